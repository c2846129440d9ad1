/*
 * all_apis.c: every simulated CUDA runtime function, in a fixed order, with its results printed.
 *
 * The real situation it stands for: an application that uses the whole allocation API surface,
 * including the error paths real programs hit (NULL out-pointers, zero sizes, out-of-memory,
 * double frees, wrong free function). A profiler preloaded in front of the runtime must not
 * change a single result: tests run this with and without the profiler and compare stdout byte
 * for byte, then check the trace against the counts below.
 *
 * Output: one line per fact, "<label> rc=<n>" for each call's return code, then
 * "<label> <field>=<value>" for its out-parameters. Device pointers are printed in hex (the
 * simulator's addresses are deterministic); managed and pinned host memory is real heap memory
 * whose address varies between runs, so it is printed as "ptr=host-page-aligned" after checking.
 * Any result other than the expected one prints a message on stderr and exits 1.
 *
 * Configuration: needs SIMCUDA_CAPACITY=1073741824 (1 GiB) and SIMCUDA_DEVICES=2; main() sets
 * them when unset (before the first CUDA call) and exits 1 if the runtime reports otherwise.
 *
 * Expected numbers (MiB = 1048576 bytes):
 *   device memory, 11 successful allocations: cudaMalloc 5 (1 MiB, 1000 B, 1000 B, 2 MiB on
 *     device 1, 5 MiB), cudaMallocAsync 1 (4 MiB), cudaMallocAsync_ptsz 1 (4 MiB),
 *     cudaMallocFromPoolAsync 2 (2 MiB on device 0, 2 MiB on device 1), cudaMallocPitch 1
 *     (pitch 1024 x 10 rows = 10240 B), cudaMalloc3D 1 (pitch 512 x 4 x 3 = 6144 B);
 *     10 successful frees: cudaFree 6, cudaFreeAsync 3, cudaFreeAsync_ptsz 1.
 *   managed memory, 2 successful cudaMallocManaged (3 MiB, 1 MiB), 1 successful cudaFree (1 MiB).
 *   pinned host memory, 3 successful allocations: cudaMallocHost 1 (1 MiB), cudaHostAlloc 2
 *     (2 MiB, 1 MiB); 2 successful cudaFreeHost (the 1 MiB ones).
 *   live at exit, exactly: one 5 MiB device allocation (cudaMalloc, device 0), one 3 MiB managed
 *     allocation (device 0), one 2 MiB pinned host allocation (cudaHostAlloc): 10 MiB in 3 blocks.
 *   3 allocations fail with cudaErrorMemoryAllocation (2): cudaMalloc 2 GiB, cudaMallocManaged
 *     2 GiB, cudaMallocHost 2^62 B. 13 allocation calls fail with other codes (bad arguments).
 *   4 allocation calls succeed with size 0 and return NULL (cudaMalloc, cudaMallocAsync,
 *     cudaMallocFromPoolAsync, cudaMallocHost): nothing allocated.
 *   3 frees of NULL succeed and free nothing (cudaFree, cudaFreeAsync, cudaFreeHost); 8 frees
 *     fail with cudaErrorInvalidValue (1) and free nothing.
 *   The final cudaMemGetInfo on device 0 reports free = 1 GiB - 8 MiB = 1065353216.
 */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define CAPACITY "1073741824"
#define SENTINEL ((void *)0x1) /* stored in out-params the runtime must overwrite with NULL */

/* Prints "<label> rc=<rc>" and exits unless rc is the expected code. */
static void expect(const char *label, cudaError_t rc, cudaError_t want)
{
    printf("%s rc=%d\n", label, (int)rc);
    if (rc != want) {
        fflush(stdout);
        fprintf(stderr, "all_apis: %s returned %d (%s), expected %d\n", label, (int)rc,
                cudaGetErrorName(rc), (int)want);
        exit(1);
    }
}

static void show_ptr(const char *label, const void *p)
{
    printf("%s ptr=0x%" PRIxPTR "\n", label, (uintptr_t)p);
}

/* Managed and pinned memory: real, page aligned, usable. Its address is not printed. */
static void show_host_ptr(const char *label, void *p, size_t size)
{
    if (p == NULL || (uintptr_t)p % 4096 != 0) {
        fprintf(stderr, "all_apis: %s: %p is not a page-aligned host pointer\n", label, p);
        exit(1);
    }
    memset(p, 0xab, size); /* the program really touches it */
    printf("%s ptr=host-page-aligned\n", label);
}

static void show_size(const char *label, const char *field, size_t v)
{
    printf("%s %s=%zu\n", label, field, v);
}

static void must_equal(const char *what, size_t got, size_t want)
{
    if (got != want) {
        fflush(stdout);
        fprintf(stderr, "all_apis: %s is %zu, expected %zu\n", what, got, want);
        exit(1);
    }
}

static void versions_and_devices(void)
{
    int v = 0;
    expect("get_last_error.initial", cudaGetLastError(), cudaSuccess);
    expect("runtime_version", cudaRuntimeGetVersion(&v), cudaSuccess);
    show_size("runtime_version", "value", (size_t)v);
    expect("runtime_version.null_out", cudaRuntimeGetVersion(NULL), cudaErrorInvalidValue);
    expect("driver_version", cudaDriverGetVersion(&v), cudaSuccess);
    show_size("driver_version", "value", (size_t)v);
    expect("device_count", cudaGetDeviceCount(&v), cudaSuccess);
    show_size("device_count", "value", (size_t)v);
    must_equal("device count (SIMCUDA_DEVICES)", (size_t)v, 2);
    expect("device_count.null_out", cudaGetDeviceCount(NULL), cudaErrorInvalidValue);
    expect("get_device", cudaGetDevice(&v), cudaSuccess);
    show_size("get_device", "value", (size_t)v);
    expect("get_device.null_out", cudaGetDevice(NULL), cudaErrorInvalidValue);

    size_t free_b = 0, total_b = 0;
    expect("mem_info.start", cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    show_size("mem_info.start", "free", free_b);
    show_size("mem_info.start", "total", total_b);
    must_equal("total memory (SIMCUDA_CAPACITY)", total_b, GiB);
}

/* Plain cudaMalloc/cudaFree and the last-error functions. Returns the live 1 MiB block. */
static void *plain_device_memory(void)
{
    void *a, *b, *c, *z = SENTINEL, *big = SENTINEL;
    size_t free_b, total_b;

    expect("malloc", cudaMalloc(&a, 1 * MiB), cudaSuccess);
    show_ptr("malloc", a);
    expect("malloc.null_out", cudaMalloc(NULL, 1 * MiB), cudaErrorInvalidValue);
    expect("malloc.zero", cudaMalloc(&z, 0), cudaSuccess);
    show_ptr("malloc.zero", z);
    expect("malloc.over_capacity", cudaMalloc(&big, 2 * GiB), cudaErrorMemoryAllocation);
    show_ptr("malloc.over_capacity", big);

    expect("peek_at_last_error", cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    expect("peek_at_last_error.again", cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    expect("get_last_error", cudaGetLastError(), cudaErrorMemoryAllocation);
    expect("get_last_error.again", cudaGetLastError(), cudaSuccess);

    expect("malloc.odd_size", cudaMalloc(&b, 1000), cudaSuccess);
    show_ptr("malloc.odd_size", b);
    expect("mem_info.after_malloc", cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    show_size("mem_info.after_malloc", "free", free_b);
    show_size("mem_info.after_malloc", "total", total_b);

    expect("free.null", cudaFree(NULL), cudaSuccess);
    expect("free.never_allocated", cudaFree((void *)0x7000ffff0000), cudaErrorInvalidValue);
    expect("free.interior", cudaFree((char *)a + 512), cudaErrorInvalidValue);
    expect("free", cudaFree(b), cudaSuccess);
    expect("free.double", cudaFree(b), cudaErrorInvalidValue);

    /* The freed 1000-byte block's address comes back for the next allocation of that size. */
    expect("malloc.reuse", cudaMalloc(&c, 1000), cudaSuccess);
    show_ptr("malloc.reuse", c);
    show_size("malloc.reuse", "same_as_freed", c == b);
    expect("free.reuse", cudaFree(c), cudaSuccess);
    return a;
}

/* Stream-ordered allocation, the default pools and a second device. */
static void streams_pools_devices(cudaStream_t s)
{
    void *d1, *d2, *e0, *e1, *f, *x = SENTINEL;
    cudaMemPool_t pool0, pool1, pool_bad;
    size_t free_b, total_b;
    int dev;

    expect("malloc_async", cudaMallocAsync(&d1, 4 * MiB, s), cudaSuccess);
    show_ptr("malloc_async", d1);
    expect("malloc_async.null_out", cudaMallocAsync(NULL, 4 * MiB, s), cudaErrorInvalidValue);
    expect("malloc_async.zero", cudaMallocAsync(&x, 0, s), cudaSuccess);
    show_ptr("malloc_async.zero", x);
    expect("malloc_async.bad_stream", cudaMallocAsync(&x, 1 * MiB, (cudaStream_t)0x1234),
           cudaErrorInvalidResourceHandle);
    expect("malloc_async_ptsz", cudaMallocAsync_ptsz(&d2, 4 * MiB, cudaStreamPerThread),
           cudaSuccess);
    show_ptr("malloc_async_ptsz", d2);
    expect("free_async", cudaFreeAsync(d1, s), cudaSuccess);
    expect("free_async_ptsz", cudaFreeAsync_ptsz(d2, cudaStreamPerThread), cudaSuccess);
    expect("free_async.double", cudaFreeAsync(d1, s), cudaErrorInvalidValue);
    expect("free_async.null", cudaFreeAsync(NULL, s), cudaSuccess);

    expect("default_pool.dev0", cudaDeviceGetDefaultMemPool(&pool0, 0), cudaSuccess);
    show_ptr("default_pool.dev0", pool0);
    expect("default_pool.dev1", cudaDeviceGetDefaultMemPool(&pool1, 1), cudaSuccess);
    show_ptr("default_pool.dev1", pool1);
    expect("default_pool.bad_device", cudaDeviceGetDefaultMemPool(&pool_bad, 2),
           cudaErrorInvalidDevice);
    expect("default_pool.null_out", cudaDeviceGetDefaultMemPool(NULL, 0), cudaErrorInvalidValue);
    expect("malloc_from_pool", cudaMallocFromPoolAsync(&e0, 2 * MiB, pool0, s), cudaSuccess);
    show_ptr("malloc_from_pool", e0);
    /* Current device is 0, but the pool decides: this lands on device 1. */
    expect("malloc_from_pool.dev1", cudaMallocFromPoolAsync(&e1, 2 * MiB, pool1, s),
           cudaSuccess);
    show_ptr("malloc_from_pool.dev1", e1);
    expect("malloc_from_pool.bad_pool",
           cudaMallocFromPoolAsync(&x, 1 * MiB, (cudaMemPool_t)0x9999, s),
           cudaErrorInvalidValue);
    x = SENTINEL;
    expect("malloc_from_pool.zero", cudaMallocFromPoolAsync(&x, 0, pool0, s), cudaSuccess);
    show_ptr("malloc_from_pool.zero", x);
    expect("free_async.pool", cudaFreeAsync(e0, s), cudaSuccess);
    expect("free_async.pool_dev1", cudaFreeAsync(e1, s), cudaSuccess);

    expect("set_device.1", cudaSetDevice(1), cudaSuccess);
    expect("get_device.after_set", cudaGetDevice(&dev), cudaSuccess);
    show_size("get_device.after_set", "value", (size_t)dev);
    /* Same size as the pool block just freed on device 1: it gets that address back. */
    expect("malloc.dev1", cudaMalloc(&f, 2 * MiB), cudaSuccess);
    show_ptr("malloc.dev1", f);
    expect("mem_info.dev1", cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    show_size("mem_info.dev1", "free", free_b);
    show_size("mem_info.dev1", "total", total_b);
    expect("free.dev1", cudaFree(f), cudaSuccess);
    expect("set_device.2", cudaSetDevice(2), cudaErrorInvalidDevice);
    expect("set_device.negative", cudaSetDevice(-1), cudaErrorInvalidDevice);
    expect("get_device.after_bad_set", cudaGetDevice(&dev), cudaSuccess);
    show_size("get_device.after_bad_set", "value", (size_t)dev);
    expect("set_device.0", cudaSetDevice(0), cudaSuccess);
}

/* Managed memory, pitched and 3D allocations. Returns the live 3 MiB managed block. */
static void *managed_and_pitched(void)
{
    void *m, *m2, *pp, *x = SENTINEL;
    size_t pitch = 0, free_b, total_b;
    struct cudaPitchedPtr p3;

    expect("malloc_managed", cudaMallocManaged(&m, 3 * MiB, cudaMemAttachGlobal), cudaSuccess);
    show_host_ptr("malloc_managed", m, 3 * MiB);
    expect("malloc_managed.attach_host", cudaMallocManaged(&m2, 1 * MiB, cudaMemAttachHost),
           cudaSuccess);
    show_host_ptr("malloc_managed.attach_host", m2, 1 * MiB);
    expect("malloc_managed.zero", cudaMallocManaged(&x, 0, cudaMemAttachGlobal),
           cudaErrorInvalidValue);
    expect("malloc_managed.bad_flags", cudaMallocManaged(&x, 1 * MiB, 3), cudaErrorInvalidValue);
    expect("malloc_managed.null_out", cudaMallocManaged(NULL, 1 * MiB, cudaMemAttachGlobal),
           cudaErrorInvalidValue);
    x = SENTINEL;
    expect("malloc_managed.over_capacity", cudaMallocManaged(&x, 2 * GiB, cudaMemAttachGlobal),
           cudaErrorMemoryAllocation);
    show_ptr("malloc_managed.over_capacity", x);
    expect("mem_info.after_managed", cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    show_size("mem_info.after_managed", "free", free_b);
    expect("free.managed", cudaFree(m2), cudaSuccess);
    expect("free_host.managed", cudaFreeHost(m), cudaErrorInvalidValue);

    expect("malloc_pitch", cudaMallocPitch(&pp, &pitch, 1000, 10), cudaSuccess);
    show_ptr("malloc_pitch", pp);
    show_size("malloc_pitch", "pitch", pitch);
    expect("malloc_pitch.null_pitch", cudaMallocPitch(&x, NULL, 1000, 10), cudaErrorInvalidValue);
    expect("malloc_pitch.null_out", cudaMallocPitch(NULL, &pitch, 1000, 10),
           cudaErrorInvalidValue);
    expect("free.pitch", cudaFree(pp), cudaSuccess);

    expect("malloc_3d", cudaMalloc3D(&p3, make_cudaExtent(100, 4, 3)), cudaSuccess);
    show_ptr("malloc_3d", p3.ptr);
    show_size("malloc_3d", "pitch", p3.pitch);
    show_size("malloc_3d", "xsize", p3.xsize);
    show_size("malloc_3d", "ysize", p3.ysize);
    expect("malloc_3d.null_out", cudaMalloc3D(NULL, make_cudaExtent(100, 4, 3)),
           cudaErrorInvalidValue);
    expect("free.3d", cudaFree(p3.ptr), cudaSuccess);
    return m;
}

/* Pinned host memory. Returns the live 2 MiB cudaHostAlloc block. */
static void *pinned_host_memory(void *device_ptr)
{
    void *h, *h2, *h3, *x = SENTINEL;

    expect("malloc_host", cudaMallocHost(&h, 1 * MiB), cudaSuccess);
    show_host_ptr("malloc_host", h, 1 * MiB);
    expect("malloc_host.null_out", cudaMallocHost(NULL, 1 * MiB), cudaErrorInvalidValue);
    expect("malloc_host.zero", cudaMallocHost(&x, 0), cudaSuccess);
    show_ptr("malloc_host.zero", x);
    x = SENTINEL;
    /* 2^62 bytes: beyond any SIMCUDA_HOST_CAPACITY and any real machine. */
    expect("malloc_host.over_capacity", cudaMallocHost(&x, (size_t)1 << 62),
           cudaErrorMemoryAllocation);
    show_ptr("malloc_host.over_capacity", x);
    expect("free.pinned", cudaFree(h), cudaErrorInvalidValue);
    expect("free_host", cudaFreeHost(h), cudaSuccess);
    expect("free_host.double", cudaFreeHost(h), cudaErrorInvalidValue);
    expect("free_host.null", cudaFreeHost(NULL), cudaSuccess);
    expect("free_host.device_ptr", cudaFreeHost(device_ptr), cudaErrorInvalidValue);

    expect("host_alloc",
           cudaHostAlloc(&h2, 2 * MiB, cudaHostAllocPortable | cudaHostAllocMapped), cudaSuccess);
    show_host_ptr("host_alloc", h2, 2 * MiB);
    expect("host_alloc.bad_flags", cudaHostAlloc(&x, 1 * MiB, 0x100), cudaErrorInvalidValue);
    expect("host_alloc.null_out", cudaHostAlloc(NULL, 1 * MiB, cudaHostAllocDefault),
           cudaErrorInvalidValue);
    expect("host_alloc.default", cudaHostAlloc(&h3, 1 * MiB, cudaHostAllocDefault), cudaSuccess);
    show_host_ptr("host_alloc.default", h3, 1 * MiB);
    expect("free_host.default", cudaFreeHost(h3), cudaSuccess);
    return h2;
}

static void errors_and_strings(cudaStream_t s)
{
    static const cudaError_t codes[] = {cudaSuccess,
                                        cudaErrorInvalidValue,
                                        cudaErrorMemoryAllocation,
                                        cudaErrorInitializationError,
                                        cudaErrorInsufficientDriver,
                                        cudaErrorInvalidDevice,
                                        cudaErrorInvalidResourceHandle,
                                        (cudaError_t)9999};
    char label[64];

    expect("device_synchronize", cudaDeviceSynchronize(), cudaSuccess);
    expect("stream_destroy", cudaStreamDestroy(s), cudaSuccess);
    expect("stream_destroy.again", cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
    expect("stream_destroy.null", cudaStreamDestroy(NULL), cudaErrorInvalidResourceHandle);
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        snprintf(label, sizeof label, "error.%d", (int)codes[i]);
        printf("%s name=%s\n", label, cudaGetErrorName(codes[i]));
        printf("%s string=%s\n", label, cudaGetErrorString(codes[i]));
    }
    expect("get_last_error.end", cudaGetLastError(), cudaErrorInvalidResourceHandle);
    expect("get_last_error.end_again", cudaGetLastError(), cudaSuccess);
}

int main(void)
{
    /* Before the first CUDA call: the simulator reads its environment once, lazily. */
    setenv("SIMCUDA_CAPACITY", CAPACITY, 0);
    setenv("SIMCUDA_DEVICES", "2", 0);

    cudaStream_t s;
    size_t free_b = 0, total_b = 0;

    versions_and_devices();
    void *first = plain_device_memory();
    expect("stream_create", cudaStreamCreate(&s), cudaSuccess);
    show_ptr("stream_create", s);
    expect("stream_create.null_out", cudaStreamCreate(NULL), cudaErrorInvalidValue);
    streams_pools_devices(s);
    void *managed = managed_and_pitched();
    void *pinned = pinned_host_memory(first);

    /* Leave exactly three blocks live: 5 MiB device, 3 MiB managed, 2 MiB pinned host. */
    void *keep;
    expect("malloc.keep", cudaMalloc(&keep, 5 * MiB), cudaSuccess);
    show_ptr("malloc.keep", keep);
    expect("free.first", cudaFree(first), cudaSuccess);

    expect("mem_info.end", cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    show_size("mem_info.end", "free", free_b);
    show_size("mem_info.end", "total", total_b);
    must_equal("free memory at the end", free_b, GiB - 8 * MiB);
    total_b = 0;
    expect("mem_info.null_free", cudaMemGetInfo(NULL, &total_b), cudaSuccess);
    show_size("mem_info.null_free", "total", total_b);
    free_b = 0;
    expect("mem_info.null_total", cudaMemGetInfo(&free_b, NULL), cudaSuccess);
    show_size("mem_info.null_total", "free", free_b);
    expect("mem_info.null_both", cudaMemGetInfo(NULL, NULL), cudaSuccess);

    errors_and_strings(s);
    (void)managed;
    (void)pinned;
    show_size("live", "device", 5 * MiB);
    show_size("live", "managed", 3 * MiB);
    show_size("live", "pinned_host", 2 * MiB);
    return 0;
}
