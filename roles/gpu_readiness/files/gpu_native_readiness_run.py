# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Starts the gpu_native readiness agent: what the systemd unit runs.

Python compiles the script it is started with on every run and never caches that bytecode.  This launcher is all
that is compiled; the agent, ``gpu_native_readiness_agent.py`` next to it, is imported as a module, from the
bytecode the gpu_readiness role compiles when it installs it (issue #32: compiling the agent script was about a
sixth of a steady-state run's instructions).  Same command line as the agent's:

    gpu_native_readiness_run.py --config /etc/gpu-native-readiness/config.json
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_native_readiness_agent  # noqa: E402 pylint: disable=import-error

    sys.exit(gpu_native_readiness_agent.main())
