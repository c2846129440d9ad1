/*
 * hip_alloc.c: the HIP allocation API surface of an AMD GPU program (PyTorch ROCm builds link
 * libamdhip64 directly, so a preloaded profiler's exports interpose on every call here).
 * gpumemprof-build: link=amdhip64
 *
 * In order (MiB = 1048576 bytes; addresses with the default configuration):
 *   hipMalloc 1 MiB -> 0x600000000000, then hipFree of it
 *   hipStreamCreate -> 0x5f0000000100; hipMallocAsync 2 MiB on it -> 0x600000100000, then
 *     hipFreeAsync of it
 *   hipDeviceGetDefaultMemPool(device 0) -> 0x2000; hipMallocFromPoolAsync 3 MiB from it ->
 *     0x600000300000 (kept)
 *   hipMallocManaged 4 MiB, hipMemAttachGlobal (kept)
 *   hipHostMalloc 1 MiB, flags 0, then hipHostFree of it
 *   hipExtMallocWithFlags 5 MiB, hipDeviceMallocFinegrained -> 0x600000600000 (kept)
 *   VMM: hipMemAddressReserve 16 MiB -> 0x640000000000; hipMemCreate 2 MiB on device 0 ->
 *     handle 0x4b000010; hipMemMap at the reservation's start; hipMemSetAccess; hipMemUnmap;
 *     hipMemRelease; hipMemAddressFree (2 MiB committed at the peak, none at exit)
 *   hipMalloc of 2 TiB (more than any SIMHIP_CAPACITY): hipErrorOutOfMemory (2), *ptr = NULL
 *   hipMemGetInfo: device_used = total - free
 *   hipStreamDestroy
 * Totals: 6 successful allocation calls (hipMalloc, hipMallocAsync, hipMallocFromPoolAsync,
 * hipMallocManaged, hipHostMalloc, hipExtMallocWithFlags), 3 successful frees (hipFree,
 * hipFreeAsync, hipHostFree), 1 VMM handle created and released, 1 failed allocation.
 * Live at exit: device 3 + 5 MiB = 8388608 bytes in 2 blocks; managed 4 MiB = 4194304 bytes;
 * device_used = 12582912.
 *
 * Prints (key=value): malloc_1mib, free_1mib, stream, async_2mib, async_2mib_freed, pool,
 * pool_3mib, managed_4mib, host_1mib, host_1mib_freed, ext_5mib, vmm_reserve, vmm_handle,
 * vmm_peak_committed, vmm_live_committed, failed_alloc_rc, failed_alloc_size, failed_alloc_ptr,
 * device_used, alloc_calls_ok, free_calls_ok, live_device_bytes, live_managed_bytes.
 */
#define PROGRAM "hip_alloc"

#include "report.h"

#include <hip/hip_runtime_api.h>

#define MiB ((size_t)1 << 20)
#define TOO_BIG ((size_t)1 << 41) /* 2 TiB: above the simulator's 1 TiB capacity limit */

int main(void)
{
    void *one, *two, *three, *managed, *host, *five, *va, *big = (void *)0x1;
    hipStream_t stream;
    hipMemPool_t pool;

    expect_rc("hipMalloc 1 MiB", hipMalloc(&one, 1 * MiB), hipSuccess);
    put_hex("malloc_1mib", (uintptr_t)one);
    expect_rc("hipFree", hipFree(one), hipSuccess);
    put_hex("free_1mib", (uintptr_t)one);

    expect_rc("hipStreamCreate", hipStreamCreate(&stream), hipSuccess);
    put_hex("stream", (uintptr_t)stream);
    expect_rc("hipMallocAsync 2 MiB", hipMallocAsync(&two, 2 * MiB, stream), hipSuccess);
    put_hex("async_2mib", (uintptr_t)two);
    expect_rc("hipFreeAsync", hipFreeAsync(two, stream), hipSuccess);
    put_int("async_2mib_freed", 1);

    expect_rc("hipDeviceGetDefaultMemPool", hipDeviceGetDefaultMemPool(&pool, 0), hipSuccess);
    put_hex("pool", (uintptr_t)pool);
    expect_rc("hipMallocFromPoolAsync 3 MiB", hipMallocFromPoolAsync(&three, 3 * MiB, pool, stream),
              hipSuccess);
    put_hex("pool_3mib", (uintptr_t)three);

    expect_rc("hipMallocManaged 4 MiB", hipMallocManaged(&managed, 4 * MiB, hipMemAttachGlobal),
              hipSuccess);
    put_host("managed_4mib", managed, 4 * MiB);

    expect_rc("hipHostMalloc 1 MiB", hipHostMalloc(&host, 1 * MiB, hipHostMallocDefault),
              hipSuccess);
    put_host("host_1mib", host, 1 * MiB);
    expect_rc("hipHostFree", hipHostFree(host), hipSuccess);
    put_int("host_1mib_freed", 1);

    expect_rc("hipExtMallocWithFlags 5 MiB",
              hipExtMallocWithFlags(&five, 5 * MiB, hipDeviceMallocFinegrained), hipSuccess);
    put_hex("ext_5mib", (uintptr_t)five);

    hipMemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = hipMemAllocationTypePinned;
    prop.location.type = hipMemLocationTypeDevice;
    prop.location.id = 0;
    hipMemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = hipMemAccessFlagsProtReadWrite;
    hipMemGenericAllocationHandle_t handle;
    expect_rc("hipMemAddressReserve", hipMemAddressReserve(&va, 16 * MiB, 0, NULL, 0), hipSuccess);
    put_hex("vmm_reserve", (uintptr_t)va);
    expect_rc("hipMemCreate", hipMemCreate(&handle, 2 * MiB, &prop, 0), hipSuccess);
    put_hex("vmm_handle", (uintptr_t)handle);
    expect_rc("hipMemMap", hipMemMap(va, 2 * MiB, 0, handle, 0), hipSuccess);
    expect_rc("hipMemSetAccess", hipMemSetAccess(va, 2 * MiB, &access, 1), hipSuccess);
    put_u64("vmm_peak_committed", 2 * MiB);
    expect_rc("hipMemUnmap", hipMemUnmap(va, 2 * MiB), hipSuccess);
    expect_rc("hipMemRelease", hipMemRelease(handle), hipSuccess);
    expect_rc("hipMemAddressFree", hipMemAddressFree(va, 16 * MiB), hipSuccess);
    put_u64("vmm_live_committed", 0);

    hipError_t rc = hipMalloc(&big, TOO_BIG);
    expect_rc("hipMalloc 2 TiB", rc, hipErrorOutOfMemory);
    expect_eq("the failed allocation's pointer", (uintptr_t)big, 0);
    put_int("failed_alloc_rc", rc);
    put_u64("failed_alloc_size", TOO_BIG);
    put_hex("failed_alloc_ptr", (uintptr_t)big);

    size_t free_b = 0, total_b = 0;
    expect_rc("hipMemGetInfo", hipMemGetInfo(&free_b, &total_b), hipSuccess);
    put_u64("device_used", total_b - free_b);
    expect_rc("hipStreamDestroy", hipStreamDestroy(stream), hipSuccess);

    put_int("alloc_calls_ok", 6);
    put_int("free_calls_ok", 3);
    put_u64("live_device_bytes", 8 * MiB);
    put_u64("live_managed_bytes", 4 * MiB);
    return 0;
}
