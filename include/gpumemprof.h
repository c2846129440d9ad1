/*
 * gpumemprof.h - the public C API of libgpumemprof.so, the gpumemprof preload shim.
 *
 * The shim needs no code change: `LD_PRELOAD=libgpumemprof.so ./program` records
 * every GPU allocation. These functions are for programs that want a little control.
 * Do not link against the shim; look the functions up at run time so the program
 * works the same without it:
 *
 *     int (*flush)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpumemprof_flush");
 *     if (flush) flush();
 *
 * All functions are thread-safe, never abort the program, and may be called before
 * the first allocation (they initialise the shim if needed).
 */
#ifndef GPUMEMPROF_H
#define GPUMEMPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if this process is being recorded, 0 if not (disabled, or the trace file could
 * not be created). */
int gpumemprof_is_active(void);

/* Writes every event recorded so far to the trace file (not merely queues it) and
 * returns 0 once it is on disk (in the page cache: it survives the process being
 * killed). Returns -1 if the shim is not recording or the writer did not answer
 * within 10 seconds. */
int gpumemprof_flush(void);

/* The path of the trace file being written (valid for the life of the process), or
 * NULL if the shim is not recording. */
const char *gpumemprof_trace_path(void);

/* The shim's version string, e.g. "0.1.0". */
const char *gpumemprof_version(void);

/* Opens a range named `name` on this thread: an NVTX range of the default domain, exactly
 * as nvtxRangePushA(name) opens one (every range report shows it: summary/peak/leaks
 * --by range, --max-range-peak), and a scope whose peak gpumemprof_memory reads. Returns
 * the range's level (0-based) or -1. Pair each push with a gpumemprof_range_pop on the
 * same thread. */
int gpumemprof_range_push(const char *name);

/* Closes this thread's innermost range: returns the level it closes, or -1 if none. */
int gpumemprof_range_pop(void);

/* PyTorch's memory as the shim saw it at its last tensor event, summed over devices: what
 * torch.cuda.memory_allocated() and memory_reserved() say, and their highest values since
 * the process started. Without PyTorch every figure is 0. */
struct gpumemprof_memory {
    uint64_t allocated_bytes;      /* tensors live now */
    uint64_t reserved_bytes;       /* PyTorch's segments now (device memory it holds) */
    uint64_t peak_allocated_bytes;
    uint64_t peak_reserved_bytes;
    /* The most allocated since this thread's innermost open range (gpumemprof_range_push)
     * opened, other threads' tensors included; peak_allocated_bytes with none open. */
    uint64_t scope_peak_allocated_bytes;
};

/* Fills *out (pass sizeof *out as size) and returns 0; -1 if the shim is not recording.
 * Cheap: a few relaxed atomic loads, no lock, no system call. */
int gpumemprof_memory(struct gpumemprof_memory *out, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEMPROF_H */
