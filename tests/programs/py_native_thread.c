/*
 * py_native_thread.c: a C library a Python script loads with ctypes; alloc_on_native_thread()
 * allocates on a new pthread that has never run Python (as autograd's backward threads or a
 * library's worker threads do), so that allocation's stack must have native frames only.
 * gpumemprof-build: shared-library link=cudart
 *
 * Built as $OUT_DIR/bin/libpy_native_thread.so. alloc_on_native_thread(bytes) starts a thread
 * that calls cudaMalloc(bytes) once (never freed), joins it, and returns the cudaError_t.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>

struct job {
    size_t bytes;
    int rc;
};

static void *run(void *arg) {
    struct job *j = arg;
    void *p = NULL;
    j->rc = (int)cudaMalloc(&p, j->bytes); /* GPUMEMPROF-PY-NATIVE-THREAD */
    return NULL;
}

int alloc_on_native_thread(size_t bytes) {
    struct job j = {bytes, -1};
    pthread_t t;
    if (pthread_create(&t, NULL, run, &j) != 0) {
        return -2;
    }
    pthread_join(t, NULL);
    return j.rc;
}
