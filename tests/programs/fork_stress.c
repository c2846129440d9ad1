/*
 * fork_stress.c: a process that forks over and over while its other threads allocate.
 *
 * The real situation: a data loader forking workers (Python multiprocessing's fork start
 * method) while training threads keep allocating: at each fork another thread may be inside a
 * hook, holding a lock, and the profiler's writer may be in the middle of a write. The child
 * gets a copy of every lock but only the forking thread. Neither side may ever hang.
 *
 * Usage: fork_stress <forks>. Starts 4 threads, each doing cudaMalloc(4096) + cudaFree in a
 * tight loop on device 0 until told to stop. Once every thread has done at least one pair, the
 * main thread forks <forks> times, one child at a time. Each child calls alarm(30) (a child that
 * hangs dies of SIGALRM instead of hanging its parent), does one cudaMalloc of 1 MiB
 * (1048576 bytes) and one cudaFree, and _exit(0)s (_exit(1) if either call failed); the parent
 * waits for it before the next fork. Then the threads stop and are joined.
 * Prints "threads=4", "forks=<forks>" and "children_ok=<children that exited 0>". Exit status 0
 * when every child exited 0 and no call failed in any thread; else 1, with the first bad
 * child's wait status on stderr.
 * Expected traces: the parent's holds only 4096-byte allocations, each freed; a child that
 * records (GPUMEMPROF_FORK=trace) holds exactly 1 allocation of 1 MiB and 1 free.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define MiB ((size_t)1 << 20)

static atomic_int stop;
static atomic_int started;
static atomic_int thread_failed;

static void *churn(void *arg)
{
    (void)arg;
    int announced = 0;
    while (!atomic_load(&stop)) {
        void *p;
        if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) {
            atomic_store(&thread_failed, 1);
            break;
        }
        if (!announced) {
            announced = 1;
            atomic_fetch_add(&started, 1);
        }
    }
    if (!announced)
        atomic_fetch_add(&started, 1); /* never leave main waiting */
    return NULL;
}

static void child(void)
{
    alarm(30);
    void *q;
    int bad = cudaMalloc(&q, MiB) != cudaSuccess || cudaFree(q) != cudaSuccess;
    _exit(bad);
}

int main(int argc, char **argv)
{
    int forks = argc > 1 ? atoi(argv[1]) : 0;
    if (forks <= 0) {
        fprintf(stderr, "usage: fork_stress <forks>\n");
        return 1;
    }
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        if (pthread_create(&threads[i], NULL, churn, NULL) != 0) {
            fprintf(stderr, "fork_stress: pthread_create failed\n");
            return 1;
        }
    }
    while (atomic_load(&started) < THREADS)
        sched_yield();

    int ok = 0, first_bad_status = -1;
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork_stress: fork");
            break;
        }
        if (pid == 0)
            child();
        int status = 0;
        pid_t got;
        do
            got = waitpid(pid, &status, 0);
        while (got < 0 && errno == EINTR);
        if (got == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ok++;
        else if (first_bad_status < 0)
            first_bad_status = status;
    }

    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    printf("threads=%d\nforks=%d\nchildren_ok=%d\n", THREADS, forks, ok);
    if (first_bad_status >= 0)
        fprintf(stderr, "fork_stress: a child ended with wait status 0x%x\n", first_bad_status);
    if (atomic_load(&thread_failed))
        fprintf(stderr, "fork_stress: a thread's cudaMalloc or cudaFree failed\n");
    return ok == forks && !atomic_load(&thread_failed) ? 0 : 1;
}
