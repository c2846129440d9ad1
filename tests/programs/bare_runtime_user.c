/*
 * bare_runtime_user.c: allocates through bare_runtime.c's runtime, which has no cudaGetDevice.
 * gpumemprof-build: link=dl
 *
 * Usage: bare_runtime_user LIBRARY PAIRS [KEEP]
 *   opens LIBRARY (libbare_runtime.so) the way a program that loads its runtime at run time
 *   does (dlopen + dlsym), makes PAIRS cudaMalloc(1 MiB) + cudaFree pairs, then KEEP more
 *   cudaMalloc(2 MiB) that are never freed (default 0), then one cudaMalloc(2 TiB), which
 *   the runtime refuses. Prints "pairs=<n> kept=<k> refused=<its error>" and exits 0, or
 *   exits 1 naming what failed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bare_runtime_user LIBRARY PAIRS [KEEP]\n");
        return 1;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    int (*cuda_malloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(lib, "cudaMalloc");
    int (*cuda_free)(void *) = (int (*)(void *))dlsym(lib, "cudaFree");
    if (!cuda_malloc || !cuda_free) {
        fprintf(stderr, "no cudaMalloc/cudaFree in %s\n", argv[1]);
        return 1;
    }
    long pairs = atol(argv[2]), keep = argc > 3 ? atol(argv[3]) : 0;
    for (long i = 0; i < pairs; i++) {
        void *p = NULL;
        if (cuda_malloc(&p, 1 << 20) != 0 || cuda_free(p) != 0) {
            fprintf(stderr, "pair %ld failed\n", i);
            return 1;
        }
    }
    for (long i = 0; i < keep; i++) {
        void *p = NULL;
        if (cuda_malloc(&p, 2 << 20) != 0) {
            fprintf(stderr, "keep %ld failed\n", i);
            return 1;
        }
    }
    void *huge = NULL;
    int refused = cuda_malloc(&huge, (size_t)2 << 40);
    printf("pairs=%ld kept=%ld refused=%d\n", pairs, keep, refused);
    return 0;
}
