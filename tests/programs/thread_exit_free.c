/*
 * thread_exit_free.c: device memory freed by a thread's own exit destructor, after the
 * profiler's per-thread ring is gone.
 *
 * The real situation: a framework keeps per-thread device buffers (workspaces, handles) in
 * thread-specific data and frees them in the key's destructor when the thread exits. The
 * profiler retires a thread's event ring in a destructor of its own; a destructor that runs
 * after it must still have its frees recorded (through the shared queue), with the thread's id.
 *
 * main: cudaMalloc 1 MiB (the profiler starts and creates its key), then creates key K whose
 * destructor cudaFree's the value: K is created after the profiler's key, so glibc runs its
 * destructor after the profiler's. Then three threads, one after another (each joined before
 * the next starts, so a later thread can reuse an earlier one's ring): each cudaMalloc's
 * 2 MiB and stores it in K, then makes one 4096-byte cudaMalloc/cudaFree pair, and returns.
 * main frees its 1 MiB and prints "threads=3 exit_frees=3". Exit status 0; 1 if a call fails.
 * Expected trace: 7 allocations (1 MiB, 3 x 2 MiB, 3 x 4096 bytes) and 7 frees, each 2 MiB
 * block freed by the thread that allocated it, nothing live at the end, the trace complete.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)

static pthread_key_t key;
static int exit_frees;

static void free_at_exit(void *p)
{
    if (cudaFree(p) != cudaSuccess) {
        fprintf(stderr, "thread_exit_free: cudaFree in the destructor failed\n");
        exit(1);
    }
    __atomic_add_fetch(&exit_frees, 1, __ATOMIC_SEQ_CST);
}

static void *worker(void *arg)
{
    (void)arg;
    void *held, *pair;
    if (cudaMalloc(&held, 2 * MiB) != cudaSuccess || pthread_setspecific(key, held) != 0 ||
        cudaMalloc(&pair, 4096) != cudaSuccess || cudaFree(pair) != cudaSuccess) {
        fprintf(stderr, "thread_exit_free: a call in the thread failed\n");
        exit(1);
    }
    return NULL;
}

int main(void)
{
    void *first;
    if (cudaMalloc(&first, MiB) != cudaSuccess || pthread_key_create(&key, free_at_exit) != 0) {
        fprintf(stderr, "thread_exit_free: setup failed\n");
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, NULL) != 0) {
            fprintf(stderr, "thread_exit_free: thread %d failed\n", i);
            return 1;
        }
    }
    if (cudaFree(first) != cudaSuccess) {
        fprintf(stderr, "thread_exit_free: cudaFree failed\n");
        return 1;
    }
    printf("threads=3 exit_frees=%d\n", __atomic_load_n(&exit_frees, __ATOMIC_SEQ_CST));
    return 0;
}
