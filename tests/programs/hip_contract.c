/*
 * hip_contract.c: probes the simulated HIP runtime's contract and prints what each call
 * returned; tests/sim_contract.rs holds the expected values. Meant to run with
 * SIMHIP_CAPACITY=1073741824 (1 GiB) and SIMHIP_DEVICES=2.
 * gpumemprof-build: link=amdhip64
 *
 * Output: "<label>=<value>" lines, return codes as decimal, addresses in hex; "used" values are
 * total - free from hipMemGetInfo on the current device. Exit 0 unless setup fails.
 */
#define PROGRAM "hip_contract"

#include "report.h"

#include <hip/hip_runtime_api.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static void rc_is(const char *label, hipError_t rc)
{
    printf("%s=%d\n", label, (int)rc);
}

static size_t used(void)
{
    size_t f = 0, t = 0;
    expect_rc("hipMemGetInfo", hipMemGetInfo(&f, &t), hipSuccess);
    return t - f;
}

static void attributes(const char *label, const void *p)
{
    char key[64];
    hipPointerAttribute_t a;
    memset(&a, 0xff, sizeof a);
    snprintf(key, sizeof key, "%s.rc", label);
    rc_is(key, hipPointerGetAttributes(&a, p));
    snprintf(key, sizeof key, "%s.type", label);
    put_int(key, a.type);
    snprintf(key, sizeof key, "%s.device", label);
    put_int(key, a.device);
    snprintf(key, sizeof key, "%s.managed", label);
    put_int(key, a.isManaged);
}

int main(void)
{
    void *p = (void *)0x1, *a, *b, *m, *h, *va;
    int v = -1;
    size_t f = 0, t = 0;
    hipStream_t s;
    hipMemPool_t pool;

    rc_is("device_count.rc", hipGetDeviceCount(&v));
    put_int("device_count", v);
    rc_is("runtime_version.rc", hipRuntimeGetVersion(&v));
    put_int("runtime_version", v);
    rc_is("mem_get_info.rc", hipMemGetInfo(&f, &t));
    put_u64("mem_get_info.total", t);
    put_u64("mem_get_info.free", f);
    rc_is("mem_get_info.null_free", hipMemGetInfo(NULL, &t));

    rc_is("malloc.null_out", hipMalloc(NULL, MiB));
    rc_is("malloc.zero", hipMalloc(&p, 0));
    put_hex("malloc.zero.ptr", (uintptr_t)p);
    p = (void *)0x1;
    rc_is("malloc.over_capacity", hipMalloc(&p, 2 * GiB));
    put_hex("malloc.over_capacity.ptr", (uintptr_t)p);
    rc_is("last_error", hipGetLastError());
    rc_is("last_error.again", hipGetLastError());
    rc_is("malloc", hipMalloc(&a, 1000));
    put_hex("malloc.ptr", (uintptr_t)a);
    put_u64("used.after_malloc", used());
    rc_is("free.null", hipFree(NULL));
    rc_is("free.never_allocated", hipFree((void *)0x6000ffff0000));
    rc_is("free.interior", hipFree((char *)a + 512));
    rc_is("host_free.device_ptr", hipHostFree(a));
    rc_is("free", hipFree(a));
    rc_is("free.double", hipFree(a));
    rc_is("malloc.reuse", hipMalloc(&b, 1000));
    put_int("malloc.reuse.same", a == b);
    rc_is("ext_malloc.bad_flags", hipExtMallocWithFlags(&p, MiB, 0x10));

    rc_is("stream_create", hipStreamCreate(&s));
    put_hex("stream", (uintptr_t)s);
    rc_is("malloc_async.bad_stream", hipMallocAsync(&p, MiB, (hipStream_t)0x1234));
    rc_is("malloc_async.per_thread", hipMallocAsync(&p, MiB, hipStreamPerThread));
    rc_is("free_async", hipFreeAsync(p, s));
    rc_is("pool.bad_device", hipDeviceGetDefaultMemPool(&pool, 2));
    rc_is("pool.dev1", hipDeviceGetDefaultMemPool(&pool, 1));
    put_hex("pool.dev1.handle", (uintptr_t)pool);
    rc_is("from_pool.dev1", hipMallocFromPoolAsync(&p, MiB, pool, s));
    put_hex("from_pool.dev1.ptr", (uintptr_t)p);
    attributes("attributes.pool_dev1", p);
    rc_is("from_pool.bad_pool", hipMallocFromPoolAsync(&p, MiB, (hipMemPool_t)0x9999, s));
    rc_is("stream_destroy", hipStreamDestroy(s));
    rc_is("stream_destroy.again", hipStreamDestroy(s));

    rc_is("set_device.2", hipSetDevice(2));
    rc_is("set_device.1", hipSetDevice(1));
    rc_is("get_device.rc", hipGetDevice(&v));
    put_int("get_device", v);
    rc_is("malloc.dev1", hipMalloc(&p, 2 * MiB));
    put_hex("malloc.dev1.ptr", (uintptr_t)p);
    rc_is("set_device.0", hipSetDevice(0));

    rc_is("managed.bad_flags", hipMallocManaged(&m, MiB, 3));
    rc_is("managed.zero", hipMallocManaged(&m, 0, hipMemAttachGlobal));
    rc_is("managed", hipMallocManaged(&m, MiB, hipMemAttachGlobal));
    attributes("attributes.managed", m);
    rc_is("host_malloc.bad_flags", hipHostMalloc(&h, MiB, hipHostMallocCoherent | hipHostMallocNonCoherent));
    rc_is("host_malloc", hipHostMalloc(&h, MiB, hipHostMallocMapped));
    attributes("attributes.pinned", h);
    rc_is("free.pinned", hipFree(h));
    rc_is("host_free", hipHostFree(h));
    rc_is("host_free.null", hipHostFree(NULL));
    attributes("attributes.device", b);
    int local = 0;
    attributes("attributes.unknown", &local);
    rc_is("attributes.null", hipPointerGetAttributes(NULL, b));

    /* VMM. */
    hipMemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = hipMemAllocationTypePinned;
    prop.location.type = hipMemLocationTypeDevice;
    prop.location.id = 0;
    hipMemAccessDesc access = {{hipMemLocationTypeDevice, 0}, hipMemAccessFlagsProtReadWrite};
    hipMemGenericAllocationHandle_t handle, other;
    size_t g = 0;
    rc_is("granularity.rc", hipMemGetAllocationGranularity(&g, &prop, hipMemAllocationGranularityMinimum));
    put_u64("granularity", g);
    rc_is("vmm.create.unaligned", hipMemCreate(&other, MiB, &prop, 0));
    rc_is("vmm.create.over_capacity", hipMemCreate(&other, 2 * GiB, &prop, 0));
    size_t before = used();
    rc_is("vmm.create", hipMemCreate(&handle, 2 * MiB, &prop, 0));
    put_hex("vmm.handle", (uintptr_t)handle);
    put_u64("vmm.charged_at_create", used() - before);
    rc_is("vmm.reserve", hipMemAddressReserve(&va, 8 * MiB, 0, NULL, 0));
    put_hex("vmm.reserve.base", (uintptr_t)va);
    rc_is("vmm.map.outside", hipMemMap((void *)0x600000000000, 2 * MiB, 0, handle, 0));
    rc_is("vmm.map.unknown_handle",
          hipMemMap(va, 2 * MiB, 0, (hipMemGenericAllocationHandle_t)0x1234, 0));
    rc_is("vmm.set_access.unmapped", hipMemSetAccess(va, 2 * MiB, &access, 1));
    rc_is("vmm.map", hipMemMap(va, 2 * MiB, 0, handle, 0));
    rc_is("vmm.set_access", hipMemSetAccess(va, 2 * MiB, &access, 1));
    attributes("attributes.vmm", (char *)va + 4096);
    rc_is("vmm.release_mapped", hipMemRelease(handle));
    put_u64("vmm.charged_after_release", used() - before);
    rc_is("vmm.unmap.partial", hipMemUnmap(va, 4 * MiB));
    rc_is("vmm.address_free.mapped", hipMemAddressFree(va, 8 * MiB));
    rc_is("vmm.unmap", hipMemUnmap(va, 2 * MiB));
    put_u64("vmm.charged_after_unmap", used() - before);
    rc_is("vmm.release.again", hipMemRelease(handle));
    rc_is("vmm.address_free", hipMemAddressFree(va, 8 * MiB));

    put_str("error.2.string", hipGetErrorString(hipErrorOutOfMemory));
    put_str("error.101.name", hipGetErrorName(hipErrorInvalidDevice));
    put_str("error.500.name", hipGetErrorName(hipErrorNotFound));
    put_u64("used.end", used());
    return 0;
}
