/*
 * cuda_vmm.c: the simulated driver's virtual memory management calls, the ones PyTorch's
 * expandable segments use (through cudaGetDriverEntryPoint). The rules live in sim_vmm.c; this
 * file checks the CUDA-specific arguments and returns CUDA codes:
 *
 *   cuMemCreate(handle*, size, prop*, flags)   prop->type PINNED (1), prop->location DEVICE (1)
 *       with a valid id (else CUDA_ERROR_INVALID_DEVICE), size a non-zero multiple of 2 MiB,
 *       flags 0; charges the capacity at once (over it: CUDA_ERROR_OUT_OF_MEMORY, *handle = 0).
 *   cuMemRelease(handle)                       the memory returns once no mapping of it remains.
 *   cuMemAddressReserve(ptr*, size, align, addr, flags)   size a multiple of 2 MiB, align 0 or a
 *       power of two, flags 0; addr is only a hint.
 *   cuMemAddressFree(ptr, size)                exactly one reservation, with no mapping left.
 *   cuMemMap(ptr, size, offset, handle, flags) inside one reservation, overlapping no mapping,
 *       offset + size <= the handle's size, flags 0.
 *   cuMemUnmap(ptr, size)                      exactly one or more whole, contiguous mappings.
 *   cuMemSetAccess(ptr, size, desc, count)     the range mapped; desc: device locations with
 *       valid ids and flags NONE/READ/READWRITE; count >= 1.
 *   cuMemGetAllocationPropertiesFromHandle     the prop the handle was created with.
 *   cuMemGetAllocationGranularity              2 MiB, minimum and recommended alike.
 * A bad argument or range is CUDA_ERROR_INVALID_VALUE (1); an unknown or released handle
 * CUDA_ERROR_INVALID_HANDLE (400).
 */
#include "cuda_internal.h"

#include <stdint.h>

/* CUDA_SUCCESS for pinned device memory on a valid device. */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    return cuda_valid_device(prop->location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    BEGIN();
    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *handle = 0;
    CUresult rc = check_prop(prop);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t h;
    rc = (CUresult)sim_vmm_create(&cuda_mem, size, prop->location.id, prop, sizeof *prop, &h);
    *handle = h;
    return rc;
}

SIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    BEGIN();
    return (CUresult)sim_vmm_release(&cuda_mem, handle);
}

SIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                        CUdeviceptr addr, unsigned long long flags)
{
    BEGIN();
    if (ptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *ptr = 0;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t base;
    CUresult rc = (CUresult)sim_vmm_reserve(&cuda_mem, size, alignment, (uintptr_t)addr, &base);
    *ptr = base;
    return rc;
}

SIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    BEGIN();
    return (CUresult)sim_vmm_free(&cuda_mem, (uintptr_t)ptr, size);
}

SIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    BEGIN();
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return (CUresult)sim_vmm_map(&cuda_mem, (uintptr_t)ptr, size, offset, handle);
}

SIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    BEGIN();
    return (CUresult)sim_vmm_unmap(&cuda_mem, (uintptr_t)ptr, size);
}

SIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                   size_t count)
{
    BEGIN();
    if (desc == NULL || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUmemAccess_flags f = desc[i].flags;
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return CUDA_ERROR_INVALID_VALUE;
        if (!cuda_valid_device(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
    }
    return (CUresult)sim_vmm_check_mapped(&cuda_mem, (uintptr_t)ptr, size);
}

SIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                           CUmemGenericAllocationHandle handle)
{
    BEGIN();
    if (prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return (CUresult)sim_vmm_properties(&cuda_mem, handle, prop, sizeof *prop);
}

SIM_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                                  const CUmemAllocationProp *prop,
                                                  CUmemAllocationGranularity_flags option)
{
    BEGIN();
    if (granularity == NULL || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_prop(prop);
    if (rc == CUDA_SUCCESS)
        *granularity = SIM_VMM_GRANULARITY;
    return rc;
}
