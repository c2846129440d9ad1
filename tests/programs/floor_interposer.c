/*
 * floor_interposer.c: the floor of an interposing profiler's design, for the benchmark
 * (BENCHMARKS.md, tests/bench/ab.sh): a preloaded library that does the least a profiler that
 * writes events from another thread must do per call, and nothing else. Its cudaMalloc and
 * cudaFree forward to the next definition (dlsym RTLD_NEXT, looked up once), stamp the time
 * (rdtsc, no fence), and push a 32-byte event into a ring that a consumer thread drains (it
 * only counts them). No stack, no device, no configuration, no file.
 * gpumemprof-build: shared-library link=dl cflags=-pthread
 *
 * One producer thread at a time (bench_loop is single-threaded): the ring is single-producer,
 * single-consumer, with release/acquire indices. At exit a destructor stops the consumer and
 * prints "floor_events=<n>" on stderr: every pushed event was consumed.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <x86intrin.h>

struct event {
    uint64_t time, address, size;
    uint32_t kind, pad;
};

#define RING (1u << 16)
static struct event ring[RING];
static uint64_t head, tail; /* written by the producer, the consumer; read with acquire */
static uint64_t consumed;
static int stop;
static pthread_t consumer;

static void push(uint32_t kind, uint64_t address, uint64_t size)
{
    uint64_t h = __atomic_load_n(&head, __ATOMIC_RELAXED);
    while (h - __atomic_load_n(&tail, __ATOMIC_ACQUIRE) >= RING)
        sched_yield();
    struct event *e = &ring[h & (RING - 1)];
#ifdef FLOOR_FENCED
    if (kind == 0)
        _mm_lfence(); /* the shim's stamps: floor_interposer_fenced.c */
#endif
    e->time = __rdtsc();
    e->address = address;
    e->size = size;
    e->kind = kind;
    __atomic_store_n(&head, h + 1, __ATOMIC_RELEASE);
}

static void *drain(void *unused)
{
    (void)unused;
    uint64_t t = 0;
    for (;;) {
        uint64_t h = __atomic_load_n(&head, __ATOMIC_ACQUIRE);
        if (t == h) {
            if (__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
                break;
            sched_yield();
            continue;
        }
        for (; t < h; t++)
            consumed += ring[t & (RING - 1)].size != (uint64_t)-1;
        __atomic_store_n(&tail, t, __ATOMIC_RELEASE);
    }
    return NULL;
}

__attribute__((constructor)) static void start(void)
{
    pthread_create(&consumer, NULL, drain, NULL);
}

__attribute__((destructor)) static void finish(void)
{
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(consumer, NULL);
    fprintf(stderr, "floor_events=%llu\n", (unsigned long long)consumed);
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    static cudaError_t (*next)(void **, size_t);
    if (!next)
        next = (cudaError_t(*)(void **, size_t))dlsym(RTLD_NEXT, "cudaMalloc");
    if (!next)
        return cudaErrorInsufficientDriver;
    cudaError_t rc = next(devPtr, size);
    if (rc == cudaSuccess)
        push(0, (uint64_t)(uintptr_t)*devPtr, size);
    return rc;
}

cudaError_t cudaFree(void *devPtr)
{
    static cudaError_t (*next)(void *);
    if (!next)
        next = (cudaError_t(*)(void *))dlsym(RTLD_NEXT, "cudaFree");
    if (!next)
        return cudaErrorInsufficientDriver;
    cudaError_t rc = next(devPtr);
    push(1, (uint64_t)(uintptr_t)devPtr, 0);
    return rc;
}
