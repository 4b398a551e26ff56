# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_plugin_configs: every NVIDIA device plugin config roles/device_plugin_config publishes.

The logic lives in plugins/plugin_utils/device_plugin_config.py, which the preflight's counting rule reads too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import device_plugin_config
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.plain_data import to_plain


def device_plugin_configs(settings, classes=None, default_name="default", node_classes=None):
    """``{configs: {name: YAML text}, packed: [name], problems: [...]}``; see device_plugin_configs.yml."""
    try:
        return device_plugin_config.render_all(to_plain(settings), to_plain(classes), to_plain(default_name),
                                               to_plain(node_classes))
    except device_plugin_config.DevicePluginConfigError as exc:
        raise AnsibleFilterError("device_plugin_configs: %s" % exc)


class FilterModule(object):
    """gpu_native.fleet device plugin config filters."""

    def filters(self):
        return {"device_plugin_configs": device_plugin_configs}
