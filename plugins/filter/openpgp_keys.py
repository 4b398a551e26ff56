# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pinned signing-key filters for roles/_signed_repository (logic in plugin_utils/openpgp_keys.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import openpgp_keys
from ansible_collections.gpu_native.fleet.plugins.plugin_utils.plain_data import to_plain


def openpgp_fingerprint(value):
    """A fingerprint as gpg prints it (no spaces, upper case), or ``""`` when ``value`` is not one."""
    return openpgp_keys.normalise_fingerprint(to_plain(value))


def gpg_primary_fingerprints(listing):
    """The primary-key fingerprints in ``gpg --show-keys --with-colons`` output."""
    try:
        return openpgp_keys.primary_fingerprints(to_plain(listing))
    except openpgp_keys.OpenPGPError as exc:
        raise AnsibleFilterError("gpg_primary_fingerprints: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {
            "gpg_primary_fingerprints": gpg_primary_fingerprints,
            "openpgp_fingerprint": openpgp_fingerprint,
        }
