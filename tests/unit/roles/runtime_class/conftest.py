"""Reuse the Kubernetes API stand-in fixtures of tests/unit/k8s_standin/conftest.py."""
import importlib.util
import os

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "k8s_standin", "conftest.py")
_SPEC = importlib.util.spec_from_file_location("k8s_standin_conftest", _PATH)
_MODULE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MODULE)

standin_factory = _MODULE.standin_factory
run_playbook = _MODULE.run_playbook
run_ansible_playbook = _MODULE.run_ansible_playbook
REPO_ROOT = _MODULE.REPO_ROOT
