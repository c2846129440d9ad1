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

#ifdef __cplusplus
}
#endif

#endif /* GPUMEMPROF_H */
