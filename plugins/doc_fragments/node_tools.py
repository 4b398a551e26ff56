# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """Options of every module that runs the node's NVIDIA tools (module_utils/_common/node_tools.py).

    ``gpu_native.fleet.node_tools``: the binary and the timeout.
    ``gpu_native.fleet.node_tools.captured``: O(source) and O(captured), for modules that can replay a support
    bundle.  A module lists its own capture keys by redefining O(captured) with suboptions (a module's option
    replaces the fragment's of the same name), keeping the one shape: C(captured.<key>) holds the text the tool
    printed, the key named after the output (C(nvidia_smi_xml) for C(nvidia-smi -q -x), C(nvidia_smi_query) for
    C(nvidia-smi -q), C(nvidia_smi) for the table, C(lspci), C(kernel_log) ...).
    """

    DOCUMENTATION = r"""
options:
  nvidia_smi:
    description:
      - Name or absolute path of C(nvidia-smi). A bare name is looked up on E(PATH), then in
        C(/usr/local/sbin), C(/usr/local/bin), C(/usr/sbin), C(/usr/bin), C(/sbin) and C(/bin).
    type: str
    default: nvidia-smi
  command_timeout:
    description:
      - Seconds each tool call may take before its whole process group is killed. A call that times out is a
        result of its own (C(nvidia-smi did not answer within 30 s)), never a hang.
      - When unset, each tool has its own default (C(nvidia-smi) 30 s, C(lspci) 15 s, C(journalctl) 30 s,
        C(dcgmi) 120 s, C(nvidia-mig-parted) 600 s).
      - Must be above 0 and at most 86400.
    type: float
notes:
  - Tools run with C(LC_ALL=C), no standard input, in their own process group, and at most 32 MiB of output per
    stream; more is reported as unreadable output.
  - A missing binary, a driver that does not answer, a timeout, a non-zero exit and unreadable output are
    told apart in the result and in error messages.
"""

    CAPTURED = r"""
options:
  source:
    description:
      - V(live) runs the tools on the node; V(captured) replays the texts in O(captured) through the same
        code path (the same driver, timeout and readability checks), so a support bundle is judged offline.
    type: str
    choices: [live, captured]
    default: live
  captured:
    description:
      - Tool outputs to replay when O(source=captured), one key per output (for example C(nvidia_smi_xml) for
        C(nvidia-smi -q -x)). Unknown keys are rejected.
    type: dict
"""
