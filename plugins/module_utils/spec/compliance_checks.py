# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in node_compliance) and on the controller (the compliance report filters,
# tools/fleet_report.py, which loads this file by path): standard library only, no import, Python 3.8+.
"""The names of the compliance checks, in one place (issue 24, 6).

``NODE_CHECKS`` are the checks ``node_compliance`` runs on a node, in the order it runs and reports them (its
``checks`` option's choices and default); the compliance role runs all of them unless ``compliance_checks`` names
some. ``REPORT_CHECKS`` is every row a compliance report can hold, in the order the reports list them: the node
checks with the rows the controller adds (``reachability`` for an unreachable host, ``kubernetes`` from the node
object, ``dra`` from the node's ResourceSlices, ``mig`` from ``mig_config`` compare). A new node check is added to ``NODE_CHECKS`` (and where it stands
in ``REPORT_CHECKS``); nothing else lists them.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

NODE_CHECKS = ("spec", "gpu_health", "containerd", "readiness", "isolation")
CONTROLLER_CHECKS = ("reachability", "kubernetes", "dra", "mig")
REPORT_CHECKS = ("reachability", "spec", "gpu_health", "kubernetes", "dra", "mig", "containerd", "readiness", "isolation")
