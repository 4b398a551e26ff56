"""The cordon_decision filter: the face of plugin_utils/cordon_ownership.py for the _node_cordon role."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpu_native.fleet.plugins.filter.cordon_decision import FilterModule, cordon_decision


class _AnsibleLazyTemplateDict(dict):
    """Shaped like ansible-core's lazy template containers (what a template hands a filter)."""


NODE = _AnsibleLazyTemplateDict({"metadata": _AnsibleLazyTemplateDict({"name": "gpu-1", "annotations": {
    "example.com/by": "mig", "example.com/run": "r1"}}), "spec": {"unschedulable": True}})


def test_registered():
    assert FilterModule().filters()["cordon_decision"] is cordon_decision


def test_take_returns_the_state_and_the_patch():
    result = cordon_decision({"metadata": {"name": "gpu-1"}, "spec": {}}, "onboard", run_id="r2", now="T")
    assert result["state"]["action"] == "cordoned" and result["state"]["holder"] == "onboard"
    assert result["patch"]["spec"] == {"unschedulable": True}


def test_take_passes_the_options_through():
    skipped = cordon_decision(NODE, "mig", run_id="r2", now="T")
    assert skipped["state"]["action"] == "skipped" and skipped["patch"] is None
    taken = cordon_decision(NODE, "onboard", run_id="r2", now="T", take_over="true")
    assert taken["state"]["action"] == "taken_over"
    resumed = cordon_decision(NODE, "mig", run_id="r2", now="T", owner_annotation="example.com/by",
                              run_id_annotation="example.com/run")
    assert resumed["state"]["action"] == "resumed"
    assert resumed["patch"] == {"metadata": {"annotations": {"example.com/run": "r2"}}}
    registering = {"metadata": {"name": "n"}, "spec": {"unschedulable": True, "taints": [{"key": "k"}]}}
    assert cordon_decision(registering, "mig", run_id="r", now="T", registration_taint_key="k")["state"]["action"] == \
        "adopted"
    assert cordon_decision(registering, "mig", run_id="r", now="T", registration_taint_key="k",
                           adopt_registration_taint=False)["state"]["action"] == "skipped"


def test_release_returns_released_and_the_patch():
    result = cordon_decision(NODE, "mig", step="release", owner_annotation="example.com/by",
                             run_id_annotation="example.com/run")
    assert result["released"]["released"] is True
    assert result["patch"]["spec"] == {"unschedulable": False}
    assert cordon_decision(NODE, "onboard", step="release")["patch"] is None


@pytest.mark.parametrize("args, kwargs, message", [
    ((None, "mig"), {"run_id": "r", "now": "T"}, "cordon_decision: expected a Node object"),
    ((NODE, "no good"), {"run_id": "r", "now": "T"}, "cordon_decision: the cordon owner 'no good'"),
    ((NODE, "mig"), {"step": "drain"}, "step must be take or release, got 'drain'"),
    ((NODE, "mig"), {"run_id": "r", "now": "T", "take_over": "maybe"}, "take_over must be true or false"),
    ((NODE, "mig"), {"step": "release", "owner_annotation": "a/b/c"}, "the owner annotation key"),
])
def test_bad_input_is_a_filter_error(args, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("(", r"\(")):
        cordon_decision(*args, **kwargs)
