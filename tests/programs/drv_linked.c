/*
 * drv_linked.c: a program written against the CUDA driver API and linked with -lcuda, calling
 * the driver's exports (cuMemAlloc_v2, ...) through the PLT, as C/C++ code using the driver API
 * directly does. A preloaded profiler's driver exports interpose on these calls.
 * gpumemprof-build: link=cuda
 *
 * In order (MiB = 1048576 bytes; addresses with the default configuration):
 *   cuInit(0)
 *   cuMemAlloc_v2 1 MiB -> 0x700000000000 (kept), 2 MiB -> 0x700000100000, 3 MiB ->
 *     0x700000300000 (kept); cuMemFree_v2 of the 2 MiB one
 *   cuMemAllocManaged 4 MiB, CU_MEM_ATTACH_GLOBAL (kept)
 *   cuMemAllocHost_v2 1 MiB, then cuMemFreeHost of it
 *   cuMemHostAlloc 2 MiB, flags 0 (kept)
 *   cuMemHostRegister_v2 of a 64 KiB malloc'd buffer, flags 0, then cuMemHostUnregister
 *   cuMemAllocPitch_v2 width 1000, height 10, element 4 -> pitch 1024, 10240 bytes at
 *     0x700000600000 (kept)
 *   cuStreamCreate -> 0x5e0000000100; cuMemAllocAsync 8 MiB on it -> 0x700000602800, then
 *     cuMemFreeAsync of it on the same stream
 *   cuDeviceGetDefaultMemPool(device 0) -> 0x1000; cuMemAllocFromPoolAsync 5 MiB from it on the
 *     stream -> 0x700000e02800 (kept); cuStreamDestroy
 *   cuMemAlloc_v2 of 2 TiB (more than any SIMCUDA_CAPACITY): CUDA_ERROR_OUT_OF_MEMORY (2),
 *     *dptr = 0
 *   cuMemGetInfo_v2: device_used = total - free
 *
 * Totals: 9 successful allocation calls (cuMemAlloc_v2 x3, cuMemAllocManaged, cuMemAllocHost_v2,
 * cuMemHostAlloc, cuMemAllocPitch_v2, cuMemAllocAsync, cuMemAllocFromPoolAsync), 3 successful
 * frees (cuMemFree_v2, cuMemFreeHost, cuMemFreeAsync), 1 host registration and its
 * unregistration, 1 failed allocation. Live at exit: device 1 + 3 + 5 MiB + 10240 B = 9447424 B
 * in 4 blocks; managed 4 MiB (4194304 B, charged to device 0); pinned host 2 MiB (2097152 B).
 * device_used = 9447424 + 4194304 = 13641728 (plus SIMCUDA_CONTEXT_BYTES when set).
 *
 * Prints (key=value): init_rc, alloc_1mib, alloc_2mib, alloc_3mib, free_2mib, managed_4mib,
 * pinned_1mib, pinned_1mib_freed, host_alloc_2mib, registered_bytes, unregistered, pitch_alloc,
 * pitch, stream, async_8mib, async_8mib_freed, pool, pool_5mib, failed_alloc_rc,
 * failed_alloc_size, failed_alloc_ptr, device_used, alloc_calls_ok, free_calls_ok,
 * live_device_bytes, live_managed_bytes, live_pinned_bytes.
 */
#define PROGRAM "drv_linked"

#include "report.h"

#include <cuda.h>

#define MiB ((size_t)1 << 20)
#define TOO_BIG ((size_t)1 << 41) /* 2 TiB: above the simulator's 1 TiB capacity limit */

int main(void)
{
    CUdeviceptr a, b, c, managed, pitched, async, pooled, big = 0x1;
    void *pinned, *host;
    size_t pitch = 0, free_b = 0, total_b = 0;
    CUstream stream;
    CUmemoryPool pool;

    expect_rc("cuInit", cuInit(0), CUDA_SUCCESS);
    put_int("init_rc", 0);

    expect_rc("cuMemAlloc_v2 1 MiB", cuMemAlloc_v2(&a, 1 * MiB), CUDA_SUCCESS);
    put_hex("alloc_1mib", a);
    expect_rc("cuMemAlloc_v2 2 MiB", cuMemAlloc_v2(&b, 2 * MiB), CUDA_SUCCESS);
    put_hex("alloc_2mib", b);
    expect_rc("cuMemAlloc_v2 3 MiB", cuMemAlloc_v2(&c, 3 * MiB), CUDA_SUCCESS);
    put_hex("alloc_3mib", c);
    expect_rc("cuMemFree_v2", cuMemFree_v2(b), CUDA_SUCCESS);
    put_hex("free_2mib", b);

    expect_rc("cuMemAllocManaged", cuMemAllocManaged(&managed, 4 * MiB, CU_MEM_ATTACH_GLOBAL),
              CUDA_SUCCESS);
    put_host("managed_4mib", (void *)(uintptr_t)managed, 4 * MiB);

    expect_rc("cuMemAllocHost_v2", cuMemAllocHost_v2(&pinned, 1 * MiB), CUDA_SUCCESS);
    put_host("pinned_1mib", pinned, 1 * MiB);
    expect_rc("cuMemFreeHost", cuMemFreeHost(pinned), CUDA_SUCCESS);
    put_int("pinned_1mib_freed", 1);

    expect_rc("cuMemHostAlloc", cuMemHostAlloc(&host, 2 * MiB, 0), CUDA_SUCCESS);
    put_host("host_alloc_2mib", host, 2 * MiB);

    char *buffer = malloc(64 * 1024);
    if (!buffer) {
        fprintf(stderr, PROGRAM ": out of host memory\n");
        return 1;
    }
    expect_rc("cuMemHostRegister_v2", cuMemHostRegister_v2(buffer, 64 * 1024, 0), CUDA_SUCCESS);
    put_u64("registered_bytes", 64 * 1024);
    expect_rc("cuMemHostUnregister", cuMemHostUnregister(buffer), CUDA_SUCCESS);
    put_int("unregistered", 1);
    free(buffer);

    expect_rc("cuMemAllocPitch_v2", cuMemAllocPitch_v2(&pitched, &pitch, 1000, 10, 4),
              CUDA_SUCCESS);
    put_hex("pitch_alloc", pitched);
    put_u64("pitch", pitch);

    expect_rc("cuStreamCreate", cuStreamCreate(&stream, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    put_hex("stream", (uintptr_t)stream);
    expect_rc("cuMemAllocAsync", cuMemAllocAsync(&async, 8 * MiB, stream), CUDA_SUCCESS);
    put_hex("async_8mib", async);
    expect_rc("cuMemFreeAsync", cuMemFreeAsync(async, stream), CUDA_SUCCESS);
    put_int("async_8mib_freed", 1);

    expect_rc("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
    put_hex("pool", (uintptr_t)pool);
    expect_rc("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync(&pooled, 5 * MiB, pool, stream),
              CUDA_SUCCESS);
    put_hex("pool_5mib", pooled);
    expect_rc("cuStreamDestroy", cuStreamDestroy(stream), CUDA_SUCCESS);

    CUresult rc = cuMemAlloc_v2(&big, TOO_BIG);
    expect_rc("cuMemAlloc_v2 2 TiB", rc, CUDA_ERROR_OUT_OF_MEMORY);
    expect_eq("the failed allocation's pointer", big, 0);
    put_int("failed_alloc_rc", rc);
    put_u64("failed_alloc_size", TOO_BIG);
    put_hex("failed_alloc_ptr", big);

    expect_rc("cuMemGetInfo_v2", cuMemGetInfo_v2(&free_b, &total_b), CUDA_SUCCESS);
    put_u64("device_used", total_b - free_b);

    put_int("alloc_calls_ok", 9);
    put_int("free_calls_ok", 3);
    put_u64("live_device_bytes", 1 * MiB + 3 * MiB + 5 * MiB + 1024 * 10);
    put_u64("live_managed_bytes", 4 * MiB);
    put_u64("live_pinned_bytes", 2 * MiB);
    return 0;
}
