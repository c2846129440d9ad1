/*
 * hip_sim.c: a simulated HIP runtime, built as libamdhip64.so.6, that stands in for an AMD GPU in
 * gpumemprof's tests. Programs link it with -lamdhip64 as they link ROCm's runtime (a direct
 * dependency, so a preloaded profiler's exports interpose). It shares the CUDA driver's memory
 * model (sim_memory.c, sim_vmm.c) but has its own state, addresses and variables.
 *
 * Environment, read once on the first call (decimal numbers; empty means unset):
 *   SIMHIP_CAPACITY       bytes of memory per device   default 17179869184 (16 GiB), at most 1 TiB
 *   SIMHIP_DEVICES        number of devices            default 1, 1..64
 *   SIMHIP_HOST_CAPACITY  bytes of pinned host memory  default 68719476736 (64 GiB)
 * A malformed value is reported once on stderr and every call that needs the runtime then fails
 * with hipErrorNotInitialized (3).
 *
 * Memory model (sim_memory.h), as the CUDA driver's with other addresses:
 *   - Every size is rounded up to 512 bytes; capacity is charged the rounded size.
 *   - Device memory (hipMalloc, hipMallocAsync, hipMallocFromPoolAsync, hipExtMallocWithFlags) is
 *     fake: device d hands out addresses from 0x600000000000 + d * 1 TiB upwards, reusing the most
 *     recently freed address of the same rounded size.
 *   - Managed memory (charged to the device) and pinned host memory (hipHostMalloc, charged to
 *     SIMHIP_HOST_CAPACITY) are real, 4096-aligned host memory.
 *   - VMM: reservations from [0x640000000000, 0x660000000000); physical handles are
 *     (hipMemGenericAllocationHandle_t)(0x4b000000 + 0x10 * n); granularity 2 MiB; the rules of
 *     sim_vmm.c (and of cuda_vmm.c's comment, with HIP names).
 *   - The current device is per thread (default 0). Streams are 0x5f0000000000 + 0x100 * n; the
 *     default pool of device d is 0x2000 + d and allocates on d. Stream-ordered calls take effect
 *     immediately.
 *
 * Contract rules kept here (tests/sim_contract.rs checks them):
 *   NULL out-pointer -> hipErrorInvalidValue (1). Size 0 from hipMalloc/Async/FromPool/
 *   hipExtMallocWithFlags/hipHostMalloc -> hipSuccess with a NULL pointer, nothing charged.
 *   hipMallocManaged with size 0 or flags other than hipMemAttachGlobal/Host -> 1. Over capacity ->
 *   hipErrorOutOfMemory (2) with *ptr = NULL. hipFree(NULL), hipHostFree(NULL) and
 *   hipFreeAsync(NULL) succeed. Freeing anything that is not the start of a live block of the right
 *   family (hipFree/hipFreeAsync: device, managed; hipHostFree: pinned) -> 1, nothing changes.
 *   Bad stream -> hipErrorInvalidHandle (400); bad device -> hipErrorInvalidDevice (101); bad pool
 *   -> 1. VMM: bad argument or range -> 1, unknown or released handle -> 400. Every failing call
 *   sets the calling thread's last error (hipGetLastError returns and clears it).
 *
 * Built with -fvisibility=hidden (only SIM_EXPORT definitions are exported) and -Wl,-Bsymbolic;
 * no exported function calls another (they share static helpers).
 */
#include "hip/hip_runtime_api.h"
#include "sim_memory.h"

#include <pthread.h>
#include <stdint.h>

#define SIM_EXPORT __attribute__((visibility("default")))
#define GiB (1ULL << 30)
#define HIP_VERSION_SIM 60241133 /* HIP 6.2.41133: major * 10^7 + minor * 10^5 + patch */

static const struct sim_layout layout = {
    .tag = "simhip",
    .capacity_env = "SIMHIP_CAPACITY",
    .devices_env = "SIMHIP_DEVICES",
    .host_capacity_env = "SIMHIP_HOST_CAPACITY",
    .context_env = NULL,
    .consequence = "HIP calls will fail with hipErrorNotInitialized",
    .default_capacity = 16 * GiB,
    .default_host_capacity = 64 * GiB,
    .device_base = 0x600000000000ULL,
    .legacy_base = 0,
    .legacy_end = 0,
    .vmm_base = 0x640000000000ULL,
    .vmm_end = 0x660000000000ULL,
    .stream_base = 0x5f0000000000ULL,
    .pool_base = 0x2000,
    .handle_base = 0x4b000000ULL,
};

static struct sim_memory mem = SIM_MEMORY_INIT(&layout);
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ok; /* configuration valid; set inside `once` */

static __thread hipError_t last_error = hipSuccess;
static __thread int current_device = 0;

/* ---- helpers (none of them exported) ------------------------------------------------------- */

static void fork_prepare(void) { pthread_mutex_lock(&mem.lock); }
static void fork_done(void) { pthread_mutex_unlock(&mem.lock); }

static void configure(void)
{
    if (sim_memory_configure(&mem) != 0)
        return;
    pthread_atfork(fork_prepare, fork_done, fork_done);
    ok = 1;
}

static hipError_t fail(hipError_t e)
{
    last_error = e;
    return e;
}

/* A model status as HIP reports it (the values are shared), setting the last error. */
static hipError_t result(enum sim_status s)
{
    return s == SIM_OK ? hipSuccess : fail((hipError_t)s);
}

#define REQUIRE_STARTED()                                                                          \
    do {                                                                                           \
        pthread_once(&once, configure);                                                            \
        if (!ok)                                                                                   \
            return fail(hipErrorNotInitialized);                                                   \
    } while (0)

static int valid_device(int d)
{
    return d >= 0 && d < mem.devices;
}

static int stream_ok(hipStream_t s)
{
    return s == NULL || s == hipStreamPerThread || sim_stream_live(&mem, (uintptr_t)s);
}

/* Device memory: size 0 -> NULL and success. */
static hipError_t device_alloc(void **p, size_t size, int device)
{
    if (size == 0) {
        *p = NULL;
        return hipSuccess;
    }
    uintptr_t a;
    enum sim_status s = sim_device_alloc(&mem, device, size, 0, &a);
    *p = (void *)a;
    return result(s);
}

static hipError_t release(void *p, unsigned kinds)
{
    return result(sim_free(&mem, (uintptr_t)p, kinds));
}

#define FREES_DEVICE_OR_MANAGED (SIM_FREES(SIM_DEVICE) | SIM_FREES(SIM_MANAGED))

/* ---- device memory ------------------------------------------------------------------------- */

SIM_EXPORT hipError_t hipMalloc(void **ptr, size_t size)
{
    REQUIRE_STARTED();
    if (ptr == NULL)
        return fail(hipErrorInvalidValue);
    return device_alloc(ptr, size, current_device);
}

SIM_EXPORT hipError_t hipExtMallocWithFlags(void **ptr, size_t sizeBytes, unsigned int flags)
{
    REQUIRE_STARTED();
    if (ptr == NULL)
        return fail(hipErrorInvalidValue);
    if (flags > hipDeviceMallocContiguous) {
        *ptr = NULL;
        return fail(hipErrorInvalidValue);
    }
    return device_alloc(ptr, sizeBytes, current_device);
}

SIM_EXPORT hipError_t hipFree(void *ptr)
{
    REQUIRE_STARTED();
    return release(ptr, FREES_DEVICE_OR_MANAGED);
}

SIM_EXPORT hipError_t hipMallocAsync(void **dev_ptr, size_t size, hipStream_t stream)
{
    REQUIRE_STARTED();
    if (dev_ptr == NULL)
        return fail(hipErrorInvalidValue);
    if (!stream_ok(stream)) {
        *dev_ptr = NULL;
        return fail(hipErrorInvalidHandle);
    }
    return device_alloc(dev_ptr, size, current_device);
}

SIM_EXPORT hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream)
{
    REQUIRE_STARTED();
    if (!stream_ok(stream))
        return fail(hipErrorInvalidHandle);
    return release(dev_ptr, FREES_DEVICE_OR_MANAGED);
}

SIM_EXPORT hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t *mem_pool, int device)
{
    REQUIRE_STARTED();
    if (mem_pool == NULL)
        return fail(hipErrorInvalidValue);
    if (!valid_device(device))
        return fail(hipErrorInvalidDevice);
    *mem_pool = (hipMemPool_t)sim_pool_of(&mem, device);
    return hipSuccess;
}

SIM_EXPORT hipError_t hipMallocFromPoolAsync(void **dev_ptr, size_t size, hipMemPool_t mem_pool,
                                             hipStream_t stream)
{
    REQUIRE_STARTED();
    if (dev_ptr == NULL)
        return fail(hipErrorInvalidValue);
    *dev_ptr = NULL;
    int device = sim_pool_device(&mem, (uintptr_t)mem_pool);
    if (device < 0)
        return fail(hipErrorInvalidValue);
    if (!stream_ok(stream))
        return fail(hipErrorInvalidHandle);
    return device_alloc(dev_ptr, size, device); /* the pool, not the current device, decides */
}

/* ---- managed and pinned host memory -------------------------------------------------------- */

SIM_EXPORT hipError_t hipMallocManaged(void **dev_ptr, size_t size, unsigned int flags)
{
    REQUIRE_STARTED();
    if (dev_ptr == NULL)
        return fail(hipErrorInvalidValue);
    if (size == 0 || (flags != hipMemAttachGlobal && flags != hipMemAttachHost)) {
        *dev_ptr = NULL;
        return fail(hipErrorInvalidValue);
    }
    return result(sim_host_alloc(&mem, SIM_MANAGED, current_device, size, dev_ptr));
}

SIM_EXPORT hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
    REQUIRE_STARTED();
    if (ptr == NULL)
        return fail(hipErrorInvalidValue);
    const unsigned known = hipHostMallocPortable | hipHostMallocMapped |
                           hipHostMallocWriteCombined | hipHostMallocNumaUser |
                           hipHostMallocCoherent | hipHostMallocNonCoherent;
    if ((flags & ~known) ||
        ((flags & hipHostMallocCoherent) && (flags & hipHostMallocNonCoherent))) {
        *ptr = NULL;
        return fail(hipErrorInvalidValue);
    }
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    return result(sim_host_alloc(&mem, SIM_PINNED_HOST, current_device, size, ptr));
}

SIM_EXPORT hipError_t hipHostFree(void *ptr)
{
    REQUIRE_STARTED();
    return release(ptr, SIM_FREES(SIM_PINNED_HOST));
}

SIM_EXPORT hipError_t hipMemGetInfo(size_t *free, size_t *total)
{
    REQUIRE_STARTED();
    /* Either half may be NULL, as with CUDA. */
    sim_mem_info(&mem, current_device, free, total);
    return hipSuccess;
}

/* Memory the runtime does not know is unregistered host memory (ROCm 6, as CUDA 11+). */
SIM_EXPORT hipError_t hipPointerGetAttributes(hipPointerAttribute_t *attributes, const void *ptr)
{
    REQUIRE_STARTED();
    if (attributes == NULL || ptr == NULL)
        return fail(hipErrorInvalidValue);
    hipPointerAttribute_t a = {hipMemoryTypeUnregistered, -1, NULL, (void *)ptr, 0, 0};
    struct sim_pointer p;
    if (sim_pointer_query(&mem, (uintptr_t)ptr, &p) == SIM_OK) {
        a.device = p.device;
        a.devicePointer = (void *)ptr;
        if (p.kind == SIM_MANAGED) {
            a.type = hipMemoryTypeManaged;
            a.isManaged = 1;
        } else if (p.kind == SIM_PINNED_HOST || p.kind == SIM_REGISTERED_HOST) {
            a.type = hipMemoryTypeHost;
        } else {
            a.type = hipMemoryTypeDevice;
            a.hostPointer = NULL;
        }
    }
    *attributes = a;
    return hipSuccess;
}

/* ---- virtual memory management ------------------------------------------------------------- */

static hipError_t check_prop(const hipMemAllocationProp *prop)
{
    if (prop == NULL || prop->type != hipMemAllocationTypePinned ||
        prop->location.type != hipMemLocationTypeDevice)
        return hipErrorInvalidValue;
    return valid_device(prop->location.id) ? hipSuccess : hipErrorInvalidDevice;
}

SIM_EXPORT hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size,
                                   const hipMemAllocationProp *prop, unsigned long long flags)
{
    REQUIRE_STARTED();
    if (handle == NULL)
        return fail(hipErrorInvalidValue);
    *handle = NULL;
    hipError_t e = check_prop(prop);
    if (e != hipSuccess)
        return fail(e);
    if (flags != 0)
        return fail(hipErrorInvalidValue);
    uint64_t h;
    enum sim_status s = sim_vmm_create(&mem, size, prop->location.id, prop, sizeof *prop, &h);
    *handle = (hipMemGenericAllocationHandle_t)(uintptr_t)h;
    return result(s);
}

SIM_EXPORT hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle)
{
    REQUIRE_STARTED();
    return result(sim_vmm_release(&mem, (uintptr_t)handle));
}

SIM_EXPORT hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr,
                                           unsigned long long flags)
{
    REQUIRE_STARTED();
    if (ptr == NULL)
        return fail(hipErrorInvalidValue);
    *ptr = NULL;
    if (flags != 0)
        return fail(hipErrorInvalidValue);
    uintptr_t base;
    enum sim_status s = sim_vmm_reserve(&mem, size, alignment, (uintptr_t)addr, &base);
    *ptr = (void *)base;
    return result(s);
}

SIM_EXPORT hipError_t hipMemAddressFree(void *devPtr, size_t size)
{
    REQUIRE_STARTED();
    return result(sim_vmm_free(&mem, (uintptr_t)devPtr, size));
}

SIM_EXPORT hipError_t hipMemMap(void *ptr, size_t size, size_t offset,
                                hipMemGenericAllocationHandle_t handle, unsigned long long flags)
{
    REQUIRE_STARTED();
    if (flags != 0)
        return fail(hipErrorInvalidValue);
    return result(sim_vmm_map(&mem, (uintptr_t)ptr, size, offset, (uintptr_t)handle));
}

SIM_EXPORT hipError_t hipMemUnmap(void *ptr, size_t size)
{
    REQUIRE_STARTED();
    return result(sim_vmm_unmap(&mem, (uintptr_t)ptr, size));
}

SIM_EXPORT hipError_t hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc,
                                      size_t count)
{
    REQUIRE_STARTED();
    if (desc == NULL || count == 0)
        return fail(hipErrorInvalidValue);
    for (size_t i = 0; i < count; i++) {
        hipMemAccessFlags f = desc[i].flags;
        if (desc[i].location.type != hipMemLocationTypeDevice ||
            (f != hipMemAccessFlagsProtNone && f != hipMemAccessFlagsProtRead &&
             f != hipMemAccessFlagsProtReadWrite))
            return fail(hipErrorInvalidValue);
        if (!valid_device(desc[i].location.id))
            return fail(hipErrorInvalidDevice);
    }
    return result(sim_vmm_check_mapped(&mem, (uintptr_t)ptr, size));
}

SIM_EXPORT hipError_t hipMemGetAllocationPropertiesFromHandle(
    hipMemAllocationProp *prop, hipMemGenericAllocationHandle_t handle)
{
    REQUIRE_STARTED();
    if (prop == NULL)
        return fail(hipErrorInvalidValue);
    return result(sim_vmm_properties(&mem, (uintptr_t)handle, prop, sizeof *prop));
}

SIM_EXPORT hipError_t hipMemGetAllocationGranularity(size_t *granularity,
                                                     const hipMemAllocationProp *prop,
                                                     hipMemAllocationGranularity_flags option)
{
    REQUIRE_STARTED();
    if (granularity == NULL || (option != hipMemAllocationGranularityMinimum &&
                                option != hipMemAllocationGranularityRecommended))
        return fail(hipErrorInvalidValue);
    hipError_t e = check_prop(prop);
    if (e != hipSuccess)
        return fail(e);
    *granularity = SIM_VMM_GRANULARITY;
    return hipSuccess;
}

/* ---- devices and streams ------------------------------------------------------------------- */

SIM_EXPORT hipError_t hipInit(unsigned int flags)
{
    REQUIRE_STARTED();
    return flags == 0 ? hipSuccess : fail(hipErrorInvalidValue);
}

SIM_EXPORT hipError_t hipGetDevice(int *deviceId)
{
    REQUIRE_STARTED();
    if (deviceId == NULL)
        return fail(hipErrorInvalidValue);
    *deviceId = current_device;
    return hipSuccess;
}

SIM_EXPORT hipError_t hipSetDevice(int deviceId)
{
    REQUIRE_STARTED();
    if (!valid_device(deviceId))
        return fail(hipErrorInvalidDevice);
    current_device = deviceId;
    return hipSuccess;
}

SIM_EXPORT hipError_t hipGetDeviceCount(int *count)
{
    if (count == NULL)
        return fail(hipErrorInvalidValue);
    pthread_once(&once, configure);
    if (!ok) {
        *count = 0;
        return fail(hipErrorNotInitialized);
    }
    *count = mem.devices;
    return hipSuccess;
}

SIM_EXPORT hipError_t hipDeviceSynchronize(void)
{
    REQUIRE_STARTED();
    return hipSuccess; /* nothing is ever in flight */
}

SIM_EXPORT hipError_t hipStreamCreate(hipStream_t *stream)
{
    REQUIRE_STARTED();
    if (stream == NULL)
        return fail(hipErrorInvalidValue);
    uintptr_t h;
    enum sim_status s = sim_stream_create(&mem, &h);
    if (s == SIM_OK)
        *stream = (hipStream_t)h;
    return result(s);
}

SIM_EXPORT hipError_t hipStreamDestroy(hipStream_t stream)
{
    REQUIRE_STARTED();
    return result(sim_stream_destroy(&mem, (uintptr_t)stream));
}

/* ---- errors and versions ------------------------------------------------------------------- */

static const struct {
    hipError_t code;
    const char *name;
    const char *text;
} error_table[] = {
    {hipSuccess, "hipSuccess", "no error"},
    {hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
    {hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
    {hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
    {hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
    {hipErrorInvalidContext, "hipErrorInvalidContext", "invalid device context"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
    {hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
    {hipErrorHostMemoryAlreadyRegistered, "hipErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {hipErrorHostMemoryNotRegistered, "hipErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
    {hipErrorUnknown, "hipErrorUnknown", "unknown error"},
};

SIM_EXPORT const char *hipGetErrorString(hipError_t hipError)
{
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == hipError)
            return error_table[i].text;
    return "unknown error";
}

SIM_EXPORT const char *hipGetErrorName(hipError_t hip_error)
{
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == hip_error)
            return error_table[i].name;
    return "hipErrorUnknown";
}

SIM_EXPORT hipError_t hipGetLastError(void)
{
    hipError_t e = last_error;
    last_error = hipSuccess;
    return e;
}

SIM_EXPORT hipError_t hipPeekAtLastError(void)
{
    return last_error;
}

SIM_EXPORT hipError_t hipRuntimeGetVersion(int *runtimeVersion)
{
    if (runtimeVersion == NULL)
        return fail(hipErrorInvalidValue);
    *runtimeVersion = HIP_VERSION_SIM;
    return hipSuccess;
}
