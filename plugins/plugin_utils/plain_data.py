# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on the controller only (filter plugins); never imported by a module or the gpu_readiness agent.
"""Ansible's lazy containers and tagged strings as plain Python data.

The collection's filters hand their arguments to the logic in plugin_utils and module_utils, which
compares types (``isinstance(x, str)``, ``type(x) is dict``) and serialises the
result; ansible-core 2.19 passes lazy containers and tagged strings instead.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def to_plain(value):
    """Dicts, lists/tuples and strings copied into plain ``dict``, ``list`` and ``str``; other values as they are."""
    if isinstance(value, dict):
        return dict((str(key), to_plain(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    if isinstance(value, str):
        return str(value)
    return value
