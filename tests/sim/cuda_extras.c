/*
 * cuda_extras.c: the rest of the driver API that PyTorch's libc10_cuda.so resolves (through
 * cudaGetDriverEntryPointByVersion) before it uses expandable segments: device attributes,
 * the context stack, and the calls of IPC and stream memory operations, which the simulated
 * device does not have (CUDA_ERROR_NOT_SUPPORTED, as a device without them answers) or
 * completes at once (nothing is ever in flight).
 *
 *   cuDeviceGetAttribute    the handful of attributes the simulation models (below); any
 *                           other valid attribute is 0; past the last one: INVALID_VALUE
 *   cuCtxPushCurrent/Pop    a per-thread stack over cuCtxSetCurrent/cuCtxGetCurrent
 *   cuMemExportToShareableHandle, cuMemImportFromShareableHandle, cuMemRetainAllocationHandle,
 *   cuMemGetAddressRange    CUDA_ERROR_NOT_SUPPORTED
 *   cuStreamWriteValue32, cuMemsetD32Async   CUDA_SUCCESS (device memory holds no bytes)
 */
#include "cuda_internal.h"

#include <stddef.h>

/* CUdevice_attribute values (cuda.h) the simulation answers. */
#define ATTR_MAX_THREADS_PER_BLOCK 1
#define ATTR_WARP_SIZE 10
#define ATTR_MULTIPROCESSOR_COUNT 16
#define ATTR_UNIFIED_ADDRESSING 41
#define ATTR_COMPUTE_CAPABILITY_MAJOR 75
#define ATTR_COMPUTE_CAPABILITY_MINOR 76
#define ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define ATTR_MEMORY_POOLS_SUPPORTED 115
#define ATTR_MAX 150

SIM_EXPORT CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev)
{
    BEGIN();
    if (pi == NULL || attrib <= 0 || attrib >= ATTR_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cuda_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case ATTR_MAX_THREADS_PER_BLOCK:
        *pi = 1024;
        break;
    case ATTR_WARP_SIZE:
        *pi = 32;
        break;
    case ATTR_MULTIPROCESSOR_COUNT:
        *pi = 132;
        break;
    case ATTR_COMPUTE_CAPABILITY_MAJOR:
        *pi = 9;
        break;
    case ATTR_UNIFIED_ADDRESSING:
    case ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case ATTR_MEMORY_POOLS_SUPPORTED:
        *pi = 1;
        break;
    default:
        *pi = 0;
    }
    return CUDA_SUCCESS;
}

#define CTX_STACK 16
static __thread CUcontext ctx_stack[CTX_STACK];
static __thread int ctx_depth;

SIM_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
    BEGIN();
    if (ctx_depth >= CTX_STACK)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext previous = NULL;
    cuCtxGetCurrent(&previous);
    CUresult rc = cuCtxSetCurrent(ctx);
    if (rc == CUDA_SUCCESS)
        ctx_stack[ctx_depth++] = previous;
    return rc;
}

SIM_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    BEGIN();
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx)
        cuCtxGetCurrent(pctx);
    return cuCtxSetCurrent(ctx_stack[--ctx_depth]);
}

SIM_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                                 CUmemGenericAllocationHandle handle,
                                                 int handleType, unsigned long long flags)
{
    (void)shareableHandle;
    (void)handle;
    (void)handleType;
    (void)flags;
    BEGIN();
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                   void *osHandle, int shHandleType)
{
    (void)handle;
    (void)osHandle;
    (void)shHandleType;
    BEGIN();
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    (void)handle;
    (void)addr;
    BEGIN();
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    (void)pbase;
    (void)psize;
    (void)dptr;
    BEGIN();
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_EXPORT CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, unsigned int value,
                                         unsigned int flags)
{
    (void)stream;
    (void)addr;
    (void)value;
    (void)flags;
    BEGIN();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                     CUstream hStream)
{
    (void)dstDevice;
    (void)ui;
    (void)N;
    (void)hStream;
    BEGIN();
    return CUDA_SUCCESS;
}
