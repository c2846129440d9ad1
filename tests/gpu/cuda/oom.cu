/*
 * oom.cu: a program that runs out of device memory with a known request and a known live set,
 * for the real-GPU suite (tests/gpu/README.md). Valid C and C++, built like leak.cu (nvcc with
 * the static and the shared cudart on a GPU; gcc against the simulated runtime in the suite's
 * simulated mode).
 *
 * On device 0 (MiB = 1048576 bytes):
 *   load_weights()       1 x 256 MiB cudaMalloc, kept                       (GPU-OOM-WEIGHTS)
 *   alloc_activations()  4 x 64 MiB cudaMalloc, kept                        (GPU-OOM-ACT)
 *   scratch()            32 MiB cudaMalloc, freed at once                   (GPU-OOM-SCRATCH)
 *   then cudaMemGetInfo, and grow_batch() asks for the free memory plus 64 MiB, rounded up to
 *   2 MiB: more than is free on any device, less than its total       (GPU-OOM-REQUEST)
 * At the failure: 512 MiB live in 5 allocations. Right after it, cudaMemGetInfo again: the
 * free memory the profiler should have recorded with the failure.
 *
 * Prints key=value: site:MARKER=BYTES/COUNT per line live at the failure, request_bytes,
 * oom_rc (2, cudaErrorMemoryAllocation), live_bytes, live_count, free_after, total_bytes.
 * Exits 1 after the failure, as a framework does after an out-of-memory it cannot recover
 * from; 3 if anything else goes wrong.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)

static void must(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "oom: %s failed: %d\n", what, (int)rc);
        exit(3);
    }
}

__attribute__((noinline)) static void *load_weights(void)
{
    void *p = NULL;
    must(cudaMalloc(&p, 256 * MiB), "weights"); /* GPUMEMPROF-GPU-OOM-WEIGHTS */
    return p;
}

__attribute__((noinline)) static void alloc_activations(void **act)
{
    for (int i = 0; i < 4; i++)
        must(cudaMalloc(&act[i], 64 * MiB), "activation"); /* GPUMEMPROF-GPU-OOM-ACT */
}

__attribute__((noinline)) static void scratch(void)
{
    void *p = NULL;
    must(cudaMalloc(&p, 32 * MiB), "scratch"); /* GPUMEMPROF-GPU-OOM-SCRATCH */
    must(cudaFree(p), "free scratch");
}

__attribute__((noinline)) static cudaError_t grow_batch(void **p, size_t n)
{
    return cudaMalloc(p, n); /* GPUMEMPROF-GPU-OOM-REQUEST */
}

int main(void)
{
    void *act[4], *big = NULL;
    void *weights = load_weights();
    alloc_activations(act);
    scratch();
    size_t free_before = 0, total = 0;
    must(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
    size_t request = (free_before + 64 * MiB + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
    cudaError_t rc = grow_batch(&big, request);
    size_t free_after = 0;
    /* cudaMalloc's failure is sticky in the last error only; the next call works. */
    must(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo after");
    /* The marker is split so that only the allocating line carries it whole. */
    printf("site:GPUMEMPROF-GPU-OOM-%s=%zu/1\n", "WEIGHTS", 256 * MiB);
    printf("site:GPUMEMPROF-GPU-OOM-%s=%zu/4\n", "ACT", 256 * MiB);
    printf("request_bytes=%zu\n", request);
    printf("oom_rc=%d\n", (int)rc);
    printf("live_bytes=%zu\n", 512 * MiB);
    printf("live_count=5\n");
    printf("free_after=%zu\n", free_after);
    printf("total_bytes=%zu\n", total);
    fflush(stdout);
    (void)weights;
    if (rc != cudaErrorMemoryAllocation) {
        fprintf(stderr, "oom: expected out of memory (2), got %d\n", (int)rc);
        return 3;
    }
    return 1;
}
