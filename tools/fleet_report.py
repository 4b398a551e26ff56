# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run playbooks/compliance.yml through ansible-runner (the engine AWX uses) and report per host.

    .venv/bin/python tools/fleet_report.py -i INVENTORY [--limit PATTERN] [--forks N] [--html FILE]
                                            [--json FILE] [--junit FILE] [-e KEY=VALUE ...]
                                            [--ee IMAGE [--ee-volume SRC[:DST[:OPTIONS]] ...]]

Prints one line per host as its checks finish, then a table of hosts and checks.
With --ee IMAGE the run happens inside that execution environment (`make ee` builds
localhost/gpu-native/fleet-ee:latest) the way AWX runs a job on a podman execution node: ansible-runner with
process isolation, the container started `--user=root` (AWX's own container option), here also
`--network=host`; the project (playbooks/) and the inventory are copied into the runner's private data
directory (/runner/project, /runner/inventory), the collection is the one installed in the image, and the
reports are written to /runner/artifacts/compliance.  Files the inventory names on this machine (SSH keys, a
kubeconfig) must be mounted with --ee-volume.
Exit status: 0 when every host is compliant and none is unreachable, 1 otherwise, 2 when the run itself
could not produce a report (bad inventory, playbook error).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PLAYBOOK = os.path.join(REPO, "playbooks", "compliance.yml")
NODE_TASK = "Run the node checks in one execution"


def _collection_module(relative):
    """A module of the collection, loaded by path: this tool runs from a checkout without the collection on
    sys.path."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    path = os.path.join(REPO, "plugins", "module_utils", *relative.split("/"))
    spec = importlib.util.spec_from_file_location("gpu_native_fleet_" + relative.replace("/", "_")[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The report's check names from the collection's one list, and its one table renderer.
CHECKS = _collection_module("spec/compliance_checks.py").REPORT_CHECKS
fixed_width_table = _collection_module("_common/text.py").fixed_width_table
SHORT = {"pass": "ok", "fail": "FAIL", "error": "ERROR", "skip": "-", "unreachable": "UNREACHABLE"}


def progress_line(event):
    """The per-host progress line for a runner event, or None."""
    name = event.get("event")
    data = event.get("event_data") or {}
    if data.get("task") != NODE_TASK or name not in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
        return None
    host = data.get("host")
    result = data.get("res") or {}
    if name == "runner_on_unreachable" or result.get("unreachable"):
        lines = (result.get("msg") or "unreachable").strip().splitlines() or ["unreachable"]
        return "%-24s UNREACHABLE  %s" % (host, lines[0])
    checks = result.get("checks")
    if not isinstance(checks, list):
        return "%-24s ERROR        %s" % (host, result.get("msg") or "no result")
    bad = ["%s=%s" % (c.get("check"), c.get("status")) for c in checks if c.get("status") not in ("pass", "skip")]
    return "%-24s %-12s %s" % (host, "compliant" if not bad else "DRIFT", ", ".join(bad))


def table(rows):
    """Hosts down, checks across; the status of each."""
    hosts = []
    cells = {}
    for row in rows:
        if row["host"] not in hosts:
            hosts.append(row["host"])
        cells[(row["host"], row["check"])] = SHORT.get(row["status"], row["status"])
    rows = [[host] + [cells.get((host, check), "") for check in CHECKS] for host in hosts]
    return fixed_width_table([["host"] + list(CHECKS)] + rows)


def artifact_data(runner):
    for event in runner.events:
        if event.get("event") == "playbook_on_stats":
            return (event.get("event_data") or {}).get("artifact_data") or {}
    return {}


def ee_kwargs(image, volumes, private, inventory):
    """ansible_runner.run() arguments for a run inside the execution environment `image`, laid out as AWX lays
    out a job: the project under /runner/project, the inventory under /runner/inventory."""
    shutil.copytree(os.path.join(REPO, "playbooks"), os.path.join(private, "project", "playbooks"))
    target = os.path.join(private, "inventory")
    if os.path.isdir(inventory):
        shutil.copytree(inventory, target)
    else:
        os.makedirs(target)
        shutil.copyfile(inventory, os.path.join(target, os.path.basename(inventory)))
    mounts = []
    for volume in volumes:
        parts = volume.split(":")
        if len(parts) > 3 or not parts[0] or not os.path.isabs(parts[0]):
            raise SystemExit("--ee-volume takes an absolute SRC[:DST[:OPTIONS]], got %r" % volume)
        if not os.path.exists(parts[0]):
            raise SystemExit("--ee-volume %s: the source does not exist" % parts[0])
        mounts.append(":".join([parts[0], parts[1] if len(parts) > 1 and parts[1] else parts[0],
                                parts[2] if len(parts) > 2 else "ro"]))
    return {"playbook": "playbooks/compliance.yml", "process_isolation": True,
            "process_isolation_executable": "podman", "container_image": image,
            # AWX starts job containers with --user=root (awx/main/tasks/jobs.py,
            # build_execution_environment_params); the host network reaches what this machine reaches
            "container_options": ["--user=root", "--network=host"], "container_volume_mounts": mounts}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
    parser.add_argument("--limit", help="host pattern (default: the group gpu_nodes)")
    parser.add_argument("--forks", type=int, default=25)
    parser.add_argument("--html", help="write the HTML report here")
    parser.add_argument("--json", dest="json_out", help="write the JSON report here")
    parser.add_argument("--junit", help="write the JUnit XML report here")
    parser.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--ee", metavar="IMAGE", help="run inside this execution environment image (podman)")
    parser.add_argument("--ee-volume", action="append", default=[], metavar="SRC[:DST[:OPTIONS]]",
                        help="with --ee: mount this path into the container (DST defaults to SRC, read-only)")
    args = parser.parse_args(argv)
    if not os.path.exists(args.inventory):
        parser.error("inventory %s does not exist" % args.inventory)
    if args.ee_volume and not args.ee:
        parser.error("--ee-volume needs --ee IMAGE")
    if args.ee and not shutil.which("podman"):
        sys.stderr.write("--ee needs podman, which is not on PATH. Fix: install podman (or run without --ee)\n")
        return 2
    try:
        import ansible_runner  # pylint: disable=import-outside-toplevel
    except ImportError:
        sys.stderr.write("ansible-runner is not installed. Fix: pip install -r requirements.txt\n")
        return 2

    work = tempfile.mkdtemp(prefix="fleet-report-")
    try:
        private = os.path.join(work, "runner")
        os.makedirs(private)
        if args.ee:
            reports = os.path.join(private, "artifacts", "compliance")
            extravars = {"compliance_report_dir": "/runner/artifacts/compliance"}
        else:
            reports = os.path.join(work, "reports")
            extravars = {"compliance_report_dir": reports}
        for item in args.extra_var:
            key, sep, value = item.partition("=")
            if not sep or not key:
                parser.error("-e takes KEY=VALUE, got %r" % item)
            extravars[key] = value
        envvars = {}
        if args.ee:
            kwargs = ee_kwargs(args.ee, args.ee_volume, private, args.inventory)
        else:
            link = os.path.join(REPO, ".cache", "collections")
            if "ANSIBLE_COLLECTIONS_PATH" not in os.environ and os.path.isdir(link):
                envvars["ANSIBLE_COLLECTIONS_PATH"] = link
            kwargs = {"playbook": PLAYBOOK, "inventory": os.path.abspath(args.inventory)}

        def on_event(event):
            line = progress_line(event)
            if line:
                print(line, flush=True)
            return True

        runner = ansible_runner.run(
            private_data_dir=private, limit=args.limit, forks=args.forks, extravars=extravars,
            envvars=envvars, event_handler=on_event, quiet=True, **kwargs)
        report = os.path.join(reports, "compliance.json")
        if not os.path.isfile(report):
            sys.stderr.write("the compliance run wrote no report (status %s). Its output:\n%s\n"
                             % (runner.status, runner.stdout.read()[-4000:]))
            return 2
        with open(report) as handle:
            rows = json.load(handle)
        print()
        print(table(rows))
        summary = artifact_data(runner).get("compliance_summary") or {}
        print("\n%s host(s): %s compliant, failed: %s, unreachable: %s" % (
            summary.get("hosts_total"), summary.get("hosts_compliant"),
            ", ".join(summary.get("hosts_failed") or []) or "none",
            ", ".join(summary.get("hosts_unreachable") or []) or "none"))
        for target, name in ((args.html, "compliance.html"), (args.json_out, "compliance.json"),
                             (args.junit, "compliance.junit.xml")):
            if target:
                shutil.copyfile(os.path.join(reports, name), target)
                print("wrote %s" % target)
        bad = [row for row in rows if row["status"] in ("fail", "error", "unreachable")]
        return 0 if rows and not bad and runner.status == "successful" else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
