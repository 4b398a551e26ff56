# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""lazy_compile: a module-level pattern compiled on first use, with re's results and errors (issue #32)."""
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.lazy_regex import LazyPattern, lazy_compile

COLLECTIONS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", ".cache",
                                           "collections"))


def test_compiled_on_first_use_only():
    pattern = lazy_compile(r"(?P<word>\w+)-(\d+)", re.IGNORECASE)
    assert isinstance(pattern, LazyPattern)
    assert pattern._compiled is None
    assert pattern.pattern == r"(?P<word>\w+)-(\d+)"
    assert pattern.match("abc-12").group("word") == "abc"
    assert pattern._compiled is pattern.compiled()
    assert pattern.flags == re.compile(r"(?P<word>\w+)-(\d+)", re.IGNORECASE).flags
    assert pattern.groups == 2 and pattern.groupindex == {"word": 1}


@pytest.mark.parametrize("method, args", [
    ("match", ("Xid 79, GPU-1",)),
    ("match", ("  Xid 79", 2)),
    ("fullmatch", ("Xid 79",)),
    ("search", ("NVRM: Xid 79, pid=1",)),
    ("findall", ("Xid 13 Xid 31 xid 43",)),
    ("sub", (r"<\1>", "Xid 13 Xid 31")),
    ("subn", ("X", "Xid 13 Xid 31")),
    ("split", ("a Xid 13 b Xid 31 c",)),
])
def test_same_results_as_re(method, args):
    source, flags = r"xid\s(\d+)", re.IGNORECASE

    def result(value):
        if isinstance(value, (str, tuple, list, type(None))):
            return value
        return (value.group(0), value.groups(), value.span())

    assert result(getattr(lazy_compile(source, flags), method)(*args)) == result(
        getattr(re.compile(source, flags), method)(*args))
    assert [m.span() for m in lazy_compile(source, flags).finditer(args[-1] if isinstance(args[-1], str) else args[0])] \
        == [m.span() for m in re.compile(source, flags).finditer(args[-1] if isinstance(args[-1], str) else args[0])]


def test_after_the_first_call_the_method_is_res_own():
    """No Python frame between a caller and re once a method was used (thousands of matches a run)."""
    pattern = lazy_compile(r"xid\s(\d+)")
    first = pattern.search
    assert first("NVRM: xid 79").group(1) == "79"
    assert pattern.search == pattern.compiled().search
    assert type(pattern.search) is type(re.compile("x").search)
    assert first("xid 13").group(1) == "13"  # a method taken before the first call still works
    assert pattern.match("xid 5").group(1) == "5" and pattern.match == pattern.compiled().match
    with pytest.raises(AttributeError):
        pattern.no_such_method  # noqa: B018 pylint: disable=pointless-statement


def test_a_wrong_pattern_fails_on_first_use_as_re_compile_does():
    pattern = lazy_compile(r"(unclosed")
    with pytest.raises(re.error):
        pattern.search("text")


def test_the_agents_parsers_compile_no_pattern_at_import():
    """Importing pci, nvidia_smi and xid compiles nothing: each pattern is compiled by the call that needs it."""
    code = (
        "import re, sys\n"
        "compiled = []\n"
        "original = re._compile\n"
        "def counting(pattern, flags):\n"
        "    caller = sys._getframe(2).f_globals.get('__name__', '')\n"  # re.compile / re.match -> its caller
        "    if caller.startswith('ansible_collections.') or caller.endswith('lazy_regex'):\n"
        "        compiled.append(pattern)\n"
        "    return original(pattern, flags)\n"
        "re._compile = counting\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import pci, nvidia_smi, xid\n"
        "assert not xid._DECODE_ROWS, 'the Xid 144-150 decode index was built at import'\n"
        "print(len(compiled))\n"
        "xid.parse_kernel_log('2026-11-30T22:43:04+0000 h kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, off')\n"
        "print(len(compiled))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, COLLECTIONS], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "0"
    assert int(out[1]) > 0  # the parse compiled what it used
