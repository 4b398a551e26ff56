# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the check modules that import it): standard library only, Python 3.8+.
"""The one shape of a check module's result (docs/DEVELOPING.md, "How a check result looks").

Every module that judges a node (spec_matrix, gpu_health, dcgm_diag,
gpu_bandwidth, cuda_smoke, llm_smoke, node_compliance, mig_layout) returns

- ``status``: ``pass`` (judged and fine), ``fail`` (judged and not fine),
  ``skip`` (nothing was judged, on purpose: check mode, a tool that is not
  required, nothing to measure; ``reasons`` says why) or ``error`` (the check
  could not be made: a tool missing that is required, a timeout, output that
  cannot be read; ``reasons`` names the cause and the fix);
- ``reasons``: a list of one-line texts; never empty for ``fail``, ``skip``
  and ``error``; for ``pass`` it may hold notes.

The module's own keys (``gpu_ready``, ``passed``, ``compliant``...) stay as
documented extras.  ``result(status, reasons, **extras)`` builds the dict and
``check(result)`` validates one (the unit tests run it on every module's output).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import squash

PASS = "pass"
FAIL = "fail"
SKIP = "skip"
ERROR = "error"
STATUSES = (PASS, FAIL, SKIP, ERROR)
#: One reason is one line; the list is bounded (a node annotation and a summary row show them).
MAX_REASON_CHARS = 4000
MAX_REASONS = 1000
#: The modules that keep this contract (nvidia_driver_info only reports facts; mig_config compares for the mig
#: role and mig_layout). tests/unit/plugins/modules/conftest.py validates every result they return in the tests.
CHECK_MODULES = ("spec_matrix", "gpu_health", "dcgm_diag", "gpu_bandwidth", "cuda_smoke", "llm_smoke",
                 "node_compliance", "mig_layout")
#: Keys the contract owns; a module's extras may not reuse them with another meaning.
CONTRACT_KEYS = ("status", "reasons")


class CheckResultError(FleetError, ValueError):
    """A check result that breaks the contract (a bug in the module that built it)."""


def _one_line(text):
    return squash(text, MAX_REASON_CHARS, fit=True)


def reasons_of(reasons):
    """``reasons`` as a bounded list of one-line texts (a single text is one reason; empty ones are dropped)."""
    if reasons is None:
        return []
    if isinstance(reasons, str):
        reasons = [reasons]
    if not isinstance(reasons, (list, tuple)):
        raise CheckResultError("reasons is %s, not a list of texts" % type(reasons).__name__)
    out = [_one_line(reason) for reason in reasons if reason is not None and str(reason).strip()]
    if len(out) > MAX_REASONS:
        out = out[:MAX_REASONS - 1] + ["... and %d more" % (len(out) - MAX_REASONS + 1)]
    return out


def result(status, reasons=None, **extras):
    """A check result: ``{status, reasons}`` plus the module's extras (checked with ``check``)."""
    out = dict(extras)
    out["status"] = status
    out["reasons"] = reasons_of(reasons)
    if status in (FAIL, SKIP, ERROR) and not out["reasons"]:
        what = {FAIL: "failed", SKIP: "skipped", ERROR: "errored"}[status]
        out["reasons"] = ["%s without a reason (report this as a bug)" % what]
    return check(out)


def status_of(passed, skipped=False, error=False):
    """The status of a judgement given as flags: error wins over skip, skip over pass/fail."""
    if error:
        return ERROR
    if skipped:
        return SKIP
    return PASS if passed else FAIL


def check(value):
    """Return ``value`` when it keeps the contract; else raise ``CheckResultError`` naming what is wrong."""
    if not isinstance(value, dict):
        raise CheckResultError("a check result is a mapping, got %s" % type(value).__name__)
    for key in CONTRACT_KEYS:
        if key not in value:
            raise CheckResultError("the check result has no %r (keys: %s)" % (key, ", ".join(sorted(map(str, value)))))
    if value["status"] not in STATUSES:
        raise CheckResultError("status is %r, not one of %s" % (value["status"], ", ".join(STATUSES)))
    reasons = value["reasons"]
    if not isinstance(reasons, list) or not all(isinstance(reason, str) for reason in reasons):
        raise CheckResultError("reasons is not a list of texts: %r" % (reasons,))
    if value["status"] != PASS and not reasons:
        raise CheckResultError("status %s needs at least one reason" % value["status"])
    return value
