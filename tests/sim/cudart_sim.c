/*
 * cudart_sim.c: a simulated CUDA runtime, built as libcudart.so.12, that stands in for the GPU in
 * gpumemprof's tests. Programs link it with -lcudart exactly as they would link the real runtime,
 * and every exported cuda* symbol is versioned cudaMalloc@@libcudart.so.12 like the real one
 * (libcudart.map), so a profiler preloaded in front of it meets the same symbols and the same
 * contract: out-parameters, error codes, per-thread last error and current device.
 *
 * Environment, read once on the first call (decimal numbers; empty means unset):
 *   SIMCUDA_CAPACITY       bytes of memory per device   default 17179869184 (16 GiB), at most 1 TiB
 *   SIMCUDA_DEVICES        number of devices            default 1, 1..64
 *   SIMCUDA_HOST_CAPACITY  bytes of pinned host memory  default 68719476736 (64 GiB)
 * A malformed value is reported once on stderr and every call that needs the runtime then fails
 * with cudaErrorInitializationError (3), as a real runtime does when it cannot start.
 *
 * Memory model:
 *   - Every size is rounded up to 512 bytes; capacity is charged the rounded size.
 *   - Device memory (cudaMalloc, the async/pool variants, cudaMallocPitch, cudaMalloc3D) is fake:
 *     addresses are never dereferenced. Device d hands out addresses from 0x700000000000 +
 *     d * 0x10000000000 upwards (a 1 TiB window each); a freed block goes on a per-size stack and
 *     the next allocation of the same rounded size gets the most recently freed address back.
 *   - Managed memory (charged to the current device) and pinned host memory (charged to
 *     SIMCUDA_HOST_CAPACITY) are real, 4096-aligned host memory, because programs touch it.
 *   - Stream-ordered calls take effect immediately; streams are opaque numbered handles.
 *
 * Contract rules kept here (tests/sim_contract.rs checks them):
 *   NULL out-pointer -> cudaErrorInvalidValue. Size 0 from cudaMalloc/Async/FromPool/Pitch/3D/
 *   Host/HostAlloc -> cudaSuccess with a NULL pointer, nothing charged. cudaMallocManaged with
 *   size 0 or flags other than cudaMemAttachGlobal/Host -> cudaErrorInvalidValue. Over capacity ->
 *   cudaErrorMemoryAllocation with *p = NULL. cudaFree(NULL) and cudaFreeHost(NULL) succeed.
 *   Freeing anything that is not the start of a live block of the right family (never allocated,
 *   double free, an interior pointer, pinned memory through cudaFree, device memory through
 *   cudaFreeHost) -> cudaErrorInvalidValue and nothing changes. Every failing call sets the
 *   calling thread's last error.
 *
 * No exported function calls another exported one: such a call goes through the PLT, where a
 * preloaded profiler would see it as a second, nested API call.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */

#include "cuda_runtime_api.h"
#include "sim_tables.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_VERSION 12040             /* reported as both runtime and driver: CUDA 12.4 */
#define ROUNDING 512                  /* allocation granularity, a power of two */
#define HOST_ALIGN 4096               /* managed/pinned memory is page aligned, as real */
#define DEVICE_BASE 0x700000000000ULL /* first fake address of device 0 */
#define DEVICE_WINDOW 0x10000000000ULL /* 1 TiB of fake address space per device */
#define MAX_DEVICES 64                /* 64 windows end at 0x740000000000, below the libraries */
#define POOL_BASE 0x1000              /* default pool of device d is (cudaMemPool_t)(0x1000 + d) */
#define STREAM_BASE 0x5e0000000000ULL /* stream n is STREAM_BASE + n * STREAM_STEP */
#define STREAM_STEP 0x100

#define DEFAULT_CAPACITY 17179869184ULL      /* 16 GiB */
#define DEFAULT_HOST_CAPACITY 68719476736ULL /* 64 GiB */

struct device_state {
    size_t used;                /* rounded bytes of device + managed memory live on it */
    uintptr_t next;             /* bump pointer: next never-used fake address */
    struct sim_free_lists free; /* freed fake addresses by rounded size */
};

static struct {
    pthread_once_t once;
    int ok; /* configuration was valid */
    size_t capacity, host_capacity;
    int devices;

    pthread_mutex_t lock; /* guards everything below */
    struct device_state dev[MAX_DEVICES];
    size_t host_used;
    struct sim_live_table live;
    uintptr_t *streams; /* live stream handles, unordered */
    size_t n_streams, streams_cap;
    uintptr_t streams_made;
} sim = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static __thread cudaError_t last_error = cudaSuccess;
static __thread int current_device = 0;

/* ---- configuration ------------------------------------------------------------------------- */

/* Reads one decimal variable into *out; -1 (after saying why on stderr) if it is malformed. */
static int env_number(const char *name, unsigned long long def, unsigned long long min,
                      unsigned long long max, unsigned long long *out)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    /* strtoull would accept leading blanks and a minus sign: demand digits only. */
    if (!isdigit((unsigned char)s[0]) || *end != '\0' || errno != 0 || v < min || v > max) {
        fprintf(stderr,
                "simcuda: %s=\"%s\" is not a decimal number in [%llu, %llu]; "
                "CUDA calls will fail with cudaErrorInitializationError\n",
                name, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* fork() while another thread holds the lock would leave the child's copy locked forever:
 * hold it across fork so both sides start with it free. (A real runtime refuses to work in
 * the child of an initialised parent; the simulator keeps working, which fork tests need.) */
static void fork_prepare(void) { pthread_mutex_lock(&sim.lock); }
static void fork_done(void) { pthread_mutex_unlock(&sim.lock); }

static void load_config(void)
{
    unsigned long long capacity, devices, host_capacity;
    int bad = 0;
    bad |= env_number("SIMCUDA_CAPACITY", DEFAULT_CAPACITY, 0, DEVICE_WINDOW, &capacity);
    bad |= env_number("SIMCUDA_DEVICES", 1, 1, MAX_DEVICES, &devices);
    bad |= env_number("SIMCUDA_HOST_CAPACITY", DEFAULT_HOST_CAPACITY, 0, SIZE_MAX, &host_capacity);
    if (bad)
        return;
    sim.capacity = (size_t)capacity;
    sim.devices = (int)devices;
    sim.host_capacity = (size_t)host_capacity;
    for (int d = 0; d < sim.devices; d++)
        sim.dev[d].next = (uintptr_t)(DEVICE_BASE + (unsigned long long)d * DEVICE_WINDOW);
    pthread_atfork(fork_prepare, fork_done, fork_done);
    sim.ok = 1;
}

/* ---- helpers (none of them exported) ------------------------------------------------------- */

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

static int started(void)
{
    pthread_once(&sim.once, load_config);
    return sim.ok;
}

#define REQUIRE_STARTED()                                                                          \
    do {                                                                                           \
        if (!started())                                                                            \
            return fail(cudaErrorInitializationError);                                             \
    } while (0)

/* Rounds n up to the allocation granularity; -1 if that overflows. */
static int round_up(size_t n, size_t *out)
{
    if (n > SIZE_MAX - (ROUNDING - 1))
        return -1;
    *out = (n + ROUNDING - 1) & ~(size_t)(ROUNDING - 1);
    return 0;
}

static int stream_is_live_locked(cudaStream_t s)
{
    uintptr_t h = (uintptr_t)s;
    for (size_t i = 0; i < sim.n_streams; i++)
        if (sim.streams[i] == h)
            return 1;
    return 0;
}

/* NULL, the legacy and per-thread handles, and live created streams are valid. */
static int stream_ok(cudaStream_t s)
{
    if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread)
        return 1;
    pthread_mutex_lock(&sim.lock);
    int ok = stream_is_live_locked(s);
    pthread_mutex_unlock(&sim.lock);
    return ok;
}

/* Fake device memory: `size` is non-zero and p non-NULL. */
static cudaError_t device_alloc(void **p, size_t size, int device)
{
    size_t rounded;
    if (round_up(size, &rounded) != 0) {
        *p = NULL;
        return fail(cudaErrorMemoryAllocation);
    }
    struct device_state *d = &sim.dev[device];
    uintptr_t window_end =
        (uintptr_t)(DEVICE_BASE + (unsigned long long)(device + 1) * DEVICE_WINDOW);
    cudaError_t rc = cudaSuccess;
    uintptr_t addr = 0;

    pthread_mutex_lock(&sim.lock);
    if (rounded > sim.capacity - d->used) {
        rc = cudaErrorMemoryAllocation;
    } else {
        addr = sim_free_pop(&d->free, rounded);
        int fresh = addr == 0;
        /* Sizes are never coalesced, so churn through many distinct sizes can exhaust the
         * window before the capacity: that is fragmentation, reported as out of memory. */
        if (fresh && rounded > window_end - d->next)
            rc = cudaErrorMemoryAllocation;
        else if (fresh)
            addr = d->next;
        if (rc == cudaSuccess) {
            struct sim_block b = {addr, rounded, SIM_DEVICE, device};
            if (sim_live_insert(&sim.live, b) != 0) {
                rc = cudaErrorMemoryAllocation;
                if (!fresh)
                    (void)sim_free_push(&d->free, rounded, addr); /* had room a moment ago */
            } else {
                if (fresh)
                    d->next += rounded;
                d->used += rounded;
            }
        }
    }
    pthread_mutex_unlock(&sim.lock);

    if (rc != cudaSuccess) {
        *p = NULL;
        return fail(rc);
    }
    *p = (void *)addr;
    return cudaSuccess;
}

/* Real host memory, managed (charged to `device`) or pinned (device -1): size non-zero. */
static cudaError_t host_alloc(void **p, size_t size, int kind, int device)
{
    size_t rounded;
    if (round_up(size, &rounded) != 0) {
        *p = NULL;
        return fail(cudaErrorMemoryAllocation);
    }
    size_t *used = kind == SIM_MANAGED ? &sim.dev[device].used : &sim.host_used;
    size_t capacity = kind == SIM_MANAGED ? sim.capacity : sim.host_capacity;
    cudaError_t rc = cudaErrorMemoryAllocation;
    void *mem = NULL;

    pthread_mutex_lock(&sim.lock);
    if (rounded <= capacity - *used && posix_memalign(&mem, HOST_ALIGN, rounded) == 0) {
        struct sim_block b = {(uintptr_t)mem, rounded, kind, device};
        if (sim_live_insert(&sim.live, b) == 0) {
            *used += rounded;
            rc = cudaSuccess;
        } else {
            free(mem);
            mem = NULL;
        }
    }
    pthread_mutex_unlock(&sim.lock);

    *p = mem;
    return rc == cudaSuccess ? cudaSuccess : fail(rc);
}

#define FREES_DEVICE (1u << SIM_DEVICE)
#define FREES_MANAGED (1u << SIM_MANAGED)
#define FREES_PINNED_HOST (1u << SIM_PINNED_HOST)

/* Frees the live block starting at p if its kind is in `kinds` (a FREES_* mask). */
static cudaError_t release(void *p, unsigned kinds)
{
    if (p == NULL)
        return cudaSuccess;
    pthread_mutex_lock(&sim.lock);
    struct sim_block *slot = sim_live_find(&sim.live, (uintptr_t)p);
    if (!slot || !(kinds & (1u << slot->kind))) {
        pthread_mutex_unlock(&sim.lock);
        return fail(cudaErrorInvalidValue);
    }
    struct sim_block b = *slot;
    sim_live_remove(&sim.live, slot);
    if (b.kind == SIM_DEVICE) {
        sim.dev[b.device].used -= b.size;
        /* On failure the fake address is just never handed out again. */
        (void)sim_free_push(&sim.dev[b.device].free, b.size, b.ptr);
    } else if (b.kind == SIM_MANAGED) {
        sim.dev[b.device].used -= b.size;
        free(p);
    } else {
        sim.host_used -= b.size;
        free(p);
    }
    pthread_mutex_unlock(&sim.lock);
    return cudaSuccess;
}

/* Shared body of cudaMallocAsync and cudaMallocAsync_ptsz. */
static cudaError_t malloc_async(void **p, size_t size, cudaStream_t stream)
{
    REQUIRE_STARTED();
    if (p == NULL)
        return fail(cudaErrorInvalidValue);
    if (!stream_ok(stream)) {
        *p = NULL;
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (size == 0) {
        *p = NULL;
        return cudaSuccess;
    }
    return device_alloc(p, size, current_device);
}

/* Shared body of cudaFreeAsync and cudaFreeAsync_ptsz: stream-ordered frees are immediate. */
static cudaError_t free_async(void *p, cudaStream_t stream)
{
    REQUIRE_STARTED();
    if (!stream_ok(stream))
        return fail(cudaErrorInvalidResourceHandle);
    return release(p, FREES_DEVICE);
}

/* Bytes of a pitched allocation: rows rounded to the granularity. -1 on overflow. */
static int pitched_bytes(size_t width, size_t rows, size_t *pitch, size_t *bytes)
{
    if (round_up(width, pitch) != 0)
        return -1;
    return __builtin_mul_overflow(*pitch, rows, bytes) ? -1 : 0;
}

/* ---- device memory ------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    REQUIRE_STARTED();
    if (devPtr == NULL)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    return device_alloc(devPtr, size, current_device);
}

cudaError_t cudaFree(void *devPtr)
{
    REQUIRE_STARTED();
    return release(devPtr, FREES_DEVICE | FREES_MANAGED);
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream)
{
    return malloc_async(devPtr, size, stream);
}

cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream)
{
    return malloc_async(devPtr, size, stream);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream)
{
    return free_async(devPtr, stream);
}

cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream)
{
    return free_async(devPtr, stream);
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
    REQUIRE_STARTED();
    if (pool == NULL)
        return fail(cudaErrorInvalidValue);
    if (device < 0 || device >= sim.devices)
        return fail(cudaErrorInvalidDevice);
    *pool = (cudaMemPool_t)(uintptr_t)(POOL_BASE + device);
    return cudaSuccess;
}

cudaError_t cudaMallocFromPoolAsync(void **devPtr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream)
{
    REQUIRE_STARTED();
    if (devPtr == NULL)
        return fail(cudaErrorInvalidValue);
    /* Only the default pools exist; an allocation lands on the pool's device, whatever the
     * current device is. */
    uintptr_t v = (uintptr_t)pool;
    if (v < POOL_BASE || v >= POOL_BASE + (uintptr_t)sim.devices) {
        *devPtr = NULL;
        return fail(cudaErrorInvalidValue);
    }
    if (!stream_ok(stream)) {
        *devPtr = NULL;
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    return device_alloc(devPtr, size, (int)(v - POOL_BASE));
}

cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    REQUIRE_STARTED();
    if (devPtr == NULL || pitch == NULL)
        return fail(cudaErrorInvalidValue);
    size_t bytes;
    if (pitched_bytes(width, height, pitch, &bytes) != 0) {
        *devPtr = NULL;
        return fail(cudaErrorMemoryAllocation);
    }
    if (bytes == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    return device_alloc(devPtr, bytes, current_device);
}

cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    REQUIRE_STARTED();
    if (pitchedDevPtr == NULL)
        return fail(cudaErrorInvalidValue);
    size_t rows, pitch, bytes;
    pitchedDevPtr->ptr = NULL;
    if (__builtin_mul_overflow(extent.height, extent.depth, &rows) ||
        pitched_bytes(extent.width, rows, &pitch, &bytes) != 0)
        return fail(cudaErrorMemoryAllocation);
    pitchedDevPtr->pitch = pitch;
    pitchedDevPtr->xsize = extent.width;
    pitchedDevPtr->ysize = extent.height;
    if (bytes == 0)
        return cudaSuccess;
    return device_alloc(&pitchedDevPtr->ptr, bytes, current_device);
}

/* ---- managed and pinned host memory -------------------------------------------------------- */

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    REQUIRE_STARTED();
    if (devPtr == NULL)
        return fail(cudaErrorInvalidValue);
    if (size == 0 || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)) {
        *devPtr = NULL;
        return fail(cudaErrorInvalidValue);
    }
    return host_alloc(devPtr, size, SIM_MANAGED, current_device);
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    REQUIRE_STARTED();
    if (ptr == NULL)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    return host_alloc(ptr, size, SIM_PINNED_HOST, -1);
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    REQUIRE_STARTED();
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
    return host_alloc(pHost, size, SIM_PINNED_HOST, -1);
}

cudaError_t cudaFreeHost(void *ptr)
{
    REQUIRE_STARTED();
    return release(ptr, FREES_PINNED_HOST);
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    REQUIRE_STARTED();
    pthread_mutex_lock(&sim.lock);
    size_t used = sim.dev[current_device].used;
    pthread_mutex_unlock(&sim.lock);
    /* Callers pass NULL for the half they do not want. */
    if (free_bytes)
        *free_bytes = sim.capacity - used;
    if (total_bytes)
        *total_bytes = sim.capacity;
    return cudaSuccess;
}

/* Which device and kind a pointer belongs to. The sim knows allocation base addresses only
 * (what a profiler asks about); any other pointer is reported as unregistered host memory,
 * as CUDA 11+ does for memory it does not know. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    REQUIRE_STARTED();
    if (attributes == NULL)
        return fail(cudaErrorInvalidValue);
    struct cudaPointerAttributes a = {cudaMemoryTypeUnregistered, -1, NULL, NULL};
    pthread_mutex_lock(&sim.lock);
    struct sim_block *slot = ptr ? sim_live_find(&sim.live, (uintptr_t)ptr) : NULL;
    if (slot) {
        a.device = slot->device;
        if (slot->kind == SIM_DEVICE) {
            a.type = cudaMemoryTypeDevice;
            a.devicePointer = (void *)ptr;
        } else if (slot->kind == SIM_MANAGED) {
            a.type = cudaMemoryTypeManaged;
            a.devicePointer = (void *)ptr;
            a.hostPointer = (void *)ptr;
        } else {
            a.type = cudaMemoryTypeHost;
            a.device = current_device;
            a.devicePointer = (void *)ptr;
            a.hostPointer = (void *)ptr;
        }
    } else {
        a.hostPointer = (void *)ptr;
    }
    pthread_mutex_unlock(&sim.lock);
    *attributes = a;
    return cudaSuccess;
}

/* ---- devices and streams ------------------------------------------------------------------- */

cudaError_t cudaGetDevice(int *device)
{
    REQUIRE_STARTED();
    if (device == NULL)
        return fail(cudaErrorInvalidValue);
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    REQUIRE_STARTED();
    if (device < 0 || device >= sim.devices)
        return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (count == NULL)
        return fail(cudaErrorInvalidValue);
    if (!started()) {
        *count = 0;
        return fail(cudaErrorInitializationError);
    }
    *count = sim.devices;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    REQUIRE_STARTED();
    return cudaSuccess; /* nothing is ever in flight */
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    REQUIRE_STARTED();
    if (pStream == NULL)
        return fail(cudaErrorInvalidValue);
    cudaError_t rc = cudaSuccess;
    pthread_mutex_lock(&sim.lock);
    if (sim.n_streams == sim.streams_cap) {
        size_t cap = sim.streams_cap ? sim.streams_cap * 2 : 16;
        uintptr_t *s = realloc(sim.streams, cap * sizeof *s);
        if (s) {
            sim.streams = s;
            sim.streams_cap = cap;
        } else {
            rc = cudaErrorMemoryAllocation;
        }
    }
    if (rc == cudaSuccess) {
        /* Handles count up and are never reused, so a destroyed one stays invalid. */
        uintptr_t h = (uintptr_t)STREAM_BASE + ++sim.streams_made * STREAM_STEP;
        sim.streams[sim.n_streams++] = h;
        *pStream = (cudaStream_t)h;
    }
    pthread_mutex_unlock(&sim.lock);
    return rc == cudaSuccess ? cudaSuccess : fail(rc);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    REQUIRE_STARTED();
    uintptr_t h = (uintptr_t)stream;
    int found = 0;
    pthread_mutex_lock(&sim.lock);
    for (size_t i = 0; i < sim.n_streams; i++) {
        if (sim.streams[i] == h) {
            sim.streams[i] = sim.streams[--sim.n_streams];
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&sim.lock);
    /* NULL and the special handles are not destroyable either. */
    return found ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
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
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
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

cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return fail(cudaErrorInvalidValue);
    *driverVersion = SIM_VERSION;
    return cudaSuccess;
}
