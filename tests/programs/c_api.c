/*
 * c_api.c: a program that uses the shim's public C API (include/gpumemprof.h) the way the
 * header recommends: looked up with dlsym, so it runs the same without the profiler.
 *
 * The real situation: a training script's C++ extension that wants to know whether it is
 * being profiled and where the trace goes (to log it next to its checkpoints).
 *
 * It allocates and frees 1 MiB (so the shim has something to record), then prints
 *   active=<gpumemprof_is_active()>          or "api absent" without the shim
 *   path=<gpumemprof_trace_path() or (null)>
 *   version=<gpumemprof_version()>
 *   ranges=<push "load">,<push "parse">,<pop>,<pop>,<pop with none open>  (the levels)
 *   memory=<gpumemprof_memory()>:<its five figures, comma-separated>   (no PyTorch: zeros)
 * and exits 0.
 */
#include "../../include/gpumemprof.h"
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
    void *p;
    if (cudaMalloc(&p, 1 << 20) != cudaSuccess || cudaFree(p) != cudaSuccess) {
        fprintf(stderr, "c_api: CUDA call failed\n");
        return 1;
    }
    /* The declarations in the header give the types the lookups are cast to. */
    __typeof__(gpumemprof_is_active) *is_active = (__typeof__(gpumemprof_is_active) *)dlsym(RTLD_DEFAULT, "gpumemprof_is_active");
    __typeof__(gpumemprof_trace_path) *trace_path = (__typeof__(gpumemprof_trace_path) *)dlsym(RTLD_DEFAULT, "gpumemprof_trace_path");
    __typeof__(gpumemprof_version) *version = (__typeof__(gpumemprof_version) *)dlsym(RTLD_DEFAULT, "gpumemprof_version");
    if (!is_active || !trace_path || !version) {
        printf("api absent\n");
        return 0;
    }
    const char *path = trace_path();
    printf("active=%d\npath=%s\nversion=%s\n", is_active(), path ? path : "(null)", version());
    __typeof__(gpumemprof_range_push) *push = (__typeof__(gpumemprof_range_push) *)dlsym(RTLD_DEFAULT, "gpumemprof_range_push");
    __typeof__(gpumemprof_range_pop) *pop = (__typeof__(gpumemprof_range_pop) *)dlsym(RTLD_DEFAULT, "gpumemprof_range_pop");
    __typeof__(gpumemprof_memory) *memory = (__typeof__(gpumemprof_memory) *)dlsym(RTLD_DEFAULT, "gpumemprof_memory");
    if (!push || !pop || !memory) {
        printf("ranges absent\n");
        return 0;
    }
    int a = push("load"), b = push("parse"), c = pop(), d = pop(), e = pop();
    printf("ranges=%d,%d,%d,%d,%d\n", a, b, c, d, e);
    struct gpumemprof_memory m = {1, 1, 1, 1, 1};
    int rc = memory(&m, sizeof m);
    printf("memory=%d:%llu,%llu,%llu,%llu,%llu\n", rc, (unsigned long long)m.allocated_bytes,
           (unsigned long long)m.reserved_bytes, (unsigned long long)m.peak_allocated_bytes,
           (unsigned long long)m.peak_reserved_bytes, (unsigned long long)m.scope_peak_allocated_bytes);
    return 0;
}
