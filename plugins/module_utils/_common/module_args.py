# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it): standard library only, Python 3.8+.
"""Checks of module options that AnsibleModule's argument spec cannot express.

A NUL byte in a path, library name or command argument makes the standard
library raise ``ValueError: embedded null byte`` deep inside ``os`` or
``subprocess``; :func:`nul_byte_message` finds it first and says which option.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _first_nul(value, path):
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            found = _first_nul(value[key], "%s.%s" % (path, key))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _first_nul(item, "%s[%d]" % (path, index))
            if found:
                return found
    return None


def nul_byte_message(params, names):
    """The fail_json message for the first option in ``names`` whose text holds a NUL byte, else ``None``."""
    for name in names:
        found = _first_nul(params.get(name), name)
        if found:
            return ("%s holds a NUL byte, which no path, library or command argument can contain. Nothing was run. "
                    "Fix: pass the value without the \\x00." % found)
    return None
