/*
 * leak.cu: a program that leaks device memory from marked lines, for the real-GPU suite
 * (tests/gpu/README.md). Plain host code that is valid C and C++: nvcc builds it for a real
 * GPU (once with the default static cudart, once with -cudart shared), and in the suite's
 * simulated mode gcc builds it as C against the simulated runtime (tests/sim).
 *
 * All allocations are on device 0 (MiB = 1048576 bytes), in this order:
 *   keep_cache()   3 x 2 MiB cudaMalloc, never freed                      (GPU-LEAK-CACHE)
 *   keep_buffer()  1 x 10 MiB cudaMalloc, never freed                     (GPU-LEAK-BUFFER)
 *   keep_async()   1 x 6 MiB cudaMallocAsync on the legacy stream, never freed (GPU-LEAK-ASYNC)
 *   step()         8 times: 4 MiB cudaMalloc, then cudaFree               (GPU-LEAK-STEP)
 * Leaked at exit: 22 MiB in 5 allocations. Peak: 22 + 4 = 26 MiB. Calls: 12 cudaMalloc,
 * 1 cudaMallocAsync, 8 cudaFree. With the static cudart the program exports none of these:
 * a profiler sees them only as the driver calls they become (cuMemAlloc_v2, cuMemAllocAsync,
 * cuMemFree_v2).
 *
 * Prints key=value lines with those facts (site:MARKER=BYTES/COUNT per leaking line,
 * size_probe=BYTES/COUNT for the one size leaked several times, leaked_bytes, leaked_count,
 * peak_bytes, and the calls per API as each build's trace should name them), so the suite's
 * expectations come from the program that did the work. Exits 1 if a call fails.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)

static void must(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "leak: %s failed: %d\n", what, (int)rc);
        exit(1);
    }
}

/* noinline: each marked line stays in its own function, as in a debug build. */
__attribute__((noinline)) static void keep_cache(void **cache)
{
    for (int i = 0; i < 3; i++)
        must(cudaMalloc(&cache[i], 2 * MiB), "cache"); /* GPUMEMPROF-GPU-LEAK-CACHE */
}

__attribute__((noinline)) static void *keep_buffer(void)
{
    void *p = NULL;
    must(cudaMalloc(&p, 10 * MiB), "buffer"); /* GPUMEMPROF-GPU-LEAK-BUFFER */
    return p;
}

__attribute__((noinline)) static void *keep_async(void)
{
    void *p = NULL;
    must(cudaMallocAsync(&p, 6 * MiB, 0), "async"); /* GPUMEMPROF-GPU-LEAK-ASYNC */
    return p;
}

__attribute__((noinline)) static void step(void)
{
    void *p = NULL;
    must(cudaMalloc(&p, 4 * MiB), "step"); /* GPUMEMPROF-GPU-LEAK-STEP */
    must(cudaFree(p), "free step");
}

int main(void)
{
    void *cache[3];
    keep_cache(cache);
    void *buffer = keep_buffer();
    void *async = keep_async();
    for (int i = 0; i < 8; i++)
        step();
    must(cudaDeviceSynchronize(), "synchronize");
    /* The marker is split so that only the allocating line carries it whole. */
    printf("site:GPUMEMPROF-GPU-LEAK-%s=%zu/3\n", "CACHE", 6 * MiB);
    printf("site:GPUMEMPROF-GPU-LEAK-%s=%zu/1\n", "BUFFER", 10 * MiB);
    printf("site:GPUMEMPROF-GPU-LEAK-%s=%zu/1\n", "ASYNC", 6 * MiB);
    printf("size_probe=%zu/3\n", 2 * MiB);
    printf("leaked_bytes=%zu\n", 22 * MiB);
    printf("leaked_count=5\n");
    printf("peak_bytes=%zu\n", 26 * MiB);
    printf("runtime_calls=cudaFree:0/8,cudaMalloc:12/0,cudaMallocAsync:1/0\n");
    printf("driver_calls=cuMemAllocAsync:1/0,cuMemAlloc_v2:12/0,cuMemFree_v2:0/8\n");
    (void)buffer;
    (void)async;
    return 0;
}
