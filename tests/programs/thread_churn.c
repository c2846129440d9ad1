/*
 * thread_churn.c: many short-lived threads, each making one allocation and freeing it, one after
 * another: a data loader or a thread pool that does not keep its threads. The profiler must keep
 * its memory bounded by the threads alive at once, not by how many ever lived.
 *
 * Usage: thread_churn [threads=100000]
 * Prints threads=<n> and the process's peak resident memory, vm_hwm_kib=<VmHWM from
 * /proc/self/status>. Expected events: n cudaMalloc of 1024 bytes and n cudaFree.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *work(void *arg)
{
    (void)arg;
    void *p = NULL;
    if (cudaMalloc(&p, 1024) != cudaSuccess || cudaFree(p) != cudaSuccess)
        exit(1);
    return NULL;
}

static long vm_hwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kib;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    for (long i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, work, NULL) != 0 || pthread_join(t, NULL) != 0)
            return 1;
    }
    printf("threads=%ld\nvm_hwm_kib=%ld\n", n, vm_hwm_kib());
    return 0;
}
