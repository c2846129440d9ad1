/*
 * flush_rounds.c: a program that flushes the trace after each round of work.
 *
 * The real situation: a job that checkpoints and calls gpumemprof_flush() at each checkpoint so
 * the trace on disk is current. Each flush writes one block, so the trace has a known minimum
 * number of blocks whatever the timing: tests use it where they need a multi-block trace.
 *
 * Usage: flush_rounds [rounds=5]. Each round allocates three 64 KiB device buffers, frees two,
 * then flushes (looked up with dlsym; absent without the profiler). Prints "rounds=N flushes=M"
 * (M = N under the profiler, 0 without) and exits 0. Expected trace: 3N allocations, 2N frees,
 * N * 64 KiB live, and at least N + 1 blocks (one per flush, then the final one).
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define KiB ((size_t)1 << 10)

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    int (*flush)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpumemprof_flush");
    int flushes = 0;
    for (int r = 0; r < rounds; r++) {
        void *p[3];
        for (int i = 0; i < 3; i++) {
            if (cudaMalloc(&p[i], 64 * KiB) != cudaSuccess) {
                fprintf(stderr, "flush_rounds: cudaMalloc failed\n");
                return 1;
            }
        }
        if (cudaFree(p[0]) != cudaSuccess || cudaFree(p[1]) != cudaSuccess) {
            fprintf(stderr, "flush_rounds: cudaFree failed\n");
            return 1;
        }
        if (flush && flush() == 0)
            flushes++;
    }
    printf("rounds=%d flushes=%d\n", rounds, flushes);
    return 0;
}
