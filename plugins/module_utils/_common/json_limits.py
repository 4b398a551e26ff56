# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Bounds for JSON that a tool on the node printed, checked before ``json.loads`` sees it.

``json.loads`` recurses once per nesting level, so a hostile or broken output of
``[[[[...`` ends in a RecursionError deep inside the parser. The parsers of
tools' JSON (dcgm.py, nvbandwidth.py) call this first and raise their own
error with the limit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def json_nesting_exceeds(text, limit):
    """True when ``text`` nests arrays/objects deeper than ``limit`` (strings and escapes skipped; no recursion)."""
    depth = 0
    in_string = False
    escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False
