# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on the controller only (filter plugins); never imported by a module or the gpu_readiness agent.
"""Pinned repository signing keys (roles/_signed_repository): fingerprints as users write them, and the
primary-key fingerprints in ``gpg --show-keys --with-colons`` output (gpg's DETAILS: the ``fpr`` record that
follows a ``pub``/``sec`` record belongs to the primary key, one after ``sub``/``ssb`` to a subkey).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

# v4 keys: 40 hexadecimal digits (SHA-1); v5/v6 keys (RFC 9580): 64 (SHA-256).
_FINGERPRINT = re.compile(r"^(?:[0-9A-F]{40}|[0-9A-F]{64})$")
# A keyring of a few keys lists in a few KB; more is not the listing of one key file.
MAX_LISTING_CHARS = 1024 * 1024


class OpenPGPError(FleetError, ValueError):
    """Input that is not gpg's colon listing."""


def normalise_fingerprint(value):
    """``value`` without spaces (and a ``0x``), upper case, when it is a full fingerprint; else ``""``."""
    if value is None:
        return ""
    text = re.sub(r"\s+", "", str(value)).upper()
    if text.startswith("0X"):
        text = text[2:]
    return text if _FINGERPRINT.match(text) else ""


def primary_fingerprints(listing):
    """The fingerprint of each primary key in ``gpg --with-colons`` output (text or lines), in order."""
    if isinstance(listing, (list, tuple)):
        listing = "\n".join(str(line) for line in listing)
    if not isinstance(listing, str):
        raise OpenPGPError("input must be gpg --with-colons text, got %s" % type(listing).__name__)
    if len(listing) > MAX_LISTING_CHARS:
        raise OpenPGPError("%d characters of gpg output is not the listing of one key file" % len(listing))
    found = []
    record = None
    for line in listing.splitlines():
        fields = line.split(":")
        if fields[0] in ("pub", "sec"):
            record = "primary"
        elif fields[0] in ("sub", "ssb"):
            record = "subkey"
        elif fields[0] == "fpr" and record == "primary":
            if len(fields) > 9 and fields[9]:
                found.append(fields[9].upper())
            record = None
    return found
