/*
 * hip/hip_runtime_api.h: gpumemprof's own minimal declarations of the HIP runtime API
 * (libamdhip64.so.6).
 *
 * Written from the documented API contract (ROCm 6: signatures, type names, error codes, flag
 * values), not copied from AMD's headers. It declares only what the simulated HIP runtime
 * (hip_sim.c) implements, with the real names, types, values and C linkage, so test programs
 * compile against it as real applications compile against ROCm. Usable from C and C++.
 */
#ifndef GPUMEMPROF_SIM_HIP_RUNTIME_API_H
#define GPUMEMPROF_SIM_HIP_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: the values are the real ones (they are ABI). */
typedef enum hipError_t {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorMemoryAllocation = 2, /* the older name */
    hipErrorNotInitialized = 3,
    hipErrorInitializationError = 3,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidContext = 201,
    hipErrorInvalidHandle = 400,
    hipErrorInvalidResourceHandle = 400,
    hipErrorNotFound = 500,
    hipErrorHostMemoryAlreadyRegistered = 712,
    hipErrorHostMemoryNotRegistered = 713,
    hipErrorNotSupported = 801,
    hipErrorUnknown = 999
} hipError_t;

/* Opaque handles: pointers to structs that are never defined, as in the real header. */
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipMemPoolHandle_t *hipMemPool_t;
typedef struct ihipMemGenericAllocationHandle *hipMemGenericAllocationHandle_t;

/* The per-thread default stream. */
#define hipStreamPerThread ((hipStream_t)2)

/* hipMallocManaged flags. */
#define hipMemAttachGlobal 0x01
#define hipMemAttachHost 0x02

/* hipHostMalloc flags (may be or-ed together). */
#define hipHostMallocDefault 0x0
#define hipHostMallocPortable 0x1
#define hipHostMallocMapped 0x2
#define hipHostMallocWriteCombined 0x4
#define hipHostMallocNumaUser 0x20000000
#define hipHostMallocCoherent 0x40000000
#define hipHostMallocNonCoherent 0x80000000

/* hipExtMallocWithFlags flags. */
#define hipDeviceMallocDefault 0x0
#define hipDeviceMallocFinegrained 0x1
#define hipMallocSignalMemory 0x2
#define hipDeviceMallocUncached 0x3
#define hipDeviceMallocContiguous 0x4

/* What a pointer is (ROCm 6 layout). */
typedef enum hipMemoryType {
    hipMemoryTypeUnregistered = 0,
    hipMemoryTypeHost = 1,
    hipMemoryTypeDevice = 2,
    hipMemoryTypeManaged = 3,
    hipMemoryTypeArray = 10,
    hipMemoryTypeUnified = 11
} hipMemoryType;

typedef struct hipPointerAttribute_t {
    enum hipMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
    int isManaged;
    unsigned allocationFlags;
} hipPointerAttribute_t;

/* Virtual memory management. */
typedef enum hipMemAllocationType {
    hipMemAllocationTypeInvalid = 0x0,
    hipMemAllocationTypePinned = 0x1,
    hipMemAllocationTypeMax = 0x7FFFFFFF
} hipMemAllocationType;

typedef enum hipMemAllocationHandleType {
    hipMemHandleTypeNone = 0x0,
    hipMemHandleTypePosixFileDescriptor = 0x1,
    hipMemHandleTypeWin32 = 0x2,
    hipMemHandleTypeWin32Kmt = 0x4
} hipMemAllocationHandleType;

typedef enum hipMemLocationType {
    hipMemLocationTypeInvalid = 0,
    hipMemLocationTypeDevice = 1
} hipMemLocationType;

typedef struct hipMemLocation {
    hipMemLocationType type;
    int id; /* the device ordinal for hipMemLocationTypeDevice */
} hipMemLocation;

typedef struct hipMemAllocationProp {
    hipMemAllocationType type;
    union {
        hipMemAllocationHandleType requestedHandleType;
        hipMemAllocationHandleType requestedHandleTypes;
    };
    hipMemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
    } allocFlags;
} hipMemAllocationProp;

typedef enum hipMemAccessFlags {
    hipMemAccessFlagsProtNone = 0,
    hipMemAccessFlagsProtRead = 1,
    hipMemAccessFlagsProtReadWrite = 3
} hipMemAccessFlags;

typedef struct hipMemAccessDesc {
    hipMemLocation location;
    hipMemAccessFlags flags;
} hipMemAccessDesc;

typedef enum hipMemAllocationGranularity_flags {
    hipMemAllocationGranularityMinimum = 0x0,
    hipMemAllocationGranularityRecommended = 0x1
} hipMemAllocationGranularity_flags;

/* Device, managed and pinned host memory. */
hipError_t hipMalloc(void **ptr, size_t size);
hipError_t hipFree(void *ptr);
hipError_t hipMallocAsync(void **dev_ptr, size_t size, hipStream_t stream);
hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream);
hipError_t hipMallocFromPoolAsync(void **dev_ptr, size_t size, hipMemPool_t mem_pool,
                                  hipStream_t stream);
hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t *mem_pool, int device);
hipError_t hipMallocManaged(void **dev_ptr, size_t size, unsigned int flags);
hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags);
hipError_t hipHostFree(void *ptr);
hipError_t hipExtMallocWithFlags(void **ptr, size_t sizeBytes, unsigned int flags);
hipError_t hipMemGetInfo(size_t *free, size_t *total);
hipError_t hipPointerGetAttributes(hipPointerAttribute_t *attributes, const void *ptr);

/* Virtual memory management. */
hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size,
                        const hipMemAllocationProp *prop, unsigned long long flags);
hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle);
hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr,
                                unsigned long long flags);
hipError_t hipMemAddressFree(void *devPtr, size_t size);
hipError_t hipMemMap(void *ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
                     unsigned long long flags);
hipError_t hipMemUnmap(void *ptr, size_t size);
hipError_t hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc, size_t count);
hipError_t hipMemGetAllocationPropertiesFromHandle(hipMemAllocationProp *prop,
                                                   hipMemGenericAllocationHandle_t handle);
hipError_t hipMemGetAllocationGranularity(size_t *granularity, const hipMemAllocationProp *prop,
                                          hipMemAllocationGranularity_flags option);

/* Devices and streams. */
hipError_t hipInit(unsigned int flags);
hipError_t hipGetDevice(int *deviceId);
hipError_t hipSetDevice(int deviceId);
hipError_t hipGetDeviceCount(int *count);
hipError_t hipDeviceSynchronize(void);
hipError_t hipStreamCreate(hipStream_t *stream);
hipError_t hipStreamDestroy(hipStream_t stream);

/* Errors and versions. */
const char *hipGetErrorString(hipError_t hipError);
const char *hipGetErrorName(hipError_t hip_error);
hipError_t hipGetLastError(void);
hipError_t hipPeekAtLastError(void);
hipError_t hipRuntimeGetVersion(int *runtimeVersion);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEMPROF_SIM_HIP_RUNTIME_API_H */
