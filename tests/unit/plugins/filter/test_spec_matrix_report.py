"""spec_matrix_report filter: one or many hosts' results as Markdown or plain text."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter.spec_matrix_report import FilterModule, spec_matrix_report


def item(check, name, expected, actual, status, note=None):
    return {"check": check, "name": name, "expected": expected, "actual": actual, "status": status, "note": note}


def result(items, profile="h100-serving"):
    summary = {"pass": 0, "fail": 0, "unknown": 0}
    for entry in items:
        summary[entry["status"]] += 1
    summary["total"] = len(items)
    return {"changed": False, "compliant": summary["fail"] == summary["unknown"] == 0, "profile": profile,
            "results": items, "summary": summary}


NODE_A = result([
    item("os", "id", "ubuntu", "ubuntu", "pass"),
    item("sysctl", "vm.max_map_count", "262144", "65530", "fail"),
    item("gpu", "count", "8", None, "fail", "driver not loaded"),
    item("services", "nvidia-persistenced", "running", None, "unknown", "systemd | not running"),
])
NODE_B = result([item("os", "id", "ubuntu", "ubuntu", "pass")], profile="a100-training")


def test_registered_for_ansible():
    assert FilterModule().filters()["spec_matrix_report"] is spec_matrix_report


def test_single_host_markdown():
    text = spec_matrix_report(NODE_A)
    assert text.splitlines() == [
        "node (h100-serving): 1 pass, 2 fail, 1 unknown",
        "",
        "| item | expected | actual | status | note |",
        "|---|---|---|---|---|",
        "| sysctl.vm.max_map_count | 262144 | 65530 | fail |  |",
        "| gpu.count | 8 | - | fail | driver not loaded |",
        "| services.nvidia-persistenced | running | - | unknown | systemd \\| not running |",
        "| os.id | ubuntu | ubuntu | pass |  |",
    ]


def test_many_hosts_only_problems():
    text = spec_matrix_report({"gpu-b02": NODE_B, "gpu-a01": NODE_A}, only_problems=True)
    lines = text.splitlines()
    assert lines[0] == ("gpu-b02 (a100-training): 1 pass, 0 fail, 0 unknown; "
                        "gpu-a01 (h100-serving): 1 pass, 2 fail, 1 unknown")
    assert lines[2] == "| host | item | expected | actual | status | note |"
    assert lines[4].startswith("| gpu-a01 | sysctl.vm.max_map_count |")
    assert len(lines) == 7 and "gpu-b02 |" not in text


def test_dict2items_and_list_of_items():
    pairs = [{"key": "gpu-a01", "value": NODE_A}]
    assert spec_matrix_report(pairs) == spec_matrix_report({"gpu-a01": NODE_A})
    bare = spec_matrix_report(NODE_A["results"], summary=False)
    assert bare.splitlines()[0] == "| item | expected | actual | status | note |"


def test_plain_text_columns():
    text = spec_matrix_report(NODE_A, "text", summary=False)
    lines = text.splitlines()
    assert lines[0].split() == ["ITEM", "EXPECTED", "ACTUAL", "STATUS", "NOTE"]
    assert lines[2].split()[:4] == ["sysctl.vm.max_map_count", "262144", "65530", "fail"]
    # columns line up
    assert lines[0].index("EXPECTED") == lines[2].index("262144")


def test_all_pass_with_only_problems_and_no_note_column():
    text = spec_matrix_report(NODE_B, only_problems=True)
    assert text.splitlines()[-1] == "All items pass."
    assert "note" not in spec_matrix_report(NODE_B)


def test_failed_module_run_is_one_row():
    failed = {"failed": True, "msg": "invalid gpu_native_spec_matrix: profiles.x.sysctl_typo: unknown key",
              "results": [], "summary": {"pass": 0, "fail": 0, "unknown": 0, "total": 0}, "profile": None}
    text = spec_matrix_report({"gpu-c03": failed})
    assert "| gpu-c03 | (module) | - | - | fail | invalid gpu_native_spec_matrix: profiles.x.sysctl_typo" in text


@pytest.mark.parametrize("data, kwargs, message", [
    ("text", {}, "expected a spec_matrix result, a list of its results, or a mapping of host to result; got str"),
    ({"gpu-a01": {"rc": 0}}, {}, "value for host gpu-a01 is not a spec_matrix result"),
    ([1, 2], {}, "list entries must be spec_matrix results or {key, value} pairs"),
    (NODE_A, {"format": "html"}, "format must be markdown or text, got 'html'"),
])
def test_bad_input(data, kwargs, message):
    with pytest.raises(AnsibleFilterError) as info:
        spec_matrix_report(data, **kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize("data, message", [
    # issue #10 item 9: these raised "'int' object has no attribute 'get'" / "'str' object has no attribute 'get'"
    ({"results": [1, 2], "summary": {}}, "results[0] must be a mapping with check, name"),
    ({"results": [], "summary": "x"}, "summary must be a mapping of status to count, got str"),
    ({"results": [{"check": "os", "name": "id", "status": "pass"}], "summary": ["x"]},
     "summary must be a mapping of status to count, got list"),
    ({"gpu-a01": {"results": [{"check": "os", "status": "pass"}, "oops"], "summary": {}}},
     "gpu-a01.results[1] must be a mapping"),
    ([{"key": "gpu-b01", "value": {"results": [None], "summary": {}}}], "gpu-b01.results[0] must be a mapping"),
])
def test_malformed_results_name_the_path(data, message):
    with pytest.raises(AnsibleFilterError) as info:
        spec_matrix_report(data)
    assert message in str(info.value)
    assert "spec_matrix_report: " in str(info.value)
