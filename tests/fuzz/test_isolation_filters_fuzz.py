# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests for issue 26's filters: the pinned signing-key filters and the report-name check.

* any value: openpgp_fingerprint gives a fingerprint as gpg prints it (40 or 64 upper-case hex digits) or "";
* any text, including broken ``gpg --with-colons`` records: gpg_primary_fingerprints gives a list of such
  fingerprints or its own AnsibleFilterError, never another exception;
* any value: compliance_report_name gives back a plain file name unchanged (no '/', never '.' or '..') or
  raises its own AnsibleFilterError.

Inputs are bounded (max_size); no test measures time.
"""
import re

from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpu_native.fleet.plugins.filter import compliance_report as cr
from ansible_collections.gpu_native.fleet.plugins.filter import openpgp_keys as keys

FUZZ_TARGETS = ("openpgp_fingerprint", "gpg_primary_fingerprints", "compliance_report_name")

FINGERPRINT = re.compile(r"\A(?:[0-9A-F]{40}|[0-9A-F]{64})\Z")
HEXISH = st.text(alphabet="0123456789abcdefABCDEFxX :\t\n\u0660\u00b2", max_size=80)
VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=80), HEXISH,
                   st.lists(st.text(max_size=10), max_size=3))
RECORD_TYPES = st.sampled_from(["pub", "sub", "fpr", "uid", "sig", "sec", "ssb", "grp", "tru", "", "fpr2"])
RECORD = st.builds(lambda kind, fields: ":".join([kind] + fields), RECORD_TYPES,
                   st.lists(st.one_of(HEXISH, st.text(max_size=12)), max_size=12))


@given(VALUES)
def test_openpgp_fingerprint(value):
    result = keys.openpgp_fingerprint(value)
    assert result == "" or FINGERPRINT.match(result)


@given(st.one_of(st.lists(st.one_of(RECORD, st.text(max_size=60)), max_size=12).map("\n".join), VALUES))
def test_gpg_primary_fingerprints(listing):
    try:
        result = keys.gpg_primary_fingerprints(listing)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("gpg_primary_fingerprints: ")
        return
    assert isinstance(result, list) and all(FINGERPRINT.match(item) for item in result)


@given(st.one_of(VALUES, st.text(alphabet="abc./\\-_\x00 \n", max_size=20)))
def test_compliance_report_name(name):
    try:
        result = cr.compliance_report_name(name)
    except AnsibleFilterError as exc:
        assert "is not a plain file name" in str(exc) and "Nothing was written." in str(exc)
        return
    assert result == name and isinstance(name, str) and "/" not in name and "\\" not in name
    assert name not in (".", "..") and "\x00" not in name and "\n" not in name
