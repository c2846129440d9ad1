/*
 * cudart13.c: what the simulated runtime lacks for PyTorch's libc10_cuda.so (torch 2.15,
 * CUDA 13): streams, events, peer access, capture queries, memory-pool attributes, IPC and
 * device properties. Linked with cudart_sim.c (the memory model's allocation calls) into a
 * stand-in libcudart.so.13 (version node libcudart.so.13, sim/libcudart13.map) by the tests
 * that run PyTorch's real caching allocator (tests/torch_real.rs, built at test time: this
 * file is compiled against NVIDIA's own CUDA 13 headers from the nvidia-cuda-runtime wheel,
 * so struct cudaDeviceProp is the real layout).
 *
 * The contract honoured is the one the caching allocator relies on: every stream is always
 * idle (work completes at once: events are complete, queries succeed), nothing is being
 * captured into a graph, one device has no peers, and copies between simulated device
 * addresses move no bytes (no kernel ever reads them). IPC is not supported
 * (cudaErrorNotSupported), as on a device without it.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

/* Handles are distinct, never dereferenced, never NULL. */
static uintptr_t next_handle = 0x5100;

static uintptr_t handle(void)
{
    return __atomic_add_fetch(&next_handle, 16, __ATOMIC_RELAXED);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    int count = 0;
    if (!prop) {
        return cudaErrorInvalidValue;
    }
    if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
        return cudaErrorInvalidDevice;
    }
    int current = 0;
    size_t free_bytes = 0, total = 0;
    cudaGetDevice(&current);
    cudaSetDevice(device);
    cudaMemGetInfo(&free_bytes, &total);
    cudaSetDevice(current);
    memset(prop, 0, sizeof *prop);
    strncpy(prop->name, "gpumemprof simulated GPU", sizeof prop->name - 1);
    prop->totalGlobalMem = total;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->sharedMemPerBlock = 48 << 10;
    prop->sharedMemPerBlockOptin = 227 << 10;
    prop->l2CacheSize = 50 << 20;
    prop->memoryBusWidth = 5120;
    prop->integrated = 0;
    prop->unifiedAddressing = 1;
    prop->pciDeviceID = device;
    /* What the torch package's kernels size their launches by (an H100's figures). */
    prop->regsPerBlock = 65536;
    prop->regsPerMultiprocessor = 65536;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->maxBlocksPerMultiProcessor = 32;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->sharedMemPerMultiprocessor = 228 << 10;
    prop->totalConstMem = 64 << 10;
    prop->memPitch = 2147483647;
    prop->textureAlignment = 512;
    prop->concurrentKernels = 1;
    prop->asyncEngineCount = 2;
    prop->managedMemory = 1;
    prop->memoryPoolsSupported = 1;
    prop->cooperativeLaunch = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    (void)device;
    (void)peerDevice;
    if (!canAccessPeer) {
        return cudaErrorInvalidValue;
    }
    *canAccessPeer = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    (void)peerDevice;
    (void)flags;
    return cudaErrorInvalidDevice;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    if (leastPriority) {
        *leastPriority = 0;
    }
    if (greatestPriority) {
        *greatestPriority = -5;
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                           void *value)
{
    (void)device;
    (void)attr;
    if (!value) {
        return cudaErrorInvalidValue;
    }
    *(uint64_t *)value = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                           void *value)
{
    (void)device;
    (void)attr;
    (void)value;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    (void)flags;
    (void)priority;
    if (!pStream) {
        return cudaErrorInvalidValue;
    }
    *pStream = (cudaStream_t)handle();
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    (void)stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    (void)stream;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    (void)stream;
    (void)event;
    (void)flags;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    (void)stream;
    if (!status) {
        return cudaErrorInvalidValue;
    }
    *status = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                     enum cudaStreamCaptureStatus *captureStatus_out,
                                     unsigned long long *id_out, cudaGraph_t *graph_out,
                                     const cudaGraphNode_t **dependencies_out,
                                     const cudaGraphEdgeData **edgeData_out,
                                     size_t *numDependencies_out)
{
    (void)stream;
    if (!captureStatus_out) {
        return cudaErrorInvalidValue;
    }
    *captureStatus_out = cudaStreamCaptureStatusNone;
    if (id_out) {
        *id_out = 0;
    }
    if (graph_out) {
        *graph_out = NULL;
    }
    if (dependencies_out) {
        *dependencies_out = NULL;
    }
    if (edgeData_out) {
        *edgeData_out = NULL;
    }
    if (numDependencies_out) {
        *numDependencies_out = 0;
    }
    return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    /* The mode is per thread and only matters while capturing: keep the caller's value. */
    return mode ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                         cudaGraphEdgeData *edgeData, size_t *pNumDependencies)
{
    (void)node;
    (void)pDependencies;
    (void)edgeData;
    if (pNumDependencies) {
        *pNumDependencies = 0;
    }
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    (void)flags;
    if (!event) {
        return cudaErrorInvalidValue;
    }
    *event = (cudaEvent_t)handle();
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    (void)stream;
    return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms || !start || !end) {
        return cudaErrorInvalidValue;
    }
    *ms = 0.0f;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    (void)dst;
    (void)src;
    (void)count;
    (void)kind;
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)stream;
    return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                size_t count, cudaStream_t stream)
{
    (void)dstDevice;
    (void)srcDevice;
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    (void)memPool;
    (void)attr;
    if (!value) {
        return cudaErrorInvalidValue;
    }
    *(uint64_t *)value = 0;
    return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    (void)memPool;
    (void)attr;
    (void)value;
    return cudaSuccess;
}

cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
                                 size_t count)
{
    (void)memPool;
    (void)descList;
    (void)count;
    return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    (void)memPool;
    (void)minBytesToKeep;
    return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle_out, void *devPtr)
{
    (void)handle_out;
    (void)devPtr;
    return cudaErrorNotSupported;
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t h, unsigned int flags)
{
    (void)devPtr;
    (void)h;
    (void)flags;
    return cudaErrorNotSupported;
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    (void)devPtr;
    return cudaErrorNotSupported;
}
