# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""STAND-IN MIG extension for the nvidia-smi stand-in (tests only; no GPU exists on test hosts).

The nvidia-smi stand-in (``tests/standins/nvidia-smi``) imports this module and
calls ``handle(argv, capture_dir)`` before its own dispatch.  This module keeps
MIG state in a JSON file on the host and answers the MIG commands as the real
tool does (texts and exit codes follow real captures, see
tests/fixtures/nvidia/09_nvsmi_mig_tables_part.txt):

    nvidia-smi [-i N] -mig 0|1          (also --multi-instance-gpu)
    nvidia-smi [-i N] -r                (also --gpu-reset; applies a pending MIG mode)
    nvidia-smi mig [-i N] -lgip | -lgipp | -lgi | -lci
    nvidia-smi mig [-i N] -cgi <profile[:start]>,... [-C]
    nvidia-smi mig [-i N] -dci [-gi G] [-ci C]
    nvidia-smi mig [-i N] -dgi [-gi G]
    nvidia-smi -q -x                    the captured XML with MIG mode and devices rewritten
    nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name[,used_memory] --format=csv[,noheader]
                                        the processes the state's "processes" knob lists

It refuses what the real tool refuses: an unknown profile, a start the profile
does not allow, an overlapping placement (Insufficient Resources), MIG
commands on a GPU without MIG mode, destroying a GPU instance that still has
compute instances, and anything on a GPU "in use by another client".

State file: ``$NVIDIA_SMI_STANDIN_MIG_STATE`` or
``/var/lib/nvidia-smi-standin/mig-state.json``; created from the capture's XML
on the first MIG call.  Knobs a test may set in it:

    "mode_change_needs_reset": true   -mig leaves the mode pending until -r
    "busy": [0]                       GPU indexes in use by another client
                                      (mode changes stay pending, -r, -dci, -dgi
                                      and -cgi are refused)
    "processes": [{"gpu": 1, "pid": 4242, "name": "python3"}]
                                      compute processes --query-compute-apps lists

Every call is appended to ``calls.log`` (JSON lines: time, argv, rc) next to
the state file, so tests can check the order of operations.

The profile tables below are this stand-in's own copy of what the GPUs report
(from real -lgip/-lgipp captures), deliberately independent of the
collection's mig_geometry, so tests compare the collection against the "GPU".
"""

import json
import os
import re
import sys
import time

DEFAULT_STATE = "/var/lib/nvidia-smi-standin/mig-state.json"
INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
EXIT_INVALID = 2
EXIT_NOT_SUPPORTED = 3
EXIT_NOT_FOUND = 6
EXIT_OTHER = 255

# name: (profile id, slices, starts, size, memory GiB, SM, DEC, ENC, CE, JPEG, OFA, +me)
_H100 = {
    "1g.10gb": (19, 1, [0, 1, 2, 3, 4, 5, 6], 1, "9.75", 16, 1, 0, 1, 1, 0, False),
    "1g.10gb+me": (20, 1, [0, 1, 2, 3, 4, 5, 6], 1, "9.75", 16, 1, 0, 1, 1, 1, True),
    "1g.20gb": (15, 1, [0, 2, 4, 6], 2, "19.62", 26, 1, 0, 1, 1, 0, False),
    "2g.20gb": (14, 2, [0, 2, 4], 2, "19.62", 32, 2, 0, 2, 2, 0, False),
    "3g.40gb": (9, 3, [0, 4], 4, "39.50", 60, 3, 0, 3, 3, 0, False),
    "4g.40gb": (5, 4, [0], 4, "39.50", 64, 4, 0, 4, 4, 0, False),
    "7g.80gb": (0, 7, [0], 8, "79.25", 132, 7, 0, 8, 7, 1, False),
}
_A100_40 = {
    "1g.5gb": (19, 1, [0, 1, 2, 3, 4, 5, 6], 1, "4.75", 14, 0, 0, 1, 0, 0, False),
    "1g.5gb+me": (20, 1, [0, 1, 2, 3, 4, 5, 6], 1, "4.75", 14, 1, 0, 1, 1, 1, True),
    "1g.10gb": (15, 1, [0, 2, 4, 6], 2, "9.75", 14, 1, 0, 1, 0, 0, False),
    "2g.10gb": (14, 2, [0, 2, 4], 2, "9.75", 28, 1, 0, 2, 0, 0, False),
    "3g.20gb": (9, 3, [0, 4], 4, "19.62", 42, 2, 0, 3, 0, 0, False),
    "4g.20gb": (5, 4, [0], 4, "19.62", 56, 2, 0, 4, 0, 0, False),
    "7g.40gb": (0, 7, [0], 8, "39.50", 98, 5, 0, 7, 1, 1, False),
}
_A100_80 = {
    "1g.10gb": (19, 1, [0, 1, 2, 3, 4, 5, 6], 1, "9.50", 14, 0, 0, 1, 0, 0, False),
    "1g.10gb+me": (20, 1, [0, 1, 2, 3, 4, 5, 6], 1, "9.50", 14, 1, 0, 1, 1, 1, True),
    "1g.20gb": (15, 1, [0, 2, 4, 6], 2, "19.50", 14, 1, 0, 1, 0, 0, False),
    "2g.20gb": (14, 2, [0, 2, 4], 2, "19.50", 28, 1, 0, 2, 0, 0, False),
    "3g.40gb": (9, 3, [0, 4], 4, "39.25", 42, 2, 0, 3, 0, 0, False),
    "4g.40gb": (5, 4, [0], 4, "39.25", 56, 2, 0, 4, 0, 0, False),
    "7g.80gb": (0, 7, [0], 8, "79.00", 98, 5, 0, 7, 1, 1, False),
}
_A30 = {
    "1g.6gb": (14, 1, [0, 1, 2, 3], 1, "5.81", 14, 0, 0, 1, 0, 0, False),
    "1g.6gb+me": (21, 1, [0, 1, 2, 3], 1, "5.81", 14, 1, 0, 1, 1, 1, True),
    "2g.12gb": (5, 2, [0, 2], 2, "11.69", 28, 2, 0, 2, 0, 0, False),
    "2g.12gb+me": (6, 2, [0, 2], 2, "11.69", 28, 2, 0, 2, 1, 1, True),
    "4g.24gb": (0, 4, [0], 4, "23.44", 56, 4, 0, 4, 1, 1, False),
}
PROFILES_BY_DEVICE = {
    "233010DE": (8, _H100), "233110DE": (8, _H100), "232210DE": (8, _H100),
    "20B010DE": (8, _A100_40), "20B210DE": (8, _A100_80), "20B510DE": (8, _A100_80),
    "20B710DE": (4, _A30),
}
# GPU instance ids as the driver hands them out: by placement (start, size).
_GI_IDS_8 = {(0, 8): 0, (4, 4): 1, (0, 4): 2, (0, 2): 3, (2, 2): 4, (4, 2): 5, (6, 2): 6}
_GI_IDS_4 = {(0, 4): 0, (0, 2): 1, (2, 2): 2}
# Default compute instance profile id for N compute slices (the -C instance).
_CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


class Refused(Exception):
    def __init__(self, text, code):
        Exception.__init__(self, text)
        self.text = text
        self.code = code


# ---------------------------------------------------------------- plumbing

def _base_module():
    """The nvidia-smi stand-in itself (its capture loaders)."""
    main = sys.modules.get("__main__")
    if main is not None and hasattr(main, "resolve") and hasattr(main, "load_manifest"):
        return main
    import importlib.machinery
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nvidia-smi")
    loader = importlib.machinery.SourceFileLoader("nvidia_smi_standin_base", path)
    spec = importlib.util.spec_from_loader("nvidia_smi_standin_base", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def state_path():
    return os.environ.get("NVIDIA_SMI_STANDIN_MIG_STATE") or DEFAULT_STATE


def _captured_xml(capture_dir):
    if not capture_dir or not os.path.isdir(capture_dir):
        return None, None
    base = _base_module()
    manifest = base.load_manifest(capture_dir)
    if manifest.get("no_driver"):
        return None, manifest
    return base.resolve(capture_dir, manifest, "xml"), manifest


def _gpus_from_xml(xml_text):
    gpus = []
    for position, block in enumerate(re.findall(r"<gpu id=\"[^\"]+\">.*?</gpu>", xml_text, re.S)):
        bus = re.search(r"<gpu id=\"([^\"]+)\"", block).group(1)
        device = re.search(r"<pci_device_id>([0-9A-Fa-f]+)</pci_device_id>", block)
        current = re.search(r"<current_mig>([^<]*)</current_mig>", block)
        gpus.append({
            "index": position,
            "bus_id": bus,
            "device_id": device.group(1).upper() if device else None,
            "mig": (current.group(1).strip() if current else "N/A"),
            "pending": (current.group(1).strip() if current else "N/A"),
            "instances": [],
        })
    return gpus


def load_state(capture_dir, create=True):
    path = state_path()
    if os.path.exists(path):
        with open(path) as handle:
            return json.load(handle)
    if not create:
        return None
    xml_text, _manifest = _captured_xml(capture_dir)
    if xml_text is None:
        return None
    return {"mode_change_needs_reset": False, "busy": [], "gpus": _gpus_from_xml(xml_text)}


def save_state(state):
    path = state_path()
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory)
    temp = path + ".tmp"
    with open(temp, "w") as handle:
        json.dump(state, handle, indent=1, sort_keys=True)
    os.rename(temp, path)


def _log(argv, rc):
    path = os.path.join(os.path.dirname(state_path()) or ".", "calls.log")
    try:
        directory = os.path.dirname(path)
        if directory and not os.path.isdir(directory):
            os.makedirs(directory)
        with open(path, "a") as handle:
            handle.write(json.dumps({"time": time.time(), "argv": argv, "rc": rc}) + "\n")
    except (IOError, OSError):
        pass


# ---------------------------------------------------------------- arguments

def _parse(argv):
    """Split argv into (command, options) or None when not a MIG call."""
    args = list(argv)
    sub = False
    if args and args[0] == "mig":
        sub = True
        args = args[1:]
    opts = {"sub": sub}
    position = 0
    aliases = {
        "--id": "-i", "--multi-instance-gpu": "-mig", "--gpu-reset": "-r",
        "--list-gpu-instance-profiles": "-lgip", "--list-gpu-instance-possible-placements": "-lgipp",
        "--list-gpu-instances": "-lgi", "--list-compute-instances": "-lci",
        "--create-gpu-instance": "-cgi", "--default-compute-instance": "-C",
        "--destroy-compute-instance": "-dci", "--destroy-gpu-instance": "-dgi",
        "--gpu-instance-id": "-gi", "--compute-instance-id": "-ci",
        "--query": "-q", "--xml-format": "-x",
    }
    with_value = ("-i", "-mig", "-cgi", "-gi", "-ci")
    while position < len(args):
        arg = args[position]
        value = None
        if arg.startswith("--") and "=" in arg:
            arg, value = arg.split("=", 1)
        arg = aliases.get(arg, arg)
        if arg in with_value:
            if value is None:
                if position + 1 >= len(args):
                    return "invalid", opts
                value = args[position + 1]
                position += 1
            opts[arg] = value
        elif arg in ("-r", "-lgip", "-lgipp", "-lgi", "-lci", "-C", "-dci", "-dgi", "-q", "-x"):
            opts[arg] = True
        else:
            return None, opts
        position += 1
    if sub:
        commands = [c for c in ("-lgip", "-lgipp", "-lgi", "-lci", "-cgi", "-dci", "-dgi") if c in opts]
        if len(commands) != 1 or ("-C" in opts and commands[0] != "-cgi"):
            return "invalid", opts
        return commands[0], opts
    if "-mig" in opts and not opts.get("-r") and not opts.get("-q"):
        return "-mig", opts
    if opts.get("-r") and "-mig" not in opts and not opts.get("-q"):
        return "-r", opts
    if opts.get("-q") and opts.get("-x") and set(opts) <= {"sub", "-q", "-x"}:
        return "xml", opts
    return None, opts


def _targets(state, opts):
    gpus = state["gpus"]
    if "-i" not in opts:
        return gpus
    chosen = []
    for token in opts["-i"].split(","):
        token = token.strip()
        found = None
        for gpu in gpus:
            if token.isdigit() and int(token) == gpu["index"]:
                found = gpu
            elif not token.isdigit() and _same_bus(token, gpu["bus_id"]):
                found = gpu
        if found is None:
            raise Refused("No devices were found", EXIT_NOT_FOUND)
        chosen.append(found)
    return chosen


def _same_bus(first, second):
    def key(text):
        parts = re.split(r"[:.]", text.lower())
        return tuple(int(p, 16) for p in parts[-3:])
    try:
        return key(first) == key(second)
    except ValueError:
        return False


def _profiles(gpu):
    return PROFILES_BY_DEVICE.get(gpu.get("device_id") or "", (None, None))


# ---------------------------------------------------------------- commands

def _mode(state, opts):
    value = opts["-mig"]
    if value not in ("0", "1"):
        raise Refused(INVALID_ARGS, EXIT_INVALID)
    want = "Enabled" if value == "1" else "Disabled"
    out = []
    for gpu in _targets(state, opts):
        _slots, profiles = _profiles(gpu)
        if profiles is None:
            out.append("Unable to %s MIG Mode for GPU %s: Not Supported" % ("enable" if value == "1" else "disable", gpu["bus_id"]))
            print("\n".join(out))
            return EXIT_NOT_SUPPORTED
        if want == "Disabled" and gpu["instances"]:
            out.append("Unable to disable MIG Mode for GPU %s: In use by another client" % gpu["bus_id"])
            print("\n".join(out))
            return EXIT_OTHER
        busy = gpu["index"] in state.get("busy", [])
        if busy or state.get("mode_change_needs_reset"):
            gpu["pending"] = want
            if gpu["mig"] == want:
                out.append("%s MIG Mode for GPU %s" % ("Enabled" if value == "1" else "Disabled", gpu["bus_id"]))
                continue
            out.append("Warning: MIG mode is in pending %s state for GPU %s:%s" % (
                "enable" if value == "1" else "disable", gpu["bus_id"],
                "In use by another client" if busy else "Reset required"))
            out.append("%s is currently being used by one or more other processes (e.g. CUDA application or a "
                       "monitoring application such as another instance of nvidia-smi). Please first kill all "
                       "processes using the device and retry the command or reboot the system to make MIG mode "
                       "effective." % gpu["bus_id"] if busy else
                       "A GPU reset is required to make MIG mode effective.")
        else:
            gpu["mig"] = gpu["pending"] = want
            out.append("%s MIG Mode for GPU %s" % ("Enabled" if value == "1" else "Disabled", gpu["bus_id"]))
    out.append("All done.")
    print("\n".join(out))
    return 0


def _reset(state, opts):
    if "-i" not in opts:
        print("GPU reset requires a target GPU: use -i.")  # the real tool resets all only with extra flags
        return EXIT_INVALID
    for gpu in _targets(state, opts):
        if gpu["index"] in state.get("busy", []):
            print("GPU %s is currently in use by another process.\n\n1 device is currently being used by one or more "
                  "other processes (e.g., Fabric Manager, CUDA application, graphics application such as an X "
                  "server, or a monitoring application such as another instance of nvidia-smi). Please first kill "
                  "all processes using this device and all compute applications running in the system." % gpu["bus_id"])
            return EXIT_OTHER
        gpu["mig"] = gpu["pending"]
        if gpu["mig"] != "Enabled":
            gpu["instances"] = []
        print("GPU %s was successfully reset." % gpu["bus_id"])
    print("All done.")
    return 0


def _mig_gpus(state, opts):
    targets = _targets(state, opts)
    enabled = [g for g in targets if g["mig"] == "Enabled"]
    if not enabled:
        raise Refused("No MIG-enabled devices found.", EXIT_NOT_FOUND)
    return enabled


def _free_count(gpu, slots, profile):
    used = 0
    for inst in gpu["instances"]:
        used |= ((1 << inst["size"]) - 1) << inst["start"]
    count = 0
    for start in profile[2]:
        mask = ((1 << profile[3]) - 1) << start
        if start + profile[3] <= slots and not used & mask:
            used |= mask
            count += 1
    if profile[11]:
        has_me = any(inst["me"] for inst in gpu["instances"])
        count = 0 if has_me else min(count, 1)
    return count


def _total_count(slots, profile):
    return _free_count({"instances": []}, slots, profile)


def _lgip(state, opts):
    rows = ["+-----------------------------------------------------------------------------+",
            "| GPU instance profiles:                                                      |",
            "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |",
            "|                              Free/Total   GiB              CE    JPEG  OFA  |",
            "|=============================================================================|"]
    for gpu in _mig_gpus(state, opts):
        slots, profiles = _profiles(gpu)
        for name, profile in _sorted_profiles(profiles):
            rows.append("|%4d  MIG %-13s%3d     %d/%d        %-11s%-7s%-7d%-6d%d   |" % (
                gpu["index"], name, profile[0], _free_count(gpu, slots, profile), _total_count(slots, profile),
                profile[4], "No", profile[5], profile[6], profile[7]))
            rows.append("|%61s%-6d%-6d%d   |" % ("", profile[8], profile[9], profile[10]))
            rows.append("+-----------------------------------------------------------------------------+")
    print("\n".join(rows))
    return 0


def _sorted_profiles(profiles):
    # nvidia-smi lists profiles by id order of its table: 1g, 1g+me, 1g double, 2g, 3g, 4g, 7g
    return sorted(profiles.items(), key=lambda item: (item[1][1], item[1][3], item[1][11]))


def _lgipp(state, opts):
    rows = []
    for gpu in _mig_gpus(state, opts):
        _slots, profiles = _profiles(gpu)
        for _name, profile in _sorted_profiles(profiles):
            rows.append("GPU %2d Profile ID %2d %s {%s}:%d" % (
                gpu["index"], profile[0], "Placements:" if len(profile[2]) > 1 else "Placement :",
                ",".join(str(s) for s in profile[2]), profile[3]))
    print("\n".join(rows))
    return 0


def _lgi(state, opts):
    rows = []
    for gpu in _mig_gpus(state, opts):
        for inst in sorted(gpu["instances"], key=lambda i: i["gi"]):
            rows.append("|%4d  MIG %-15s%3d%9d%11d:%d     |" % (
                gpu["index"], inst["profile"], inst["profile_id"], inst["gi"], inst["start"], inst["size"]))
            rows.append("+-------------------------------------------------------+")
    if not rows:
        print("No GPU instances found: Not Found")
        return EXIT_NOT_FOUND
    print("\n".join(["+-------------------------------------------------------+",
                     "| GPU instances:                                        |",
                     "| GPU   Name             Profile  Instance   Placement  |",
                     "|                          ID       ID       Start:Size |",
                     "|=======================================================|"] + rows))
    return 0


def _lci(state, opts):
    rows = []
    for gpu in _mig_gpus(state, opts):
        for inst in sorted(gpu["instances"], key=lambda i: i["gi"]):
            for ci in inst["cis"]:
                rows.append("|%4d%7d       MIG %-16s%2d%10d%11d:%d     |" % (
                    gpu["index"], inst["gi"], inst["profile"], ci["profile_id"], ci["ci"], 0, inst["slices"]))
                rows.append("+--------------------------------------------------------------------+")
    if not rows:
        print("No compute instances found: Not Found")
        return EXIT_NOT_FOUND
    print("\n".join(["+--------------------------------------------------------------------+",
                     "| Compute instances:                                                 |",
                     "| GPU     GPU       Name             Profile   Instance   Placement  |",
                     "|       Instance                       ID        ID       Start:Size |",
                     "|         ID                                                         |",
                     "|====================================================================|"] + rows))
    return 0


def _busy(state, gpu):
    return gpu["index"] in state.get("busy", [])


def _cgi(state, opts):
    out = []
    code = 0
    for gpu in _mig_gpus(state, opts):
        slots, profiles = _profiles(gpu)
        gi_ids = _GI_IDS_8 if slots == 8 else _GI_IDS_4
        for token in opts["-cgi"].split(","):
            token = token.strip()
            wanted, _sep, start_text = token.partition(":")
            match = None
            for name, profile in profiles.items():
                if wanted == name or wanted == "MIG " + name or (wanted.isdigit() and int(wanted) == profile[0]):
                    match = (name, profile)
            if match is None:
                out.append("Unable to create a GPU instance on GPU %2d using profile %s: Not Found" % (gpu["index"], wanted))
                code = EXIT_NOT_FOUND
                break
            name, profile = match
            if _busy(state, gpu):
                out.append("Unable to create a GPU instance on GPU %2d using profile %d: In use by another client"
                           % (gpu["index"], profile[0]))
                code = EXIT_OTHER
                break
            used = 0
            for inst in gpu["instances"]:
                used |= ((1 << inst["size"]) - 1) << inst["start"]
            if start_text:
                if not start_text.isdigit() or int(start_text) not in profile[2]:
                    out.append("Unable to create a GPU instance on GPU %2d using profile %d: Invalid Argument"
                               % (gpu["index"], profile[0]))
                    code = EXIT_INVALID
                    break
                candidates = [int(start_text)]
            else:
                candidates = sorted(profile[2], reverse=True)  # the driver fills from the top
            start = None
            for candidate in candidates:
                mask = ((1 << profile[3]) - 1) << candidate
                if not used & mask:
                    start = candidate
                    break
            me_taken = profile[11] and any(inst["me"] for inst in gpu["instances"])
            if start is None or me_taken:
                out.append("Unable to create a GPU instance on GPU %2d using profile %d: Insufficient Resources"
                           % (gpu["index"], profile[0]))
                code = EXIT_OTHER
                break
            gi = gi_ids.get((start, profile[3]), 7 + start if slots == 8 else 3 + start)
            inst = {"profile": name, "profile_id": profile[0], "gi": gi, "start": start, "size": profile[3],
                    "slices": profile[1], "me": profile[11], "cis": []}
            gpu["instances"].append(inst)
            out.append("Successfully created GPU instance ID %2d on GPU %2d using profile MIG %s (ID %2d)"
                       % (gi, gpu["index"], name, profile[0]))
            if opts.get("-C"):
                ci_profile = _CI_PROFILE.get(profile[1], 0)
                inst["cis"].append({"ci": 0, "profile_id": ci_profile})
                out.append("Successfully created compute instance ID %2d on GPU %2d GPU instance ID %2d using profile "
                           "MIG %s (ID %2d)" % (0, gpu["index"], gi, name, ci_profile))
        if code:
            break
    if code:
        out.append("Failed to create GPU instances: %s" % out[-1].rsplit(": ", 1)[1])
    print("\n".join(out))
    return code


def _dci(state, opts):
    out = []
    found = False
    for gpu in _mig_gpus(state, opts):
        for inst in gpu["instances"]:
            if "-gi" in opts and str(inst["gi"]) != opts["-gi"]:
                continue
            for ci in list(inst["cis"]):
                if "-ci" in opts and str(ci["ci"]) != opts["-ci"]:
                    continue
                found = True
                if _busy(state, gpu):
                    out.append("Unable to destroy compute instance ID %2d from GPU %2d GPU instance ID %2d: In use by another client"
                               % (ci["ci"], gpu["index"], inst["gi"]))
                    out.append("Failed to destroy compute instances: In use by another client")
                    print("\n".join(out))
                    return EXIT_OTHER
                inst["cis"].remove(ci)
                out.append("Successfully destroyed compute instance ID %2d from GPU %2d GPU instance ID %2d"
                           % (ci["ci"], gpu["index"], inst["gi"]))
    if not found:
        print("No compute instances found: Not Found")
        return EXIT_NOT_FOUND
    print("\n".join(out))
    return 0


def _dgi(state, opts):
    out = []
    found = False
    for gpu in _mig_gpus(state, opts):
        for inst in list(gpu["instances"]):
            if "-gi" in opts and str(inst["gi"]) != opts["-gi"]:
                continue
            found = True
            if inst["cis"] or _busy(state, gpu):
                out.append("Unable to destroy GPU instance ID %2d from GPU %2d: In use by another client" % (inst["gi"], gpu["index"]))
                out.append("Failed to destroy GPU instances: In use by another client")
                print("\n".join(out))
                return EXIT_OTHER
            gpu["instances"].remove(inst)
            out.append("Successfully destroyed GPU instance ID %2d from GPU %2d" % (inst["gi"], gpu["index"]))
    if not found:
        print("No GPU instances found: Not Found")
        return EXIT_NOT_FOUND
    print("\n".join(out))
    return 0


def _mig_devices_xml(gpu):
    if gpu["mig"] != "Enabled" or not any(inst["cis"] for inst in gpu["instances"]):
        return "<mig_devices>None</mig_devices>"
    _slots, profiles = _profiles(gpu)
    parts = ["<mig_devices>"]
    device_index = 0
    for inst in sorted(gpu["instances"], key=lambda i: i["start"]):
        profile = profiles[inst["profile"]]
        for ci in inst["cis"]:
            parts.append(
                "\n            <mig_device>\n                <index>%d</index>\n"
                "                <gpu_instance_id>%d</gpu_instance_id>\n"
                "                <compute_instance_id>%d</compute_instance_id>\n"
                "                <device_attributes>\n                    <shared>\n"
                "                        <multiprocessor_count>%d</multiprocessor_count>\n"
                "                    </shared>\n                </device_attributes>\n"
                "                <fb_memory_usage>\n                    <total>%d MiB</total>\n"
                "                </fb_memory_usage>\n            </mig_device>"
                % (device_index, inst["gi"], ci["ci"], profile[5], int(float(profile[4]) * 1024)))
            device_index += 1
    parts.append("\n        </mig_devices>")
    return "".join(parts)


def _xml(state, capture_dir):
    xml_text, _manifest = _captured_xml(capture_dir)
    if xml_text is None:
        return None
    blocks = re.split(r"(<gpu id=\"[^\"]+\">.*?</gpu>)", xml_text, flags=re.S)
    position = 0
    out = []
    for block in blocks:
        if block.startswith("<gpu id="):
            gpu = state["gpus"][position] if position < len(state["gpus"]) else None
            position += 1
            if gpu is not None and _profiles(gpu)[1] is not None:
                block = re.sub(r"<current_mig>[^<]*</current_mig>", "<current_mig>%s</current_mig>" % gpu["mig"], block)
                block = re.sub(r"<pending_mig>[^<]*</pending_mig>", "<pending_mig>%s</pending_mig>" % gpu["pending"], block)
                block = re.sub(r"<mig_devices>.*?</mig_devices>|<mig_devices>None</mig_devices>",
                               lambda _m: _mig_devices_xml(gpu), block, count=1, flags=re.S)
        out.append(block)
    sys.stdout.write("".join(out))
    return 0


HANDLERS = {"-lgip": _lgip, "-lgipp": _lgipp, "-lgi": _lgi, "-lci": _lci, "-cgi": _cgi, "-dci": _dci, "-dgi": _dgi,
            "-mig": _mode, "-r": _reset}
MUTATING = ("-cgi", "-dci", "-dgi", "-mig", "-r")


_APPS_FIELDS = {"gpu_bus_id": "bus", "pid": "pid", "process_name": "name", "used_memory": "memory"}


def _compute_apps(argv, capture_dir):
    """``--query-compute-apps=F,.. --format=csv[,noheader]``: None when the call is not that."""
    query = [a for a in argv if a.startswith("--query-compute-apps=")]
    formats = [a for a in argv if a.startswith("--format=")]
    if len(query) != 1 or len(formats) != 1 or len(argv) != 2:
        return None
    fields = query[0].split("=", 1)[1].split(",")
    options = formats[0].split("=", 1)[1].split(",")
    if any(f not in _APPS_FIELDS for f in fields) or "csv" not in options:
        print(INVALID_ARGS)
        return EXIT_INVALID
    state = load_state(capture_dir)
    if state is None:
        return None
    rows = [] if "noheader" in options else [", ".join(fields)]
    for proc in state.get("processes", []):
        gpu = [g for g in state["gpus"] if g["index"] == proc["gpu"]][0]
        values = {"bus": gpu["bus_id"], "pid": str(proc["pid"]), "name": proc.get("name", "python3"),
                  "memory": "%d MiB" % proc.get("memory_mib", 1024)}
        rows.append(", ".join(values[_APPS_FIELDS[f]] for f in fields))
    if rows:
        print("\n".join(rows))
    return 0


def handle(argv, capture_dir):
    """Answer a MIG call; return the exit status, or None when the call is not ours."""
    if any(a.startswith("--query-compute-apps") for a in argv):
        code = _compute_apps(argv, capture_dir)
        _log(argv, code)
        return code
    command, opts = _parse(argv)
    if command is None:
        _log(argv, None)
        return None
    if command == "invalid":
        print(INVALID_ARGS)
        _log(argv, EXIT_INVALID)
        return EXIT_INVALID
    if command == "xml":
        state = load_state(capture_dir, create=False)
        if state is None:
            _log(argv, None)
            return None
        code = _xml(state, capture_dir)
        _log(argv, code)
        return code
    state = load_state(capture_dir)
    if state is None:
        _log(argv, None)
        return None  # no capture or no driver: the stand-in answers as it would
    try:
        code = HANDLERS[command](state, opts)
    except Refused as exc:
        print(exc.text)
        code = exc.code
    if command in MUTATING:
        save_state(state)
    _log(argv, code)
    return code
