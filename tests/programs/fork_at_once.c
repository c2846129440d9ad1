/*
 * fork_at_once.c: a parent that starts many worker processes at the same moment.
 *
 * The real situation: a launcher or data loader that forks its workers together (Python
 * multiprocessing's fork start method, a pool of 200 workers), every worker using the GPU
 * at once. Each worker's profiler says on stderr when it starts recording and when it wrote
 * its trace; those lines reach one terminal (or one log) at the same time and must not mix.
 *
 * Usage: fork_at_once <children>. The parent does cudaMalloc(4096) on device 0 (so it
 * records too), then forks <children> children without waiting in between. Each child
 * waits until every child exists (a pipe the parent closes once all are forked), does
 * cudaMalloc(1 MiB = 1048576 bytes) and cudaFree of it, and _exit(0)s (_exit(1) if a call
 * failed). The parent waits for all of them, frees its 4096 bytes, and prints
 * "children_ok=<children that exited 0>". Exit status 0 when every child exited 0; a child
 * that did not is named on stderr with its exit code or signal ("fork_at_once: child ...").
 * Expected: one trace per process (<children> + 1), and on stderr, with GPUMEMPROF_QUIET
 * unset, exactly one "recording ..." and one "wrote ..." line per process, each whole.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    void *mine;
    if (cudaMalloc(&mine, 4096) != cudaSuccess) {
        fprintf(stderr, "fork_at_once: cudaMalloc(4096) failed\n");
        return 1;
    }
    int gate[2];
    if (pipe(gate) != 0) {
        perror("fork_at_once: pipe");
        return 1;
    }
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork_at_once: fork");
            return 1;
        }
        if (pid == 0) {
            char c;
            close(gate[1]);
            /* Returns 0 (end of file) once the parent closed its end: every child exists. */
            if (read(gate[0], &c, 1) < 0)
                _exit(1);
            void *p;
            if (cudaMalloc(&p, 1 << 20) != cudaSuccess || cudaFree(p) != cudaSuccess)
                _exit(1);
            _exit(0);
        }
    }
    close(gate[0]);
    close(gate[1]);
    int ok = 0;
    for (int i = 0; i < n; i++) {
        int status;
        pid_t pid = wait(&status);
        if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ok++;
        else if (pid < 0)
            perror("fork_at_once: wait");
        else if (WIFSIGNALED(status))
            fprintf(stderr, "fork_at_once: child %d ended by signal %d\n", (int)pid,
                    WTERMSIG(status));
        else
            fprintf(stderr, "fork_at_once: child %d exited %d\n", (int)pid,
                    WEXITSTATUS(status));
    }
    cudaFree(mine);
    printf("children_ok=%d\n", ok);
    return ok == n ? 0 : 1;
}
