# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""The one base of the collection's own exceptions.

Every error class in module_utils and plugin_utils derives from ``FleetError``
and keeps its other bases (``ValueError`` where it had it), so existing
``except`` clauses still match and a caller can catch the collection's errors
as one family: ``except FleetError``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class FleetError(Exception):
    """Base of every exception the collection's shared code raises."""
