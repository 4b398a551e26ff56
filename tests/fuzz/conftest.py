"""Fuzz tests reuse the unit suite's collection link."""
import importlib.util
import os

_SPEC = importlib.util.spec_from_file_location(
    "gpu_native_unit_conftest_fuzz", os.path.join(os.path.dirname(__file__), "..", "unit", "conftest.py"))
_MODULE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MODULE)  # links the checkout as ansible_collections/gpu_native/fleet
