# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_native readiness agent: writes GPU readiness metrics for node_exporter's textfile collector.

Installed by the gpu_native.fleet.gpu_readiness role and run by a systemd timer.
The verdict logic is the collection's own module_utils (gpu_health, nvidia_smi,
xid, pci) and every command runs through its one runner (node_tools: PATH
lookup, LC_ALL=C, a timeout that kills the process group, capped output); the
role copies them next to this script under
``ansible_collections/gpu_native/fleet/plugins/module_utils/``; there is no
second copy of the parsers or of the runner.

Usage: gpu_native_readiness_agent.py --config /etc/gpu-native-readiness/config.json

The agent never fails the timer: on an internal error it writes the metrics it
has plus ``gpu_native_readiness_agent_error 1`` and exits 0.  The file is
written atomically (temporary file in the same directory, then rename).

The kernel log is read incrementally (module_utils.gpu.kernel_log_state): each run
reads only the lines added since the last one (journal cursor, dmesg position
or file offset, kept with the boot id in ``<state_dir>/kernel_log_state.json``)
and judges the Xids of the whole ``xid_since`` window from the kept lines.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Only what every run needs is imported here; argparse (a command line other than the unit's) and ssl (the API
# server) are imported where they are used: the agent runs every minute on every GPU node.
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

PROBE_TIMEOUT_S = 30
#: The API server exchange (connect, TLS, headers, body) as a whole.
API_TIMEOUT_S = 10
#: A node object is a few KiB: a larger answer is not one, and is not read to the end.
API_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: A ServiceAccount token is about 1 KiB.
API_MAX_TOKEN_BYTES = 64 * 1024

# Every metric the agent writes: name -> (type, help).  The help text is the
# metric's documentation (docs/gpu_readiness.md repeats it).
METRICS = {
    "gpu_native_node_driver_ready": (
        "gauge", "1 when nvidia-smi reaches the NVIDIA driver and lists at least one GPU, else 0."),
    "gpu_native_node_toolkit_ready": (
        "gauge", "1 when the NVIDIA Container Toolkit's check command (nvidia-container-cli info) succeeds, else 0."),
    "gpu_native_node_plugin_ready": (
        "gauge", "1 when the device plugin's counts are known, above 0 and equal to what the node's GPUs give "
                 "(per resource with device_plugin_config: replicas, renameByDefault, MIG; else nvidia.com/gpu "
                 "against the GPU or MIG device count), else 0."),
    "gpu_native_node_cuda_ready": (
        "gauge", "1 when libcuda initialises (cuInit) and reports at least one device, else 0."),
    "gpu_native_node_gpu_ready": (
        "gauge", "1 when every GPU is healthy and the PCI, nvidia-smi, device-plugin and expected counts agree "
                 "(the gpu_health verdict), else 0."),
    "gpu_native_nvidia_pci_devices": (
        "gauge", "NVIDIA GPUs on PCI: class 0302 or 0300 with vendor 10de; NVSwitches (class 0680) are not counted."),
    "gpu_native_node_nvidia_smi_devices": (
        "gauge", "GPUs nvidia-smi knows (attached_gpus, else the GPUs it lists); 0 when the driver is unreachable."),
    "gpu_native_node_device_plugin_gpus": (
        "gauge", "nvidia.com/gpu in the node's allocatable, read from the node object; absent when it cannot be read."),
    "gpu_native_node_device_plugin_devices": (
        "gauge", "Allocatable count per device-plugin resource (label resource, e.g. nvidia.com/gpu.shared, "
                 "nvidia.com/mig-1g.10gb); 0 for an expected resource the node does not expose."),
    "gpu_native_node_device_plugin_expected_devices": (
        "gauge", "Count per resource the node's GPUs, MIG layout and device-plugin config give (written only when "
                 "device_plugin_config or mig_layout is configured and the count can be computed)."),
    "gpu_native_gpu_healthy": (
        "gauge", "1 when the GPU has no problem (ERR!, lost handle, fallen off the bus, Unknown Error fields, pending "
                 "row remap, pending uncorrectable ECC, uncleared fatal Xid), else 0."),
    "gpu_native_gpu_pending_action": (
        "gauge", "1 for the strongest pending action of a GPU (restart_app, workflow, drain_p2p, reset_gpu or "
                 "reboot_node)."),
    "gpu_native_xid_events_in_window": (
        "gauge", "Kernel-log lines per Xid and GPU within the agent's window (xid_since, current boot); "
                 "cleared=true once a driver reload or a later Xid 154 'to 0x0 (None)' cleared it."),
    "gpu_native_node_validation_last_success_ts_seconds": (
        "gauge", "Unix time of the last run in which the driver and every GPU were ready."),
    "gpu_native_readiness_agent_error": (
        "gauge", "1 when the last agent run hit an internal error (the other metrics may be partial), else 0."),
    "gpu_native_readiness_agent_last_run_ts_seconds": (
        "gauge", "Unix time at which the agent last wrote this file."),
    "gpu_native_readiness_agent_duration_seconds": (
        "gauge", "Seconds the last agent run took."),
}


def escape_label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class MetricSet(object):
    """Samples grouped by metric name, rendered in Prometheus text format."""

    def __init__(self, node):
        self.node = node
        self.samples = dict((name, []) for name in METRICS)

    def add(self, name, value, **labels):
        if name not in METRICS:
            raise KeyError(name)
        if value is None:
            return
        merged = [("node", self.node)] + sorted(labels.items())
        self.samples[name].append((merged, float(value)))

    def render(self):
        lines = []
        for name, (kind, help_text) in METRICS.items():
            samples = self.samples[name]
            if not samples:
                continue
            lines.append("# HELP %s %s" % (name, help_text))
            lines.append("# TYPE %s %s" % (name, kind))
            for labels, value in samples:
                label_text = ",".join('%s="%s"' % (key, escape_label(val)) for key, val in labels)
                number = repr(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
                lines.append("%s{%s} %s" % (name, label_text, number))
        return "\n".join(lines) + "\n"


def write_atomically(directory, file_name, content):
    """Write ``content`` to ``directory/file_name`` through a temporary file and a rename."""
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    # tempfile.mkstemp without importing tempfile (shutil, bz2, lzma, random: issue #32)
    handle, temp_path = node_tools().make_temporary(directory, "." + file_name + ".", ".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp_path, 0o644)
        os.rename(temp_path, os.path.join(directory, file_name))
    except BaseException:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
        raise


def node_tools():
    """The collection's runner, copied next to this script by the role."""
    from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools as runner
    return runner


def kernel_log_state():
    """The incremental kernel-log reader and its state file (module_utils.gpu.kernel_log_state)."""
    from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import kernel_log_state as reader
    return reader


def run_command(argv, timeout=PROBE_TIMEOUT_S):
    """(rc, stdout, stderr) of a probe command, through the shared runner; never raises.

    A missing binary gives rc 127, a timeout rc 124 (the process group is killed)."""
    return node_tools().NodeTools(timeout=timeout).run_command(list(argv))


def cuda_probe(library):
    """Run in a child process: exit 0 when cuInit works and a device exists."""
    import ctypes  # here, not at the top: only the probe child needs it (the agent's footprint)
    try:
        cuda = ctypes.CDLL(library)
    except OSError:
        return 2
    if cuda.cuInit(0) != 0:
        return 3
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return 4
    return 0


#: The launcher the role installs next to the agent (what the unit starts).
LAUNCHER = "gpu_native_readiness_run.py"


def probe_script():
    """The script the CUDA probe child runs: the launcher next to the agent, which imports the agent from its
    compiled bytecode (started as a script, the agent would be compiled again in every run's child), else the agent
    itself."""
    agent = os.path.abspath(__file__)
    launcher = os.path.join(os.path.dirname(agent), LAUNCHER)
    return launcher if os.path.isfile(launcher) else agent


def check_cuda(library):
    # the child runs with the agent's own interpreter flags (-I -S under the unit): no site-packages to load
    flags = (["-I"] if sys.flags.isolated else []) + (["-S"] if sys.flags.no_site else [])
    rc, _out, _err = run_command([sys.executable] + flags + [probe_script(), "--cuda-probe", library],
                                 timeout=PROBE_TIMEOUT_S)
    return rc == 0


def check_toolkit(command):
    if not command:
        return False
    rc, _out, _err = run_command(list(command), timeout=PROBE_TIMEOUT_S)
    return rc == 0


def _allocatable_resources(node_object):
    allocatable = (node_object.get("status") or {}).get("allocatable") or {}
    return dict((str(key), int(str(value))) for key, value in allocatable.items() if str(key).startswith("nvidia.com/"))


def device_plugin_count(kube, node_name):
    """nvidia.com/gpu allocatable from the node object, or None when it cannot be read."""
    resources = device_plugin_resources(kube, node_name)
    return None if resources is None else resources.get("nvidia.com/gpu", 0)


def read_node_from_api(kube, node_name):
    """The node object from the API server with the bearer token, or None (with a line on stderr why).

    The token goes only to ``api_url``: ``https://`` unless ``insecure`` (the token would travel in clear), no
    redirect followed, at most API_MAX_RESPONSE_BYTES read, the whole exchange within API_TIMEOUT_S
    (module_utils._common.http_deadline)."""
    from urllib.parse import quote, urlsplit
    from ansible_collections.gpu_native.fleet.plugins.module_utils._common import http_deadline
    api_url = str(kube["api_url"]).rstrip("/")
    try:
        scheme = urlsplit(api_url).scheme
    except ValueError:
        scheme = ""
    if scheme != "https" and not (scheme == "http" and kube.get("insecure") is True):
        sys.stderr.write("gpu-native-readiness: kube api_url is not an https:// URL, so the token is not sent; set "
                         "gpu_readiness_kube_api_url to https://..., or gpu_readiness_kube_insecure: true for a "
                         "plain-http API server on a trusted network\n")
        return None
    if "@" in urlsplit(api_url).netloc:
        sys.stderr.write("gpu-native-readiness: kube api_url carries credentials; the token file is the credential\n")
        return None
    with open(kube["token_file"]) as handle:
        token = handle.read(API_MAX_TOKEN_BYTES).strip()
    context = None
    if scheme == "https":
        import ssl  # here, not at the top: loading libssl costs every run ~10 ms of CPU
        context = ssl.create_default_context(cafile=kube.get("ca_file") or None)
    url = "%s/api/v1/nodes/%s" % (api_url, quote(str(node_name), safe=""))
    deadline = http_deadline.Deadline(API_TIMEOUT_S)
    with http_deadline.Exchange(url, deadline, headers={"Authorization": "Bearer " + token,
                                                        "Accept": "application/json"}, context=context) as answer:
        if answer.status != 200:
            where = " redirecting elsewhere (not followed)" if answer.location else ""
            sys.stderr.write("gpu-native-readiness: the API server answered HTTP %d%s for node %s\n"
                             % (answer.status, where, node_name))
            return None
        return json.loads(answer.read(API_MAX_RESPONSE_BYTES).decode("utf-8"))


def device_plugin_resources(kube, node_name):
    """The node object's nvidia.com/* allocatable ({resource: count}), or None when it cannot be read.

    Tried in order: the API server with a bearer token (``api_url``,
    ``token_file``, ``ca_file``, ``insecure``), then ``kubectl`` with ``kubeconfig`` (and
    ``client_certificate``/``client_key`` when set).
    The kubelet's pod-resources API is gRPC over a unix socket, which the
    standard library cannot speak; the node object carries the same count.
    """
    kube = kube or {}
    if kube.get("api_url") and kube.get("token_file") and os.path.exists(kube["token_file"]):
        try:
            node_object = read_node_from_api(kube, node_name)
            if node_object is not None:
                return _allocatable_resources(node_object)
        except Exception:  # noqa: BLE001 - any failure means "not reachable"; the metric is then absent
            pass
    kubectl = kube.get("kubectl")
    kubeconfig = kube.get("kubeconfig")
    if kubectl and kubeconfig and os.path.exists(kubeconfig):
        argv = [kubectl, "--kubeconfig", kubeconfig]
        # sandboxed, the role hands over the certificate the kubeconfig names by path (a systemd credential)
        for flag, key in (("--client-certificate", "client_certificate"), ("--client-key", "client_key")):
            if kube.get(key):
                argv += [flag, kube[key]]
        rc, out, _err = run_command(argv + ["get", "node", node_name, "-o", "json"], timeout=PROBE_TIMEOUT_S)
        if rc == 0:
            try:
                return _allocatable_resources(json.loads(out))
            except (ValueError, TypeError):
                return None
    return None


def read_last_success(state_dir):
    try:
        with open(os.path.join(state_dir, "last_success")) as handle:
            return float(handle.read().strip())
    except (IOError, OSError, ValueError):
        return None


def record_success(state_dir, now):
    write_atomically(state_dir, "last_success", "%d\n" % now)


def evaluate_node(config, metrics, now):
    """Fill ``metrics``; return an error line or None."""
    from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu.gpu_health import collect, evaluate

    timeout = config.get("command_timeout")
    tools = node_tools().NodeTools(
        paths={"nvidia-smi": config.get("nvidia_smi") or "nvidia-smi", "lspci": config.get("lspci") or "lspci"},
        timeout=None if timeout in (None, "") else float(timeout))
    state_dir = config.get("state_dir", "/var/lib/gpu-native-readiness")
    reader = kernel_log_state().KernelLogReader(state_dir, now=now)
    inputs, _sources = collect(
        tools,
        kernel_log=config.get("kernel_log", "auto"),
        xid_since=config.get("xid_since", "24h"),
        sysfs_root=config.get("pci_sysfs_root", "/sys/bus/pci/devices"),
        kernel_log_reader=reader.read,
    )
    for note in reader.notes:
        sys.stderr.write("gpu-native-readiness: %s\n" % note)
    try:
        reader.save()
    except (IOError, OSError) as exc:
        sys.stderr.write("gpu-native-readiness: cannot write the kernel-log state %s: %s (the next run reads the "
                         "whole window again)\n" % (reader.path, exc))
    resources = device_plugin_resources(config.get("kube"), metrics.node)
    plugin_count = None if resources is None else resources.get("nvidia.com/gpu", 0)
    if resources is not None:
        inputs["device_plugin_resources"] = resources
    expected = config.get("expected_gpus")
    expected = None if expected in (None, "") else int(expected)
    result = evaluate(inputs, expected_gpus=expected, xid_actions=config.get("xid_actions") or {},
                      device_plugin_config=config.get("device_plugin_config") or None,
                      mig_layout=config.get("mig_layout") or None,
                      sensor_error=config.get("sensor_error") or "fail")

    driver_ready = bool(result["driver_reachable"] and (result["nvidia_smi_gpu_count"] or 0) > 0)
    metrics.add("gpu_native_node_driver_ready", int(driver_ready))
    metrics.add("gpu_native_node_toolkit_ready", int(driver_ready and check_toolkit(config.get("toolkit_command"))))
    exposed = sum((resources or {}).values())
    plugin_ready = bool(result["checks"]["device_plugin_count_matches"]) and exposed > 0
    metrics.add("gpu_native_node_plugin_ready", int(plugin_ready))
    metrics.add("gpu_native_node_cuda_ready", int(driver_ready and check_cuda(config.get("cuda_library", "libcuda.so.1"))))
    metrics.add("gpu_native_node_gpu_ready", int(result["gpu_ready"]))
    metrics.add("gpu_native_nvidia_pci_devices", result["pci_gpu_count"])
    metrics.add("gpu_native_node_nvidia_smi_devices", result["nvidia_smi_gpu_count"])
    metrics.add("gpu_native_node_device_plugin_gpus", plugin_count)
    rows = result.get("device_plugin_resources") or []
    for row in rows:
        metrics.add("gpu_native_node_device_plugin_devices", row["actual"], resource=row["resource"])
        metrics.add("gpu_native_node_device_plugin_expected_devices", row["expected"], resource=row["resource"])
    if not rows:
        for resource, count in sorted((resources or {}).items()):
            metrics.add("gpu_native_node_device_plugin_devices", count, resource=resource)
    for gpu in result["gpus"]:
        labels = {"gpu": "" if gpu["index"] is None else str(gpu["index"]),
                  "pci_bus_id": gpu["pci_bus_id"] or "", "uuid": gpu["uuid"] or ""}
        metrics.add("gpu_native_gpu_healthy", int(gpu["healthy"]), **labels)
    for action in result["actions"]:
        if action["action"] not in ("none", "ignore"):
            metrics.add("gpu_native_gpu_pending_action", 1, action=action["action"],
                        gpu="" if action["index"] is None else str(action["index"]),
                        pci_bus_id=action["pci_bus_id"] or "", uuid=action["uuid"] or "")
    for event in result["xid_events"]:
        metrics.add("gpu_native_xid_events_in_window", event["count"],
                    gpu="" if event["gpu_index"] is None else str(event["gpu_index"]),
                    pci_bus_id=event["pci_bus_id"] or "", uuid=event["uuid"] or "",
                    xid=str(event["xid"]), action=event["action"],
                    cleared="true" if event["cleared"] else "false",
                    workload=",".join(event["processes"])[:120])
    if result["gpu_ready"] and driver_ready:
        record_success(state_dir, now)
    metrics.add("gpu_native_node_validation_last_success_ts_seconds", read_last_success(state_dir))
    return None


def load_config(path):
    with open(path) as handle:
        config = json.load(handle)
    if not isinstance(config, dict):
        raise ValueError("%s does not hold a JSON object" % path)
    return config


def run_once(config_path, output_dir=None):
    """Evaluate and write the metrics file; return the exit status (always 0 once the file is written)."""
    started = time.time()
    error = None
    config = {}
    try:
        config = load_config(config_path)
    except (IOError, OSError, ValueError) as exc:
        error = "config %s unreadable: %s" % (config_path, exc)
    node = config.get("node_name") or os.uname()[1]
    metrics = MetricSet(node)
    if error is None:
        try:
            evaluate_node(config, metrics, int(started))
        except Exception as exc:  # noqa: BLE001 - the agent must never crash the timer
            error = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    metrics.add("gpu_native_readiness_agent_error", int(error is not None))
    metrics.add("gpu_native_readiness_agent_last_run_ts_seconds", int(time.time()))
    metrics.add("gpu_native_readiness_agent_duration_seconds", round(time.time() - started, 3))
    directory = output_dir or config.get("textfile_dir", "/var/lib/prometheus/node-exporter")
    file_name = config.get("file_name", "gpu_native_readiness.prom")
    if error:
        sys.stderr.write("gpu-native-readiness: %s\n" % error)
    try:
        write_atomically(directory, file_name, metrics.render())
    except (IOError, OSError) as exc:
        sys.stderr.write("gpu-native-readiness: cannot write %s/%s: %s\n" % (directory, file_name, exc))
        return 1
    return 0


DEFAULT_CONFIG = "/etc/gpu-native-readiness/config.json"
_OPTIONS = {"--config": "config", "--output-dir": "output_dir", "--cuda-probe": "cuda_probe"}


def _plain_options(argv):
    """The options of a command line made only of ``--option VALUE`` pairs of known options (what the systemd
    unit and the CUDA probe pass), as a dict; None for anything else (argparse then parses it, with its help and
    its errors).  argparse and the gettext lookups it makes cost every run ~2 ms of CPU."""
    if len(argv) % 2:
        return None
    options = {"config": DEFAULT_CONFIG, "output_dir": None, "cuda_probe": None}
    seen = set()
    for flag, value in zip(argv[::2], argv[1::2]):
        if flag not in _OPTIONS or flag in seen or not value or value.startswith("-"):
            return None
        seen.add(flag)
        options[_OPTIONS[flag]] = value
    return options


def parse_options(argv):
    """``{config, output_dir, cuda_probe}`` from the command line."""
    options = _plain_options(argv)
    if options is not None:
        return options
    import argparse
    parser = argparse.ArgumentParser(description="Write GPU readiness metrics for node_exporter's textfile collector.")
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--output-dir", help="write here instead of the configured textfile_dir")
    parser.add_argument("--cuda-probe", metavar="LIBRARY", help=argparse.SUPPRESS)
    return vars(parser.parse_args(argv))


def main(argv=None):
    options = parse_options(sys.argv[1:] if argv is None else list(argv))
    if options["cuda_probe"]:
        return cuda_probe(options["cuda_probe"])
    return run_once(options["config"], options["output_dir"])


if __name__ == "__main__":
    sys.exit(main())
