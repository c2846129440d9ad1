/*
 * cudart_once.c: plain runtime allocations, which the runtime carries out through the driver
 * (cudaMalloc -> cuMemAlloc_v2 from the resolver). A profiler that wraps both layers sees each
 * allocation twice, once inside the other; it must record it once, as a cudaMalloc.
 *
 * In order (MiB = 1048576 bytes; addresses with the default configuration): cudaMalloc 12 MiB
 * -> 0x700000000000, cudaFree of it, cudaMalloc 4 MiB -> 0x700000c00000 (kept; a freed address
 * is only reused for the same size). Totals: 2 successful cudaMalloc, 1 successful cudaFree.
 * Live at exit: 4 MiB = 4194304 bytes in 1 block.
 *
 * Prints (key=value): alloc_12mib, free_12mib, alloc_4mib, cudaMalloc_calls, cudaFree_calls,
 * live_device_bytes.
 */
#define PROGRAM "cudart_once"

#include "report.h"

#include <cuda_runtime_api.h>

#define MiB ((size_t)1 << 20)

int main(void)
{
    void *twelve, *four;
    expect_rc("cudaMalloc 12 MiB", cudaMalloc(&twelve, 12 * MiB), cudaSuccess);
    put_hex("alloc_12mib", (uintptr_t)twelve);
    expect_rc("cudaFree 12 MiB", cudaFree(twelve), cudaSuccess);
    put_hex("free_12mib", (uintptr_t)twelve);
    expect_rc("cudaMalloc 4 MiB", cudaMalloc(&four, 4 * MiB), cudaSuccess);
    put_hex("alloc_4mib", (uintptr_t)four);
    put_int("cudaMalloc_calls", 2);
    put_int("cudaFree_calls", 1);
    put_u64("live_device_bytes", 4 * MiB);
    return 0;
}
