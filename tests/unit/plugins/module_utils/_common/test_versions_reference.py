"""versions: the dpkg and rpm rules agree with the real dpkg and rpm, on real data.

Property tests against the references (no network):

* dpkg: pairs drawn from the versions in this machine's apt lists
  (``/var/lib/apt/lists/*Packages*``, any compression apt reads) and dpkg
  status, compared with ``dpkg --compare-versions`` (two ``sh`` loops, one
  per core);
* rpm: versions covering epochs, ``~``, ``^``, letters and releases,
  compared with rpm's own ``rpm.vercmp`` in one ``rpm --eval`` (Debian's
  ``rpm`` package; ``tests/tools/setup-host.sh`` installs it).

Seeded: set ``VERSIONS_SEED`` to reproduce a failure (the seed is in every
failure message); ``VERSIONS_PAIRS`` changes the number of pairs.
A test skips, saying why, where the reference tool or the apt lists are
missing.
"""
import functools
import glob
import os
import random
import re
import shutil
import subprocess
import tempfile

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.versions import (
    compare_versions,
    dpkg_compare,
    rpm_compare,
    satisfies,
)

SEED = int(os.environ.get("VERSIONS_SEED", "20261130"))
PAIRS = int(os.environ.get("VERSIONS_PAIRS", "3000"))
APT_HELPER = "/usr/lib/apt/apt-helper"


def _sign(value):
    return (value > 0) - (value < 0)


# ---- dpkg ------------------------------------------------------------------
def _list_files():
    files = sorted(path for path in glob.glob("/var/lib/apt/lists/*Packages*") if not path.endswith(".diff_Index"))
    return files


def _read_list(path):
    if path.endswith("Packages"):
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    if not os.access(APT_HELPER, os.X_OK):
        return ""
    proc = subprocess.run([APT_HELPER, "cat-file", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          check=False, timeout=120)
    return proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else ""


def _package_versions():
    """``{package: set(versions)}`` from the apt lists and the dpkg status file."""
    found = {}
    texts = [_read_list(path) for path in _list_files()]
    if os.path.exists("/var/lib/dpkg/status"):
        with open("/var/lib/dpkg/status", "rb") as handle:
            texts.append(handle.read().decode("utf-8", "replace"))
    for text in texts:
        package = None
        for line in text.splitlines():
            if line.startswith("Package: "):
                package = line[9:].strip()
            elif line.startswith("Version: ") and package:
                found.setdefault(package, set()).add(line[9:].strip())
    return found


@pytest.fixture(scope="module")
def real_debian_versions():
    if not shutil.which("dpkg"):
        pytest.skip("no dpkg on this machine: the dpkg reference test needs Debian's dpkg")
    if not _list_files():
        pytest.skip("no apt lists in /var/lib/apt/lists: run `apt-get update` once (tests/tools/setup-host.sh does)")
    versions = _package_versions()
    if sum(len(v) for v in versions.values()) < 1000:
        pytest.skip("fewer than 1000 versions in the apt lists; run `apt-get update`")
    return versions


def _dpkg_reference(pairs):
    """``dpkg --compare-versions`` on every pair: -1, 0 or 1, two sh loops in parallel."""
    script = ('while read -r a b; do if dpkg --compare-versions "$a" lt "$b"; then echo -1; '
              'elif dpkg --compare-versions "$a" eq "$b"; then echo 0; else echo 1; fi; done')
    half = (len(pairs) + 1) // 2
    chunks = [pairs[:half], pairs[half:]]
    procs = []
    for chunk in chunks:
        handle = tempfile.TemporaryFile()
        handle.write("".join("%s %s\n" % pair for pair in chunk).encode())
        handle.seek(0)
        procs.append((handle, subprocess.Popen(["sh", "-c", script], stdin=handle, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE)))
    results = []
    for handle, proc in procs:
        out, err = proc.communicate(timeout=300)
        handle.close()
        assert proc.returncode == 0, err.decode()
        results.extend(int(line) for line in out.decode().split())
    assert len(results) == len(pairs), "dpkg gave %d answers for %d pairs" % (len(results), len(pairs))
    return results


def _dpkg_pairs(versions, rng, count):
    everything = sorted(set(v for vs in versions.values() for v in vs))
    multi = sorted(name for name, vs in versions.items() if len(vs) > 1)
    pairs = []
    # 1. unrelated versions
    for dummy in range(count // 4):
        pairs.append((rng.choice(everything), rng.choice(everything)))
    # 2. versions of the same package (security updates, +debNuM, ~bpo, +b1 ...)
    for dummy in range(count // 4):
        if not multi:
            break
        pair = rng.sample(sorted(versions[rng.choice(multi)]), 2)
        pairs.append(tuple(pair))
    # 3. neighbours in dpkg order: the closest calls there are
    sample = sorted(rng.sample(everything, min(len(everything), count // 4 + 1)),
                    key=functools.cmp_to_key(dpkg_compare))
    pairs.extend(zip(sample, sample[1:]))
    # 4. spellings dpkg calls equal: 0: epoch, -0 revision, leading zeros
    for dummy in range(count // 20):
        version = rng.choice(everything)
        if ":" not in version and rng.random() < 0.5:
            pairs.append((version, "0:" + version))
        elif "-" not in version:
            pairs.append((version, version + "-0"))
        else:
            pairs.append((version, re.sub(r"(\d+)", r"0\1", version, count=1)))
    # 5. a real version against an edited copy of itself
    edits = ("+b1", "~rc1", "+dfsg", "-1", ".0", "a", "~", "+really1.0", "0")
    while len(pairs) < count:
        version = rng.choice(everything)
        edited = version + rng.choice(edits)
        if ":" in edited.partition(":")[2] and "-" not in edited:
            continue
        pairs.append((version, edited) if rng.random() < 0.5 else (edited, version))
    return pairs


# The three pairs of issue #11: the old single rule got each one wrong.
DPKG_REGRESSIONS = [
    ("0.6.0+dfsg-1", "0.6.0+dfsg-6", -1),
    ("5.5.0-1", "5.5.0+dfsg-2", -1),
    ("3.9.1+dfsg-1", "3.9.1-6", 1),
]


@pytest.mark.parametrize("left, right, expected", DPKG_REGRESSIONS)
def test_issue_11_pairs_compare_as_dpkg(left, right, expected):
    assert dpkg_compare(left, right) == expected
    assert dpkg_compare(right, left) == -expected  # pylint: disable=arguments-out-of-order
    assert compare_versions(left, right, scheme="dpkg") == expected


@pytest.mark.parametrize("left, right, expected", DPKG_REGRESSIONS)
def test_issue_11_pairs_in_package_constraints(left, right, expected):
    operator = {-1: "<", 1: ">"}[expected]
    assert satisfies(left, operator + right, scheme="dpkg")
    assert not satisfies(left, "==" + right, scheme="dpkg")


@pytest.mark.parametrize("left, right, expected", DPKG_REGRESSIONS)
def test_issue_11_pairs_against_real_dpkg(left, right, expected):
    if not shutil.which("dpkg"):
        pytest.skip("no dpkg on this machine")
    assert _dpkg_reference([(left, right)]) == [expected]


def test_dpkg_rule_agrees_with_dpkg_on_the_apt_lists(real_debian_versions):
    rng = random.Random(SEED)
    pairs = _dpkg_pairs(real_debian_versions, rng, PAIRS) + [p[:2] for p in DPKG_REGRESSIONS]
    reference = _dpkg_reference(pairs)
    ours = [dpkg_compare(a, b) for a, b in pairs]
    wrong = [(a, b, mine, theirs) for (a, b), mine, theirs in zip(pairs, ours, reference) if mine != theirs]
    assert not wrong, "VERSIONS_SEED=%d: %d of %d pairs disagree with dpkg, e.g. %r" % (
        SEED, len(wrong), len(pairs), wrong[:10])
    # the sample is not trivial: all three answers occur, many times
    assert min(reference.count(-1), reference.count(0), reference.count(1)) >= 10, (
        reference.count(-1), reference.count(0), reference.count(1))


# ---- rpm -------------------------------------------------------------------
def _rpm_version(rng, real):
    """A version string rpm accepts: epochs, ~, ^, letters, releases, odd separators."""
    if real and rng.random() < 0.25:
        return rng.choice(real)
    parts = []
    if rng.random() < 0.3:
        parts.append(rng.choice(["0", "1", "2", "01", "10", ""]) + ":")
    for index in range(rng.randint(1, 5)):
        if index:
            parts.append(rng.choice([".", ".", ".", "~", "^", "_", "+", "-", "", "..", "~~", "^^", "~^"]))
        kind = rng.random()
        if kind < 0.55:
            parts.append(rng.choice(["0", "1", "2", "9", "10", "00", "007", "123", "20241130", "1" * 20]))
        elif kind < 0.9:
            parts.append(rng.choice(["a", "b", "rc", "RC", "beta", "git", "el9", "fc40", "Z", "z", "aa"]))
        else:
            parts.append(rng.choice(["rc1", "1a", "a1b2", "p1", "g3f2a1"]))
    if rng.random() < 0.4:
        parts.append("-" + rng.choice(["1", "2", "1.el9", "0.1.rc1", "1~beta", "1^post", "10", "a"]))
    text = "".join(parts)
    return text if text and text.lstrip("0123456789:") != "" or text.strip(":") else "1"


def _rpm_reference(pairs):
    """rpm's ``rpm.vercmp`` for every pair, in one ``rpm --eval``."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write("local t = {}\nlocal p = {\n")
        for left, right in pairs:
            handle.write("{[==[%s]==], [==[%s]==]},\n" % (left, right))
        handle.write("}\nfor i, v in ipairs(p) do t[#t + 1] = tostring(rpm.vercmp(v[1], v[2])) end\n"
                     "print(table.concat(t, ' '))\n")
        name = handle.name
    try:
        proc = subprocess.run(["rpm", "--eval", "%%{lua: dofile('%s')}" % name], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, check=False, timeout=300)
    finally:
        os.unlink(name)
    assert proc.returncode == 0, proc.stderr.decode()
    results = [int(word) for word in proc.stdout.decode().split()]
    assert len(results) == len(pairs), "rpm gave %d answers for %d pairs: %s" % (
        len(results), len(pairs), proc.stderr.decode()[:500])
    return results


RPM_CASES = [
    ("1.0~rc1", "1.0", -1),
    ("1.0^git1", "1.0", 1),
    ("1.0^git1", "1.0.1", -1),
    ("1.0~rc1^git1", "1.0~rc1", 1),
    ("1:1.0", "2.0", 1),
    ("0:1.0", "1.0", 0),
    ("1.0", "1.0-5", -1),
    ("1.0-1.el9", "1.0-1.el9_4", -1),
    ("1.0a", "1.0.1", -1),
    ("1.01", "1.1", 0),
    ("1_0", "1.0", 0),
    ("2.8ubuntu1", "2.8", 1),
]


@pytest.mark.parametrize("left, right, expected", RPM_CASES)
def test_rpm_rule_examples(left, right, expected):
    assert rpm_compare(left, right) == expected
    assert rpm_compare(right, left) == -expected  # pylint: disable=arguments-out-of-order
    assert compare_versions(left, right, scheme="rpm") == expected


def test_rpm_rule_agrees_with_rpm(real_rpm):
    rng = random.Random(SEED + 1)
    real = []
    if os.path.isdir("/var/lib/apt/lists"):
        real = sorted(v for vs in _package_versions().values() for v in vs)[:5000]
    versions = [_rpm_version(rng, real) for dummy in range(PAIRS)]
    pairs = [(rng.choice(versions), rng.choice(versions)) for dummy in range(PAIRS)]
    # neighbours in our order and each version against itself with one edit
    ordered = sorted(versions[:PAIRS // 3], key=functools.cmp_to_key(rpm_compare))
    pairs.extend(zip(ordered, ordered[1:]))
    pairs.extend((v, v + rng.choice(["~1", "^1", ".0", "a", "-1", "0", "_"])) for v in versions[:PAIRS // 3])
    pairs.extend(p[:2] for p in RPM_CASES)
    reference = _rpm_reference(pairs)
    ours = [rpm_compare(a, b) for a, b in pairs]
    wrong = [(a, b, mine, theirs) for (a, b), mine, theirs in zip(pairs, ours, reference) if mine != _sign(theirs)]
    assert not wrong, "VERSIONS_SEED=%d: %d of %d pairs disagree with rpm.vercmp, e.g. %r" % (
        SEED, len(wrong), len(pairs), wrong[:10])
    assert min(reference.count(-1), reference.count(0), reference.count(1)) >= 10


@pytest.fixture(scope="module")
def real_rpm():
    if not shutil.which("rpm"):
        pytest.skip("no rpm on this machine: install Debian's `rpm` package (tests/tools/setup-host.sh does)")
    return True
