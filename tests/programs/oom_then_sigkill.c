/*
 * oom_then_sigkill.c: a job killed the instant its allocation fails with out-of-memory.
 *
 * The real situation: a rank hits CUDA out-of-memory and is SIGKILLed at once (a supervisor
 * that kills failed ranks, the kernel's OOM killer, a watchdog). Nothing runs after the
 * failure: no exit handler, no explicit flush, no signal handler. Whatever the profiler had not
 * written to the file when cudaMalloc returned is lost, so it must have written every event up
 * to and including the failure by then.
 *
 * Device 0 has 64 MiB (SIMCUDA_CAPACITY, set by main when unset). All calls are cudaMalloc /
 * cudaFree on device 0 (MiB = 1048576 bytes), in this order:
 *   4 buffers of 8 MiB, then 1 of 16 MiB (5 allocations, 48 MiB); the 16 MiB one is freed
 *   (1 free): 32 MiB live in 4 allocations;
 *   cudaMalloc(40 MiB) with 64 - 32 = 32 MiB free: out of memory (2); the failure's
 *   mem_free is 33554432 and mem_total 67108864.
 * Prints "allocs=5", "frees=1", "live_bytes=33554432" and "asking=41943040" before the failing
 * call, then nothing: when the call fails with 2 it kill(getpid(), SIGKILL)s itself at once, so
 * "killed by SIGKILL" is its only success. Exit status 3 if the failing call returned anything
 * but cudaErrorMemoryAllocation (2), 1 if an earlier call failed.
 * Expected trace (whatever GPUMEMPROF_FLUSH_MS): 5 allocations (8, 8, 8, 8, 16 MiB), 1 free (the
 * 16 MiB address), 1 failed allocation of 40 MiB with result 2, no End record.
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void must(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "oom_then_sigkill: %s failed: %d\n", what, (int)rc);
        exit(1);
    }
}

int main(void)
{
    setenv("SIMCUDA_CAPACITY", "67108864", 0); /* before the first CUDA call */
    void *small[4], *big, *request = NULL;
    for (int i = 0; i < 4; i++)
        must(cudaMalloc(&small[i], 8 * MiB), "cudaMalloc 8 MiB");
    must(cudaMalloc(&big, 16 * MiB), "cudaMalloc 16 MiB");
    must(cudaFree(big), "cudaFree 16 MiB");
    printf("allocs=5\nfrees=1\nlive_bytes=%zu\nasking=%zu\n", 32 * MiB, 40 * MiB);
    fflush(stdout);

    cudaError_t rc = cudaMalloc(&request, 40 * MiB);
    if (rc == cudaErrorMemoryAllocation)
        kill(getpid(), SIGKILL); /* nothing of this process runs after this line */
    fprintf(stderr, "oom_then_sigkill: cudaMalloc(40 MiB) returned %d, expected 2\n", (int)rc);
    return 3;
}
