# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpu_native.fleet collection: not a public API; it may change in any release.
# Runs on managed nodes (in the modules that import it, some also in the gpu_readiness agent):
# standard library only, Python 3.8+.
"""Run a real CUDA kernel on one device with nothing but ``ctypes`` and ``libcuda.so.1``.

No nvcc, no container, no CUDA toolkit: the driver API JIT-compiles a small
PTX kernel (a fused multiply-add over a few MB), launches it, copies the
result back and checks every element.

Each device runs in a forked child process with ``CUDA_VISIBLE_DEVICES``
set to its UUID before ``cuInit`` (the only way to reach every MIG device,
which CUDA enumerates one per process).  A crash or a hang in the driver
then costs the child, never the module: the parent kills it after the
timeout and reports why.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import json
import os
import re
import select
import signal
import time
from array import array

from ansible_collections.gpu_native.fleet.plugins.module_utils._common.errors import FleetError

LIBRARY = "libcuda.so.1"
#: Elements in each buffer (4 MiB of float32 each).
ELEMENTS = 1 << 20
BLOCK = 256
FMA_A = 2.0

#: ``y[i] = a * x[i] + y[i]`` for ``i < n``; PTX ISA 6.0, sm_52, JIT-compiled
#: by the driver for whatever GPU it runs on (Maxwell and newer).
PTX = r"""
.version 6.0
.target sm_52
.address_size 64

.visible .entry gpu_native_fma(
    .param .u64 x_ptr,
    .param .u64 y_ptr,
    .param .f32 a,
    .param .u32 n
)
{
    .reg .pred %p<2>;
    .reg .f32 %f<5>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [x_ptr];
    ld.param.u64 %rd2, [y_ptr];
    ld.param.f32 %f1, [a];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}
"""
KERNEL_NAME = b"gpu_native_fma"

_NVIDIA_SMI_L_GPU_RE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)")
_NVIDIA_SMI_L_MIG_RE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-zA-Z/-]+)\)")


class CudaError(FleetError):
    """A CUDA driver call failed; ``name`` is ``cuGetErrorName``'s text."""

    def __init__(self, call, code, name, text):
        FleetError.__init__(self, "%s failed: %s (%d)%s" % (call, name, code, ": " + text if text else ""))
        self.call = call
        self.code = code
        self.name = name


class LibraryMissing(FleetError):
    """libcuda.so.1 cannot be loaded."""


def check_library(library=LIBRARY):
    """Raise :class:`LibraryMissing` when ``library`` cannot be loaded (no CUDA call is made)."""
    _Driver(library)


def parse_nvidia_smi_l(text):
    """``nvidia-smi -L`` -> devices to test: every GPU, or its MIG devices when it has any."""
    devices = []
    current = None
    for line in (text or "").splitlines()[:4096]:
        gpu = _NVIDIA_SMI_L_GPU_RE.match(line)
        if gpu:
            current = {"index": gpu.group(1), "name": gpu.group(2), "uuid": gpu.group(3), "migs": []}
            devices.append(current)
            continue
        mig = _NVIDIA_SMI_L_MIG_RE.match(line)
        if mig and current is not None:
            current["migs"].append({"index": "%s/%s" % (current["index"], mig.group(2)),
                                    "name": "%s %s" % (current["name"], mig.group(1)), "uuid": mig.group(3)})
    targets = []
    for gpu in devices:
        if gpu["migs"]:
            targets.extend(gpu["migs"])
        else:
            targets.append({"index": gpu["index"], "name": gpu["name"], "uuid": gpu["uuid"]})
    return targets


class _Driver(object):
    def __init__(self, library):
        try:
            self.lib = ctypes.CDLL(library)
        except (OSError, ValueError, TypeError) as exc:  # ValueError: a NUL byte in the name
            raise LibraryMissing("%s not found: is the NVIDIA driver installed? (%s)" % (library, exc))

    def error_name(self, code):
        name = ctypes.c_char_p()
        text = ctypes.c_char_p()
        label = "CUDA_ERROR_%d" % code
        detail = ""
        try:
            if self.lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
                label = name.value.decode("ascii", "replace")
            if self.lib.cuGetErrorString(code, ctypes.byref(text)) == 0 and text.value:
                detail = text.value.decode("ascii", "replace")
        except AttributeError:
            pass
        return label, detail

    def call(self, name, *args):
        function = getattr(self.lib, name, None)
        if function is None:
            raise CudaError(name, -1, "symbol missing", "%s is not exported by libcuda" % name)
        code = function(*args)
        if code != 0:
            label, detail = self.error_name(code)
            raise CudaError(name, code, label, detail)


def run_kernel(library=LIBRARY, elements=ELEMENTS):
    """Run the FMA kernel on CUDA device 0 of this process.  Returns a result dict."""
    started = time.time()
    driver = _Driver(library)
    call = driver.call
    call("cuInit", 0)
    count = ctypes.c_int(0)
    call("cuDeviceGetCount", ctypes.byref(count))
    if count.value < 1:
        raise CudaError("cuDeviceGetCount", 100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is visible")
    device = ctypes.c_int(0)
    call("cuDeviceGet", ctypes.byref(device), 0)
    name_buffer = ctypes.create_string_buffer(256)
    call("cuDeviceGetName", name_buffer, 256, device)
    context = ctypes.c_void_p()
    call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
    cu_module = ctypes.c_void_p()
    x_device = ctypes.c_uint64(0)
    y_device = ctypes.c_uint64(0)
    try:
        call("cuCtxSetCurrent", context)
        call("cuModuleLoadData", ctypes.byref(cu_module), ctypes.c_char_p(PTX.encode("ascii")))
        function = ctypes.c_void_p()
        call("cuModuleGetFunction", ctypes.byref(function), cu_module, KERNEL_NAME)
        size = elements * 4
        x_host = array("f", (float(i % 1024) for i in range(elements)))
        y_host = array("f", [1.0]) * elements
        call("cuMemAlloc_v2", ctypes.byref(x_device), ctypes.c_size_t(size))
        call("cuMemAlloc_v2", ctypes.byref(y_device), ctypes.c_size_t(size))
        x_address, _n = x_host.buffer_info()
        y_address, _n = y_host.buffer_info()
        call("cuMemcpyHtoD_v2", x_device, ctypes.c_void_p(x_address), ctypes.c_size_t(size))
        call("cuMemcpyHtoD_v2", y_device, ctypes.c_void_p(y_address), ctypes.c_size_t(size))
        a_value = ctypes.c_float(FMA_A)
        n_value = ctypes.c_uint32(elements)
        params = (ctypes.c_void_p * 4)(
            ctypes.cast(ctypes.byref(x_device), ctypes.c_void_p), ctypes.cast(ctypes.byref(y_device), ctypes.c_void_p),
            ctypes.cast(ctypes.byref(a_value), ctypes.c_void_p), ctypes.cast(ctypes.byref(n_value), ctypes.c_void_p))
        grid = (elements + BLOCK - 1) // BLOCK
        call("cuLaunchKernel", function, grid, 1, 1, BLOCK, 1, 1, 0, None, params, None)
        call("cuCtxSynchronize")
        result = array("f", [0.0]) * elements
        result_address, _n = result.buffer_info()
        call("cuMemcpyDtoH_v2", ctypes.c_void_p(result_address), y_device, ctypes.c_size_t(size))
        wrong = 0
        first_wrong = None
        for index in range(elements):
            expected = FMA_A * (index % 1024) + 1.0
            if result[index] != expected:
                wrong += 1
                if first_wrong is None:
                    first_wrong = (index, result[index], expected)
        if wrong:
            return {"passed": False, "name": name_buffer.value.decode("utf-8", "replace"),
                    "error": "%d of %d elements wrong (first at %d: got %r, expected %r)" % (
                        wrong, elements, first_wrong[0], first_wrong[1], first_wrong[2]),
                    "duration_ms": int((time.time() - started) * 1000)}
    finally:
        for pointer in (x_device, y_device):
            if pointer.value:
                driver.lib.cuMemFree_v2(pointer)
        if cu_module.value is not None:  # NULL until cuModuleLoadData succeeds
            driver.lib.cuModuleUnload(cu_module)
        # CUDA 11+ exports the _v2 entry point; older drivers only the plain one.
        if hasattr(driver.lib, "cuDevicePrimaryCtxRelease_v2"):
            driver.lib.cuDevicePrimaryCtxRelease_v2(device)
        else:
            driver.lib.cuDevicePrimaryCtxRelease(device)
    return {"passed": True, "name": name_buffer.value.decode("utf-8", "replace"), "error": None,
            "duration_ms": int((time.time() - started) * 1000)}


def count_devices(library=LIBRARY):
    """Devices CUDA enumerates in this process (call only in a child)."""
    driver = _Driver(library)
    driver.call("cuInit", 0)
    count = ctypes.c_int(0)
    driver.call("cuDeviceGetCount", ctypes.byref(count))
    return {"passed": True, "count": count.value}


def _child(write_fd, library, visible_device, elements, action):
    if visible_device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device
    try:
        result = count_devices(library) if action == "count" else run_kernel(library, elements)
    except LibraryMissing as exc:
        result = {"passed": False, "error": str(exc), "error_name": "LIBRARY_MISSING"}
    except CudaError as exc:
        result = {"passed": False, "error": str(exc), "error_name": exc.name}
    except Exception as exc:  # noqa: BLE001 - the child reports whatever happened, never a traceback
        result = {"passed": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    data = json.dumps(result).encode("utf-8")
    while data:
        written = os.write(write_fd, data)
        data = data[written:]
    os.close(write_fd)


def _quiet_fault_handler():
    """A driver crash in the child is reported by the parent; no Python dump on stderr."""
    try:
        import faulthandler
        faulthandler.disable()
    except (ImportError, RuntimeError):
        pass


def smoke_device(visible_device=None, library=LIBRARY, timeout=60, elements=ELEMENTS, action="kernel"):
    """Run :func:`run_kernel` in a forked child; never raises, never hangs past ``timeout``."""
    started = time.time()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(read_fd)
        _quiet_fault_handler()
        code = 0
        try:
            _child(write_fd, library, visible_device, elements, action)
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    os.close(write_fd)
    chunks = []
    deadline = started + timeout
    timed_out = False
    while True:
        remaining = deadline - time.time()
        if remaining <= 0:
            timed_out = True
            break
        ready, _w, _x = select.select([read_fd], [], [], min(remaining, 1.0))
        if ready:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_fd)
    if timed_out:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _pid, status = os.waitpid(pid, 0)
    duration_ms = int((time.time() - started) * 1000)
    if timed_out:
        return {"passed": False, "error": "the CUDA process did not finish within %s s" % timeout,
                "error_name": "TIMEOUT", "duration_ms": duration_ms}
    try:
        result = json.loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        if os.WIFSIGNALED(status):
            reason = "the CUDA process was killed by signal %d" % os.WTERMSIG(status)
        else:
            reason = "the CUDA process exited with %d and reported nothing" % os.WEXITSTATUS(status)
        return {"passed": False, "error": reason, "error_name": "CRASHED", "duration_ms": duration_ms}
    result["duration_ms"] = duration_ms
    return result
