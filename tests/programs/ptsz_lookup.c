/*
 * ptsz_lookup.c: the same driver function asked for with two stream semantics. A program built
 * with --default-stream per-thread (or a library serving such programs) gets driver entry
 * points with cudaEnablePerThreadDefaultStream and receives the _ptsz variants; with
 * cudaEnableDefault it receives the plain ones. A profiler that wraps the resolver must hand
 * back a wrapper of the right variant for each, never one for both.
 * gpumemprof-build: link=cudart,dl
 *
 * Lookups through cudaGetDriverEntryPoint: "cuMemAllocAsync" and "cuMemFreeAsync", each with
 * cudaEnablePerThreadDefaultStream (-> the cuMemAllocAsync_ptsz / cuMemFreeAsync_ptsz exports)
 * and with cudaEnableDefault (-> cuMemAllocAsync / cuMemFreeAsync); the two answers differ.
 * Then (MiB = 1048576 bytes; addresses with the default configuration): 3 MiB through the
 * per-thread cuMemAllocAsync on stream 0 -> 0x700000000000, 5 MiB through the default one on
 * stream 0 -> 0x700000300000; the 3 MiB block freed with the per-thread cuMemFreeAsync, the
 * 5 MiB one with the default one. Totals: 2 allocations, 2 frees, nothing live at exit.
 *
 * Prints (key=value): alloc_ptsz_status, alloc_default_status, alloc_pointers_differ,
 * free_pointers_differ, alloc_ptsz_is_ptsz_export, alloc_default_is_plain_export,
 * free_ptsz_is_ptsz_export, free_default_is_plain_export, ptsz_3mib, default_5mib, freed,
 * live_device_bytes.
 */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#define PROGRAM "ptsz_lookup"

#include "report.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#define MiB ((size_t)1 << 20)

/* cudaGetDriverEntryPoint, or exit; the status is printed under `key`. */
static void *entry(const char *name, unsigned long long flags, const char *key)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    expect_rc(name, cudaGetDriverEntryPoint(name, &fn, flags, &status), cudaSuccess);
    expect_rc("its status", status, cudaDriverEntryPointSuccess);
    if (key)
        put_int(key, status);
    return fn;
}

int main(void)
{
    typedef __typeof__(cuMemAllocAsync) alloc_fn;
    typedef __typeof__(cuMemFreeAsync) free_fn;
    alloc_fn *alloc_ptsz =
        entry("cuMemAllocAsync", cudaEnablePerThreadDefaultStream, "alloc_ptsz_status");
    alloc_fn *alloc_default = entry("cuMemAllocAsync", cudaEnableDefault, "alloc_default_status");
    free_fn *free_ptsz = entry("cuMemFreeAsync", cudaEnablePerThreadDefaultStream, NULL);
    free_fn *free_default = entry("cuMemFreeAsync", cudaEnableDefault, NULL);
    put_int("alloc_pointers_differ", alloc_ptsz != alloc_default);
    put_int("free_pointers_differ", free_ptsz != free_default);

    /* The runtime loaded the driver: compare with its exports. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        fprintf(stderr, PROGRAM ": libcuda.so.1 is not loaded: %s\n", dlerror());
        return 1;
    }
    put_int("alloc_ptsz_is_ptsz_export", (void *)alloc_ptsz == dlsym(h, "cuMemAllocAsync_ptsz"));
    put_int("alloc_default_is_plain_export", (void *)alloc_default == dlsym(h, "cuMemAllocAsync"));
    put_int("free_ptsz_is_ptsz_export", (void *)free_ptsz == dlsym(h, "cuMemFreeAsync_ptsz"));
    put_int("free_default_is_plain_export", (void *)free_default == dlsym(h, "cuMemFreeAsync"));

    CUdeviceptr three, five;
    expect_rc("cuMemAllocAsync_ptsz 3 MiB", alloc_ptsz(&three, 3 * MiB, NULL), CUDA_SUCCESS);
    put_hex("ptsz_3mib", three);
    expect_rc("cuMemAllocAsync 5 MiB", alloc_default(&five, 5 * MiB, NULL), CUDA_SUCCESS);
    put_hex("default_5mib", five);
    expect_rc("cuMemFreeAsync_ptsz", free_ptsz(three, NULL), CUDA_SUCCESS);
    expect_rc("cuMemFreeAsync", free_default(five, NULL), CUDA_SUCCESS);
    put_int("freed", 2);
    put_u64("live_device_bytes", 0);
    return 0;
}
