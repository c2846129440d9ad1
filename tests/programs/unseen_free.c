/*
 * unseen_free.c: frees device memory the profiler never saw being allocated, next to memory it
 * sees through a library handle.
 *
 * 1. 1 MiB with the ordinary cudaMalloc, freed with cudaFree: seen (the export).
 * 2. 2 MiB through dlsym(libcudart handle, "cudaMalloc"), freed with cudaFree: seen too (the
 *    dlsym override hands out the profiler's wrapper for a hooked name on any handle).
 * 3. 3 MiB through the legacy 32-bit driver entry point cuMemAlloc (v1, from
 *    dlsym(libcuda handle, "cuMemAlloc")), which the profiler does not hook, freed with the
 *    ordinary cudaFree: the profiler sees a successful free of an address it does not know and
 *    must record it (the analyzer counts an "unknown free") without crashing.
 *
 * Expected under the profiler: 2 allocations (3 MiB), 3 frees of which 1 unknown, nothing live.
 * Prints "ok" and exits 0.
 * gpumemprof-build: link=cudart,dl
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

int main(void)
{
    void *seen, *via_handle;
    if (cudaMalloc(&seen, 1 << 20) != cudaSuccess || cudaFree(seen) != cudaSuccess) {
        fprintf(stderr, "unseen_free: ordinary CUDA calls failed\n");
        return 1;
    }
    void *rt = dlopen("libcudart.so.12", RTLD_NOW | RTLD_NOLOAD);
    if (!rt) {
        fprintf(stderr, "unseen_free: libcudart.so.12 is not loaded: %s\n", dlerror());
        return 1;
    }
    cudaError_t (*malloc_via_handle)(void **, size_t) =
        (cudaError_t(*)(void **, size_t))dlsym(rt, "cudaMalloc");
    if (!malloc_via_handle || malloc_via_handle(&via_handle, 2 << 20) != cudaSuccess ||
        cudaFree(via_handle) != cudaSuccess) {
        fprintf(stderr, "unseen_free: cudaMalloc through the library handle failed\n");
        return 1;
    }
    /* The runtime loaded the driver; the legacy v1 allocator is not hooked. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!drv) {
        fprintf(stderr, "unseen_free: libcuda.so.1 is not loaded: %s\n", dlerror());
        return 1;
    }
    CUresult (*alloc_v1)(CUdeviceptr_v1 *, unsigned int) =
        (CUresult(*)(CUdeviceptr_v1 *, unsigned int))dlsym(drv, "cuMemAlloc");
    CUdeviceptr_v1 unseen = 0;
    if (!alloc_v1 || alloc_v1(&unseen, 3u << 20) != CUDA_SUCCESS) {
        fprintf(stderr, "unseen_free: legacy cuMemAlloc failed\n");
        return 1;
    }
    if (cudaFree((void *)(uintptr_t)unseen) != cudaSuccess) {
        fprintf(stderr, "unseen_free: cudaFree of the unseen pointer failed\n");
        return 1;
    }
    dlclose(drv);
    dlclose(rt);
    printf("ok\n");
    return 0;
}
