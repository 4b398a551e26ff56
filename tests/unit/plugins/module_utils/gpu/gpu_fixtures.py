# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read tests/fixtures/nvidia/ the way the nvidia-smi stand-in replays them.

The loader is the stand-in's own (tests/standins/nvidia-smi), so tests and
Molecule hosts see the same bytes.
"""
import importlib.machinery
import importlib.util
import json
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
FIXTURE_DIR = os.path.join(REPO, "tests", "fixtures", "nvidia")
STANDIN_PATH = os.path.join(REPO, "tests", "standins", "nvidia-smi")
_STANDIN = []


def standin():
    """The stand-in script loaded as a module (cached)."""
    if not _STANDIN:
        loader = importlib.machinery.SourceFileLoader("nvidia_smi_standin", STANDIN_PATH)
        spec = importlib.util.spec_from_loader("nvidia_smi_standin", loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        _STANDIN.append(module)
    return _STANDIN[0]


def text(name, part=None, start=None):
    return standin().load_capture_text(os.path.join(FIXTURE_DIR, name), part, start)


def verdict_cases():
    with open(os.path.join(FIXTURE_DIR, "verdicts.json")) as handle:
        return json.load(handle)["cases"]


def captured_inputs(case):
    """The `captured` dict of a verdicts.json case, texts loaded."""
    captured = {}
    for key, value in case["captured"].items():
        if isinstance(value, dict):
            captured[key] = text(value["file"], value.get("part"), value.get("start"))
        else:
            captured[key] = value
    return captured
