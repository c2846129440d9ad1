/*
 * drv_contract.c: probes the simulated CUDA driver's contract, one area per mode, and prints
 * what each call returned; tests/sim_contract.rs holds the expected values (the real driver's
 * behaviour), so the profiler's tests can trust the simulator.
 * gpumemprof-build: link=cuda,dl
 *
 * Usage: drv_contract <mode>, mode one of
 *   init      calls before cuInit, cuInit's flags
 *   resolver  cuGetProcAddress[_v2]: versions, flags, status, suffixed and unknown names; each
 *             answer is printed as the name of the export it equals ("null" when none)
 *   context   contexts and SIMCUDA_CONTEXT_BYTES, per-thread current context, cuMemGetInfo_v2
 *             with NULL out-parameters (needs SIMCUDA_DEVICES=2)
 *   alloc     argument checks, out of memory, wrong-family frees, v1 entry points, pointer
 *             attributes
 *   host      cuMemHostRegister_v2 / cuMemHostUnregister
 *   vmm       cuMemCreate/Map/Unmap/Release/AddressReserve/AddressFree/SetAccess rules and when
 *             physical memory returns to the capacity
 * Output: "<label>=<value>" lines, return codes as decimal, addresses in hex; "used" values are
 * simcuda_device_used(0). Exit 0 unless the mode is unknown or a setup step fails.
 */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#define PROGRAM "drv_contract"

#include "report.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

unsigned long long simcuda_device_used(int device); /* the driver's test-only export */

static void *driver; /* libcuda.so.1's handle */

static void rc_is(const char *label, CUresult rc)
{
    printf("%s=%d\n", label, (int)rc);
}

/* ---- init ---------------------------------------------------------------------------------- */

static void mode_init(void)
{
    CUdeviceptr p = 0x1;
    int v = 0;
    const char *s = NULL;
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = 99;
    rc_is("before_init.mem_alloc", cuMemAlloc_v2(&p, MiB));
    put_hex("before_init.mem_alloc.ptr", p); /* untouched */
    rc_is("before_init.device_count", cuDeviceGetCount(&v));
    rc_is("before_init.mem_get_info", cuMemGetInfo_v2(NULL, NULL));
    rc_is("before_init.driver_version", cuDriverGetVersion(&v));
    put_int("before_init.driver_version.value", v);
    rc_is("before_init.get_proc", cuGetProcAddress_v2("cuMemAlloc", &fn, 12040, 0, &st));
    put_int("before_init.get_proc.status", st);
    rc_is("before_init.error_name", cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    put_str("before_init.error_name.value", s ? s : "null");
    rc_is("before_init.error_string", cuGetErrorString(CUDA_ERROR_NOT_FOUND, &s));
    put_str("before_init.error_string.value", s ? s : "null");
    rc_is("before_init.error_name.unknown", cuGetErrorName((CUresult)9999, &s));
    put_int("before_init.error_name.unknown.null", s == NULL);
    rc_is("init.bad_flags", cuInit(1));
    rc_is("init", cuInit(0));
    rc_is("init.again", cuInit(0));
    rc_is("after_init.device_count", cuDeviceGetCount(&v));
    put_int("after_init.device_count.value", v);
    rc_is("after_init.driver_version.null", cuDriverGetVersion(NULL));
}

/* ---- resolver ------------------------------------------------------------------------------ */

static const char *const exports[] = {
    "cuInit",
    "cuMemAlloc",
    "cuMemAlloc_v2",
    "cuMemFree",
    "cuMemFree_v2",
    "cuMemAllocPitch",
    "cuMemAllocPitch_v2",
    "cuMemAllocHost",
    "cuMemAllocHost_v2",
    "cuMemGetInfo",
    "cuMemGetInfo_v2",
    "cuMemHostRegister",
    "cuMemHostRegister_v2",
    "cuMemAllocAsync",
    "cuMemAllocAsync_ptsz",
    "cuMemFreeAsync",
    "cuMemFreeAsync_ptsz",
    "cuMemAllocFromPoolAsync",
    "cuMemAllocFromPoolAsync_ptsz",
    "cuMemCreate",
    "cuMemMap",
    "cuGetProcAddress",
    "cuGetProcAddress_v2",
};

/* The name of the export `fn` is, "null" or "unknown". */
static const char *export_name(void *fn)
{
    if (fn == NULL)
        return "null";
    for (size_t i = 0; i < sizeof exports / sizeof exports[0]; i++)
        if (dlsym(driver, exports[i]) == fn)
            return exports[i];
    return "unknown";
}

/* Prints <label>.rc, <label>.status and <label>.fn for one cuGetProcAddress_v2 question. */
static void ask(const char *label, const char *symbol, int version, cuuint64_t flags)
{
    char key[96];
    void *fn = (void *)0x1; /* must be overwritten */
    CUdriverProcAddressQueryResult st = 99;
    CUresult rc = cuGetProcAddress_v2(symbol, &fn, version, flags, &st);
    snprintf(key, sizeof key, "%s.rc", label);
    rc_is(key, rc);
    snprintf(key, sizeof key, "%s.status", label);
    put_int(key, st);
    snprintf(key, sizeof key, "%s.fn", label);
    put_str(key, fn == (void *)0x1 ? "untouched" : export_name(fn));
}

static void mode_resolver(void)
{
    ask("mem_alloc.12040", "cuMemAlloc", 12040, 0);
    ask("mem_alloc.3020", "cuMemAlloc", 3020, 0);
    ask("mem_alloc.3010", "cuMemAlloc", 3010, 0);
    ask("mem_free.3000", "cuMemFree", 3000, 0);
    ask("mem_free.12040", "cuMemFree", 12040, 0);
    ask("mem_alloc_pitch.3000", "cuMemAllocPitch", 3000, 0);
    ask("mem_alloc_pitch.12040", "cuMemAllocPitch", 12040, 0);
    ask("mem_alloc_host.3000", "cuMemAllocHost", 3000, 0);
    ask("mem_alloc_host.12040", "cuMemAllocHost", 12040, 0);
    ask("mem_get_info.3000", "cuMemGetInfo", 3000, 0);
    ask("mem_get_info.12040", "cuMemGetInfo", 12040, 0);
    ask("host_register.6040", "cuMemHostRegister", 6040, 0);
    ask("host_register.6050", "cuMemHostRegister", 6050, 0);
    ask("alloc_async.11010", "cuMemAllocAsync", 11010, 0);
    ask("alloc_async.11020", "cuMemAllocAsync", 11020, 0);
    ask("alloc_async.legacy", "cuMemAllocAsync", 12040, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    ask("alloc_async.ptds", "cuMemAllocAsync", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    ask("alloc_async.ptds_old", "cuMemAllocAsync", 11010,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    ask("alloc_async.both_flags", "cuMemAllocAsync", 12040, 3);
    ask("alloc_async.unknown_flag", "cuMemAllocAsync", 12040, 4);
    ask("free_async.ptds", "cuMemFreeAsync", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    ask("alloc_from_pool.ptds", "cuMemAllocFromPoolAsync", 12040,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    ask("alloc_from_pool.12040", "cuMemAllocFromPoolAsync", 12040, 0);
    ask("init.ptds", "cuInit", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    ask("mem_create.10010", "cuMemCreate", 10010, 0);
    ask("mem_create.10020", "cuMemCreate", 10020, 0);
    ask("mem_map.12040", "cuMemMap", 12040, 0);
    ask("get_proc.11030", "cuGetProcAddress", 11030, 0);
    ask("get_proc.12000", "cuGetProcAddress", 12000, 0);
    ask("suffixed", "cuMemAlloc_v2", 12040, 0);
    ask("suffixed_ptsz", "cuMemAllocAsync_ptsz", 12040, 0);
    ask("unknown", "cuNoSuchFunction", 12040, 0);
    ask("prefix_only", "cu", 12040, 0);

    void *fn = (void *)0x1;
    rc_is("null_status.rc", cuGetProcAddress_v2("cuInit", &fn, 12040, 0, NULL));
    put_str("null_status.fn", export_name(fn));
    rc_is("null_pfn.rc", cuGetProcAddress_v2("cuInit", NULL, 12040, 0, NULL));
    CUdriverProcAddressQueryResult st = 99;
    rc_is("null_symbol.rc", cuGetProcAddress_v2(NULL, &fn, 12040, 0, &st));
    put_int("null_symbol.status", st); /* untouched */

    /* The v1 resolver: the same answers, without a status. */
    CUresult (*v1)(const char *, void **, int, cuuint64_t) =
        (CUresult(*)(const char *, void **, int, cuuint64_t))dlsym(driver, "cuGetProcAddress");
    fn = NULL;
    rc_is("v1.mem_alloc.rc", v1("cuMemAlloc", &fn, 12040, 0));
    put_str("v1.mem_alloc.fn", export_name(fn));
    fn = (void *)0x1;
    rc_is("v1.unknown.rc", v1("cuNoSuchFunction", &fn, 12040, 0));
    put_str("v1.unknown.fn", export_name(fn));

    /* SIMCUDA_HIDE hides names from the resolver only. */
    put_int("dlsym.mem_create_found", dlsym(driver, "cuMemCreate") != NULL);
}

/* ---- context ------------------------------------------------------------------------------- */

static void *other_thread(void *arg)
{
    (void)arg;
    CUcontext c = (CUcontext)0x1;
    CUdevice d = -1;
    rc_is("thread.current.rc", cuCtxGetCurrent(&c));
    put_hex("thread.current", (uintptr_t)c);
    rc_is("thread.get_device.rc", cuCtxGetDevice(&d));
    put_int("thread.get_device", d);
    return NULL;
}

static void mode_context(void)
{
    size_t f = 1, t = 1;
    CUcontext c = (CUcontext)0x1, c1;
    CUdevice d = -1;
    CUdeviceptr p;

    expect_rc("cuInit", cuInit(0), CUDA_SUCCESS);
    rc_is("current.before.rc", cuCtxGetCurrent(&c));
    put_hex("current.before", (uintptr_t)c);
    put_u64("used.before", simcuda_device_used(0));
    rc_is("mem_get_info.rc", cuMemGetInfo_v2(&f, &t));
    put_u64("mem_get_info.free", f);
    put_u64("mem_get_info.total", t);
    put_u64("used.after_bind", simcuda_device_used(0));
    rc_is("current.after.rc", cuCtxGetCurrent(&c));
    put_hex("current.after", (uintptr_t)c);
    rc_is("mem_get_info.null_both", cuMemGetInfo_v2(NULL, NULL));
    f = 0;
    rc_is("mem_get_info.null_total", cuMemGetInfo_v2(&f, NULL));
    put_u64("mem_get_info.null_total.free", f);
    t = 0;
    rc_is("mem_get_info.null_free", cuMemGetInfo_v2(NULL, &t));
    put_u64("mem_get_info.null_free.total", t);
    rc_is("get_device.rc", cuCtxGetDevice(&d));
    put_int("get_device", d);

    pthread_t th;
    if (pthread_create(&th, NULL, other_thread, NULL) != 0 || pthread_join(th, NULL) != 0) {
        fprintf(stderr, PROGRAM ": cannot run a thread\n");
        exit(1);
    }

    put_u64("used1.before", simcuda_device_used(1));
    rc_is("retain.1.rc", cuDevicePrimaryCtxRetain(&c1, 1));
    put_hex("retain.1", (uintptr_t)c1);
    put_u64("used1.after_retain", simcuda_device_used(1));
    rc_is("retain.bad_device", cuDevicePrimaryCtxRetain(&c, 5));
    rc_is("retain.null_out", cuDevicePrimaryCtxRetain(NULL, 0));
    rc_is("set_current.1", cuCtxSetCurrent(c1));
    rc_is("alloc.dev1.rc", cuMemAlloc_v2(&p, MiB));
    put_hex("alloc.dev1", p);
    rc_is("get_device.after_set.rc", cuCtxGetDevice(&d));
    put_int("get_device.after_set", d);
    int ordinal = -1;
    rc_is("attribute.ordinal.rc", cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    put_int("attribute.ordinal", ordinal);
    put_u64("used1.after_alloc", simcuda_device_used(1));
    rc_is("set_current.bogus", cuCtxSetCurrent((CUcontext)0x1234));
    rc_is("set_current.null", cuCtxSetCurrent(NULL));
    c = (CUcontext)0x1;
    rc_is("current.after_null.rc", cuCtxGetCurrent(&c));
    put_hex("current.after_null", (uintptr_t)c);
    rc_is("device_get.bad", cuDeviceGet(&d, 2));
    put_u64("used.unknown_device", simcuda_device_used(7));
}

/* ---- alloc --------------------------------------------------------------------------------- */

static void mode_alloc(void)
{
    CUdeviceptr p = 0x1, a, m;
    size_t pitch = 0;
    void *h = (void *)0x1;
    CUstream s;
    CUmemoryPool pool;

    expect_rc("cuInit", cuInit(0), CUDA_SUCCESS);
    rc_is("mem_alloc.null_out", cuMemAlloc_v2(NULL, MiB));
    rc_is("mem_alloc.zero", cuMemAlloc_v2(&p, 0));
    put_hex("mem_alloc.zero.ptr", p);
    p = 0x1;
    rc_is("mem_alloc.over_capacity", cuMemAlloc_v2(&p, 17 * GiB));
    put_hex("mem_alloc.over_capacity.ptr", p);
    rc_is("mem_alloc", cuMemAlloc_v2(&a, 1000));
    put_hex("mem_alloc.ptr", a);
    put_u64("used.after_1000", simcuda_device_used(0));
    rc_is("mem_free.interior", cuMemFree_v2(a + 512));
    rc_is("mem_free.null", cuMemFree_v2(0));
    rc_is("mem_free_host.device_ptr", cuMemFreeHost((void *)(uintptr_t)a));
    rc_is("mem_free", cuMemFree_v2(a));
    rc_is("mem_free.double", cuMemFree_v2(a));

    rc_is("pitch.bad_element", cuMemAllocPitch_v2(&p, &pitch, 1000, 10, 3));
    rc_is("pitch.zero_height", cuMemAllocPitch_v2(&p, &pitch, 1000, 0, 4));
    rc_is("pitch", cuMemAllocPitch_v2(&p, &pitch, 1000, 10, 8));
    put_u64("pitch.value", pitch);

    rc_is("managed.bad_flags", cuMemAllocManaged(&m, MiB, 4));
    rc_is("managed", cuMemAllocManaged(&m, MiB, CU_MEM_ATTACH_HOST));
    rc_is("mem_free_async.managed", cuMemFreeAsync(m, NULL));
    rc_is("mem_free.managed", cuMemFree_v2(m));

    rc_is("alloc_host.zero", cuMemAllocHost_v2(&h, 0));
    rc_is("alloc_host", cuMemAllocHost_v2(&h, MiB));
    rc_is("mem_free.pinned", cuMemFree_v2((CUdeviceptr)(uintptr_t)h));
    rc_is("free_host", cuMemFreeHost(h));
    rc_is("free_host.null", cuMemFreeHost(NULL));
    rc_is("host_alloc.bad_flags", cuMemHostAlloc(&h, MiB, 0x100));

    rc_is("stream_create", cuStreamCreate(&s, 0));
    put_hex("stream", (uintptr_t)s);
    rc_is("alloc_async.bad_stream", cuMemAllocAsync(&p, MiB, (CUstream)0x1234));
    rc_is("alloc_async.legacy_stream", cuMemAllocAsync(&p, MiB, CU_STREAM_LEGACY));
    rc_is("free_async.per_thread_stream", cuMemFreeAsync(p, CU_STREAM_PER_THREAD));
    rc_is("alloc_async.zero", cuMemAllocAsync(&p, 0, s));
    rc_is("default_pool.bad_device", cuDeviceGetDefaultMemPool(&pool, 3));
    rc_is("default_pool", cuDeviceGetDefaultMemPool(&pool, 0));
    rc_is("alloc_from_pool.bad_pool", cuMemAllocFromPoolAsync(&p, MiB, (CUmemoryPool)0x9999, s));
    rc_is("stream_destroy", cuStreamDestroy(s));
    rc_is("stream_destroy.again", cuStreamDestroy(s));
    rc_is("alloc_async.destroyed_stream", cuMemAllocAsync(&p, MiB, s));

    /* The original ABIs: 32-bit device pointers from the legacy window. */
    CUresult (*alloc_v1)(unsigned int *, unsigned int) =
        (CUresult(*)(unsigned int *, unsigned int))dlsym(driver, "cuMemAlloc");
    CUresult (*free_v1)(unsigned int) = (CUresult(*)(unsigned int))dlsym(driver, "cuMemFree");
    CUresult (*info_v1)(unsigned int *, unsigned int *) =
        (CUresult(*)(unsigned int *, unsigned int *))dlsym(driver, "cuMemGetInfo");
    unsigned int v1 = 0, f32 = 0, t32 = 0;
    rc_is("v1.alloc", alloc_v1(&v1, MiB));
    put_hex("v1.alloc.ptr", v1);
    rc_is("v1.get_info", info_v1(&f32, &t32));
    put_u64("v1.get_info.total", t32);
    rc_is("v1.free_by_v2", cuMemFree_v2(v1));
    rc_is("v1.free.double", free_v1(v1));

    /* Pointer attributes. */
    unsigned int type = 0, managed = 0;
    CUdeviceptr start = 0;
    rc_is("mem_alloc.keep", cuMemAlloc_v2(&a, 3 * MiB));
    rc_is("attribute.type.rc", cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a));
    put_int("attribute.type", type);
    rc_is("attribute.managed.rc", cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, a));
    put_int("attribute.managed", managed);
    rc_is("attribute.start.rc", cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a));
    put_hex("attribute.start", start);
    rc_is("attribute.host_pointer.device", cuPointerGetAttribute(&h, CU_POINTER_ATTRIBUTE_HOST_POINTER, a));
    rc_is("attribute.unknown_pointer", cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0x1234));
    rc_is("attribute.null_data", cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a));
    put_u64("used.end", simcuda_device_used(0));
}

/* ---- host ---------------------------------------------------------------------------------- */

static void mode_host(void)
{
    static char buffer[64 * 1024] __attribute__((aligned(4096)));
    unsigned int type = 0;
    expect_rc("cuInit", cuInit(0), CUDA_SUCCESS);
    rc_is("register", cuMemHostRegister_v2(buffer, sizeof buffer, CU_MEMHOSTREGISTER_PORTABLE));
    rc_is("register.again", cuMemHostRegister_v2(buffer, sizeof buffer, 0));
    rc_is("register.overlap", cuMemHostRegister_v2(buffer + 4096, 4096, 0));
    rc_is("register.null", cuMemHostRegister_v2(NULL, 4096, 0));
    rc_is("register.zero", cuMemHostRegister_v2(buffer, 0, 0));
    rc_is("register.bad_flags", cuMemHostRegister_v2(buffer, 4096, 0x100));
    rc_is("attribute.type.rc",
          cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                (CUdeviceptr)(uintptr_t)(buffer + 100)));
    put_int("attribute.type", type);
    put_u64("used", simcuda_device_used(0));
    rc_is("unregister.interior", cuMemHostUnregister(buffer + 4096));
    rc_is("unregister", cuMemHostUnregister(buffer));
    rc_is("unregister.again", cuMemHostUnregister(buffer));
    rc_is("register.after_unregister", cuMemHostRegister_v2(buffer, sizeof buffer, 0));
}

/* ---- vmm ----------------------------------------------------------------------------------- */

static void mode_vmm(void)
{
    CUmemAllocationProp prop, bad, got;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemGenericAllocationHandle h1, h2, h3, h4, x = 0x1;
    CUdeviceptr r, r2, r3, x_ptr = 0x1;
    size_t g = 0;
    const size_t G2 = 2 * MiB;

    expect_rc("cuInit", cuInit(0), CUDA_SUCCESS);
    rc_is("granularity.rc", cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    put_u64("granularity", g);
    bad = prop;
    bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
    rc_is("granularity.bad_type", cuMemGetAllocationGranularity(&g, &bad, 0));

    rc_is("create.zero", cuMemCreate(&x, 0, &prop, 0));
    rc_is("create.unaligned", cuMemCreate(&x, MiB, &prop, 0));
    put_hex("create.unaligned.handle", x);
    rc_is("create.null_prop", cuMemCreate(&x, G2, NULL, 0));
    rc_is("create.bad_type", cuMemCreate(&x, G2, &bad, 0));
    bad = prop;
    bad.location.type = CU_MEM_LOCATION_TYPE_INVALID;
    rc_is("create.bad_location", cuMemCreate(&x, G2, &bad, 0));
    bad = prop;
    bad.location.id = 5;
    rc_is("create.bad_device", cuMemCreate(&x, G2, &bad, 0));
    rc_is("create.bad_flags", cuMemCreate(&x, G2, &prop, 1));
    rc_is("create.null_handle", cuMemCreate(NULL, G2, &prop, 0));
    x = 0x1;
    rc_is("create.over_capacity", cuMemCreate(&x, 32 * GiB, &prop, 0));
    put_hex("create.over_capacity.handle", x);
    put_u64("used.start", simcuda_device_used(0));
    rc_is("create.1", cuMemCreate(&h1, G2, &prop, 0));
    put_hex("handle.1", h1);
    put_u64("used.after_create", simcuda_device_used(0));
    memset(&got, 0, sizeof got);
    rc_is("properties.rc", cuMemGetAllocationPropertiesFromHandle(&got, h1));
    put_int("properties.type", got.type);
    put_int("properties.location_type", got.location.type);
    put_int("properties.location_id", got.location.id);
    put_int("properties.handle_types", got.requestedHandleTypes);
    rc_is("properties.unknown", cuMemGetAllocationPropertiesFromHandle(&got, 0x1234));

    rc_is("reserve.unaligned", cuMemAddressReserve(&x_ptr, MiB, 0, 0, 0));
    rc_is("reserve.bad_flags", cuMemAddressReserve(&x_ptr, G2, 0, 0, 1));
    rc_is("reserve.bad_alignment", cuMemAddressReserve(&x_ptr, G2, 3 * MiB, 0, 0));
    rc_is("reserve", cuMemAddressReserve(&r, 16 * MiB, 0, 0, 0));
    put_hex("reserve.base", r);
    rc_is("reserve.hint", cuMemAddressReserve(&r2, 8 * MiB, 0, 0x750000000000ULL, 0));
    put_hex("reserve.hint.base", r2);
    rc_is("reserve.taken_hint", cuMemAddressReserve(&r3, 4 * MiB, 0, r, 0));
    put_hex("reserve.taken_hint.base", r3);
    put_u64("used.after_reserve", simcuda_device_used(0));

    rc_is("map.outside", cuMemMap(0x700000000000ULL, G2, 0, h1, 0));
    rc_is("map.unknown_handle", cuMemMap(r, G2, 0, 0x1234, 0));
    rc_is("map.past_handle", cuMemMap(r, G2, G2, h1, 0));
    rc_is("map.too_long", cuMemMap(r, 2 * G2, 0, h1, 0));
    rc_is("map.unaligned", cuMemMap(r + MiB, G2, 0, h1, 0));
    rc_is("map.bad_flags", cuMemMap(r, G2, 0, h1, 1));
    rc_is("set_access.unmapped", cuMemSetAccess(r, G2, &access, 1));
    rc_is("map.1", cuMemMap(r, G2, 0, h1, 0));
    rc_is("map.overlap", cuMemMap(r, G2, 0, h1, 0));
    rc_is("set_access", cuMemSetAccess(r, G2, &access, 1));
    rc_is("set_access.null_desc", cuMemSetAccess(r, G2, NULL, 1));
    rc_is("set_access.zero_count", cuMemSetAccess(r, G2, &access, 0));
    rc_is("set_access.beyond_mapping", cuMemSetAccess(r, 2 * G2, &access, 1));
    int ordinal = -1;
    CUdeviceptr start = 0;
    rc_is("attribute.ordinal.rc",
          cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, r + 4096));
    put_int("attribute.ordinal", ordinal);
    rc_is("attribute.start.rc",
          cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, r + 4096));
    put_hex("attribute.start", start);
    rc_is("mem_free.mapped", cuMemFree_v2(r));

    /* h2 (2 MiB) at +2 MiB and h3 (4 MiB) at +4 MiB. */
    rc_is("create.2", cuMemCreate(&h2, G2, &prop, 0));
    rc_is("create.3", cuMemCreate(&h3, 2 * G2, &prop, 0));
    /* Ends in the next reservation (r3 follows r): not inside one reservation. */
    rc_is("map.across_reservations", cuMemMap(r + 16 * MiB - G2, 2 * G2, 0, h3, 0));
    rc_is("map.2", cuMemMap(r + G2, G2, 0, h2, 0));
    rc_is("map.3", cuMemMap(r + 2 * G2, 2 * G2, 0, h3, 0));
    put_u64("used.mapped", simcuda_device_used(0));
    rc_is("unmap.partial", cuMemUnmap(r + 2 * G2, G2));
    rc_is("unmap.unaligned", cuMemUnmap(r + MiB, G2));
    rc_is("unmap.unmapped", cuMemUnmap(r + 4 * G2, G2));
    rc_is("release.2_mapped", cuMemRelease(h2));
    put_u64("used.released_but_mapped", simcuda_device_used(0));
    rc_is("release.2_again", cuMemRelease(h2));
    rc_is("properties.released", cuMemGetAllocationPropertiesFromHandle(&got, h2));
    rc_is("map.released", cuMemMap(r + 8 * G2, G2, 0, h2, 0));
    rc_is("unmap.2", cuMemUnmap(r + G2, G2));
    put_u64("used.released_and_unmapped", simcuda_device_used(0));
    rc_is("unmap.gap", cuMemUnmap(r, 4 * G2));
    rc_is("address_free.mapped", cuMemAddressFree(r, 16 * MiB));

    /* Fill the gap, then one unmap over three mappings. */
    rc_is("create.4", cuMemCreate(&h4, G2, &prop, 0));
    rc_is("map.4", cuMemMap(r + G2, G2, 0, h4, 0));
    rc_is("unmap.three", cuMemUnmap(r, 4 * G2));
    put_u64("used.unmapped_not_released", simcuda_device_used(0));
    rc_is("release.1", cuMemRelease(h1));
    rc_is("release.3", cuMemRelease(h3));
    rc_is("release.4", cuMemRelease(h4));
    put_u64("used.end", simcuda_device_used(0));

    rc_is("address_free.wrong_size", cuMemAddressFree(r, 8 * MiB));
    rc_is("address_free.interior", cuMemAddressFree(r + G2, 16 * MiB - G2));
    rc_is("address_free", cuMemAddressFree(r, 16 * MiB));
    rc_is("address_free.again", cuMemAddressFree(r, 16 * MiB));
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*run)(void);
    } modes[] = {
        {"init", mode_init},   {"resolver", mode_resolver}, {"context", mode_context},
        {"alloc", mode_alloc}, {"host", mode_host},         {"vmm", mode_vmm},
    };
    driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!driver) {
        fprintf(stderr, PROGRAM ": libcuda.so.1 is not loaded: %s\n", dlerror());
        return 1;
    }
    for (size_t i = 0; argc == 2 && i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(argv[1], modes[i].name) == 0) {
            modes[i].run();
            return 0;
        }
    }
    fprintf(stderr, "usage: " PROGRAM " init|resolver|context|alloc|host|vmm\n");
    return 2;
}
