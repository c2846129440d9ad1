/*
 * cudart_sim.c: a simulated CUDA runtime, built as libcudart.so.12, that stands in for the real
 * one in gpumemprof's tests. Programs link it with -lcudart exactly as they would link the real
 * runtime, and every exported cuda* symbol is versioned cudaMalloc@@libcudart.so.12 like the real
 * one (libcudart.map), so a profiler preloaded in front of it meets the same symbols and the same
 * contract: out-parameters, error codes, per-thread last error and current device.
 *
 * It reaches the driver the way the real runtime does, so a profiler sees the same layering:
 * no link-time dependency on libcuda. On first use it does dlopen("libcuda.so.1",
 * RTLD_NOW | RTLD_LOCAL) (built with an rpath of $ORIGIN, so the simulated driver beside it is
 * found), dlsym(handle, "cuGetProcAddress_v2") (else "cuGetProcAddress"), asks that resolver for
 * "cuGetProcAddress" and uses what comes back for every other driver function, with
 * cudaVersion 12040 and flags 0, except the _ptsz entry points (cudaMallocAsync_ptsz,
 * cudaFreeAsync_ptsz, cudaMallocFromPoolAsync_ptsz), which ask with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. Then it calls cuInit(0) once.
 *
 *   cudaMalloc -> cuMemAlloc_v2          cudaFree -> cuMemFree_v2
 *   cudaMallocAsync[_ptsz] -> cuMemAllocAsync[_ptsz]   cudaFreeAsync[_ptsz] -> cuMemFreeAsync[_ptsz]
 *   cudaMallocFromPoolAsync[_ptsz] -> cuMemAllocFromPoolAsync[_ptsz]
 *   cudaMallocManaged -> cuMemAllocManaged  cudaMallocPitch, cudaMalloc3D -> cuMemAllocPitch_v2
 *   cudaMallocHost -> cuMemAllocHost_v2  cudaHostAlloc -> cuMemHostAlloc  cudaFreeHost -> cuMemFreeHost
 *   cudaHostRegister/Unregister -> cuMemHostRegister_v2/cuMemHostUnregister
 *   cudaMemGetInfo -> cuMemGetInfo_v2    cudaPointerGetAttributes -> cuPointerGetAttribute
 *   cudaSetDevice -> cuDevicePrimaryCtxRetain + cuCtxSetCurrent
 *   cudaGetDevice -> cuCtxGetDevice (the driver makes device 0's primary context current for a
 *     thread that has none, as this runtime would)
 *   cudaGetDriverEntryPoint[ByVersion] -> the resolver, with 12040 (or the caller's version)
 *
 * The memory model, capacity and environment (SIMCUDA_*) are the driver's: see cuda_sim.c.
 *
 * Contract rules kept here (tests/sim_contract.rs checks them):
 *   libcuda.so.1 cannot be loaded (or has no resolver) -> every call that needs the driver
 *   returns cudaErrorInsufficientDriver (35); cudaDriverGetVersion then reports 0, as the real
 *   one. cuInit failing (a malformed SIMCUDA_* variable) -> cudaErrorInitializationError (3).
 *   A driver function the resolver did not give (SIMCUDA_HIDE) -> cudaErrorCallRequiresNewerDriver
 *   (36) from the calls that need it.
 *   NULL out-pointer -> cudaErrorInvalidValue. Size 0 from cudaMalloc/Async/FromPool/Pitch/3D/
 *   Host/HostAlloc -> cudaSuccess with a NULL pointer, nothing charged and no driver call.
 *   cudaMallocManaged with size 0 or flags other than cudaMemAttachGlobal/Host ->
 *   cudaErrorInvalidValue. Over capacity -> cudaErrorMemoryAllocation with *p = NULL.
 *   cudaFree(NULL) and cudaFreeHost(NULL) succeed without a driver call. Freeing anything that is
 *   not the start of a live block of the right family -> cudaErrorInvalidValue. Driver errors map
 *   1->1, 2->2, 3->3, 101->101, 201->201, 400->400 (cudaErrorInvalidResourceHandle),
 *   500->500 (cudaErrorSymbolNotFound), 712->712, 713->713, 801->801, others -> 999. Every
 *   failing call sets the calling thread's last error.
 *
 * No exported function calls another exported one: such a call goes through the PLT, where a
 * preloaded profiler would see it as a second, nested API call.
 */
#include "cuda.h"
#include "cuda_runtime_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#ifndef SIM_VERSION
#define SIM_VERSION 12040 /* the runtime's version; it asks the driver for this ABI */
#endif
#define ROUNDING 512      /* the driver's pitch alignment (cuMemAllocPitch_v2) */
#define PITCH_ELEMENT 4   /* element size passed to cuMemAllocPitch_v2 */

/* The driver functions, as the resolver returned them; NULL if it did not have one. */
static struct {
    __typeof__(cuGetProcAddress_v2) *get_proc;
    __typeof__(cuInit) *init;
    __typeof__(cuDriverGetVersion) *driver_version;
    __typeof__(cuDeviceGetCount) *device_count;
    __typeof__(cuDevicePrimaryCtxRetain) *ctx_retain;
    __typeof__(cuCtxSetCurrent) *ctx_set_current;
    __typeof__(cuCtxGetDevice) *ctx_get_device;
    __typeof__(cuCtxSynchronize) *ctx_synchronize;
    __typeof__(cuMemAlloc_v2) *mem_alloc;
    __typeof__(cuMemFree_v2) *mem_free;
    __typeof__(cuMemAllocAsync) *alloc_async, *alloc_async_ptsz;
    __typeof__(cuMemFreeAsync) *free_async, *free_async_ptsz;
    __typeof__(cuMemAllocFromPoolAsync) *alloc_pool, *alloc_pool_ptsz;
    __typeof__(cuDeviceGetDefaultMemPool) *default_pool;
    __typeof__(cuMemAllocManaged) *alloc_managed;
    __typeof__(cuMemAllocPitch_v2) *alloc_pitch;
    __typeof__(cuMemAllocHost_v2) *alloc_host;
    __typeof__(cuMemHostAlloc) *host_alloc;
    __typeof__(cuMemFreeHost) *free_host;
    __typeof__(cuMemHostRegister_v2) *host_register;
    __typeof__(cuMemHostUnregister) *host_unregister;
    __typeof__(cuMemGetInfo_v2) *mem_info;
    __typeof__(cuPointerGetAttribute) *pointer_attribute;
    __typeof__(cuStreamCreate) *stream_create;
    __typeof__(cuStreamDestroy) *stream_destroy;
} drv;

/* What to ask the resolver for: base name, flags, where the answer goes. */
static const struct {
    const char *name;
    cuuint64_t flags;
    void **slot;
} wanted[] = {
#define WANT(name, slot) {name, CU_GET_PROC_ADDRESS_DEFAULT, (void **)&drv.slot}
#define WANT_PTSZ(name, slot) {name, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, (void **)&drv.slot}
    WANT("cuInit", init),
    WANT("cuDriverGetVersion", driver_version),
    WANT("cuDeviceGetCount", device_count),
    WANT("cuDevicePrimaryCtxRetain", ctx_retain),
    WANT("cuCtxSetCurrent", ctx_set_current),
    WANT("cuCtxGetDevice", ctx_get_device),
    WANT("cuCtxSynchronize", ctx_synchronize),
    WANT("cuMemAlloc", mem_alloc),
    WANT("cuMemFree", mem_free),
    WANT("cuMemAllocAsync", alloc_async),
    WANT_PTSZ("cuMemAllocAsync", alloc_async_ptsz),
    WANT("cuMemFreeAsync", free_async),
    WANT_PTSZ("cuMemFreeAsync", free_async_ptsz),
    WANT("cuMemAllocFromPoolAsync", alloc_pool),
    WANT_PTSZ("cuMemAllocFromPoolAsync", alloc_pool_ptsz),
    WANT("cuDeviceGetDefaultMemPool", default_pool),
    WANT("cuMemAllocManaged", alloc_managed),
    WANT("cuMemAllocPitch", alloc_pitch),
    WANT("cuMemAllocHost", alloc_host),
    WANT("cuMemHostAlloc", host_alloc),
    WANT("cuMemFreeHost", free_host),
    WANT("cuMemHostRegister", host_register),
    WANT("cuMemHostUnregister", host_unregister),
    WANT("cuMemGetInfo", mem_info),
    WANT("cuPointerGetAttribute", pointer_attribute),
    WANT("cuStreamCreate", stream_create),
    WANT("cuStreamDestroy", stream_destroy),
#undef WANT
#undef WANT_PTSZ
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cudaError_t driver_status = cudaErrorInsufficientDriver; /* set once by load_driver */
static int driver_loaded;                                      /* libcuda and its resolver */

static __thread cudaError_t last_error = cudaSuccess;

/* ---- reaching the driver ------------------------------------------------------------------- */

static cudaError_t from_driver(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE:
        return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED:
        return cudaErrorInitializationError;
    case CUDA_ERROR_NO_DEVICE:
        return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE:
        return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT:
        return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE:
        return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND:
        return cudaErrorSymbolNotFound;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
        return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
        return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_NOT_SUPPORTED:
        return cudaErrorNotSupported;
    default:
        return cudaErrorUnknown;
    }
}

static void load_driver(void)
{
    typedef CUresult (*resolver_v1)(const char *, void **, int, cuuint64_t);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    void *self = NULL;
    void *v2 = dlsym(h, "cuGetProcAddress_v2");
    if (v2) {
        CUdriverProcAddressQueryResult st;
        ((__typeof__(cuGetProcAddress_v2) *)v2)("cuGetProcAddress", &self, SIM_VERSION, 0, &st);
    } else {
        void *v1 = dlsym(h, "cuGetProcAddress");
        if (v1)
            ((resolver_v1)v1)("cuGetProcAddress", &self, SIM_VERSION, 0);
    }
    if (!self)
        return; /* a driver too old for this runtime */
    /* The resolver's answer for itself is what the runtime uses from now on. */
    drv.get_proc = (__typeof__(cuGetProcAddress_v2) *)self;
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        CUdriverProcAddressQueryResult st;
        if (drv.get_proc(wanted[i].name, wanted[i].slot, SIM_VERSION, wanted[i].flags, &st) !=
            CUDA_SUCCESS)
            *wanted[i].slot = NULL;
    }
    driver_loaded = 1;
    if (!drv.init)
        return;
    driver_status = from_driver(drv.init(0));
}

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

/* The driver's result as the runtime reports it. */
static cudaError_t result(CUresult r)
{
    cudaError_t e = from_driver(r);
    return e == cudaSuccess ? e : fail(e);
}

static cudaError_t started(void)
{
    pthread_once(&once, load_driver);
    return driver_status;
}

/* Returns from the calling API unless the driver is loaded, initialised and has `fn`. */
#define REQUIRE(fn)                                                                                \
    do {                                                                                           \
        cudaError_t started_ = started();                                                          \
        if (started_ != cudaSuccess)                                                               \
            return fail(started_);                                                                 \
        if (drv.fn == NULL)                                                                        \
            return fail(cudaErrorCallRequiresNewerDriver);                                         \
    } while (0)

/* The driver writes a CUdeviceptr; the runtime hands out a void *. */
static cudaError_t to_pointer(CUresult r, CUdeviceptr d, void **p)
{
    *p = (void *)(uintptr_t)d;
    return result(r);
}

static size_t pitch_of(size_t width)
{
    return (width + ROUNDING - 1) & ~(size_t)(ROUNDING - 1);
}

/* ---- device memory ------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    REQUIRE(mem_alloc);
    if (devPtr == NULL)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = drv.mem_alloc(&d, size);
    return to_pointer(r, d, devPtr);
}

cudaError_t cudaFree(void *devPtr)
{
    REQUIRE(mem_free);
    if (devPtr == NULL)
        return cudaSuccess;
    return result(drv.mem_free((CUdeviceptr)(uintptr_t)devPtr));
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream)
{
    REQUIRE(alloc_async);
    if (devPtr == NULL)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = drv.alloc_async(&d, size, stream);
    return to_pointer(r, d, devPtr);
}

cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream)
{
    REQUIRE(alloc_async_ptsz);
    if (devPtr == NULL)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = drv.alloc_async_ptsz(&d, size, stream);
    return to_pointer(r, d, devPtr);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream)
{
    REQUIRE(free_async);
    /* NULL goes to the driver too: it still checks the stream. */
    return result(drv.free_async((CUdeviceptr)(uintptr_t)devPtr, stream));
}

cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream)
{
    REQUIRE(free_async_ptsz);
    return result(drv.free_async_ptsz((CUdeviceptr)(uintptr_t)devPtr, stream));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
    REQUIRE(default_pool);
    if (pool == NULL)
        return fail(cudaErrorInvalidValue);
    return result(drv.default_pool(pool, device));
}

cudaError_t cudaMallocFromPoolAsync(void **devPtr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream)
{
    REQUIRE(alloc_pool);
    if (devPtr == NULL)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = drv.alloc_pool(&d, size, pool, stream);
    return to_pointer(r, d, devPtr);
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void **devPtr, size_t size, cudaMemPool_t pool,
                                         cudaStream_t stream)
{
    REQUIRE(alloc_pool_ptsz);
    if (devPtr == NULL)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = drv.alloc_pool_ptsz(&d, size, pool, stream);
    return to_pointer(r, d, devPtr);
}

cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    REQUIRE(alloc_pitch);
    if (devPtr == NULL || pitch == NULL)
        return fail(cudaErrorInvalidValue);
    if (width == 0 || height == 0) {
        *devPtr = NULL;
        *pitch = pitch_of(width);
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = drv.alloc_pitch(&d, pitch, width, height, PITCH_ELEMENT);
    return to_pointer(r, d, devPtr);
}

cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    REQUIRE(alloc_pitch);
    if (pitchedDevPtr == NULL)
        return fail(cudaErrorInvalidValue);
    size_t rows;
    pitchedDevPtr->ptr = NULL;
    if (__builtin_mul_overflow(extent.height, extent.depth, &rows))
        return fail(cudaErrorMemoryAllocation);
    pitchedDevPtr->pitch = pitch_of(extent.width);
    pitchedDevPtr->xsize = extent.width;
    pitchedDevPtr->ysize = extent.height;
    if (extent.width == 0 || rows == 0)
        return cudaSuccess;
    CUdeviceptr d = 0;
    CUresult r = drv.alloc_pitch(&d, &pitchedDevPtr->pitch, extent.width, rows, PITCH_ELEMENT);
    return to_pointer(r, d, &pitchedDevPtr->ptr);
}

/* ---- managed and pinned host memory -------------------------------------------------------- */

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    REQUIRE(alloc_managed);
    if (devPtr == NULL)
        return fail(cudaErrorInvalidValue);
    CUdeviceptr d = 0;
    CUresult r = drv.alloc_managed(&d, size, flags); /* it rejects size 0 and bad flags */
    return to_pointer(r, d, devPtr);
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    REQUIRE(alloc_host);
    if (ptr == NULL)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    return result(drv.alloc_host(ptr, size));
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    REQUIRE(host_alloc);
    if (pHost == NULL)
        return fail(cudaErrorInvalidValue);
    const unsigned known = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
    if (flags & ~known) {
        *pHost = NULL;
        return fail(cudaErrorInvalidValue);
    }
    if (size == 0) {
        *pHost = NULL;
        return cudaSuccess;
    }
    return result(drv.host_alloc(pHost, size, flags)); /* the flag values are the driver's */
}

cudaError_t cudaFreeHost(void *ptr)
{
    REQUIRE(free_host);
    if (ptr == NULL)
        return cudaSuccess;
    return result(drv.free_host(ptr));
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    REQUIRE(host_register);
    return result(drv.host_register(ptr, size, flags)); /* the flag values are the driver's */
}

cudaError_t cudaHostUnregister(void *ptr)
{
    REQUIRE(host_unregister);
    return result(drv.host_unregister(ptr));
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    REQUIRE(mem_info);
    /* Callers pass NULL for the half they do not want; so may the driver's callers. */
    return result(drv.mem_info(free_bytes, total_bytes));
}

/* Memory the driver does not know is unregistered host memory, as CUDA 11+ reports it. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    REQUIRE(pointer_attribute);
    if (attributes == NULL)
        return fail(cudaErrorInvalidValue);
    struct cudaPointerAttributes a = {cudaMemoryTypeUnregistered, -1, NULL, (void *)ptr};
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    unsigned int type = 0, managed = 0;
    int device = -1;
    if (drv.pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) == CUDA_SUCCESS &&
        drv.pointer_attribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS &&
        drv.pointer_attribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == CUDA_SUCCESS) {
        a.device = device;
        a.devicePointer = (void *)ptr;
        if (managed) {
            a.type = cudaMemoryTypeManaged;
        } else if (type == CU_MEMORYTYPE_DEVICE) {
            a.type = cudaMemoryTypeDevice;
            a.hostPointer = NULL;
        } else {
            a.type = cudaMemoryTypeHost;
        }
    }
    *attributes = a;
    return cudaSuccess;
}

/* ---- devices and streams ------------------------------------------------------------------- */

cudaError_t cudaGetDevice(int *device)
{
    REQUIRE(ctx_get_device);
    if (device == NULL)
        return fail(cudaErrorInvalidValue);
    CUdevice d = 0;
    CUresult r = drv.ctx_get_device(&d);
    if (r == CUDA_SUCCESS)
        *device = d;
    return result(r);
}

cudaError_t cudaSetDevice(int device)
{
    REQUIRE(ctx_retain);
    if (drv.ctx_set_current == NULL)
        return fail(cudaErrorCallRequiresNewerDriver);
    CUcontext ctx;
    CUresult r = drv.ctx_retain(&ctx, device);
    if (r == CUDA_SUCCESS)
        r = drv.ctx_set_current(ctx);
    return result(r);
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (count == NULL)
        return fail(cudaErrorInvalidValue);
    cudaError_t s = started();
    if (s == cudaSuccess && drv.device_count == NULL)
        s = cudaErrorCallRequiresNewerDriver;
    if (s != cudaSuccess) {
        *count = 0;
        return fail(s);
    }
    return result(drv.device_count(count));
}

cudaError_t cudaDeviceSynchronize(void)
{
    REQUIRE(ctx_synchronize);
    return result(drv.ctx_synchronize());
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    REQUIRE(stream_create);
    if (pStream == NULL)
        return fail(cudaErrorInvalidValue);
    return result(drv.stream_create(pStream, CU_STREAM_DEFAULT));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    REQUIRE(stream_destroy);
    return result(drv.stream_destroy(stream));
}

/* ---- driver entry points ------------------------------------------------------------------- */

static cudaError_t entry_point(const char *symbol, void **funcPtr, int version,
                               unsigned long long flags,
                               cudaDriverEntryPointQueryResult *driverStatus)
{
    cudaError_t s = started();
    if (s != cudaSuccess)
        return fail(s);
    if (funcPtr == NULL)
        return fail(cudaErrorInvalidValue);
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    /* cudaEnable* flags have the values of the driver's CU_GET_PROC_ADDRESS_* flags. */
    CUresult r = drv.get_proc(symbol, funcPtr, version, flags, &st);
    if (driverStatus)
        *driverStatus = (cudaDriverEntryPointQueryResult)st;
    /* As the real header says: a symbol the driver lacks (or not at this version) is
     * cudaSuccess with a NULL pointer; only driverStatus tells. */
    if (r == CUDA_ERROR_NOT_FOUND) {
        *funcPtr = NULL;
        return cudaSuccess;
    }
    return result(r);
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, SIM_VERSION, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus);
}

/* ---- errors and versions ------------------------------------------------------------------- */

static const struct {
    cudaError_t code;
    const char *name;
    const char *text; /* the real runtime's wording */
} error_table[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorCallRequiresNewerDriver, "cudaErrorCallRequiresNewerDriver",
     "API call is not supported in the installed CUDA driver"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

#define UNRECOGNIZED "unrecognized error code"

const char *cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == error)
            return error_table[i].text;
    return UNRECOGNIZED;
}

const char *cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == error)
            return error_table[i].name;
    return UNRECOGNIZED;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (runtimeVersion == NULL)
        return fail(cudaErrorInvalidValue);
    *runtimeVersion = SIM_VERSION;
    return cudaSuccess;
}

/* The driver's version, or 0 when there is no driver (not an error, as in the real runtime). */
cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return fail(cudaErrorInvalidValue);
    (void)started();
    if (!driver_loaded || drv.driver_version == NULL) {
        *driverVersion = 0;
        return cudaSuccess;
    }
    return result(drv.driver_version(driverVersion));
}
