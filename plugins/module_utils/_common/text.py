# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent) and on the controller:
# standard library only, Python 3.8+.
"""Text helpers for messages: one line, bounded (issue 24, 6: they were written four times), and the one
fixed-width table every summary prints.

A message quotes what a tool printed or what a user gave; these keep the quote on one line and bounded, so a
failure reads as one line however large or multi-line the input was.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

ELLIPSIS = "..."


def clip(text, limit, fit=False):
    """``text`` cut to ``limit`` characters, with ``...`` after the cut; ``fit``: the ``...`` counts in ``limit``."""
    if len(text) <= limit:
        return text
    return text[:max(limit - len(ELLIPSIS), 0)] + ELLIPSIS if fit else text[:limit] + ELLIPSIS


def squash(text, limit, fit=False):
    """``str(text)`` on one line (every run of whitespace one space), clipped to ``limit``."""
    return clip(" ".join(str(text).split()), limit, fit)


def first_line(text, limit=None, ellipsis=True):
    """The first non-blank line of ``text``, stripped ("" when none); cut at ``limit`` when given, with ``...``
    after the cut unless ``ellipsis`` is false."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            if limit is None or len(line) <= limit:
                return line
            return clip(line, limit) if ellipsis else line[:limit]
    return ""


def fixed_width_table(table):
    """Rows of text cells (the first is the header) as aligned columns, with a dashed rule under the header.

    The one renderer of the collection's text tables (the preflight and upgrade summaries, spec_matrix_report's
    text form, tools/fleet_report.py): each column as wide as its widest cell, two spaces between columns, no
    trailing blanks.
    """
    if not table:
        return ""
    widths = [max(len(line[col]) for line in table) for col in range(len(table[0]))]
    out = []
    for index, line in enumerate(table):
        out.append("  ".join(cell.ljust(widths[col]) for col, cell in enumerate(line)).rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    return "\n".join(out)
