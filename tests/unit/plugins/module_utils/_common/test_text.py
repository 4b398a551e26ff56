# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_common/text.py: the one-line, bounded message helpers shared by the modules, filters and plugin_utils."""
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import text


def test_clip_cuts_after_the_limit_or_within_it():
    assert text.clip("abcdef", 6) == "abcdef"
    assert text.clip("abcdefg", 6) == "abcdef..."
    assert text.clip("abcdefg", 6, fit=True) == "abc..."
    assert len(text.clip("x" * 10000, 200, fit=True)) == 200
    assert text.clip("abcdef", 2, fit=True) == "..."


def test_squash_puts_anything_on_one_bounded_line():
    assert text.squash("a\n  b\tc ", 10) == "a b c"
    assert text.squash(["x"] * 3, 100) == "['x', 'x', 'x']"
    assert text.squash("word " * 1000, 20) == "word word word word " + "..."
    assert "\n" not in text.squash("l1\nl2\n" * 500, 50) and len(text.squash("l1\nl2\n" * 500, 50)) == 53


def test_first_line_skips_blank_lines_and_bounds_the_rest():
    assert text.first_line("\n  \n  first  \nsecond") == "first"
    assert text.first_line(None) == "" and text.first_line("\n\n") == ""
    assert text.first_line("y" * 500, 240) == "y" * 240 + "..."
    assert text.first_line("y" * 500, 300, ellipsis=False) == "y" * 300
    assert text.first_line("short", 240) == "short"
