# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""preflight_report_html (plugins/filter/preflight_report.py) on any rows: a page or the filter's own
AnsibleFilterError, never a raw Python error; the page never carries a tag or attribute the input brought in,
never a script, always its Content-Security-Policy, and one matrix row per node row (bounded)."""
import html.parser

from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.filter import preflight_report as pr

FUZZ_TARGETS = ("preflight_report_html",)

HOSTILE = st.sampled_from(['<script>alert(1)</script>', '" onmouseover="x', "</td></tr><img src=x>", "\x00\x1b[31m",
                           "\ud800", "<!--", "]]>", "&amp;", "<style>*{}</style>"])
TEXT = st.one_of(st.text(max_size=30), HOSTILE)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), TEXT,
                    st.sampled_from(["pass", "fail", "skip", "spec", "hardware", "cuda", "joined", "cordoned"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(TEXT, inner, max_size=3)), max_leaves=8)
RESULT = st.fixed_dictionaries({"gate": st.sampled_from(list(pr.GATES) + ["bogus"]),
                                "status": st.sampled_from(["pass", "fail", "skip", "nope"])},
                               optional={"reasons": VALUES, "duration_s": VALUES})
ROW = st.one_of(VALUES, st.fixed_dictionaries({}, optional={
    "node": VALUES, "gates": st.one_of(VALUES, st.dictionaries(st.sampled_from(pr.GATES), VALUES, max_size=5)),
    "results": st.one_of(VALUES, st.lists(st.one_of(RESULT, VALUES), max_size=6)),
    "verdict": VALUES, "reasons": VALUES, "passed": VALUES, "label_key": VALUES}))


class _Tags(html.parser.HTMLParser):
    def __init__(self):
        html.parser.HTMLParser.__init__(self)
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, tuple(name for name, _value in attrs)))


ALLOWED = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "span", "table", "thead", "tbody", "tr",
           "th", "td", "small", "ul", "li"}


@given(st.one_of(st.lists(ROW, max_size=6), VALUES), st.one_of(TEXT, VALUES), st.one_of(TEXT, VALUES))
def test_report_page_is_safe_for_any_rows(rows, title, generated):
    try:
        page = pr.preflight_report_html(rows, title=title, generated=generated)
    except AnsibleFilterError:
        assert not isinstance(rows, list)
        return
    assert isinstance(rows, list)
    parser = _Tags()
    parser.feed(page)
    assert set(tag for tag, _attrs in parser.tags) <= ALLOWED
    assert all(set(attrs) <= {"charset", "http-equiv", "content", "class", "lang"} for _tag, attrs in parser.tags)
    assert "<script" not in page.lower() and "script-src 'none'" in page
    assert page.count("<tr><td>") >= len(rows)
    assert page.count("<tr><td>") <= 2 * len(rows)
