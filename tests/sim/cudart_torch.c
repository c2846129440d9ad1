/*
 * cudart_torch.c: what the stand-in libcudart.so.13 needs beyond cudart13.c for the whole torch
 * package (libtorch_cuda.so and its kind), compiled against NVIDIA's CUDA 13 headers by
 * tests/torch/standins.py. Every other function torch imports of the runtime is a generated weak
 * stub returning cudaSuccess; these are the ones whose out-parameters or side effects torch uses.
 *
 * The contract is cudart13.c's: work completes at once on every stream (a host function or a
 * stream callback runs before the call returns), kernels compute nothing (a launch succeeds and
 * moves no byte), and the device answers attribute queries as an H100-like sm_90 part with the
 * memory the simulated driver gives it.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uintptr_t next_handle = 0x7e0000;

static void *handle(void)
{
    return (void *)__atomic_add_fetch(&next_handle, 16, __ATOMIC_RELAXED);
}

/* ---- device attributes --------------------------------------------------------------------- */

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (!value) {
        return cudaErrorInvalidValue;
    }
    (void)device;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY:
        *value = 1024;
        break;
    case cudaDevAttrMaxBlockDimZ:
        *value = 64;
        break;
    case cudaDevAttrMaxGridDimX:
        *value = 2147483647;
        break;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ:
        *value = 65535;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
        *value = 48 << 10;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *value = 227 << 10;
        break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
        *value = 228 << 10;
        break;
    case cudaDevAttrWarpSize:
        *value = 32;
        break;
    case cudaDevAttrMultiProcessorCount:
        *value = 132;
        break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
        *value = 2048;
        break;
    case cudaDevAttrMaxRegistersPerBlock:
    case cudaDevAttrMaxRegistersPerMultiprocessor:
        *value = 65536;
        break;
    case cudaDevAttrComputeCapabilityMajor:
        *value = 9;
        break;
    case cudaDevAttrComputeCapabilityMinor:
        *value = 0;
        break;
    case cudaDevAttrL2CacheSize:
        *value = 50 << 20;
        break;
    case cudaDevAttrClockRate:
    case cudaDevAttrMemoryClockRate:
        *value = 1980000;
        break;
    case cudaDevAttrGlobalMemoryBusWidth:
        *value = 5120;
        break;
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrConcurrentKernels:
    case cudaDevAttrMemoryPoolsSupported:
        *value = 1;
        break;
    default:
        *value = 0;
        break;
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    if (!pciBusId || len <= 0) {
        return cudaErrorInvalidValue;
    }
    snprintf(pciBusId, (size_t)len, "00000000:%02X:00.0", (unsigned)(device + 0x18) & 0xffu);
    return cudaSuccess;
}

/* ---- streams and events -------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    (void)flags;
    if (!pStream) {
        return cudaErrorInvalidValue;
    }
    *pStream = (cudaStream_t)handle();
    return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
    (void)hStream;
    if (!priority) {
        return cudaErrorInvalidValue;
    }
    *priority = 0;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    if (!event) {
        return cudaErrorInvalidValue;
    }
    *event = (cudaEvent_t)handle();
    return cudaSuccess;
}

/* The stream is idle: what was queued before the host function is done, so it runs now. */
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    (void)stream;
    if (!fn) {
        return cudaErrorInvalidValue;
    }
    fn(userData);
    return cudaSuccess;
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                  void *userData, unsigned int flags)
{
    (void)flags;
    if (!callback) {
        return cudaErrorInvalidValue;
    }
    callback(stream, cudaSuccess, userData);
    return cudaSuccess;
}

/* ---- kernels ------------------------------------------------------------------------------- */

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    (void)func;
    if (!attr) {
        return cudaErrorInvalidValue;
    }
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = 32;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = 48 << 10;
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                          int blockSize, size_t dynamicSMemSize)
{
    (void)func;
    (void)dynamicSMemSize;
    if (!numBlocks || blockSize <= 0) {
        return cudaErrorInvalidValue;
    }
    *numBlocks = blockSize >= 2048 ? 1 : 2048 / blockSize;
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
                                                                   const void *func,
                                                                   int blockSize,
                                                                   size_t dynamicSMemSize,
                                                                   unsigned int flags)
{
    (void)flags;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, func, blockSize,
                                                         dynamicSMemSize);
}

/* A device variable's address: a distinct fake device address per symbol, never dereferenced. */
cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    if (!devPtr || !symbol) {
        return cudaErrorInvalidValue;
    }
    *devPtr = (void *)(0x7f0000000000ULL | ((uintptr_t)symbol & 0xffffffffffULL));
    return cudaSuccess;
}
