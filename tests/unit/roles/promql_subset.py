# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small evaluator for the PromQL subset the gpu_readiness alert rules use.

Instant evaluation only (``for:`` durations are promtool's job): selectors with
``=``, ``!=``, ``=~``, ``!~``; numbers; ``time()``; ``+ - * /``; comparisons as
filters; ``and``/``or``/``unless``; ``on(...)``/``ignoring(...)``; parentheses.
Vector-vector matching is one-to-one, as in Prometheus.  Anything else raises
``PromQLSubsetError`` so an unsupported expression cannot pass silently.
"""
import re

_TOKEN_RE = re.compile(r"\s*(?:(?P<number>\d+(?:\.\d+)?)|(?P<string>\"(?:[^\"\\]|\\.)*\")|"
                       r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<op>==|!=|>=|<=|=~|!~|[-+*/<>=(){},]))")
_COMPARISONS = ("==", "!=", ">", "<", ">=", "<=")
_ARITHMETIC = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
               "/": lambda a, b: a / b if b else float("inf") if a > 0 else float("nan")}
_COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">": lambda a, b: a > b,
            "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}


class PromQLSubsetError(ValueError):
    pass


def _tokens(expr):
    position = 0
    tokens = []
    expr = expr.strip()
    while position < len(expr):
        match = _TOKEN_RE.match(expr, position)
        if not match or match.end() == position:
            raise PromQLSubsetError("cannot read %r at %d" % (expr[position:position + 20], position))
        kind = match.lastgroup
        tokens.append((kind, match.group(kind)))
        position = match.end()
        while position < len(expr) and expr[position].isspace():
            position += 1
    return tokens


class Evaluator(object):
    """``Evaluator(samples, now).evaluate(expr)`` -> float or [(labels, value)]."""

    def __init__(self, samples, now):
        self.samples = samples  # [(labels including __name__, value)]
        self.now = now

    def evaluate(self, expr):
        self.tokens = _tokens(expr)
        self.position = 0
        result = self._or()
        if self.position != len(self.tokens):
            raise PromQLSubsetError("unexpected %r" % (self.tokens[self.position][1],))
        return result

    # --- parser helpers --------------------------------------------------
    def _peek(self):
        return self.tokens[self.position] if self.position < len(self.tokens) else (None, None)

    def _take(self, value=None):
        token = self._peek()
        if value is not None and token[1] != value:
            raise PromQLSubsetError("expected %r, got %r" % (value, token[1]))
        self.position += 1
        return token

    def _matching(self):
        kind, value = self._peek()
        if value in ("on", "ignoring"):
            self._take()
            self._take("(")
            labels = []
            while self._peek()[1] != ")":
                labels.append(self._take()[1])
                if self._peek()[1] == ",":
                    self._take()
            self._take(")")
            return (value, labels)
        if value in ("group_left", "group_right", "bool"):
            raise PromQLSubsetError("%s is outside the subset" % value)
        return None

    # --- grammar ---------------------------------------------------------
    def _or(self):
        left = self._and()
        while self._peek()[1] == "or":
            self._take()
            matching = self._matching()
            left = self._set_op("or", left, self._and(), matching)
        return left

    def _and(self):
        left = self._comparison()
        while self._peek()[1] in ("and", "unless"):
            op = self._take()[1]
            matching = self._matching()
            left = self._set_op(op, left, self._comparison(), matching)
        return left

    def _comparison(self):
        left = self._additive()
        while self._peek()[1] in _COMPARISONS:
            op = self._take()[1]
            matching = self._matching()
            left = self._binary(op, left, self._additive(), matching)
        return left

    def _additive(self):
        left = self._multiplicative()
        while self._peek()[1] in ("+", "-"):
            op = self._take()[1]
            matching = self._matching()
            left = self._binary(op, left, self._multiplicative(), matching)
        return left

    def _multiplicative(self):
        left = self._primary()
        while self._peek()[1] in ("*", "/"):
            op = self._take()[1]
            matching = self._matching()
            left = self._binary(op, left, self._primary(), matching)
        return left

    def _primary(self):
        kind, value = self._peek()
        if kind == "number":
            self._take()
            return float(value)
        if value == "(":
            self._take()
            inner = self._or()
            self._take(")")
            return inner
        if value == "time" and self.tokens[self.position + 1][1] == "(":
            self._take()
            self._take("(")
            self._take(")")
            return float(self.now)
        if kind == "name" or value == "{":
            return self._selector()
        raise PromQLSubsetError("unexpected %r" % (value,))

    def _selector(self):
        matchers = []
        if self._peek()[0] == "name":
            matchers.append(("__name__", "=", self._take()[1]))
        if self._peek()[1] == "{":
            self._take()
            while self._peek()[1] != "}":
                label = self._take()[1]
                op = self._take()[1]
                if op not in ("=", "!=", "=~", "!~"):
                    raise PromQLSubsetError("matcher %r" % op)
                literal = self._take()
                if literal[0] != "string":
                    raise PromQLSubsetError("matcher value must be a string")
                matchers.append((label, op, literal[1][1:-1]))
                if self._peek()[1] == ",":
                    self._take()
            self._take("}")
        if self._peek()[1] in ("[", "offset"):
            raise PromQLSubsetError("range selectors are outside the subset")
        return [(dict(labels), value) for labels, value in self.samples if _matches(labels, matchers)]

    # --- semantics -------------------------------------------------------
    def _binary(self, op, left, right, matching):
        comparison = op in _COMPARISONS
        function = _COMPARE[op] if comparison else _ARITHMETIC[op]
        if isinstance(left, float) and isinstance(right, float):
            if comparison:
                raise PromQLSubsetError("scalar comparison needs bool")
            return function(left, right)
        if isinstance(right, float):
            return [(labels if comparison else _drop_name(labels), value if comparison else function(value, right))
                    for labels, value in left if not comparison or function(value, right)]
        if isinstance(left, float):
            return [(labels if comparison else _drop_name(labels), right_value if comparison else function(left, right_value))
                    for labels, right_value in right if not comparison or function(left, right_value)]
        index = {}
        for labels, value in right:
            key = _signature(labels, matching)
            if key in index:
                raise PromQLSubsetError("many-to-one matching on %r" % (key,))
            index[key] = value
        result = []
        for labels, value in left:
            key = _signature(labels, matching)
            if key not in index:
                continue
            if comparison:
                if function(value, index[key]):
                    result.append((labels, value))
            else:
                result.append((_drop_name(labels), function(value, index[key])))
        return result

    def _set_op(self, op, left, right, matching):
        if isinstance(left, float) or isinstance(right, float):
            raise PromQLSubsetError("%s needs vectors" % op)
        right_keys = set(_signature(labels, matching) for labels, _value in right)
        if op == "and":
            return [(l, v) for l, v in left if _signature(l, matching) in right_keys]
        if op == "unless":
            return [(l, v) for l, v in left if _signature(l, matching) not in right_keys]
        left_keys = set(_signature(l, matching) for l, _v in left)
        return list(left) + [(l, v) for l, v in right if _signature(l, matching) not in left_keys]


def _matches(labels, matchers):
    for label, op, value in matchers:
        actual = labels.get(label, "")
        if op == "=" and actual != value:
            return False
        if op == "!=" and actual == value:
            return False
        if op == "=~" and not re.fullmatch(value, actual):
            return False
        if op == "!~" and re.fullmatch(value, actual):
            return False
    return True


def _drop_name(labels):
    return dict((k, v) for k, v in labels.items() if k != "__name__")


def _signature(labels, matching):
    if matching is None:
        return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))
    kind, names = matching
    if kind == "on":
        return tuple((name, labels.get(name, "")) for name in sorted(names))
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__" and k not in names))
