/*
 * errno_kept.c: errno after a CUDA call is what the runtime left, profiler or not.
 *
 * The real situation: C code that checks errno after a sequence of calls (a logging library,
 * a retry loop around file I/O interleaved with allocations). A preloaded profiler that opens
 * its trace file, looks up symbols or starts a thread inside the first cudaMalloc would, if
 * careless, leave its own errno (ENOENT, EAGAIN...) behind.
 *
 * It sets errno to 77 before each of a cudaMalloc, a cudaFree and a failing cudaFree, and
 * prints errno after each ("malloc errno=77" ...). The simulated runtime never sets errno.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>

int main(void)
{
    void *p;
    errno = 77;
    cudaError_t rc = cudaMalloc(&p, 1 << 20);
    printf("malloc rc=%d errno=%d\n", (int)rc, errno);
    errno = 77;
    rc = cudaFree(p);
    printf("free rc=%d errno=%d\n", (int)rc, errno);
    errno = 77;
    rc = cudaFree(p);
    printf("double free rc=%d errno=%d\n", (int)rc, errno);
    return 0;
}
