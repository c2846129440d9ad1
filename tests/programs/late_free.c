/*
 * late_free.c: device memory freed by an exit handler that runs after the profiler's own.
 *
 * The real situation: CUDA's and PyTorch's own atexit handlers (and C++ static destructors)
 * free device memory while the process exits, often after the profiler's final flush. Those
 * frees must still reach the trace, or every such buffer is reported as leaked.
 *
 * main registers release_at_exit() with atexit before its first CUDA call, so it runs after
 * any exit handler registered later (the profiler registers its own when it starts recording, at
 * the first allocation). Then cudaMalloc on device 0: 1 MiB and 2 MiB (MiB = 1048576 bytes),
 * prints "allocs=2" and returns 0. release_at_exit() frees both with cudaFree and prints
 * "late_frees=2". Exit status 0; 1 if a call fails.
 * Expected trace: 2 allocations, 2 frees (both by the exit handler), nothing live at the end
 * (0 bytes leaked in 0 allocations), no unknown frees, and the trace is complete.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void *held[2];

static void release_at_exit(void)
{
    for (int i = 0; i < 2; i++) {
        if (cudaFree(held[i]) != cudaSuccess) {
            fprintf(stderr, "late_free: cudaFree at exit failed\n");
            fflush(stdout);
            _exit(1);
        }
    }
    printf("late_frees=2\n");
}

int main(void)
{
    atexit(release_at_exit); /* before the first CUDA call */
    if (cudaMalloc(&held[0], 1 * MiB) != cudaSuccess || cudaMalloc(&held[1], 2 * MiB) != cudaSuccess) {
        fprintf(stderr, "late_free: cudaMalloc failed\n");
        return 1;
    }
    printf("allocs=2\n");
    return 0;
}
