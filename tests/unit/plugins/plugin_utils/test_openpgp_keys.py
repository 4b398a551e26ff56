"""plugin_utils/openpgp_keys: the fingerprints _signed_repository pins and reads from gpg's colon listing."""
import pytest

from ansible_collections.gpu_native.fleet.plugins.plugin_utils import openpgp_keys as ok

CUDA_APT = "EB693B3035CD5710E231E123A4B469963BF863CC"

# gpg 2.2.40 --show-keys --with-colons of a key with a signing subkey (constructed from a throwaway key's listing)
LISTING = """\
pub:-:4096:1:A4B469963BF863CC:1650621413:::-:::scSC::::::23::0:
fpr:::::::::EB693B3035CD5710E231E123A4B469963BF863CC:
uid:-::::1650621413::0000000000000000000000000000000000000000::cudatools <cudatools@nvidia.com>::::::::::0:
sub:-:4096:1:0000000000000001:1650621413::::::s::::::23:
fpr:::::::::1111111111111111111111111111111111111111:
"""


@pytest.mark.parametrize("written", [CUDA_APT, CUDA_APT.lower(), "EB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC",
                                     "0x" + CUDA_APT, "\t" + CUDA_APT + "\n", "A" * 64])
def test_fingerprints_as_publishers_print_them(written):
    assert ok.normalise_fingerprint(written) == "".join(written.split()).upper().replace("0X", "", 1)


@pytest.mark.parametrize("written", ["", None, "3BF863CC", "A4B469963BF863CC", CUDA_APT + "0", CUDA_APT[:-1] + "G",
                                     "A" * 50, CUDA_APT + ";rm -rf /"])
def test_what_is_not_a_full_fingerprint(written):
    assert ok.normalise_fingerprint(written) == ""


def test_primary_fingerprints_skip_subkeys():
    assert ok.primary_fingerprints(LISTING) == [CUDA_APT]
    assert ok.primary_fingerprints(LISTING.splitlines()) == [CUDA_APT]


def test_two_keys_in_one_file_are_both_listed():
    other = LISTING.replace(CUDA_APT, "610C7B14E068A878070DA4E99CD0A493D42D0685")
    assert ok.primary_fingerprints(LISTING + other) == [CUDA_APT, "610C7B14E068A878070DA4E99CD0A493D42D0685"]


def test_no_key_no_fingerprint():
    assert ok.primary_fingerprints("") == []
    assert ok.primary_fingerprints("fpr:::::::::" + CUDA_APT + ":\n") == []  # an fpr without its pub record


@pytest.mark.parametrize("bad", [None, 42, {"pub": 1}])
def test_not_text_is_refused(bad):
    with pytest.raises(ok.OpenPGPError):
        ok.primary_fingerprints(bad)


def test_a_huge_listing_is_refused():
    with pytest.raises(ok.OpenPGPError) as error:
        ok.primary_fingerprints("x" * (ok.MAX_LISTING_CHARS + 1))
    assert "not the listing of one key file" in str(error.value)
