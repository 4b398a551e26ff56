/*
 * STAND-IN for the NVIDIA driver's libcuda.so.1, for tests on hosts with no
 * GPU.  It exports the driver-API calls cuda_smoke uses, with the real
 * signatures and error codes (cuda.h), and runs the FMA kernel on the host
 * (y[i] = a * x[i] + y[i]), so the module's launch, copy-back and element
 * checks are exercised for real.  Faults are injected through the environment:
 *   FAKE_CUDA_FAIL=<function>=<code>   that call returns <code>
 *   FAKE_CUDA_DEVICES=<n>              devices cuDeviceGetCount reports (default 1)
 *   FAKE_CUDA_CORRUPT=1                the kernel writes one wrong element
 *   FAKE_CUDA_HANG=1                   cuCtxSynchronize never returns
 *   FAKE_CUDA_CRASH=1                  cuLaunchKernel aborts the process
 * The device name carries CUDA_VISIBLE_DEVICES so tests see which device a
 * child process was given.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;

static CUresult injected(const char *name) {
    const char *spec = getenv("FAKE_CUDA_FAIL");
    size_t len = strlen(name);
    if (spec && strncmp(spec, name, len) == 0 && spec[len] == '=')
        return atoi(spec + len + 1);
    return 0;
}
#define INJECT(name) do { CUresult r_ = injected(name); if (r_) return r_; } while (0)

static const struct { int code; const char *name; const char *text; } errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {46, "CUDA_ERROR_DEVICES_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

CUresult cuGetErrorName(CUresult code, const char **out) {
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == code) { *out = errors[i].name; return 0; }
    *out = NULL;
    return 1;
}

CUresult cuGetErrorString(CUresult code, const char **out) {
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == code) { *out = errors[i].text; return 0; }
    *out = NULL;
    return 1;
}

CUresult cuInit(unsigned int flags) { (void)flags; INJECT("cuInit"); return 0; }

CUresult cuDeviceGetCount(int *count) {
    const char *n = getenv("FAKE_CUDA_DEVICES");
    INJECT("cuDeviceGetCount");
    *count = n ? atoi(n) : 1;
    return 0;
}

CUresult cuDeviceGet(int *device, int ordinal) { INJECT("cuDeviceGet"); *device = ordinal; return 0; }

CUresult cuDeviceGetName(char *name, int len, int device) {
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    INJECT("cuDeviceGetName");
    snprintf(name, (size_t)len, "Fake GPU %d (CUDA_VISIBLE_DEVICES=%s)", device, cvd ? cvd : "");
    return 0;
}

static int context_token;
CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) {
    (void)device; INJECT("cuDevicePrimaryCtxRetain"); *ctx = &context_token; return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int device) { (void)device; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; INJECT("cuCtxSetCurrent"); return 0; }

static int module_token, function_token;
CUresult cuModuleLoadData(void **module, const void *image) {
    INJECT("cuModuleLoadData");
    if (!strstr((const char *)image, ".entry gpu_native_fma")) return 218;
    *module = &module_token;
    return 0;
}
CUresult cuModuleUnload(void *module) { (void)module; return 0; }
CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    (void)module; INJECT("cuModuleGetFunction");
    if (strcmp(name, "gpu_native_fma") != 0) return 500; /* CUDA_ERROR_NOT_FOUND */
    *function = &function_token;
    return 0;
}

CUresult cuMemAlloc_v2(uint64_t *pointer, size_t size) {
    INJECT("cuMemAlloc_v2");
    void *memory = malloc(size);
    if (!memory) return 2;
    *pointer = (uint64_t)(uintptr_t)memory;
    return 0;
}
CUresult cuMemFree_v2(uint64_t pointer) { free((void *)(uintptr_t)pointer); return 0; }
CUresult cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t size) {
    INJECT("cuMemcpyHtoD_v2"); memcpy((void *)(uintptr_t)dst, src, size); return 0;
}
CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t size) {
    INJECT("cuMemcpyDtoH_v2"); memcpy(dst, (const void *)(uintptr_t)src, size); return 0;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    (void)f; (void)gy; (void)gz; (void)by; (void)bz; (void)shared; (void)stream; (void)extra;
    INJECT("cuLaunchKernel");
    if (getenv("FAKE_CUDA_CRASH")) abort();
    float *x = (float *)(uintptr_t)*(uint64_t *)params[0];
    float *y = (float *)(uintptr_t)*(uint64_t *)params[1];
    float a = *(float *)params[2];
    uint32_t n = *(uint32_t *)params[3];
    uint64_t threads = (uint64_t)gx * bx;
    for (uint64_t i = 0; i < threads && i < n; i++) y[i] = a * x[i] + y[i];
    if (getenv("FAKE_CUDA_CORRUPT") && n > 7) y[7] += 1.0f;
    return 0;
}

CUresult cuCtxSynchronize(void) {
    INJECT("cuCtxSynchronize");
    if (getenv("FAKE_CUDA_HANG")) for (;;) pause();
    return 0;
}
