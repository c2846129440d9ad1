/*
 * nvml_churn.c: a job whose device memory churns at one level, as PyTorch's does with
 * PYTORCH_NO_CUDA_MEMORY_CACHING=1 (a cudaMalloc and a cudaFree per tensor, every step, the
 * same bytes each step). Lots of memory is allocated, none of it new: the level never rises
 * after the first round. A profiler that asks NVML again after every 16 MiB allocated would
 * ask it every round; on a real GPU each NVML query is a call into the kernel driver, as cudaMalloc
 * and cudaFree are, and such a job ran 10% slower (docs/VALIDATION.md).
 *
 * Usage: nvml_churn [ROUNDS [MIB [HOLD_US]]] (defaults 100, 48, 2000): ROUNDS times,
 * cudaMalloc of MIB MiB on device 0, hold it HOLD_US microseconds, cudaFree it. Nothing is
 * live at exit. Totals: ROUNDS allocations and frees of MIB MiB; the level is MIB MiB.
 *
 * Prints (key=value): rounds, level_bytes, allocated_bytes. Exit 1 if a call fails.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#define PROGRAM "nvml_churn"

#include "report.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    size_t bytes = (argc > 2 ? (size_t)atol(argv[2]) : 48) * MiB;
    long hold_us = argc > 3 ? atol(argv[3]) : 2000;
    for (long i = 0; i < rounds; i++) {
        void *p;
        expect_rc("cudaMalloc", cudaMalloc(&p, bytes), cudaSuccess);
        struct timespec hold = {hold_us / 1000000, (hold_us % 1000000) * 1000};
        while (nanosleep(&hold, &hold) != 0)
            ; /* interrupted: sleep the rest */
        expect_rc("cudaFree", cudaFree(p), cudaSuccess);
    }
    put_int("rounds", rounds);
    put_u64("level_bytes", bytes);
    put_u64("allocated_bytes", bytes * (unsigned long long)rounds);
    return 0;
}
