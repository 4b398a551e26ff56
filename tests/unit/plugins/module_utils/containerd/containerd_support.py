"""Shared by the containerd_config unit tests: the node's paths, the fixture loader and the plan helper."""
import os

from ansible_collections.gpu_native.fleet.plugins.module_utils.containerd import containerd_config as cc

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "containerd")
CONFIG = "/etc/containerd/config.toml"
DROP_IN_DIR = "/etc/containerd/conf.d"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
BINARY = "/usr/bin/nvidia-container-runtime"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def run_plan(text, state="present", drop_in=None, **kwargs):
    params = dict(config_path=CONFIG, config_text=text, drop_in_dir=DROP_IN_DIR, drop_in_text=drop_in,
                  runtime_name="nvidia", binary_path=BINARY, state=state)
    params.update(kwargs)
    return cc.plan(**params)


def after(result, path):
    return [change for change in result.files if change.path == path][0].after
