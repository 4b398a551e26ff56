# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_config module: drives main() offline (gpus / captured) and with a faked nvidia-smi."""
import copy
import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import node_tools
from ansible_collections.gpu_native.fleet.plugins.modules import mig_config

NVIDIA_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia")
BEGIN = "# ---- BEGIN VERBATIM ----\n"

# The A100-SXM4-80GB capture (fixture 01) holds four 1g.20gb instances with GPU instance
# ids 3, 4, 5, 6 (14 SMs, 19968 MiB each).  nvidia-smi's -lgi/-lci for that state,
# constructed in the real tables' layout:
LGI_A100_4X_1G20 = """+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 1g.20gb         15        3          0:2     |
+-------------------------------------------------------+
|   0  MIG 1g.20gb         15        4          2:2     |
+-------------------------------------------------------+
|   0  MIG 1g.20gb         15        5          4:2     |
+-------------------------------------------------------+
|   0  MIG 1g.20gb         15        6          6:2     |
+-------------------------------------------------------+
"""
LCI_A100_4X_1G20 = """+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
""" + "".join(
    "|   0      %d       MIG 1g.20gb          0         0          0:1     |\n"
    "+--------------------------------------------------------------------+\n" % gi for gi in (3, 4, 5, 6))

DOC = {"version": "v1", "mig-configs": {
    "all-1g.20gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.20gb": 4}}],
    "balanced": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}}],
    "two-7g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 2}}],
    "off": [{"devices": "all", "mig-enabled": False}],
}}


def xml_fixture():
    with open(os.path.join(NVIDIA_FIXTURES, "01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt")) as handle:
        return handle.read().split(BEGIN, 1)[1]


def run(args, capsys, run_command=None, monkeypatch=None):
    if run_command is not None:
        def runner(argv, timeout, env_update=None, max_bytes=None):
            rc, out, err = run_command(None, argv)
            return rc, out.encode(), err.encode(), False, False, 0.0
        monkeypatch.setattr(node_tools, "run_process", runner)
        args = dict(args, nvidia_smi="/bin/true")  # an existing executable; the runner answers for it
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mig_config.main()
    return json.loads(capsys.readouterr().out)


def test_offline_validation_with_given_gpus(capsys):
    document = copy.deepcopy(DOC)
    del document["mig-configs"]["two-7g"]
    before = copy.deepcopy(document)
    result = run({"config": document, "gpus": [{"index": 0, "device_id": "0x20B2"}, {"index": 1, "product": "NVIDIA A100-SXM4-80GB"}]}, capsys)
    assert result.get("failed") is not True, result
    assert result["valid"] is True and result["changed"] is False
    assert result["commands"] == []
    balanced = result["configs"]["balanced"]["placements"][0]
    assert [(i["profile"], i["start"]) for i in balanced[1]["instances"]] == [("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]
    assert document == before  # input untouched


def test_validate_fails_on_an_impossible_layout(capsys):
    result = run({"config": DOC, "gpus": [{"index": 0, "device_id": "0x233010DE"}]}, capsys)
    assert result["failed"] is True
    assert result["valid"] is False
    assert result["msg"].startswith("mig-parted config is invalid: config two-7g entry 0: GPU 0 (H100-80GB, 0x233010DE): "
                                    "7g.80gb: 2 requested but at most 1 fit")
    assert "Fix:" in result["msg"]
    assert result["configs"]["balanced"]["valid"] is True


def test_select_validates_one_config_only(capsys):
    result = run({"config": DOC, "select": "balanced", "gpus": [{"index": 0, "device_id": "0x233010DE"}]}, capsys)
    assert result["valid"] is True and list(result["configs"]) == ["balanced"]


def test_schema_error_fails_with_its_path(capsys):
    document = {"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-device": {}}]}}
    result = run({"config": document, "gpus": [{"index": 0, "device_id": "0x2330"}]}, capsys)
    assert result["failed"] is True
    assert "mig-configs.c[0].mig-device: unknown key" in result["msg"]
    assert "(and 1 more)" in result["msg"]  # mig-devices missing too


def test_bad_gpus_and_bad_geometry_fail_before_validation(capsys):
    result = run({"config": DOC, "gpus": [{"index": 0, "device_id": "H100"}]}, capsys)
    assert result["failed"] is True and "gpus is invalid: gpus[0].device_id: 'H100' is not a PCI device id" in result["msg"]
    result = run({"config": DOC, "gpus": [{"index": 0, "device_id": "0x2330"}],
                  "geometry": {"H100-80GB": {"profiles": {"1g.10gb": {"starts": [9]}}}}}, capsys)
    assert result["failed"] is True and result["msg"].startswith("geometry is invalid: geometry.H100-80GB.profiles.1g.10gb.starts")


def test_geometry_override_adds_a_model(capsys):
    geometry = {"TEST-GPU": {"device_ids": ["0x1234"], "slices": 2, "memory_slots": 2,
                             "profiles": {"1g.8gb": {"id": 1, "starts": [0, 1], "size": 1}}}}
    document = {"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.8gb": 2}}]}}
    result = run({"config": document, "gpus": [{"index": 0, "device_id": "10de:1234"}], "geometry": geometry}, capsys)
    assert result["valid"] is True and result["gpus"][0]["model"] == "TEST-GPU"


def test_compare_needs_select(capsys):
    result = run({"config": DOC, "mode": "compare", "captured": {"nvidia_smi_xml": xml_fixture()}}, capsys)
    assert result["failed"] is True and result["msg"].startswith("mode=compare needs select")


def test_compare_captured_in_sync(capsys):
    result = run({"config": DOC, "select": "all-1g.20gb", "mode": "compare",
                  "captured": {"nvidia_smi_xml": xml_fixture(), "mig_lgi": LGI_A100_4X_1G20, "mig_lci": LCI_A100_4X_1G20}},
                 capsys)
    assert result.get("failed") is not True, result
    assert result["gpus"][0]["model"] == "A100-80GB"
    assert result["gpus"][0]["pci_bus_id"] == "0000:01:00.0"
    assert result["in_sync"] is True and result["drift"] == [] and result["plan"] == []
    assert [i["gpu_instance_id"] for i in result["actual"]["0"]["instances"]] == [3, 4, 5, 6]


def test_compare_captured_drift_gives_a_plan(capsys):
    result = run({"config": DOC, "select": "balanced", "mode": "compare",
                  "captured": {"nvidia_smi_xml": xml_fixture(), "mig_lgi": LGI_A100_4X_1G20, "mig_lci": LCI_A100_4X_1G20}},
                 capsys)
    assert result["in_sync"] is False
    assert result["drift"][0]["message"] == "GPU 0: instances 1g.20gb x4, the config wants 1g.10gb x1, 2g.20gb x1, 4g.40gb x1"
    assert result["plan"] == [{"index": 0, "pci_bus_id": "0000:01:00.0", "model": "A100-80GB", "mig_enabled": True,
                               "mode_change": False, "destroy": True, "create": "5:0,14:4,19:6",
                               "instances": result["configs"]["balanced"]["placements"][0][0]["instances"]}]


def test_compare_against_an_invalid_config_fails(capsys):
    result = run({"config": DOC, "select": "two-7g", "mode": "compare", "captured": {"nvidia_smi_xml": xml_fixture()}}, capsys)
    assert result["failed"] is True and "config two-7g is invalid" in result["msg"]


def test_live_discovery_and_compare_run_nvidia_smi(capsys, monkeypatch):
    calls = []

    def fake_run(self, argv, **kwargs):
        calls.append(argv[1:])
        if argv[1:] == ["-q", "-x"]:
            return 0, xml_fixture(), ""
        if argv[1:] == ["mig", "-lgi"]:
            return 0, LGI_A100_4X_1G20, ""
        if argv[1:] == ["mig", "-lci"]:
            return 6, "No compute instances found: Not Found\n", ""
        raise AssertionError(argv)

    result = run({"config": DOC, "select": "all-1g.20gb", "mode": "compare"}, capsys, fake_run, monkeypatch)
    assert calls == [["-q", "-x"], ["mig", "-lgi"], ["mig", "-lci"]]
    assert result["commands"][0] == "/bin/true -q -x"
    assert [d["kind"] for d in result["drift"]] == ["compute_instances"]


def test_live_nvidia_smi_failure_is_reported(capsys, monkeypatch):
    def fake_run(self, argv, **kwargs):
        return 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", ""

    result = run({"config": DOC, "select": "balanced"}, capsys, fake_run, monkeypatch)
    assert result["failed"] is True
    assert "could not communicate with the NVIDIA driver" in result["msg"] and "Fix:" in result["msg"]


def test_missing_nvidia_smi_without_gpus(capsys):
    with patch_module_args({"config": DOC, "nvidia_smi": "/nonexistent/nvidia-smi"}):
        with pytest.raises(SystemExit):
            mig_config.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and "nvidia-smi was not found (/nonexistent/nvidia-smi)" in result["msg"]
    assert "pass gpus" in result["msg"]


def test_single_strategy_violation_fails_validation(capsys):
    result = run({"config": DOC, "select": "balanced", "mig_strategy": "single",
                  "gpus": [{"index": 0, "device_id": "0x2330"}]}, capsys)
    assert result["failed"] is True
    assert "migStrategy single" in result["msg"] and "needs exactly one profile per GPU" in result["msg"]


def test_compare_refuses_a_gpu_the_node_does_not_have(capsys):
    """Issue #10 item 16: gpus index 42 on a one-GPU node planned instances on "GPU 42"."""
    result = run({"config": DOC, "select": "all-1g.20gb", "mode": "compare", "gpus": [{"index": 42, "device_id": "0x20B2"}],
                  "captured": {"nvidia_smi_xml": xml_fixture(), "mig_lgi": LGI_A100_4X_1G20, "mig_lci": LCI_A100_4X_1G20}},
                 capsys)
    assert result["failed"] is True
    assert result["msg"].startswith("gpus names GPU 42 but the node has GPU 0. Fix:")
    assert result["plan"] == [] and "configs" not in result


@pytest.mark.parametrize("geometry,path", [
    ({"H100-80GB": {"profiles": [1, 2]}}, "geometry.H100-80GB.profiles"),
    ({"H100-80GB": {"device_ids": [{"a": 1}]}}, "geometry.H100-80GB.device_ids[0]"),
    ({"H100-80GB": {"profiles": {"1g.10gb": {"slices": "abc"}}}}, "geometry.H100-80GB.profiles.1g.10gb.slices"),
    ({"A100-80GB": {"profiles": {"1g.20gb": {"id": "15"}}}}, "geometry.A100-80GB.profiles.1g.20gb.id"),
])
def test_bad_geometry_overrides_fail_with_their_path_in_both_modes(capsys, geometry, path):
    """Issue #10 item 7: these were tracebacks (an id given as a string broke compare's plan)."""
    for mode in ("validate", "compare"):
        result = run({"config": DOC, "select": "all-1g.20gb", "mode": mode, "geometry": geometry,
                      "captured": {"nvidia_smi_xml": xml_fixture(), "mig_lgi": LGI_A100_4X_1G20, "mig_lci": LCI_A100_4X_1G20}},
                     capsys)
        assert result["failed"] is True, result
        assert result["msg"].startswith("geometry is invalid: " + path), result["msg"]
        assert "\n" not in result["msg"] and "Traceback" not in json.dumps(result)


def test_a_layout_the_search_cannot_decide_is_invalid_with_the_reason(capsys):
    """Issue #10 item 4: a 40-slot geometry is refused up front; a 32-slot one is bounded by the step limit."""
    profiles = {"3g.3gb": {"id": 1, "slices": 3, "starts": list(range(0, 30)), "size": 3},
                "2g.2gb": {"id": 2, "slices": 2, "starts": list(range(1, 31, 2)), "size": 2},
                "1g.1gb": {"id": 3, "slices": 1, "starts": list(range(0, 32, 4)), "size": 1}}
    layout = {"3g.3gb": 8, "2g.2gb": 3, "1g.1gb": 2}
    document = {"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": layout}]}}
    wide = {"WIDE": {"device_ids": ["0x1234"], "slices": 32, "memory_slots": 40, "profiles": profiles}}
    result = run({"config": document, "gpus": [{"index": 0, "device_id": "0x1234"}], "geometry": wide}, capsys)
    assert result["failed"] is True and result["msg"].startswith("geometry is invalid: geometry.WIDE.memory_slots: 40")
    wide["WIDE"]["memory_slots"] = 32
    result = run({"config": document, "gpus": [{"index": 0, "device_id": "0x1234"}], "geometry": wide}, capsys)
    assert result["failed"] is True and result["valid"] is False
    assert "search limit reached" in result["msg"] and "treat it as invalid" in result["msg"]


@pytest.mark.parametrize("product", ["NVIDIA GH200 480GB", "NVIDIA GB200", "NVIDIA B300 SXM6 AC",
                                     "NVIDIA RTX PRO 6000 Blackwell Server Edition"])
def test_a_mig_gpu_without_a_verified_geometry_is_refused_clearly(capsys, product):
    entry = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.24gb": 1}}
    document = {"version": "v1", "mig-configs": {"c": [entry]}}
    result = run({"config": document, "gpus": [{"index": 0, "product": product}]}, capsys)
    assert result["failed"] is True
    assert "no verified MIG geometry for %s; pass geometry overrides" % product in result["msg"]


def test_blackwell_profile_suffixes_work_through_a_geometry_override(capsys):
    geometry = {"RTX-PRO-6000-TEST": {"products": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"], "slices": 4,
                                      "memory_slots": 4, "profiles": {
                                          "1g.24gb-me": {"id": 1, "starts": [0, 1, 2, 3], "size": 1},
                                          "1g.24gb+me.all": {"id": 2, "starts": [0, 1, 2, 3], "size": 1},
                                          "2g.48gb+gfx": {"id": 3, "starts": [0, 2], "size": 2}}}}
    document = {"version": "v1", "mig-configs": {
        "ok": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.24gb-me": 1, "1g.24gb+me.all": 1, "2g.48gb+gfx": 1}}],
        "two-me-all": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.24gb+me.all": 2}}]}}
    result = run({"config": document, "select": "ok", "geometry": geometry,
                  "gpus": [{"index": 0, "product": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}]}, capsys)
    assert result.get("failed") is not True, result
    result = run({"config": document, "select": "two-me-all", "geometry": geometry,
                  "gpus": [{"index": 0, "product": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}]}, capsys)
    assert result["failed"] is True and "+me instances requested" in result["msg"]
