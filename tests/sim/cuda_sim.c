/*
 * cuda_sim.c: a simulated CUDA driver, built as libcuda.so.1, that stands in for the GPU in
 * gpumemprof's tests. Programs link it (-lcuda), dlopen it and dlsym its `_v2` exports (the
 * TensorFlow/XLA way), or reach it through its resolver cuGetProcAddress[_v2] (the CUDA runtime's
 * way, and cudaGetDriverEntryPoint's); the simulated runtime libcudart.so.12 is built on top of
 * it exactly like that. It owns the device memory model (sim_memory.c, sim_vmm.c); this file holds
 * initialisation, contexts, memory, streams and pools, cuda_vmm.c the virtual memory management
 * calls, cuda_proc.c the resolver and the error strings.
 *
 * Environment, read once by the first cuInit (decimal numbers; empty means unset):
 *   SIMCUDA_CAPACITY       bytes of memory per device   default 17179869184 (16 GiB), at most 1 TiB
 *   SIMCUDA_DEVICES        number of devices            default 1, 1..64
 *   SIMCUDA_HOST_CAPACITY  bytes of pinned host memory  default 68719476736 (64 GiB)
 *   SIMCUDA_CONTEXT_BYTES  bytes a device's primary context takes from its capacity once the
 *                          context exists (reported as used by cuMemGetInfo and the NVML
 *                          stand-in)                    default 0
 *   SIMCUDA_HIDE           comma list of base names the resolver reports as not found
 *                          ("cuMemCreate,cuMemAllocAsync": an older driver); read by cuda_proc.c
 * A malformed value is reported once on stderr; cuInit then fails with CUDA_ERROR_NOT_INITIALIZED
 * and so does every call that needs it (the runtime reports cudaErrorInitializationError).
 *
 * Memory model (sim_memory.h):
 *   - Every size is rounded up to 512 bytes; capacity is charged the rounded size.
 *   - Device memory is fake: device d hands out addresses from 0x700000000000 + d * 1 TiB upwards,
 *     reusing the most recently freed address of the same rounded size. The v1 entry points
 *     (cuMemAlloc, cuMemAllocPitch: 32-bit device pointers) allocate from [0x10000000, 4 GiB).
 *   - Managed memory (charged to the device) and pinned host memory (charged to
 *     SIMCUDA_HOST_CAPACITY) are real, 4096-aligned host memory, because programs touch it.
 *     cuMemHostRegister pins a caller's range in place and charges nothing.
 *   - VMM: see cuda_vmm.c. Reservations come from [0x740000000000, 0x760000000000); physical
 *     handles are 0x4a000000 + 0x10 * n; granularity 2 MiB.
 *   - Threads: the first successful cuInit starts one helper thread that sleeps with every signal
 *     blocked, as the real driver starts threads of its own (a CUDA process is never
 *     single-threaded).
 *   - Contexts: only primary contexts, handle 0x5c0000000000 + 0x100 * device, created by
 *     cuDevicePrimaryCtxRetain or by the first memory placed on the device. The current context
 *     is per thread; a thread without one that makes a call needing one (memory, cuCtxGetDevice,
 *     cuMemGetInfo, cuCtxSynchronize) gets device 0's primary context made current, as the CUDA
 *     runtime would have done. cuCtxGetCurrent only reports (NULL when none).
 *   - Streams are 0x5e0000000000 + 0x100 * n, never reused; the default pool of device d is
 *     0x1000 + d and allocates on d whatever the current context. Stream-ordered calls take
 *     effect immediately.
 *
 * Contract rules kept here (tests/sim_contract.rs checks them):
 *   Every call but cuInit, cuDriverGetVersion, cuGetProcAddress[_v2] and cuGetErrorName/String
 *   returns CUDA_ERROR_NOT_INITIALIZED (3) before cuInit(0) succeeded. NULL out-pointer ->
 *   CUDA_ERROR_INVALID_VALUE (1) (cuMemGetInfo excepted: either half may be NULL). Size 0 -> 1.
 *   Over capacity -> CUDA_ERROR_OUT_OF_MEMORY (2) with *dptr = 0. Bad stream ->
 *   CUDA_ERROR_INVALID_HANDLE (400); bad device -> CUDA_ERROR_INVALID_DEVICE (101); bad context ->
 *   CUDA_ERROR_INVALID_CONTEXT (201). Freeing 0/NULL succeeds and does nothing; freeing anything
 *   that is not the start of a live block of the right family -> 1, nothing changes
 *   (cuMemFree[_v2] frees device and managed memory, cuMemFreeAsync device memory, cuMemFreeHost
 *   pinned memory). Registering a range overlapping a registered one ->
 *   CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712); unregistering what is not the start of a
 *   registered range -> CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED (713).
 *
 * Built with -fvisibility=hidden (only SIM_EXPORT definitions are exported) and -Wl,-Bsymbolic:
 * no export calls another (they share static helpers), and the resolver's table of the library's
 * own entry points binds to them at link time, never through the PLT/GOT where a preloaded
 * profiler could interpose; the real driver's resolver likewise hands out its own functions.
 */
#include "cuda_internal.h"

#include <pthread.h>
#include <signal.h>

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define GiB (1ULL << 30)
#define DRIVER_VERSION 12040            /* CUDA 12.4 */
#define CONTEXT_BASE 0x5c0000000000ULL /* primary context of device d: + d * CONTEXT_STEP */
#define CONTEXT_STEP 0x100

static const struct sim_layout layout = {
    .tag = "simcuda",
    .capacity_env = "SIMCUDA_CAPACITY",
    .devices_env = "SIMCUDA_DEVICES",
    .host_capacity_env = "SIMCUDA_HOST_CAPACITY",
    .context_env = "SIMCUDA_CONTEXT_BYTES",
    .consequence = "cuInit will fail with CUDA_ERROR_NOT_INITIALIZED (CUDA runtime calls with "
                   "cudaErrorInitializationError)",
    .default_capacity = 16 * GiB,
    .default_host_capacity = 64 * GiB,
    .device_base = 0x700000000000ULL,
    .legacy_base = 0x10000000ULL,
    .legacy_end = 0x100000000ULL,
    .vmm_base = 0x740000000000ULL,
    .vmm_end = 0x760000000000ULL,
    .stream_base = 0x5e0000000000ULL,
    .pool_base = 0x1000,
    .handle_base = 0x4a000000ULL,
};

struct sim_memory cuda_mem = SIM_MEMORY_INIT(&layout);

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static int initialized;            /* cuInit succeeded; read with acquire from any thread */
static __thread int tl_device = -1; /* device of the thread's current context; -1: none */

/* ---- initialisation and contexts ----------------------------------------------------------- */

/* fork() while another thread holds the lock would leave the child's copy locked forever:
 * hold it across fork so both sides start with it free. (A real driver refuses to work in the
 * child of an initialised parent; the simulator keeps working, which fork tests need.) */
static void fork_prepare(void) { pthread_mutex_lock(&cuda_mem.lock); }
static void fork_done(void) { pthread_mutex_unlock(&cuda_mem.lock); }

/* The driver's own helper thread. The real cuInit starts threads of its own (an event handler
 * and others), so a CUDA process is never single-threaded; that matters for what the program's
 * locks cost (glibc takes uncontended locks without atomic instructions while a process has one
 * thread). This one sleeps with every signal blocked, so it never takes a signal meant for the
 * program, and does nothing else. */
static void *helper_thread(void *arg)
{
    (void)arg;
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&m);
    for (;;)
        pthread_cond_wait(&never, &m);
    return NULL;
}

static void start_helper_thread(void)
{
    sigset_t all, old;
    sigfillset(&all);
    /* The new thread inherits the creating thread's mask: block everything around the create. */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t t;
    (void)pthread_create(&t, &attr, helper_thread, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void configure(void)
{
    if (sim_memory_configure(&cuda_mem) != 0)
        return;
    pthread_atfork(fork_prepare, fork_done, fork_done);
    start_helper_thread();
    __atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
}

CUresult cuda_begin(void)
{
    return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                          : CUDA_ERROR_NOT_INITIALIZED;
}

int cuda_valid_device(int device)
{
    return device >= 0 && device < cuda_mem.devices;
}

CUresult cuda_bind(int *device)
{
    if (tl_device < 0) {
        enum sim_status s = sim_context_create(&cuda_mem, 0);
        if (s != SIM_OK)
            return (CUresult)s;
        tl_device = 0;
    }
    *device = tl_device;
    return CUDA_SUCCESS;
}

static CUcontext context_of(int device)
{
    return (CUcontext)(uintptr_t)(CONTEXT_BASE + (unsigned long long)device * CONTEXT_STEP);
}

SIM_EXPORT CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&config_once, configure);
    return cuda_begin();
}

SIM_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = DRIVER_VERSION;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    BEGIN();
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cuda_valid_device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetCount(int *count)
{
    BEGIN();
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = cuda_mem.devices;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    BEGIN();
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cuda_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    enum sim_status s = sim_context_create(&cuda_mem, dev);
    if (s != SIM_OK)
        return (CUresult)s;
    *pctx = context_of(dev);
    return CUDA_SUCCESS;
}

/* Whether device `dev`'s primary context exists (it is never released here), with flags 0. */
SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    BEGIN();
    if (flags == NULL || active == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cuda_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = sim_context_exists(&cuda_mem, dev);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    BEGIN();
    if (ctx == NULL) {
        tl_device = -1;
        return CUDA_SUCCESS;
    }
    uintptr_t off = (uintptr_t)ctx - (uintptr_t)CONTEXT_BASE;
    int device = (int)(off / CONTEXT_STEP);
    /* Only existing primary contexts are contexts. */
    if ((uintptr_t)ctx < CONTEXT_BASE || off % CONTEXT_STEP != 0 ||
        off / CONTEXT_STEP >= (uintptr_t)cuda_mem.devices ||
        !sim_context_exists(&cuda_mem, device))
        return CUDA_ERROR_INVALID_CONTEXT;
    tl_device = device;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    BEGIN();
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = tl_device < 0 ? NULL : context_of(tl_device);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    BEGIN();
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int d;
    CUresult rc = cuda_bind(&d);
    if (rc == CUDA_SUCCESS)
        *device = d;
    return rc;
}

SIM_EXPORT CUresult cuCtxSynchronize(void)
{
    BEGIN();
    int d;
    return cuda_bind(&d); /* nothing is ever in flight */
}

/* ---- device memory ------------------------------------------------------------------------- */

static int stream_ok(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD ||
           sim_stream_live(&cuda_mem, (uintptr_t)s);
}

/* `size` bytes on `device` (or the thread's device when -1) into *addr (0 on failure). */
static CUresult alloc_device(uintptr_t *addr, size_t size, int device, int legacy)
{
    *addr = 0;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int current;
    CUresult rc = cuda_bind(&current);
    if (rc != CUDA_SUCCESS)
        return rc;
    return (CUresult)sim_device_alloc(&cuda_mem, device < 0 ? current : device, size, legacy,
                                      addr);
}

static CUresult free_memory(uintptr_t p, unsigned kinds)
{
    return (CUresult)sim_free(&cuda_mem, p, kinds);
}

/* A pitched allocation: rows of `width` rounded up to 512 bytes. */
static CUresult alloc_pitch(uintptr_t *addr, size_t *pitch, size_t width, size_t height,
                            unsigned int elem, int legacy)
{
    *addr = 0;
    if (width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p, bytes;
    if (width > SIZE_MAX - (SIM_ROUNDING - 1))
        return CUDA_ERROR_OUT_OF_MEMORY;
    p = (width + SIM_ROUNDING - 1) & ~(size_t)(SIM_ROUNDING - 1);
    if (__builtin_mul_overflow(p, height, &bytes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = alloc_device(addr, bytes, -1, legacy);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}

SIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    BEGIN();
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t a;
    CUresult rc = alloc_device(&a, bytesize, -1, 0);
    *dptr = a;
    return rc;
}

SIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                       size_t Height, unsigned int ElementSizeBytes)
{
    BEGIN();
    if (dptr == NULL || pPitch == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t a;
    CUresult rc = alloc_pitch(&a, pPitch, WidthInBytes, Height, ElementSizeBytes, 0);
    *dptr = a;
    return rc;
}

SIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    BEGIN();
    return free_memory((uintptr_t)dptr, SIM_FREES(SIM_DEVICE) | SIM_FREES(SIM_MANAGED));
}

SIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    BEGIN();
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0;
    if (bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    CUresult rc = cuda_bind(&device);
    if (rc != CUDA_SUCCESS)
        return rc;
    void *p;
    rc = (CUresult)sim_host_alloc(&cuda_mem, SIM_MANAGED, device, bytesize, &p);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return rc;
}

/* Shared body of cuMemAllocAsync and its _ptsz twin (the stream NULL means the legacy or the
 * per-thread default stream: the same thing here). */
static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    BEGIN();
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0;
    if (!stream_ok(stream))
        return CUDA_ERROR_INVALID_HANDLE;
    uintptr_t a;
    CUresult rc = alloc_device(&a, size, -1, 0);
    *dptr = a;
    return rc;
}

/* Shared body of cuMemAllocFromPoolAsync and its _ptsz twin: the pool picks the device. */
static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                CUstream stream)
{
    BEGIN();
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0;
    int device = sim_pool_device(&cuda_mem, (uintptr_t)pool);
    if (device < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!stream_ok(stream))
        return CUDA_ERROR_INVALID_HANDLE;
    uintptr_t a;
    CUresult rc = alloc_device(&a, size, device, 0);
    *dptr = a;
    return rc;
}

/* Shared body of cuMemFreeAsync and its _ptsz twin: stream-ordered frees are immediate. */
static CUresult free_async(CUdeviceptr dptr, CUstream stream)
{
    BEGIN();
    if (!stream_ok(stream))
        return CUDA_ERROR_INVALID_HANDLE;
    return free_memory((uintptr_t)dptr, SIM_FREES(SIM_DEVICE));
}

SIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream);
}

SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream);
}

SIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                            CUmemoryPool pool, CUstream hStream)
{
    return alloc_from_pool(dptr, bytesize, pool, hStream);
}

SIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                 CUmemoryPool pool, CUstream hStream)
{
    return alloc_from_pool(dptr, bytesize, pool, hStream);
}

SIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

SIM_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    BEGIN();
    if (pool_out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cuda_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = (CUmemoryPool)sim_pool_of(&cuda_mem, dev);
    return CUDA_SUCCESS;
}

/* ---- pinned host memory -------------------------------------------------------------------- */

static CUresult alloc_pinned(void **pp, size_t size)
{
    *pp = NULL;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    CUresult rc = cuda_bind(&device);
    if (rc != CUDA_SUCCESS)
        return rc;
    return (CUresult)sim_host_alloc(&cuda_mem, SIM_PINNED_HOST, device, size, pp);
}

SIM_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    BEGIN();
    if (pp == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned known =
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    if (Flags & ~known) {
        *pp = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    return alloc_pinned(pp, bytesize);
}

SIM_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    BEGIN();
    if (pp == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_pinned(pp, bytesize);
}

SIM_EXPORT CUresult cuMemFreeHost(void *p)
{
    BEGIN();
    return free_memory((uintptr_t)p, SIM_FREES(SIM_PINNED_HOST));
}

static CUresult host_register(void *p, size_t bytesize, unsigned int flags)
{
    BEGIN();
    const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                           CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    if (p == NULL || bytesize == 0 || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    CUresult rc = cuda_bind(&device);
    if (rc != CUDA_SUCCESS)
        return rc;
    return (CUresult)sim_host_register(&cuda_mem, (uintptr_t)p, bytesize, device);
}

SIM_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

SIM_EXPORT CUresult cuMemHostUnregister(void *p)
{
    BEGIN();
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return (CUresult)sim_host_unregister(&cuda_mem, (uintptr_t)p);
}

/* ---- queries ------------------------------------------------------------------------------- */

static CUresult mem_info(size_t *free_bytes, size_t *total_bytes)
{
    BEGIN();
    int device;
    CUresult rc = cuda_bind(&device);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* Callers pass NULL for the half they do not want. */
    sim_mem_info(&cuda_mem, device, free_bytes, total_bytes);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    return mem_info(free, total);
}

/* Live allocations are known by their start address, registered ranges and VMM mappings by any
 * address inside; anything else is CUDA_ERROR_INVALID_VALUE, as for memory the driver does not
 * know. */
SIM_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                          CUdeviceptr ptr)
{
    BEGIN();
    if (data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_pointer p;
    if (sim_pointer_query(&cuda_mem, (uintptr_t)ptr, &p) != SIM_OK)
        return CUDA_ERROR_INVALID_VALUE;
    int host = p.kind == SIM_PINNED_HOST || p.kind == SIM_REGISTERED_HOST;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = context_of(p.device);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host && p.kind != SIM_MANAGED)
            return CUDA_ERROR_INVALID_VALUE; /* device memory has no host address */
        *(void **)data = (void *)(uintptr_t)ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = p.kind == SIM_MANAGED;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = p.device;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = p.base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = p.size;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- streams ------------------------------------------------------------------------------- */

SIM_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    BEGIN();
    if (phStream == NULL || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t h;
    enum sim_status s = sim_stream_create(&cuda_mem, &h);
    if (s == SIM_OK)
        *phStream = (CUstream)h;
    return (CUresult)s;
}

SIM_EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
    BEGIN();
    /* NULL and the special handles are not destroyable either. */
    return (CUresult)sim_stream_destroy(&cuda_mem, (uintptr_t)hStream);
}

/* ---- the original (v1) ABIs ---------------------------------------------------------------- */

SIM_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    BEGIN();
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t a;
    CUresult rc = alloc_device(&a, bytesize, -1, 1);
    *dptr = (CUdeviceptr_v1)a;
    return rc;
}

SIM_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                    unsigned int WidthInBytes, unsigned int Height,
                                    unsigned int ElementSizeBytes)
{
    BEGIN();
    if (dptr == NULL || pPitch == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t a;
    size_t pitch = 0;
    CUresult rc = alloc_pitch(&a, &pitch, WidthInBytes, Height, ElementSizeBytes, 1);
    *dptr = (CUdeviceptr_v1)a;
    if (rc == CUDA_SUCCESS)
        *pPitch = (unsigned int)pitch; /* < 4 GiB: the allocation fit the legacy window */
    return rc;
}

SIM_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    BEGIN();
    return free_memory((uintptr_t)dptr, SIM_FREES(SIM_DEVICE) | SIM_FREES(SIM_MANAGED));
}

SIM_EXPORT CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    BEGIN();
    if (pp == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_pinned(pp, bytesize);
}

/* 32-bit results saturate at UINT_MAX. */
SIM_EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    size_t f, t;
    CUresult rc = mem_info(&f, &t);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (free)
        *free = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
    if (total)
        *total = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

/* ---- test-only ----------------------------------------------------------------------------- */

/* Bytes this process uses on `device`, its context included; 0 when the device has no context
 * (or the driver is not initialised). Read by the NVML stand-in (nvml_sim.c) in the same
 * process; safe from any thread. */
SIM_EXPORT unsigned long long simcuda_device_used(int device)
{
    if (cuda_begin() != CUDA_SUCCESS || !cuda_valid_device(device))
        return 0;
    return sim_device_used(&cuda_mem, device);
}
