/*
 * oom_retry.c: an out-of-memory that a caching allocator recovers from.
 *
 * The real situation: PyTorch's caching allocator keeps freed segments for reuse. When
 * cudaMalloc fails, it frees its cached segments and retries; only if the retry fails too does
 * the program see OutOfMemoryError. The failed call is in the trace, but the run went on: the
 * profiler must call that failure transient, not the cause of a crash.
 *
 * Usage: oom_retry. Device 0 has 1 GiB (SIMCUDA_CAPACITY, set by main when unset). All
 * allocations are cudaMalloc on device 0 through alloc_block() (MiB = 1048576 bytes):
 *   fill_cache()         6 segments of 128 MiB = 768 MiB, kept cached (line marked OOM-CACHE)
 *   load_weights()       128 MiB                                (line marked OOM-LOAD)
 *   caching_malloc(256 MiB): the first try fails with 1024 - 896 = 128 MiB free (out of memory,
 *     2; line marked OOM-TRY); release_cached_blocks() frees the 6 cached segments; the retry
 *     from the same thread succeeds (line marked OOM-RETRY).
 * At the failure: 896 MiB live in 7 allocations (cache 768 in 6, weights 128 in 1).
 * Then everything is freed; prints "retry ok" and exits 0.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)
#define SEGMENTS 6

static void *cached[SEGMENTS];

static cudaError_t alloc_block(void **p, size_t size)
{
    return cudaMalloc(p, size);
}

static void fill_cache(void)
{
    for (int i = 0; i < SEGMENTS; i++)
        if (alloc_block(&cached[i], 128 * MiB) != cudaSuccess) /* GPUMEMPROF-OOM-CACHE */
            exit(3);
}

static void *load_weights(void)
{
    void *p;
    if (alloc_block(&p, 128 * MiB) != cudaSuccess) /* GPUMEMPROF-OOM-LOAD */
        exit(3);
    return p;
}

static void release_cached_blocks(void)
{
    for (int i = 0; i < SEGMENTS; i++)
        if (cudaFree(cached[i]) != cudaSuccess)
            exit(3);
}

static void *caching_malloc(size_t size)
{
    void *p;
    if (alloc_block(&p, size) == cudaSuccess) /* GPUMEMPROF-OOM-TRY */
        return NULL;                          /* the test expects this try to fail */
    release_cached_blocks();
    if (alloc_block(&p, size) == cudaSuccess) /* GPUMEMPROF-OOM-RETRY */
        return p;
    fprintf(stderr, "oom_retry: the retry failed too\n");
    exit(1);
}

int main(void)
{
    setenv("SIMCUDA_CAPACITY", "1073741824", 0); /* before the first CUDA call */
    fill_cache();
    void *weights = load_weights();
    void *batch = caching_malloc(256 * MiB);
    if (batch == NULL) {
        fprintf(stderr, "oom_retry: the first try did not fail\n");
        return 3;
    }
    if (cudaFree(batch) != cudaSuccess || cudaFree(weights) != cudaSuccess)
        return 3;
    printf("retry ok\n");
    return 0;
}
