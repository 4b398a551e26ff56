# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""toml_compat: reader fallback, the writer's round trip, the statement scanner."""
import builtins
import datetime
import glob
import math
import os
import sys
import tomllib

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import toml_compat

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "containerd")


@pytest.fixture(autouse=True)
def _fresh_backend():
    toml_compat.reset_backend()
    yield
    toml_compat.reset_backend()


def _block_imports(monkeypatch, blocked):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name in blocked:
            raise ImportError("blocked for the test: %s" % name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)


def _toml_package():
    """The old ``toml`` package: from the venv, else Debian's python3-toml, else skip."""
    try:
        import toml
        return toml
    except ImportError:
        pass
    debian = "/usr/lib/python3/dist-packages"
    if not os.path.isfile(os.path.join(debian, "toml", "__init__.py")):
        pytest.skip("the toml package (python3-toml) is not installed")
    sys.path.append(debian)
    try:
        import toml
    finally:
        sys.path.remove(debian)
    return toml


def test_prefers_tomllib():
    assert toml_compat.backend_name() == "tomllib"


def test_falls_back_to_tomli(monkeypatch):
    # tomli has tomllib's API (tomllib is tomli, vendored); stand it in for the package.
    monkeypatch.setitem(sys.modules, "tomli", tomllib)
    _block_imports(monkeypatch, {"tomllib"})
    assert toml_compat.backend_name() == "tomli"
    with pytest.raises(toml_compat.TomlParseError) as error:
        toml_compat.loads("a = 1\nb = [\n")
    assert error.value.line is not None


def test_falls_back_to_toml_package(monkeypatch):
    toml = _toml_package()
    monkeypatch.setitem(sys.modules, "toml", toml)
    _block_imports(monkeypatch, {"tomllib", "tomli"})
    assert toml_compat.backend_name() == "toml"
    assert toml_compat.loads('[a."b.c"]\nd = true\n') == {"a": {"b.c": {"d": True}}}
    with pytest.raises(toml_compat.TomlParseError) as error:
        toml_compat.loads("a = 1\n[b\n")
    assert error.value.line == 2


def test_no_reader_is_a_clear_error(monkeypatch):
    _block_imports(monkeypatch, {"tomllib", "tomli", "toml"})
    with pytest.raises(toml_compat.TomlUnavailableError) as error:
        toml_compat.loads("a = 1")
    assert "python3-tomli" in str(error.value)
    assert "python3-toml" in str(error.value)


def test_parse_error_has_line_and_column():
    with pytest.raises(toml_compat.TomlParseError) as error:
        toml_compat.loads('version = 2\n\n[plugins."x"\nk = 1\n')
    assert error.value.line == 3
    assert error.value.column is not None
    assert "at line 3" in str(error.value)


ROUND_TRIP_CASES = [
    {},
    {"version": 2, "imports": []},
    {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"runc": {"options": {"SystemdCgroup": True}}}}}}},
    {"s": 'quote " backslash \\ tab \t newline \n bell \x07 unicode é ✓', "empty": ""},
    {"ints": [0, -1, 16777216], "floats": [0.02, -1.5, 1e-07, 3.0e20], "bools": [True, False]},
    {"special": {"inf": float("inf"), "ninf": float("-inf")}},
    {"nested_arrays": [[1, 2], ["a"], []], "inline": [{"a": 1}, {"b": "c"}, 3]},
    {"tables": [{"name": "a", "sub": {"x": 1}}, {"name": "b"}], "after": {"k": "v"}},
    {"empty_table": {}, "t": {"empty": {}, "k": 1}},
    {"keys": {"a.b": 1, "with space": 2, "": 3, "ünï": 4, "bare-key_1": 5}},
    {"dt": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
     "d": datetime.date(2026, 1, 2), "t": datetime.time(3, 4, 5)},
]


@pytest.mark.parametrize("data", ROUND_TRIP_CASES)
def test_writer_round_trips(data):
    text = toml_compat.dumps(data)
    assert tomllib.loads(text) == data


def test_writer_nan():
    assert math.isnan(tomllib.loads(toml_compat.dumps({"x": float("nan")}))["x"])


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(FIXTURES, "v*.toml"))))
def test_writer_round_trips_real_configs(path):
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    assert tomllib.loads(toml_compat.dumps(data)) == data


def test_writer_quotes_dotted_keys_and_keeps_order():
    text = toml_compat.dumps({"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {"b": 1, "a": 2}}})
    assert text == 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\nb = 1\na = 2\n'


def test_writer_rejects_none():
    with pytest.raises(toml_compat.TomlWriteError):
        toml_compat.dumps({"a": None})


def test_scanner_finds_statements_and_array_elements():
    text = (
        "# comment [not a table]\n"
        "version = 2\n"
        "imports = [\n  \"/a/*.toml\", # x ]\n  '/b/*.toml',\n]\n"
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
        "  s = \"\"\"multi\n[not.a.table]\n\"\"\"\n"
        "  t = {a = [1, {b = 2}]}  # trailing\n"
        "[[arr]]\n"
        "x.y = 1\n"
    )
    statements = toml_compat.scan_statements(text)
    summary = [(s.kind, s.table, s.key) for s in statements]
    cri = ("plugins", "io.containerd.grpc.v1.cri", "containerd")
    assert summary == [
        ("keyval", (), ("version",)),
        ("keyval", (), ("imports",)),
        ("table", cri, cri),
        ("keyval", cri, ("s",)),
        ("keyval", cri, ("t",)),
        ("array_table", ("arr",), ("arr",)),
        ("keyval", ("arr",), ("x", "y")),
    ]
    imports = statements[1]
    assert [text[s:e] for s, e, _c in imports.elements] == ['"/a/*.toml"', "'/b/*.toml'"]
    assert text[statements[4].value_start:statements[4].value_end] == "{a = [1, {b = 2}]}"


def test_key_with_trailing_newline_is_quoted():
    """Found by tests/fuzz: a bare-key regex ending in "$" let "0\\n" through unquoted."""
    document = {"0\n": [], "runc\n": {"a": 1}}
    assert toml_compat.format_key("0\n") == '"0\\n"'
    assert toml_compat.loads(toml_compat.dumps(document)) == document
