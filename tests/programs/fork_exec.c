/*
 * fork_exec.c: a process that forks a worker and execs a helper, both using CUDA.
 *
 * The real situation: a launcher or data loader. A forked child (multiprocessing's fork start
 * method) inherits the profiler's state but not its writer thread; an exec'd child (torchrun
 * workers, subprocess) starts afresh with LD_PRELOAD inherited. The profiler must not deadlock
 * or corrupt the parent's trace in the forked child, and the exec'd child writes its own trace.
 *
 * Parent: allocates 1 MiB and keeps it; forks a child that allocates and frees 2 MiB and
 * _exits; then forks and execs itself as "fork_exec child", which allocates 3 MiB and keeps
 * it. Prints "forked child rc=0", "exec child ok" (from the child) and "parent ok".
 * Expected: the parent's trace holds 1 allocation (1 MiB live) and nothing of the forked child;
 * the exec'd child's own trace holds 1 allocation (3 MiB live); with GPUMEMPROF_FORK=trace (the
 * default) the forked child writes its own trace too (1 allocation, freed), with
 * GPUMEMPROF_FORK=off nothing.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static int wait_ok(pid_t pid)
{
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv)
{
    void *p;
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        if (cudaMalloc(&p, 3 * MiB) != cudaSuccess)
            return 1;
        printf("exec child ok\n");
        return 0;
    }
    if (cudaMalloc(&p, 1 * MiB) != cudaSuccess)
        return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        void *q;
        int rc = cudaMalloc(&q, 2 * MiB) != cudaSuccess || cudaFree(q) != cudaSuccess;
        _exit(rc);
    }
    printf("forked child rc=%d\n", wait_ok(pid) ? 0 : 1);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        char *args[] = {argv[0], "child", NULL};
        execv(argv[0], args);
        _exit(127);
    }
    if (!wait_ok(pid))
        return 1;
    printf("parent ok\n");
    return 0;
}
