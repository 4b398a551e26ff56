# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: the readiness agent's CPU time and peak memory per run on a large kernel journal (issue #15).

A generated 200,000-line kernel journal (short-iso, spread over the last 26 h, one NVRM line in 400: benign Xid
13/31/43 on the 8 H100 GPUs of the ``h100x8-healthy`` capture, a driver load and UUID lines, and one Xid 79 older
than the 24 h window that must expire) is served by the journalctl stand-in (tests/standins/journalctl; no journald
with kernel messages runs here).  The agent runs as it does under its systemd timer, with the nvidia-smi stand-in:

- first run: no state file, the whole 24 h window is read (what every run cost before the incremental reader);
- steady state: the state file from the run before, and one minute of new journal lines appended between runs;
- no_kernel_log: the same agent with ``kernel_log: /dev/null`` (interpreter, imports, nvidia-smi parsing, the
  metrics file): what the kernel log costs is the difference.

The floor is ``journalctl -k -n 1`` (the same stand-in).  Each run is measured with ``os.wait4`` (user+sys CPU and
peak RSS of the agent and the tools it waits for) and, inside the agent process, with ``getrusage(RUSAGE_SELF)``
(the agent's own Python work).  The same runs are repeated with the plain-file source (``kernel_log: <path>``,
floor ``tail -n 1``).  Numbers are printed with their ratio to the floor; no target is asserted here.

``--baseline DIR`` (a checkout of another revision, e.g. ``git worktree add /tmp/agent-before <rev>``) runs that
revision's agent in the same runs, interleaved with this one on the same journal (each with its own state), so the
two are compared side by side under the same load; each row is also given against ``python3 -I -S -c pass``
measured in the same run.  ``--callgrind`` adds the instruction count (``valgrind --tool=callgrind``, the agent
process only) of one steady-state run of each agent and of ``python3 -I -S -c pass``: a load-independent ratio.

    .venv/bin/python benchmarks/agent_footprint.py [--lines 200000] [--runs 5] [--json] [--baseline DIR] [--callgrind]
        [--sources journal,file]
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
AGENT = os.path.join(REPO, "roles", "gpu_readiness", "files", "gpu_native_readiness_agent.py")
# What the unit runs since issue #32 (an older checkout, e.g. a --baseline, has none: its agent is run directly).
LAUNCHER = os.path.join(REPO, "roles", "gpu_readiness", "files", "gpu_native_readiness_run.py")
STANDINS = os.path.join(REPO, "tests", "standins")
WINDOW_S = 24 * 3600
SPAN_S = 26 * 3600
BUSES = ["0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00"]
NOISE = [
    "audit: type=1400 audit(%d.%03d:%d): apparmor=\"ALLOWED\" operation=\"open\" profile=\"containerd\" name=\"/proc/%d/stat\"",
    "IPv6: ADDRCONF(NETDEV_CHANGE): cali%08x: link becomes ready",
    "eth0: renamed from tmp%05d",
    "EXT4-fs (nvme0n1p%d): mounted filesystem with ordered data mode. Quota mode: none.",
    "cni0: port %d(veth%08x) entered forwarding state",
    "mlx5_core 0000:%02x:00.0: mlx5e_rep_neigh_update:%d: neighbour update",
    "nvidia-peermem: nv_get_p2p_free_callback:%d ERROR detected invalid context, skipping further processing",
    "xfs filesystem being remounted at /var/lib/kubelet/pods/%08x supports timestamps until 2038",
]
XIDS = [
    "NVRM: Xid (PCI:%s): 13, pid=%d, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address",
    "NVRM: Xid (PCI:%s): 31, pid=%d, name=python3, Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 "
    "faulted @ 0x7f1a_8c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    "NVRM: Xid (PCI:%s): 43, pid=%d, name=python3, Ch 00000008",
]


def iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(epoch))


def journal_lines(count, start, end, rng, host="gpu-h100-01"):
    """``count`` short-iso kernel lines between ``start`` and ``end`` (Unix times), in time order."""
    step = (end - start) / float(max(count, 1))
    for index in range(count):
        stamp = int(start + index * step)
        if index == 0:
            text = "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:47 UTC 2024"
        elif index <= len(BUSES):
            text = "NVRM: GPU at PCI:%s.0: GPU-%08x-0000-4000-8000-%012x" % (BUSES[index - 1], index, index)
        elif index == len(BUSES) + 1:
            # older than the window: must expire from the state and never reach the metrics
            text = "NVRM: Xid (PCI:%s): 79, pid=<unknown>, name=<unknown>, GPU has fallen off the bus." % BUSES[3]
        elif index % 400 == 0:
            text = rng.choice(XIDS) % (rng.choice(BUSES), rng.randint(1000, 4000000))
        else:
            text = rng.choice(NOISE)
            text = text % tuple(rng.randint(1, 65535) for _i in range(text.count("%")))
        yield "%s %s kernel: %s\n" % (iso(stamp), host, text)


def write_journal(path, count, now, seed=15):
    rng = random.Random(seed)
    with open(path, "w") as handle:
        handle.writelines(journal_lines(count, now - SPAN_S, now - 60, rng))


def append_journal(path, count, start, end, seed):
    rng = random.Random(seed)
    lines = list(journal_lines(count + len(BUSES) + 2, start, end, rng))[len(BUSES) + 2:]
    with open(path, "a") as handle:
        handle.writelines(lines)


# Runs a Python script (the agent's launcher, or the journalctl stand-in for the floor) in this process and writes
# its own CPU time and peak RSS to argv[1], without the tools it runs.  The peak RSS is VmHWM, the high-water mark of
# this process's own memory: ru_maxrss would also carry the benchmark's own size, which a child inherits at
# fork/exec.  The script is compiled and run as the interpreter runs a script (compile, then exec as __main__):
# runpy.run_path, used before 2026-12-02, imports importlib.util and its dependencies, ~20 M instructions (~4 ms)
# that a run under the unit never pays but that were counted as the agent's.
WRAPPER = r"""
import json, resource, sys
out = sys.argv[1]
sys.argv = sys.argv[2:]
try:
    with open(sys.argv[0], "rb") as script:
        code = compile(script.read(), sys.argv[0], "exec")
    exec(code, {"__name__": "__main__", "__file__": sys.argv[0], "__builtins__": __builtins__})
except SystemExit:
    pass
own = resource.getrusage(resource.RUSAGE_SELF)
hwm = 0
with open("/proc/self/status") as status:
    for line in status:
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
with open(out, "w") as handle:
    json.dump({"cpu_s": own.ru_utime + own.ru_stime, "maxrss_kb": hwm}, handle)
"""
# The role runs the agent with the node's /usr/bin/python3 (gpu_readiness_python); a virtualenv's site hooks would
# add tens of ms of start-up that a node does not pay.
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def measure(argv, env, self_report=None):
    """CPU ms (with the children it waited for, via os.wait4) and rc of one command; with ``self_report``, the
    process's own CPU ms and peak RSS MB as WRAPPER wrote them."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
    err = proc.stderr.read().decode("utf-8", "replace")
    proc.stderr.close()
    row = {"cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000.0, "rc": proc.returncode, "stderr": err}
    if self_report:
        with open(self_report) as handle:
            own = json.load(handle)
        row["agent_cpu_ms"] = own["cpu_s"] * 1000.0
        row["agent_rss_mb"] = own["maxrss_kb"] / 1024.0
    return row


def install_agent(work, repo=REPO, name="install"):
    """The agent and its module_utils of checkout ``repo`` laid out as its role installs them
    (roles/gpu_readiness/vars/main.yml), in ``work/name``."""
    with open(os.path.join(repo, "roles", "gpu_readiness", "vars", "main.yml")) as handle:
        listing = handle.read().split("__gpu_readiness_module_utils:", 1)[1].split("\n__", 1)[0]
    target = os.path.join(work, name, "ansible_collections", "gpu_native", "fleet", "plugins", "module_utils")
    os.makedirs(target)
    for path in re.findall(r"^\s+-\s+(\S+\.py)\s*$", listing, re.MULTILINE):
        os.makedirs(os.path.dirname(os.path.join(target, path)), exist_ok=True)
        shutil.copy(os.path.join(repo, "plugins", "module_utils", path), os.path.join(target, path))
    agent = os.path.join(work, name, os.path.basename(AGENT))
    shutil.copy(os.path.join(repo, os.path.relpath(AGENT, REPO)), agent)
    launcher = os.path.join(repo, os.path.relpath(LAUNCHER, REPO))
    if os.path.exists(launcher):
        shutil.copy(launcher, os.path.join(work, name, os.path.basename(LAUNCHER)))
    # the bytecode the role's handler compiles (python3 -I -m compileall -q -f), so that no measured run compiles
    subprocess.run([PYTHON, "-I", "-m", "compileall", "-q", "-f", os.path.join(work, name, "ansible_collections"),
                    agent], check=True, stdout=subprocess.DEVNULL)
    return agent


def entry_point(work, install="install"):
    """The script the unit of that checkout starts: the launcher, or the agent itself before there was one."""
    launcher = os.path.join(work, install, os.path.basename(LAUNCHER))
    return launcher if os.path.exists(launcher) else os.path.join(work, install, os.path.basename(AGENT))


def setup(work, lines, now):
    os.makedirs(os.path.join(work, "bin"))
    os.symlink(os.path.join(STANDINS, "journalctl"), os.path.join(work, "bin", "journalctl"))
    journal = os.path.join(work, "kernel.journal")
    write_journal(journal, lines, now)
    env = dict(os.environ)
    env.update({
        "PATH": os.path.join(work, "bin") + os.pathsep + env.get("PATH", ""),
        "JOURNALCTL_STANDIN_LOG": journal,
        "NVIDIA_SMI_STANDIN_CAPTURE": os.path.join(STANDINS, "captures", "h100x8-healthy"),
    })
    return journal, env


def agent_config(work, source, kernel_log):
    config = {
        "node_name": "gpu-h100-01",
        "textfile_dir": os.path.join(work, "textfile-" + source),
        "state_dir": os.path.join(work, "state-" + source),
        "nvidia_smi": os.path.join(STANDINS, "nvidia-smi"),
        "lspci": os.path.join(work, "no-lspci"),
        "pci_sysfs_root": os.path.join(work, "no-sysfs"),
        "kernel_log": kernel_log,
        "xid_since": "24h",
        "toolkit_command": ["true"],
        "cuda_library": "libcuda-not-on-this-host.so.1",
        "kube": {"kubectl": os.path.join(work, "no-kubectl"), "kubeconfig": os.path.join(work, "no-kubeconfig")},
    }
    path = os.path.join(work, "config-%s.json" % source)
    with open(path, "w") as handle:
        json.dump(config, handle)
    return path, config


def run_agent(work, config_path, env, install="install"):
    """One agent run as the systemd unit starts it (python3 -I -S agent --config ...), measured.  A run that
    wrote ``gpu_native_readiness_agent_error 1`` (e.g. a module missing from the role's closure) is an error, not
    a fast run."""
    report = os.path.join(work, "self.json")
    agent = entry_point(work, install)
    row = measure([PYTHON, "-I", "-S", "-c", WRAPPER, report, agent, "--config", config_path], env, report)
    if row["rc"] != 0:
        raise RuntimeError("the agent exited %s: %s" % (row["rc"], row["stderr"][-2000:]))
    with open(config_path) as handle:
        config = json.load(handle)
    if re.search(r"^gpu_native_readiness_agent_error\{[^}]*\} 1$", metrics_text(config), re.MULTILINE):
        raise RuntimeError("the agent (%s) reported an internal error: %s" % (install, row["stderr"][-2000:]))
    return row


def metrics_text(config):
    with open(os.path.join(config["textfile_dir"], "gpu_native_readiness.prom")) as handle:
        return handle.read()


def xid_samples(text):
    return sorted(line.rsplit(" ", 1)[0] for line in text.splitlines() if line.startswith("gpu_native_xid_events"))


def bench_source(work, source, journal, env, runs, per_minute, now, installs=("install",)):
    """Each phase for every agent in ``installs`` (folders in ``work``), interleaved: the steady-state runs see the
    same new journal lines.  The first is this checkout's; its numbers are the result's top level, each other's are
    under ``others[install]``."""
    kernel_log = "auto" if source == "journal" else journal
    configs = dict((install, agent_config(work, "%s-%s" % (source, install), kernel_log)) for install in installs)
    config_path, config = configs[installs[0]]
    report = os.path.join(work, "floor.json")
    if source == "journal":
        floor_argv = [PYTHON, "-I", "-S", "-c", WRAPPER, report, os.path.join(STANDINS, "journalctl"), "-k", "-n", "1"]
    else:
        floor_argv, report = ["tail", "-n", "1", journal], None
    floors = [measure(floor_argv, env, report) for _i in range(runs)]
    interpreter = [measure([PYTHON, "-I", "-S", "-c", "pass"], env) for _i in range(runs)]
    bare_configs = dict((install, agent_config(work, "%s-%s-bare" % (source, install), os.devnull)[0])
                        for install in installs)
    rows = dict((install, {"first": [], "steady": [], "no_kernel_log": []}) for install in installs)

    def each(index):
        """The agents in turn, in an order that alternates between runs (neither always runs first)."""
        return installs if index % 2 == 0 else tuple(reversed(installs))

    for index in range(runs):
        for install in each(index):
            shutil.rmtree(configs[install][1]["state_dir"], ignore_errors=True)
            rows[install]["first"].append(run_agent(work, configs[install][0], env, install))
    first_xids = xid_samples(metrics_text(config))
    clock = now
    for index in range(runs):
        append_journal(journal, per_minute, clock, clock + 60, seed=100 + index)
        clock += 60
        for install in each(index):
            rows[install]["steady"].append(run_agent(work, configs[install][0], env, install))
    steady_by_install = dict((install, xid_samples(metrics_text(configs[install][1]))) for install in installs)
    # the agent's cost without any kernel-log line (kernel_log: /dev/null): what the kernel log adds is the rest
    for index in range(runs):
        for install in each(index):
            rows[install]["no_kernel_log"].append(run_agent(work, bare_configs[install], env, install))
    first, steady, bare = rows[installs[0]]["first"], rows[installs[0]]["steady"], rows[installs[0]]["no_kernel_log"]
    # the steady-state verdict is the first run's verdict on the same journal
    steady_xids = steady_by_install[installs[0]]
    shutil.rmtree(config["state_dir"], ignore_errors=True)
    run_agent(work, config_path, env)
    fresh_xids = xid_samples(metrics_text(config))

    def summary(rows):
        keys = ("cpu_ms", "agent_cpu_ms", "agent_rss_mb")
        return dict((key, statistics.median(row[key] for row in rows)) for key in keys if key in rows[0])

    floor = summary(floors)
    result = {"source": source, "floor": floor, "first": summary(first), "steady": summary(steady),
              "no_kernel_log": summary(bare),
              "python_start_cpu_ms": summary(interpreter)["cpu_ms"],
              "xid_series_first": len(first_xids), "steady_equals_fresh": steady_xids == fresh_xids,
              "expired_xid79_absent": source != "journal" or not any('xid="79"' in line for line in steady_xids + first_xids)}
    python_start = max(result["python_start_cpu_ms"], 0.001)

    def ratios(phases):
        for phase in ("first", "steady", "no_kernel_log"):
            phases[phase]["ratio_total"] = phases[phase]["cpu_ms"] / max(floor["cpu_ms"], 0.001)
            phases[phase]["ratio_agent"] = phases[phase]["agent_cpu_ms"] / max(floor["cpu_ms"], 0.001)
            phases[phase]["agent_per_python_start"] = phases[phase]["agent_cpu_ms"] / python_start
        return phases

    ratios(result)
    result["others"] = {}
    for install in installs[1:]:
        result["others"][install] = ratios(dict((phase, summary(rows[install][phase])) for phase in rows[install]))
        # another revision's agent must judge the same journal the same way
        result["others"][install]["steady_xids_equal"] = steady_by_install[install] == steady_xids
    return result


def callgrind_ir(argv, env):
    """Instructions executed by ``argv``'s own process (valgrind --tool=callgrind, children not traced)."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + argv, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr.decode("utf-8", "replace"))
    if not found:
        raise RuntimeError("valgrind printed no instruction count: %s" % done.stderr[-500:])
    return int(found.group(1))


def callgrind_steady(work, journal, env, installs, per_minute, now):
    """Instruction counts of one steady-state run (journal source, state from a run before, one minute of new
    lines) of each agent, run directly as the unit runs it (no wrapper), and of ``python3 -I -S -c pass``."""
    counts = {"python_start": callgrind_ir([PYTHON, "-I", "-S", "-c", "pass"], env)}
    configs = dict((install, agent_config(work, "callgrind-" + install, "auto")[0]) for install in installs)
    for install in installs:
        run_agent(work, configs[install], env, install)
    append_journal(journal, per_minute, now + 3600, now + 3660, seed=99)
    for install in installs:
        agent = entry_point(work, install)
        counts[install] = callgrind_ir([PYTHON, "-I", "-S", agent, "--config", configs[install]], env)
    return counts


def run(lines, runs, work=None, sources=("journal", "file"), baseline=None, callgrind=False):
    own = work is None
    work = work or tempfile.mkdtemp(prefix="agent-footprint-")
    try:
        now = int(time.time())
        journal, env = setup(work, lines, now)
        install_agent(work)
        installs = ("install",)
        if baseline:
            install_agent(work, os.path.abspath(baseline), "baseline")
            installs = ("install", "baseline")
        per_minute = max(1, int(lines * 60 / SPAN_S))
        results = []
        for source in sources:
            results.append(bench_source(work, source, journal, env, runs, per_minute, now, installs))
            if source != sources[-1]:
                write_journal(journal, lines, now)  # the same journal for the next source
        report = {"lines": lines, "runs": runs, "new_lines_per_run": per_minute, "results": results,
                  "baseline": baseline}
        if callgrind:
            write_journal(journal, lines, now)
            report["callgrind"] = callgrind_steady(work, journal, env, installs, per_minute, now)
        return report
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--baseline", metavar="DIR", help="a checkout of another revision, measured side by side")
    parser.add_argument("--callgrind", action="store_true", help="add valgrind instruction counts (load-independent)")
    parser.add_argument("--sources", default="journal,file",
                        help="comma-separated: journal, file (default both; one halves a run on a busy machine)")
    options = parser.parse_args()
    sources = tuple(source for source in options.sources.split(",") if source)
    if not sources or set(sources) - {"journal", "file"}:
        parser.error("--sources takes journal, file or journal,file")
    report = run(options.lines, options.runs, sources=sources, baseline=options.baseline, callgrind=options.callgrind)
    if options.json:
        print(json.dumps(report, indent=2))
        return 0
    print("%d-line kernel journal, %d new lines per steady-state run, median of %d runs"
          % (report["lines"], report["new_lines_per_run"], report["runs"]))
    for result in report["results"]:
        floor = result["floor"]
        print("\nsource %-8s floor (%s): %.1f ms CPU%s; python3 -I -S -c pass: %.1f ms CPU" % (
            result["source"], "journalctl stand-in -k -n 1" if result["source"] == "journal" else "tail -n 1",
            floor["cpu_ms"], ", %.1f MB" % floor["agent_rss_mb"] if "agent_rss_mb" in floor else "",
            result["python_start_cpu_ms"]))
        header = ("agent", "phase", "agent_cpu_ms", "total_cpu_ms", "agent_MB", "agent/floor", "total/floor",
                  "agent/python")
        print("  %-9s %-13s %13s %13s %9s %12s %12s %13s" % header)
        for label, phases in [("this", result)] + sorted(result["others"].items()):
            for phase in ("first", "steady", "no_kernel_log"):
                row = phases[phase]
                print("  %-9s %-13s %13.1f %13.1f %9.1f %12.1f %12.1f %13.2f" % (
                    label, phase, row["agent_cpu_ms"], row["cpu_ms"], row["agent_rss_mb"], row["ratio_agent"],
                    row["ratio_total"], row["agent_per_python_start"]))
            if label != "this":
                print("  %s's steady-state Xid series equal this agent's: %s" % (label, phases["steady_xids_equal"]))
        print("  steady-state Xid series equal a fresh full read: %s; expired Xid 79 absent: %s" % (
            result["steady_equals_fresh"], result["expired_xid79_absent"]))
    if "callgrind" in report:
        counts = report["callgrind"]
        print("\ncallgrind, one steady-state run (journal), agent process only, instructions:")
        for label in sorted(counts):
            print("  %-13s %12d  %6.2f x python3 -I -S -c pass" % (
                label, counts[label], counts[label] / float(counts["python_start"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
