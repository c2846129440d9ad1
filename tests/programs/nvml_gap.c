/*
 * nvml_gap.c: a process whose GPU usage, as NVML reports it, is more than the memory it
 * allocated: the CUDA context itself takes memory (hundreds of MiB on a real GPU). A profiler
 * sampling NVML from a background thread should report the gap between what it tracked and
 * what the device says this process uses. Meant to run with SIMCUDA_CONTEXT_BYTES=67108864.
 *
 * cudaMalloc 100 MiB -> 0x700000000000 (kept), then sleep 400 ms so a sampler sees the steady
 * state, then cudaMemGetInfo. With SIMCUDA_CONTEXT_BYTES=67108864 (64 MiB):
 * device_used = 104857600 + 67108864 = 171966464 and untracked_bytes = 67108864; without it,
 * device_used = 104857600 and untracked_bytes = 0. Totals: 1 allocation, no free; live at exit:
 * 100 MiB = 104857600 bytes in 1 block.
 *
 * Prints (key=value): alloc_100mib, allocated_bytes, slept_ms, device_used, untracked_bytes.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#define PROGRAM "nvml_gap"

#include "report.h"

#include <cuda_runtime_api.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

int main(void)
{
    void *p;
    expect_rc("cudaMalloc 100 MiB", cudaMalloc(&p, 100 * MiB), cudaSuccess);
    put_hex("alloc_100mib", (uintptr_t)p);
    put_u64("allocated_bytes", 100 * MiB);
    fflush(stdout);

    struct timespec pause = {0, 400 * 1000 * 1000};
    while (nanosleep(&pause, &pause) != 0)
        ; /* interrupted: sleep the rest */
    put_int("slept_ms", 400);

    size_t free_b = 0, total_b = 0;
    expect_rc("cudaMemGetInfo", cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    put_u64("device_used", total_b - free_b);
    put_u64("untracked_bytes", total_b - free_b - 100 * MiB);
    return 0;
}
