/*
 * cuda_runtime_api.h: gpumemprof's own minimal declarations of the CUDA runtime API.
 *
 * Written from the documented API contract (signatures, error codes, flag values), not copied
 * from NVIDIA's headers. It declares only what the simulated runtime (cudart_sim.c) implements,
 * with the same names, types, values and C linkage as the real libcudart.so.12, so the test
 * programs compile against it exactly as real applications compile against the toolkit.
 * Usable from C and C++.
 */
#ifndef GPUMEMPROF_SIM_CUDA_RUNTIME_API_H
#define GPUMEMPROF_SIM_CUDA_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: the values are the real ones (they are ABI). */
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInsufficientDriver = 35,
    cudaErrorCallRequiresNewerDriver = 36,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorDeviceUninitialized = 201,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorSymbolNotFound = 500,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;

/* Opaque handles: pointers to structs that are never defined, as in the real headers. */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;

/* The two special stream handles. */
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

/* cudaMallocManaged flags. */
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02

/* cudaHostAlloc flags (may be or-ed together). */
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04

/* cudaHostRegister flags (may be or-ed together). */
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaHostRegisterIoMemory 0x04
#define cudaHostRegisterReadOnly 0x08

/* cudaGetDriverEntryPoint flags: the values of the driver's CU_GET_PROC_ADDRESS_* flags. */
#define cudaEnableDefault 0x0
#define cudaEnableLegacyStream 0x1
#define cudaEnablePerThreadDefaultStream 0x2

/* What cudaGetDriverEntryPoint found (the misspelling is the real header's). */
enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
    cudaDriverEntryPointVersionNotSufficent = 2
};
typedef enum cudaDriverEntryPointQueryResult cudaDriverEntryPointQueryResult;

struct cudaPitchedPtr {
    void *ptr;    /* start of the allocation */
    size_t pitch; /* bytes per row, >= xsize */
    size_t xsize; /* requested row width in bytes */
    size_t ysize; /* requested rows per slice */
};

struct cudaExtent {
    size_t width; /* bytes for linear memory */
    size_t height;
    size_t depth;
};

static inline struct cudaExtent make_cudaExtent(size_t w, size_t h, size_t d)
{
    struct cudaExtent e;
    e.width = w;
    e.height = h;
    e.depth = d;
    return e;
}

/* Device memory. */
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync(void **devPtr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **devPtr, size_t size, cudaMemPool_t pool,
                                         cudaStream_t stream);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device);
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent);

/* Managed and pinned host memory. */
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);

/* What a pointer is (CUDA 11+ layout: unregistered host memory is not an error). */
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);

/* Devices and streams. */
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);

/* Errors and versions. */
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
cudaError_t cudaDriverGetVersion(int *driverVersion);

/* Driver entry points, through the driver's resolver (cuGetProcAddress_v2): the first asks with
 * the runtime's own version (12040), the second with the caller's. driverStatus may be NULL. */
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *driverStatus);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEMPROF_SIM_CUDA_RUNTIME_API_H */
