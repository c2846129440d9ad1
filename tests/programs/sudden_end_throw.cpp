/*
 * sudden_end_throw.cpp: a C++ job that dies of an exception nobody catches.
 *
 * The real situation: a C++ training binary (or a framework's C++ core) throws, nothing catches,
 * and std::terminate calls abort(): the process dies of SIGABRT without running atexit. The
 * profiler must complete its trace from its SIGABRT handler, then let the process die of SIGABRT.
 *
 * Core dumps are turned off first (RLIMIT_CORE 0); a SIGABRT inherited as ignored is set back to
 * its default action. Then the calls of sudden_end.c, cudaMalloc / cudaFree on device 0
 * (MiB = 1048576 bytes): 1, 2, 3 and 4 MiB (4 allocations, 10 MiB), the 2 MiB one freed (1 free):
 * 8 MiB live in 3 allocations. Prints "allocs=4", "frees=1", "live_bytes=8388608" and
 * "ending=throw", flushes stdout, and throws std::runtime_error("step failed") from step(),
 * uncaught: killed by SIGABRT (6), with the C++ runtime's "terminate called after throwing ..."
 * on stderr. Exit status 1 if a CUDA call fails.
 * Expected trace: 4 allocations (1, 2, 3, 4 MiB), 1 free (2 MiB), and an End record.
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

static const size_t MiB = size_t(1) << 20;

static void must(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        std::fprintf(stderr, "sudden_end_throw: %s failed: %d\n", what, int(rc));
        std::exit(1);
    }
}

static void step()
{
    throw std::runtime_error("step failed");
}

int main()
{
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    struct sigaction old;
    if (sigaction(SIGABRT, nullptr, &old) == 0 && old.sa_handler == SIG_IGN)
        signal(SIGABRT, SIG_DFL);

    void *kept[4];
    for (int i = 0; i < 4; i++)
        must(cudaMalloc(&kept[i], size_t(i + 1) * MiB), "cudaMalloc");
    must(cudaFree(kept[1]), "cudaFree");
    std::printf("allocs=4\nfrees=1\nlive_bytes=%zu\nending=throw\n", 8 * MiB);
    std::fflush(stdout);
    step();
    return 0;
}
