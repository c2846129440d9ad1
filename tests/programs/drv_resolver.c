/*
 * drv_resolver.c: a program that reaches the CUDA driver only through its resolver, the way the
 * CUDA runtime does (statically linked into every nvcc-built binary, which then exports no
 * cudaMalloc at all): dlopen("libcuda.so.1"), dlsym(handle, "cuGetProcAddress_v2"), ask that
 * resolver for "cuGetProcAddress" itself, and get everything else from what came back, by base
 * name, with cudaVersion 12040 and flags 0. A profiler sees these calls only by wrapping the
 * resolver (and dlsym).
 * gpumemprof-build: link=dl
 *
 * In order (MiB = 1048576 bytes; addresses with the default configuration):
 *   the resolver for "cuGetProcAddress" -> cuGetProcAddress_v2 itself (status 0)
 *   then through it: "cuInit", "cuMemAlloc" (the cuMemAlloc_v2 export), "cuMemFree"
 *     (cuMemFree_v2), "cuMemAllocAsync"; cuInit(0)
 *   cuMemAlloc 7 MiB -> 0x700000000000; cuMemAllocAsync 9 MiB on the NULL stream ->
 *     0x700000700000 (kept); cuMemFree of the 7 MiB one
 *   "cuNoSuchFunction" -> CUDA_ERROR_NOT_FOUND (500), status SYMBOL_NOT_FOUND (1), pfn NULL
 *   "cuMemAlloc" with cudaVersion 3000 -> the v1 cuMemAlloc export, not the 12040 answer
 * Totals: 2 successful allocations (one cuMemAlloc_v2, one cuMemAllocAsync), 1 successful free
 * (cuMemFree_v2). Live at exit: 9 MiB = 9437184 bytes in 1 block.
 *
 * Prints (key=value): self_lookup_rc, self_lookup_status, self_is_v2_export,
 * mem_alloc_is_v2_export, mem_free_is_v2_export, alloc_7mib, async_9mib, free_7mib, missing_rc,
 * missing_status, missing_pfn_null, v1_rc, v1_differs_from_v2, v1_is_v1_export,
 * live_device_bytes.
 */
#define PROGRAM "drv_resolver"

#include "report.h"

#include <cuda.h>
#include <dlfcn.h>

#define MiB ((size_t)1 << 20)
#define VERSION 12040

typedef __typeof__(cuGetProcAddress_v2) resolver_fn;

/* Looks `name` up through `resolve`; exits unless it is found. */
static void *need(resolver_fn *resolve, const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    CUresult rc = resolve(name, &fn, VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    expect_rc(name, rc, CUDA_SUCCESS);
    expect_rc("its status", status, CU_GET_PROC_ADDRESS_SUCCESS);
    return fn;
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, PROGRAM ": cannot load libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    resolver_fn *first = (resolver_fn *)dlsym(h, "cuGetProcAddress_v2");
    if (!first) {
        fprintf(stderr, PROGRAM ": libcuda.so.1 has no cuGetProcAddress_v2\n");
        return 1;
    }

    /* The resolver's answer for itself is what the runtime uses from then on. */
    void *self = NULL;
    CUdriverProcAddressQueryResult status = 99;
    CUresult rc = first("cuGetProcAddress", &self, VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    expect_rc("cuGetProcAddress_v2(\"cuGetProcAddress\")", rc, CUDA_SUCCESS);
    put_int("self_lookup_rc", rc);
    put_int("self_lookup_status", status);
    put_int("self_is_v2_export", self == (void *)first);
    resolver_fn *resolve = (resolver_fn *)self;

    __typeof__(cuInit) *init = (__typeof__(cuInit) *)need(resolve, "cuInit");
    __typeof__(cuMemAlloc_v2) *mem_alloc = (__typeof__(cuMemAlloc_v2) *)need(resolve, "cuMemAlloc");
    __typeof__(cuMemFree_v2) *mem_free = (__typeof__(cuMemFree_v2) *)need(resolve, "cuMemFree");
    __typeof__(cuMemAllocAsync) *alloc_async =
        (__typeof__(cuMemAllocAsync) *)need(resolve, "cuMemAllocAsync");
    put_int("mem_alloc_is_v2_export", (void *)mem_alloc == dlsym(h, "cuMemAlloc_v2"));
    put_int("mem_free_is_v2_export", (void *)mem_free == dlsym(h, "cuMemFree_v2"));

    expect_rc("cuInit", init(0), CUDA_SUCCESS);
    CUdeviceptr seven, nine;
    expect_rc("cuMemAlloc 7 MiB", mem_alloc(&seven, 7 * MiB), CUDA_SUCCESS);
    put_hex("alloc_7mib", seven);
    expect_rc("cuMemAllocAsync 9 MiB", alloc_async(&nine, 9 * MiB, NULL), CUDA_SUCCESS);
    put_hex("async_9mib", nine);
    expect_rc("cuMemFree 7 MiB", mem_free(seven), CUDA_SUCCESS);
    put_hex("free_7mib", seven);

    void *missing = (void *)0x1;
    status = 99;
    rc = resolve("cuNoSuchFunction", &missing, VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    expect_rc("cuGetProcAddress(\"cuNoSuchFunction\")", rc, CUDA_ERROR_NOT_FOUND);
    put_int("missing_rc", rc);
    put_int("missing_status", status);
    put_int("missing_pfn_null", missing == NULL);

    void *v1 = NULL;
    rc = resolve("cuMemAlloc", &v1, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    expect_rc("cuGetProcAddress(\"cuMemAlloc\", 3000)", rc, CUDA_SUCCESS);
    put_int("v1_rc", rc);
    put_int("v1_differs_from_v2", v1 != (void *)mem_alloc);
    put_int("v1_is_v1_export", v1 == dlsym(h, "cuMemAlloc"));

    put_u64("live_device_bytes", 9 * MiB);
    return 0;
}
