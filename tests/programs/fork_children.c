/*
 * fork_children.c: a process that forks workers after it started using CUDA.
 *
 * The real situation: a launcher or data loader that forks workers once the parent holds
 * device memory (multiprocessing's fork start method). A worker that allocates is a process of
 * its own: with GPUMEMPROF_FORK=trace (the default) it writes its own trace (GPUMEMPROF_OUTPUT
 * with %p names it by the child's pid), holding only its own events; with GPUMEMPROF_FORK=off it
 * records nothing. A worker that never touches CUDA leaves no trace either way.
 *
 * The parent does cudaMalloc(2 MiB) on device 0 (MiB = 1048576 bytes), then forks 4 children,
 * one at a time, waiting for each: children 1, 2 and 3 each do cudaMalloc(1 MiB), keep it, and
 * exit(0) (a normal exit: atexit handlers run); child 4 makes no CUDA call and exit(0)s.
 * After each wait the parent prints "child<i>=<pid>" (i = 1..4); then it frees its 2 MiB and
 * prints "children_ok=4". Exit status 0; 1 if a call fails or a child did not exit 0.
 * Expected traces: the parent's: 1 allocation (2 MiB), 1 free, nothing live, complete; with
 * GPUMEMPROF_FORK=trace each of children 1-3: exactly 1 allocation (1 MiB), no free, 1 MiB live,
 * complete; child 4: no trace; with GPUMEMPROF_FORK=off: only the parent's trace.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define CHILDREN 4

int main(void)
{
    void *mine;
    if (cudaMalloc(&mine, 2 * MiB) != cudaSuccess) {
        fprintf(stderr, "fork_children: cudaMalloc(2 MiB) failed\n");
        return 1;
    }
    int ok = 0;
    for (int i = 1; i <= CHILDREN; i++) {
        fflush(stdout); /* the child must not print the parent's buffered lines again */
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork_children: fork");
            return 1;
        }
        if (pid == 0) {
            void *p;
            if (i < CHILDREN && cudaMalloc(&p, MiB) != cudaSuccess)
                exit(1);
            exit(0);
        }
        int status = 0;
        if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ok++;
        else
            fprintf(stderr, "fork_children: child %d ended with wait status 0x%x\n", i, status);
        printf("child%d=%d\n", i, (int)pid);
    }
    if (cudaFree(mine) != cudaSuccess) {
        fprintf(stderr, "fork_children: cudaFree failed\n");
        return 1;
    }
    printf("children_ok=%d\n", ok);
    return ok == CHILDREN ? 0 : 1;
}
