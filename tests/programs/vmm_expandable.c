/*
 * vmm_expandable.c: GPU memory committed the way PyTorch's expandable segments do it
 * (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, c10/cuda/CUDACachingAllocator.cpp): one
 * large virtual reservation, grown and shrunk by mapping and unmapping 2 MiB physical handles.
 * The driver functions come from cudaGetDriverEntryPoint (c10/cuda/driver_api.cpp), which ends
 * in libcuda's resolver, so a profiler sees them only by wrapping the resolver.
 * gpumemprof-build: link=cudart,dl
 *
 * Lookups: cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease,
 * cuMemAddressFree through cudaGetDriverEntryPoint(flags cudaEnableDefault, status out: 0 each),
 * cuMemGetAllocationGranularity through cudaGetDriverEntryPointByVersion(12000).
 * Then, in order (MiB = 1048576 bytes; values with the default configuration):
 *   granularity 2 MiB (minimum, device 0)
 *   cuMemAddressReserve 64 MiB, alignment 0, no hint -> 0x740000000000
 *   grow: cuMemCreate 4 handles of 2 MiB (0x4a000010, 0x4a000020, 0x4a000030, 0x4a000040),
 *     cuMemMap each at reservation + 0, 2, 4, 6 MiB, one cuMemSetAccess over those 8 MiB
 *     (device 0, read-write): 8 MiB committed, the peak
 *   shrink: one cuMemUnmap of reservation + 4 MiB, 4 MiB (the last two mappings), then
 *     cuMemRelease of those two handles: 4 MiB committed
 *   grow: cuMemCreate 1 handle of 2 MiB (0x4a000050), cuMemMap at reservation + 4 MiB,
 *     cuMemSetAccess over it: 6 MiB committed
 * Nothing else: at exit 3 handles (6 MiB = 6291456 bytes) stay created and mapped and the
 * 64 MiB reservation stays reserved (cuMemAddressFree is looked up, never called).
 * device_used (cudaMemGetInfo: total - free) = 6291456, plus SIMCUDA_CONTEXT_BYTES when set.
 *
 * Prints (key=value): entry_points, entry_status, granularity, reserve_base, reserve_size,
 * handle_1 .. handle_5, peak_committed, unmapped_bytes, released_handles, live_committed,
 * live_handles, reservation_live, device_used.
 */
#define PROGRAM "vmm_expandable"

#include "report.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#define MiB ((size_t)1 << 20)
#define RESERVE (64 * MiB)

static int entry_points;

/* cudaGetDriverEntryPoint, or exit; the status must be success. */
static void *entry(const char *name)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    expect_rc(name, cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &status), cudaSuccess);
    expect_rc("its status", status, cudaDriverEntryPointSuccess);
    entry_points++;
    return fn;
}

int main(void)
{
    __typeof__(cuMemAddressReserve) *reserve = entry("cuMemAddressReserve");
    __typeof__(cuMemCreate) *create = entry("cuMemCreate");
    __typeof__(cuMemMap) *map = entry("cuMemMap");
    __typeof__(cuMemSetAccess) *set_access = entry("cuMemSetAccess");
    __typeof__(cuMemUnmap) *unmap = entry("cuMemUnmap");
    __typeof__(cuMemRelease) *release = entry("cuMemRelease");
    __typeof__(cuMemAddressFree) *address_free = entry("cuMemAddressFree");
    (void)address_free; /* looked up as PyTorch does; the reservation stays live */

    void *fn = NULL;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    expect_rc("cudaGetDriverEntryPointByVersion",
              cudaGetDriverEntryPointByVersion("cuMemGetAllocationGranularity", &fn, 12000,
                                               cudaEnableDefault, &status),
              cudaSuccess);
    expect_rc("its status", status, cudaDriverEntryPointSuccess);
    entry_points++;
    __typeof__(cuMemGetAllocationGranularity) *granularity_of = fn;
    put_int("entry_points", entry_points);
    put_int("entry_status", status);

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t granularity = 0;
    expect_rc("cuMemGetAllocationGranularity",
              granularity_of(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
    expect_eq("granularity", granularity, 2 * MiB);
    put_u64("granularity", granularity);

    CUdeviceptr base;
    expect_rc("cuMemAddressReserve", reserve(&base, RESERVE, 0, 0, 0), CUDA_SUCCESS);
    put_hex("reserve_base", base);
    put_u64("reserve_size", RESERVE);

    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    /* Grow to 8 MiB. */
    CUmemGenericAllocationHandle h[5];
    char key[32];
    for (int i = 0; i < 4; i++) {
        expect_rc("cuMemCreate", create(&h[i], granularity, &prop, 0), CUDA_SUCCESS);
        snprintf(key, sizeof key, "handle_%d", i + 1);
        put_hex(key, h[i]);
        expect_rc("cuMemMap", map(base + i * granularity, granularity, 0, h[i], 0), CUDA_SUCCESS);
    }
    expect_rc("cuMemSetAccess", set_access(base, 4 * granularity, &access, 1), CUDA_SUCCESS);
    put_u64("peak_committed", 4 * granularity);

    /* Shrink to 4 MiB: one unmap over two mappings, then release their handles. */
    expect_rc("cuMemUnmap", unmap(base + 2 * granularity, 2 * granularity), CUDA_SUCCESS);
    put_u64("unmapped_bytes", 2 * granularity);
    expect_rc("cuMemRelease 3", release(h[2]), CUDA_SUCCESS);
    expect_rc("cuMemRelease 4", release(h[3]), CUDA_SUCCESS);
    put_int("released_handles", 2);

    /* Grow to 6 MiB. */
    expect_rc("cuMemCreate", create(&h[4], granularity, &prop, 0), CUDA_SUCCESS);
    put_hex("handle_5", h[4]);
    expect_rc("cuMemMap", map(base + 2 * granularity, granularity, 0, h[4], 0), CUDA_SUCCESS);
    expect_rc("cuMemSetAccess", set_access(base + 2 * granularity, granularity, &access, 1),
              CUDA_SUCCESS);

    put_u64("live_committed", 3 * granularity);
    put_int("live_handles", 3);
    put_int("reservation_live", 1);
    size_t free_b = 0, total_b = 0;
    expect_rc("cudaMemGetInfo", cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    put_u64("device_used", total_b - free_b);
    return 0;
}
