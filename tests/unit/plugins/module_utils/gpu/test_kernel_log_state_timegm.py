# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kernel_log_state._timegm is calendar.timegm for every field a short-iso stamp can carry (issue #32: the agent
no longer imports calendar, datetime and locale for it)."""
import calendar
import random

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import kernel_log_state


def reference(fields):
    try:
        return calendar.timegm(tuple(fields) + (0, 0, 0))
    except ValueError:
        return ValueError


def ours(fields):
    try:
        return kernel_log_state._timegm(*fields)
    except ValueError:
        return ValueError


EDGES = [(year, month, day, hour, minute, second)
         for year in (0, 1, 4, 99, 100, 400, 1600, 1899, 1900, 1969, 1970, 1972, 2000, 2024, 2026, 2100, 9999)
         for month in (0, 1, 2, 3, 11, 12, 13, 99)
         for day in (0, 1, 28, 29, 30, 31, 99)
         for hour, minute, second in ((0, 0, 0), (23, 59, 60), (99, 99, 99))]


@pytest.mark.parametrize("fields", EDGES[::60] + [(2026, 11, 30, 22, 43, 4), (2024, 2, 29, 0, 0, 0)])
def test_edges_equal_calendar_timegm(fields):
    assert ours(fields) == reference(fields)


def test_every_edge_and_random_fields_equal_calendar_timegm():
    rng = random.Random(32)
    cases = EDGES + [(rng.randint(0, 9999),) + tuple(rng.randint(0, 99) for _i in range(5)) for _i in range(20000)]
    assert [case for case in cases if ours(case) != reference(case)] == []


def test_iso_epoch_of_a_journal_line():
    assert kernel_log_state.iso_epoch("2026-11-30T22:43:04+0000 gpu-01 kernel: NVRM: x") == 1796078584
    assert kernel_log_state.iso_epoch("2026-11-30T23:43:04+01:00 gpu-01 kernel: x") == 1796078584
    assert kernel_log_state.iso_epoch("2026-13-30T22:43:04+0000 gpu-01 kernel: x") is None
    assert kernel_log_state.iso_epoch("0000-01-01T00:00:00Z gpu-01 kernel: x") is None
