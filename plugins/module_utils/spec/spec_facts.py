# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Collect the node facts the spec matrix judges, in one pass.

Every source is read at most once and only when something asks for it
(:class:`NodeFacts` caches each one), so a matrix that names no GPU item
never runs ``nvidia-smi``.  Files are read under an injectable ``root`` so
unit tests can point the collector at a fake ``/proc``, ``/sys``,
os-release and dpkg status tree; subprocesses go through the collection's
one runner (``node_tools.NodeTools``: PATH and sbin/bin lookup, LC_ALL=C, a
timeout per call that kills the process group), which tests may replace.

Subprocesses, at most one each: ``nvidia-smi -q -x``, ``nvidia-ctk
--version``, ``containerd --version``, ``kubelet --version``, ``systemctl
show`` (all listed services in one call), ``rpm -q`` (all listed packages
in one call, only where there is no dpkg database).

A missing source never raises: its value is ``None`` and ``notes[source]``
says why ("driver not loaded", "containerd not installed").
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import stat

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.text import first_line
from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.nvidia_smi import (
    NvidiaSmiParseError,
    parse_query_xml,
)
from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.pci import (
    count_nvidia_gpus,
    read_sysfs_pci_devices,
)

#: Packages whose version stands for the Container Toolkit when nvidia-ctk
#: is absent, in order of preference.
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base")

_DRIVER_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")
_CTK_VERSION_RE = re.compile(r"version\s+v?(\d[\w.+~-]*)", re.I)
_KUBELET_VERSION_RE = re.compile(r"Kubernetes\s+(v?\d[\w.+~-]*)")
_SERVICE_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState")

#: Limits on sysctl keys (hostile input): a key names a file under /proc/sys.
SYSCTL_MAX_KEY_LENGTH = 255
SYSCTL_MAX_PARTS = 16
#: Bytes read from one /proc/sys file (values are a line; the largest is a few KiB).
SYSCTL_MAX_BYTES = 65536


def _legacy_runner(run_command):
    """Adapt an injected ``run_command(argv, timeout) -> (rc, out, err)`` to the runner's interface."""
    def runner(argv, timeout, env_update=None):
        rc, out, err = run_command(argv, timeout)
        return rc, out, err, False, False, 0.0
    return runner


def _lower_state(value):
    """Normalise an nvidia-smi mode (str or {current, pending}) to lower-case text."""
    if isinstance(value, dict):
        value = value.get("current")
    if value is None:
        return None
    return str(value).strip().lower()


def _pending_state(value):
    if isinstance(value, dict) and value.get("pending") is not None:
        return str(value["pending"]).strip().lower()
    return None


def sysctl_relative_path(key):
    """The path components under /proc/sys that ``key`` names; raises ``ValueError``.

    ``vm.max_map_count`` -> ``["vm", "max_map_count"]``; a key containing
    ``/`` is read as a path (``net/ipv4/conf/eth0.100/forwarding``), as
    sysctl(8) does.  Refused: not a string, empty, longer than
    :data:`SYSCTL_MAX_KEY_LENGTH`, more than :data:`SYSCTL_MAX_PARTS`
    components, ``..`` anywhere, an absolute path, an empty component,
    backslashes, whitespace, NUL, newlines or other control characters.
    """
    if not isinstance(key, str):
        raise ValueError("a sysctl key must be a string, got %s" % type(key).__name__)
    if not key:
        raise ValueError("empty sysctl key")
    if len(key) > SYSCTL_MAX_KEY_LENGTH:
        raise ValueError("sysctl key longer than %d characters" % SYSCTL_MAX_KEY_LENGTH)
    bad = [char for char in key if char == "\\" or char.isspace() or ord(char) < 0x20 or ord(char) == 0x7F]
    if bad:
        raise ValueError("sysctl key %r contains %r; a key is a name under /proc/sys such as vm.max_map_count"
                         % (key, bad[0]))
    if ".." in key:
        raise ValueError("sysctl key %r contains '..'; a key names a file under /proc/sys" % key)
    if key.startswith("/"):
        raise ValueError("sysctl key %r is an absolute path; write it relative to /proc/sys (vm.max_map_count)"
                         % key)
    parts = key.split("/") if "/" in key else key.split(".")
    if any(part in ("", ".") for part in parts):
        raise ValueError("sysctl key %r has an empty component" % key)
    if len(parts) > SYSCTL_MAX_PARTS:
        raise ValueError("sysctl key %r has more than %d components" % (key, SYSCTL_MAX_PARTS))
    return parts


def parse_os_release(text):
    """Parse os-release text into a dict of lower-cased keys (``id``, ``version_id``...)."""
    result = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, dummy, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        result[key.strip().lower()] = value
    return result


def parse_dpkg_status(text, names=None):
    """Return ``{package: version}`` for installed packages in a dpkg status file.

    ``names`` limits the result (multi-arch ``name:arch`` forms are folded
    into ``name``).  Packages in states other than ``installed`` (e.g.
    ``deinstall ok config-files``) are left out.
    """
    wanted = set(names) if names is not None else None
    result = {}
    for paragraph in re.split(r"\n\s*\n", text):
        fields = {}
        for line in paragraph.splitlines():
            if not line or line[0] in " \t":
                continue
            key, dummy, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        package = fields.get("package")
        if not package or (wanted is not None and package not in wanted):
            continue
        if not fields.get("status", "").endswith(" installed"):
            continue
        if "version" in fields:
            result[package] = fields["version"]
    return result


def parse_driver_version_file(text):
    """Driver version from ``/proc/driver/nvidia/version`` text, or ``None``."""
    match = _DRIVER_VERSION_RE.search(text or "")
    return match.group(1) if match else None


def parse_containerd_version(text):
    """Version from ``containerd --version`` (``containerd <repo> 1.7.22 <commit>``)."""
    words = first_line(text).split()
    if len(words) >= 3 and words[0] == "containerd":
        return words[2][1:] if words[2][:1] == "v" and words[2][1:2].isdigit() else words[2]
    for word in words:
        if re.match(r"^v?\d+\.\d+", word):
            return word.lstrip("v")
    return None


def parse_ctk_version(text):
    """Version from ``nvidia-ctk --version`` (``NVIDIA Container Toolkit CLI version 1.17.3``)."""
    match = _CTK_VERSION_RE.search(text or "")
    return match.group(1) if match else None


def parse_kubelet_version(text):
    """Version from ``kubelet --version`` (``Kubernetes v1.31.2``), without the ``v``."""
    match = _KUBELET_VERSION_RE.search(text or "")
    return match.group(1).lstrip("v") if match else None


def parse_systemctl_show(text):
    """Parse ``systemctl show -p ...`` output for several units into ``{Id: {prop: value}}``."""
    units = []
    current = {}
    for line in (text or "").splitlines():
        if not line.strip():
            if current:
                units.append(current)
                current = {}
            continue
        key, dummy, value = line.partition("=")
        current[key] = value
    if current:
        units.append(current)
    return units


class NodeFacts:
    """Lazily collected, cached node facts.

    ``root`` prefixes every file path (tests pass a fake tree); ``tools``
    is the ``node_tools.NodeTools`` that runs every command (default: a live
    one with each tool's default timeout).  Tests may instead inject
    ``run_command(argv, timeout) -> (rc, out, err)`` and
    ``find_binary(name)``; ``gpu_xml_parser`` defaults to
    ``nvidia_smi.parse_query_xml``.
    """

    def __init__(self, root="/", run_command=None, find_binary=None, gpu_xml_parser=None, tools=None):
        self.root = root or "/"
        self.tools = tools or node_tools.NodeTools(runner=_legacy_runner(run_command) if run_command else None,
                                                   finder=find_binary)
        self._parse_xml = gpu_xml_parser or parse_query_xml
        self._cache = {}
        self.notes = {}
        self.absent = set()
        self.commands = []
        self._wanted_packages = set()
        self._wanted_services = set()
        self._wanted_sysctl = set()

    # ---- plumbing -------------------------------------------------------
    def _path(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def _read(self, path):
        """File text under root, or ``None`` when absent/unreadable."""
        try:
            with open(self._path(path), "rb") as handle:
                return handle.read().decode("utf-8", "replace")
        except (IOError, OSError):
            return None

    def _tool_result(self, name, args):
        """Run a tool once through the runner; its ``ToolResult`` (status ``missing`` when not installed)."""
        result = self.tools.run(name, args)
        if result.status != node_tools.MISSING:
            self.commands.append(" ".join([name] + list(args)))
        return result

    def _tool(self, name, args):
        """Run a tool once; ``(rc, out, err)``, or None when not installed (a timeout is rc 124)."""
        result = self._tool_result(name, args)
        if result.status == node_tools.MISSING:
            return None
        if result.status == node_tools.TIMEOUT:
            return 124, result.stdout, result.message
        return (1 if result.rc is None else result.rc), result.stdout, result.stderr

    def _cached(self, key, producer):
        if key not in self._cache:
            self._cache[key] = producer()
        return self._cache[key]

    def _missing(self, key, note):
        """Record that ``key`` is definitely absent on this node (judged ``fail``, not ``unknown``)."""
        self.notes[key] = note
        self.absent.add(key)

    def want(self, packages=(), services=(), sysctl=()):
        """Declare names to look up, so each lookup is a single pass."""
        self._wanted_packages.update(packages)
        self._wanted_services.update(unit_name(s) for s in services)
        self._wanted_sysctl.update(sysctl)

    # ---- sources ----------------------------------------------------------
    def os_release(self):
        """``{id, version_id, version_codename, pretty_name, ...}`` or ``None``."""
        def produce():
            text = self._read("/etc/os-release")
            if text is None:
                text = self._read("/usr/lib/os-release")
            if text is None:
                self.notes["os"] = "no /etc/os-release or /usr/lib/os-release"
                return None
            return parse_os_release(text)
        return self._cached("os", produce)

    def kernel_release(self):
        def produce():
            text = self._read("/proc/sys/kernel/osrelease")
            if text is None:
                self.notes["kernel"] = "/proc/sys/kernel/osrelease unreadable"
                return None
            return text.strip()
        return self._cached("kernel", produce)

    def hostname(self):
        return self._cached("hostname", lambda: (self._read("/proc/sys/kernel/hostname") or "").strip() or None)

    def kernel_modules(self):
        """Names of loaded modules (from /proc/modules), or ``None``.

        A kernel built without loadable-module support has no /proc/modules;
        then the names under /sys/module (built-in modules) stand in.
        """
        def produce():
            text = self._read("/proc/modules")
            if text is not None:
                return sorted(line.split()[0] for line in text.splitlines() if line.strip())
            try:
                names = sorted(os.listdir(self._path("/sys/module")))
            except OSError:
                self.notes["kernel_modules"] = "neither /proc/modules nor /sys/module is readable"
                return None
            self._cache["kernel_modules_source"] = "/sys/module"
            self.notes["kernel_modules"] = ("no /proc/modules (kernel without loadable module support); "
                                            "judged from /sys/module")
            return names
        return self._cached("kernel_modules", produce)

    def module_state(self, name):
        """``loaded``, ``built-in``, ``not loaded``, or ``None`` when undeterminable.

        ``-`` and ``_`` are the same in module names (``nvidia-peermem``).
        """
        modules = self.kernel_modules()
        if modules is None:
            return None
        wanted = name.replace("-", "_")
        present = wanted in set(m.replace("-", "_") for m in modules)
        if present and self._cache.get("kernel_modules_source") != "/sys/module":
            return "loaded"
        if self.module_builtin(wanted):
            return "built-in"
        if present:
            # Listed under /sys/module: built in, or live without /proc/modules.
            live = os.path.exists(self._path("/sys/module/%s/initstate" % wanted))
            return "loaded" if live else "built-in"
        return "not loaded"

    def module_builtin(self, name):
        """True when ``name`` is built into the kernel (listed in modules.builtin)."""
        release = self.kernel_release()
        if not release:
            return False
        text = self._cached("modules_builtin", lambda: self._read("/lib/modules/%s/modules.builtin" % release) or "")
        wanted = name.replace("-", "_")
        for line in text.splitlines():
            base = os.path.basename(line.strip())
            if base.endswith(".ko"):
                base = base[:-3]
            if base.replace("-", "_") == wanted:
                return True
        return False

    def sysctl(self):
        """``{key: value}`` for the wanted keys; unreadable keys map to ``None``.

        Only files under ``/proc/sys`` are read: a key that is not a sysctl
        name (:func:`sysctl_relative_path`) or that resolves outside
        ``/proc/sys`` (a symbolic link leaving it) is refused, with a note,
        and nothing is read for it.
        """
        def produce():
            values = {}
            for key in sorted(self._wanted_sysctl):
                values[key] = None
                try:
                    parts = sysctl_relative_path(key)
                except ValueError as exc:
                    self.notes["sysctl." + key] = "refused: %s" % exc
                    continue
                text, problem = self._read_proc_sys(parts)
                if problem:
                    self.notes["sysctl." + key] = "refused: %s" % problem
                elif text is None:
                    self._missing("sysctl." + key, "no such key under /proc/sys")
                else:
                    values[key] = " ".join(text.split())
            return values
        return self._cached("sysctl", produce)

    def _read_proc_sys(self, parts):
        """``(text or None, refusal or None)`` for ``/proc/sys/<parts>`` under root.

        The real path must stay inside ``/proc/sys``; the file is opened
        without following a final symbolic link, must be a regular file, and
        at most :data:`SYSCTL_MAX_BYTES` are read.
        """
        base = os.path.realpath(self._path("/proc/sys"))
        wanted = os.path.join(base, *parts)
        real = os.path.realpath(wanted)
        if not real.startswith(base + os.sep):
            if os.path.lexists(wanted):
                return None, "/proc/sys/%s leads outside /proc/sys" % "/".join(parts)
            return None, None
        try:
            descriptor = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None, None
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                return None, "/proc/sys/%s is not a regular file" % "/".join(parts)
            data = os.read(descriptor, SYSCTL_MAX_BYTES)
        except OSError:
            return None, None
        finally:
            os.close(descriptor)
        return data.decode("utf-8", "replace"), None

    def packages(self):
        """``{name: version or None}`` for wanted packages (dpkg status, else one rpm call)."""
        def produce():
            names = sorted(self._wanted_packages | set(TOOLKIT_PACKAGES))
            status = self._read("/var/lib/dpkg/status")
            if status is not None:
                found = parse_dpkg_status(status, names)
                self._cache["package_manager"] = "dpkg"
                return dict((name, found.get(name)) for name in names)
            result = self._tool("rpm", ["-q", "--qf", "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n"] + names)
            if result is None:
                self.notes["packages"] = "no package database (neither /var/lib/dpkg/status nor rpm)"
                self._cache["package_manager"] = None
                return dict((name, None) for name in names)
            self._cache["package_manager"] = "rpm"
            found = {}
            for line in result[1].splitlines():
                words = line.split()
                if len(words) == 2 and words[0] in names:
                    version = words[1][2:] if words[1].startswith("0:") else words[1]
                    found[words[0]] = version
            return dict((name, found.get(name)) for name in names)
        return self._cached("packages", produce)

    def package_scheme(self):
        """The version rule of the package database read: ``dpkg``, ``rpm``, or ``None`` without one.

        (``versions`` compares package versions with this rule.)
        """
        self.packages()
        return self._cache.get("package_manager")

    def services(self):
        """``{unit: {load_state, active_state, sub_state, unit_file_state}}`` for wanted units."""
        def produce():
            units = sorted(self._wanted_services)
            if not units:
                return {}
            if not os.path.isdir(self._path("/run/systemd/system")):
                self.notes["services"] = "systemd is not running on this host"
                return dict((unit, None) for unit in units)
            result = self._tool("systemctl", ["show", "--property=" + ",".join(_SERVICE_PROPERTIES), "--"] + units)
            if result is None:
                self.notes["services"] = "systemctl not installed"
                return dict((unit, None) for unit in units)
            rc, out, err = result
            parsed = parse_systemctl_show(out)
            if rc != 0 and not parsed:
                self.notes["services"] = "systemctl show failed: %s" % (first_line(err) or "rc=%s" % rc)
                return dict((unit, None) for unit in units)
            values = {}
            for unit, props in zip(units, parsed):
                values[unit] = {
                    "load_state": props.get("LoadState"),
                    "active_state": props.get("ActiveState"),
                    "sub_state": props.get("SubState"),
                    "unit_file_state": props.get("UnitFileState") or None,
                }
            for unit in units[len(parsed):]:
                values[unit] = None
            return values
        return self._cached("services", produce)

    def driver(self):
        """``{version, loaded, source}``; version from /proc, else nvidia-smi."""
        def produce():
            text = self._read("/proc/driver/nvidia/version")
            if text is not None:
                version = parse_driver_version_file(text)
                if version:
                    return {"version": version, "loaded": True, "source": "/proc/driver/nvidia/version"}
                self.notes["driver"] = "unrecognised /proc/driver/nvidia/version: %s" % first_line(text)
                return {"version": None, "loaded": True, "source": None}
            # nvidia-smi answers only through a loaded driver: where /proc/driver is not visible (a
            # container, a test host replaying captures) its answer is the evidence.
            parsed = self._query_nvidia_smi()
            if parsed is not None and parsed.get("driver_version"):
                self.notes["driver"] = ("no /proc/driver/nvidia/version here; the version is the one nvidia-smi "
                                        "reports")
                return {"version": parsed["driver_version"], "loaded": True, "source": "nvidia-smi"}
            self._missing("driver", "driver not loaded: no /proc/driver/nvidia/version")
            return {"version": None, "loaded": False, "source": None}
        return self._cached("driver", produce)

    def pci_gpu_count(self):
        """NVIDIA GPUs on the PCI bus by class 0300/0302 (NVSwitch bridges excluded)."""
        def produce():
            return count_nvidia_gpus(read_sysfs_pci_devices(self._path("/sys/bus/pci/devices")))
        return self._cached("pci_gpu_count", produce)

    def nvidia_smi(self):
        """The parsed ``nvidia-smi -q -x`` dict, or ``None`` with ``notes['gpu']``."""
        if not self.driver()["loaded"]:
            self._missing("gpu", "driver not loaded")
            return None
        return self._query_nvidia_smi()

    def _query_nvidia_smi(self):
        """Run and parse ``nvidia-smi -q -x`` once, whatever /proc says."""
        def produce():
            result = self._tool_result("nvidia-smi", ["-q", "-x"])
            if result.status == node_tools.MISSING:
                self._missing("gpu", "nvidia-smi not installed")
                return None
            out = result.stdout
            if result.status == node_tools.NO_DRIVER:
                self.notes["gpu"] = "nvidia-smi failed: driver unreachable: %s" % result.detail
                return None
            if result.status == node_tools.TIMEOUT:
                self.notes["gpu"] = "nvidia-smi failed: %s" % result.message
                return None
            if result.status == node_tools.UNREADABLE:
                self.notes["gpu"] = "nvidia-smi output unreadable: %s" % result.detail
                return None
            if result.status == node_tools.FAILED or not out.strip():
                self.notes["gpu"] = "nvidia-smi failed: %s" % (
                    first_line(out) or first_line(result.stderr) or "rc=%s" % result.rc)
                return None
            try:
                return self._parse_xml(out)
            except NvidiaSmiParseError as exc:
                self.notes["gpu"] = "nvidia-smi output unreadable: %s" % exc
                return None
        return self._cached("nvidia_smi", produce)

    def gpu(self):
        """``{count, pci_count, gpus: [{index, pci_bus_id, uuid, product, ...}]}``."""
        def produce():
            parsed = self.nvidia_smi()
            facts = {"count": None, "pci_count": self.pci_gpu_count(), "gpus": []}
            if parsed is None:
                return facts
            for gpu in parsed.get("gpus") or []:
                facts["gpus"].append({
                    "index": gpu.get("index"),
                    "pci_bus_id": gpu.get("pci_bus_id"),
                    "pci_device_id": gpu.get("pci_device_id"),
                    "uuid": gpu.get("uuid"),
                    "product": gpu.get("product"),
                    "persistence_mode": _lower_state(gpu.get("persistence_mode")),
                    "ecc_mode": _lower_state(gpu.get("ecc_mode")),
                    "ecc_mode_pending": _lower_state(gpu.get("ecc_mode_pending")) or _pending_state(gpu.get("ecc_mode")),
                    "mig_mode": _lower_state(gpu.get("mig_mode")),
                    "mig_mode_pending": _lower_state(gpu.get("mig_mode_pending")) or _pending_state(gpu.get("mig_mode")),
                    "memory_total_mib": gpu.get("memory_total_mib"),
                })
            count = len(facts["gpus"])
            facts["count"] = count
            attached = parsed.get("attached_gpus")
            if attached is not None and attached != count:
                self.notes["gpu.count"] = "nvidia-smi reports attached_gpus=%s but lists %d" % (attached, count)
            if parsed.get("handle_errors"):
                self.notes["gpu.count"] = "; ".join(e.get("message", "") for e in parsed["handle_errors"])
            return facts
        return self._cached("gpu", produce)

    def cuda_version(self):
        parsed = self.nvidia_smi()
        if parsed is None:
            return None
        return parsed.get("cuda_version")

    def driver_version(self):
        """Kernel module version, else the version nvidia-smi reports."""
        version = self.driver()["version"]
        if version is None and self.driver()["loaded"]:
            parsed = self.nvidia_smi()
            if parsed is not None and parsed.get("driver_version"):
                self._cache["driver"]["version"] = parsed["driver_version"]
                self._cache["driver"]["source"] = "nvidia-smi"
                version = parsed["driver_version"]
        return version

    def container_toolkit(self):
        """``{version, source}`` from nvidia-ctk, else the package database."""
        def produce():
            result = self._tool("nvidia-ctk", ["--version"])
            if result is not None and result[0] == 0:
                version = parse_ctk_version(result[1])
                if version:
                    return {"version": version, "source": "nvidia-ctk"}
            for name in TOOLKIT_PACKAGES:
                version = self.packages().get(name)
                if version:
                    return {"version": version, "source": "package %s" % name}
            if result is None:
                self._missing("container_toolkit", "NVIDIA Container Toolkit not installed")
            else:
                self.notes["container_toolkit"] = "nvidia-ctk --version failed: %s" % (
                    first_line(result[2]) or first_line(result[1]) or "rc=%s" % result[0])
            return {"version": None, "source": None}
        return self._cached("container_toolkit", produce)

    def _tool_version(self, key, name, parser, label):
        def produce():
            result = self._tool(name, ["--version"])
            if result is None:
                self._missing(key, "%s not installed" % label)
                return None
            rc, out, err = result
            version = parser(out) or parser(err)
            if rc != 0 or not version:
                self.notes[key] = "%s --version failed: %s" % (name, first_line(err) or first_line(out) or "rc=%s" % rc)
                return None
            return version
        return self._cached(key, produce)

    def containerd_version(self):
        return self._tool_version("containerd", "containerd", parse_containerd_version, "containerd")

    def kubelet_version(self):
        return self._tool_version("kubelet", "kubelet", parse_kubelet_version, "kubelet")

    # ---- everything -----------------------------------------------------
    def collect_all(self):
        """Touch every source (``facts_only``)."""
        self.os_release()
        self.kernel_release()
        self.kernel_modules()
        self.driver_version()
        self.gpu()
        self.container_toolkit()
        self.containerd_version()
        self.kubelet_version()
        self.sysctl()
        self.packages()
        self.services()

    def as_dict(self):
        """The raw values collected so far (sources never asked for are absent)."""
        cache = self._cache
        facts = {}
        if "os" in cache:
            facts["os"] = cache["os"]
        if "kernel" in cache:
            facts["kernel"] = {"release": cache["kernel"]}
        if "driver" in cache:
            facts["driver"] = dict(cache["driver"])
        if "nvidia_smi" in cache:
            facts["cuda"] = {"version": self.cuda_version()}
        if "gpu" in cache:
            facts["gpu"] = cache["gpu"]
        elif "pci_gpu_count" in cache:
            facts["gpu"] = {"pci_count": cache["pci_gpu_count"]}
        if "container_toolkit" in cache:
            facts["container_toolkit"] = cache["container_toolkit"]
        if "containerd" in cache:
            facts["containerd"] = {"version": cache["containerd"]}
        if "kubelet" in cache:
            facts["kubernetes"] = {"kubelet_version": cache["kubelet"]}
        if "kernel_modules" in cache:
            facts["kernel_modules"] = cache["kernel_modules"]
        if "sysctl" in cache:
            facts["sysctl"] = cache["sysctl"]
        if "packages" in cache:
            facts["packages"] = cache["packages"]
            facts["package_manager"] = cache.get("package_manager")
        if "services" in cache:
            facts["services"] = cache["services"]
        facts["commands"] = list(self.commands)
        facts["notes"] = dict(self.notes)
        return facts


def unit_name(name):
    """``nvidia-persistenced`` -> ``nvidia-persistenced.service``; other unit types kept."""
    if re.search(r"\.(service|socket|timer|mount|target|path|slice|scope|device|swap|automount)$", name):
        return name
    return name + ".service"
