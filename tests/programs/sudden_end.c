/*
 * sudden_end.c: a job that ends without returning from main: a signal, a crash, abort, _exit.
 *
 * The real situation: a job stopped by its scheduler (SIGTERM) or by Ctrl-C (SIGINT), one that
 * crashes (a NULL write: SIGSEGV; a mapped file that shrank: SIGBUS), a failed assertion
 * (abort: SIGABRT), a program with its own SIGTERM handler (checkpoint and leave), and one that
 * leaves with _exit/_Exit (as forked workers and crash handlers do), which skips atexit. The
 * profiler must complete its trace in each case and leave the ending exactly as it was: the same
 * signal, or what the program's own handler did.
 *
 * Usage: sudden_end <term|int|hup|quit|abrt|segv|bus|chain|wait|_exit|_Exit>.
 * Core dumps are turned off first (RLIMIT_CORE 0) so the crashes leave no core file; a signal
 * inherited as ignored is set back to its default action, so the ending is the same whoever
 * starts the program.
 * All modes make the same calls, cudaMalloc / cudaFree on device 0 (MiB = 1048576 bytes), from
 * alloc_all(): 1, 2, 3 and 4 MiB (4 allocations, 10 MiB), then the 2 MiB one is freed (1 free):
 * 8 MiB live in 3 allocations. It prints "allocs=4", "frees=1", "live_bytes=8388608" and
 * "ending=<mode>", flushes stdout, then:
 *   term   raise(SIGTERM)                         -> killed by SIGTERM (15)
 *   int    raise(SIGINT)                          -> killed by SIGINT (2)
 *   hup    raise(SIGHUP)  (a closed terminal)     -> killed by SIGHUP (1)
 *   quit   raise(SIGQUIT) (Ctrl-\\)               -> killed by SIGQUIT (3)
 *   abrt   abort()                                -> killed by SIGABRT (6)
 *   segv   writes through a NULL pointer          -> killed by SIGSEGV (11)
 *   bus    writes to a shared mapping of an empty temporary file -> killed by SIGBUS (7)
 *   chain  (installed before the first CUDA call: a SIGTERM handler that writes "handled\n" to
 *          stdout with write(2) and calls _exit(7)) raise(SIGTERM) -> prints "handled", exit 7
 *   overflow  recurses without end (no handler: the stack overflows) -> killed by SIGSEGV (11)
 *   pipe   writes to a pipe whose reading end is closed (SIGPIPE's default) -> killed by SIGPIPE (13)
 *   usr1   raise(SIGUSR1) (default action: end the process) -> killed by SIGUSR1 (10)
 *   reraise  (installed after the first CUDA call, so it replaces any handler there was: a
 *          SIGTERM handler that writes "handled\n", resets SIGTERM to SIG_DFL with signal()
 *          and raises it again, as crash handlers do; asked back with sigaction(), the
 *          action is the program's own: prints "query=own") raise(SIGTERM) -> prints
 *          "handled", killed by SIGTERM (15)
 *   wait   prints "ready", then sleeps until a signal from outside ends it (the test sends
 *          SIGTERM or SIGINT) -> killed by that signal; exits 1 if none came within 30 s
 *   _exit  _exit(3)                               -> exit status 3
 *   _Exit  _Exit(3)                               -> exit status 3
 * Exit status 1 if a CUDA call fails, the mode is unknown, or the ending did not end it.
 * Expected trace in every mode: 4 allocations (1, 2, 3, 4 MiB), 1 free (2 MiB), and an End
 * record (the profiler completes the trace before the signal's action or the exit).
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void must(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "sudden_end: %s failed: %d\n", what, (int)rc);
        exit(1);
    }
}

static void alloc_all(void)
{
    static void *kept[4];
    for (int i = 0; i < 4; i++)
        must(cudaMalloc(&kept[i], (size_t)(i + 1) * MiB), "cudaMalloc");
    must(cudaFree(kept[1]), "cudaFree");
}

/* The program's own SIGTERM handler (mode chain): only async-signal-safe calls. */
static void on_term(int sig)
{
    (void)sig;
    static const char msg[] = "handled\n";
    ssize_t n = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(7);
}

/* The program's own handler of mode reraise: says so, then lets the default action end the
 * process, as a crash handler does after its report. */
static void on_term_reraise(int sig)
{
    static const char msg[] = "handled\n";
    ssize_t n = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)n;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Recursion the compiler cannot turn into a loop: each level keeps 1 KiB live. Endless on
 * purpose. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winfinite-recursion"
static __attribute__((noinline)) int overflow(int depth)
{
    volatile char frame[1024];
    frame[depth % sizeof frame] = (char)depth;
    return overflow(depth + 1) + frame[0];
}
#pragma GCC diagnostic pop

static void write_to_closed_pipe(void)
{
    int fds[2];
    if (pipe(fds) != 0) {
        perror("sudden_end: pipe");
        exit(1);
    }
    close(fds[0]);
    static const char byte[] = "x";
    ssize_t n = write(fds[1], byte, 1); /* no reader: SIGPIPE */
    (void)n;
}

/* Sets `sig` back to its default action if it was inherited as ignored. */
static void undo_ignored(int sig)
{
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN)
        signal(sig, SIG_DFL);
}

static int *volatile nowhere; /* NULL; volatile so the compiler keeps the faulting store */

static void write_past_end_of_file(void)
{
    FILE *f = tmpfile(); /* empty, and removed when the process ends */
    if (f == NULL) {
        perror("sudden_end: tmpfile");
        exit(1);
    }
    volatile char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
    if (page == MAP_FAILED) {
        perror("sudden_end: mmap");
        exit(1);
    }
    page[0] = 1; /* the page lies wholly past the end of the file: SIGBUS */
}

static int known(const char *mode)
{
    static const char *const modes[] = {"term",  "int",      "hup",  "quit", "abrt",
                                        "segv",  "bus",      "chain", "wait", "_exit",
                                        "_Exit", "overflow", "pipe", "usr1", "reraise"};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(mode, modes[i]) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!known(mode)) {
        fprintf(stderr,
                "usage: sudden_end term|int|hup|quit|abrt|segv|bus|chain|wait|_exit|_Exit|"
                "overflow|pipe|usr1|reraise\n");
        return 1;
    }
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    const int signals[] = {SIGTERM, SIGINT,  SIGHUP,  SIGQUIT, SIGABRT,
                           SIGSEGV, SIGBUS, SIGPIPE, SIGUSR1};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
        undo_ignored(signals[i]);
    if (strcmp(mode, "chain") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL); /* before the first CUDA call */
    }

    alloc_all();
    printf("allocs=4\nfrees=1\nlive_bytes=%zu\nending=%s\n", 8 * MiB, mode);
    fflush(stdout);

    if (strcmp(mode, "reraise") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term_reraise;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL); /* after the first CUDA call */
        struct sigaction now;
        sigaction(SIGTERM, NULL, &now);
        printf("query=%s\n", now.sa_handler == on_term_reraise ? "own" : "other");
        fflush(stdout);
    }

    if (strcmp(mode, "term") == 0 || strcmp(mode, "chain") == 0 ||
        strcmp(mode, "reraise") == 0) {
        raise(SIGTERM);
    } else if (strcmp(mode, "overflow") == 0) {
        return overflow(0);
    } else if (strcmp(mode, "pipe") == 0) {
        write_to_closed_pipe();
    } else if (strcmp(mode, "usr1") == 0) {
        raise(SIGUSR1);
    } else if (strcmp(mode, "int") == 0) {
        raise(SIGINT);
    } else if (strcmp(mode, "hup") == 0) {
        raise(SIGHUP);
    } else if (strcmp(mode, "quit") == 0) {
        raise(SIGQUIT);
    } else if (strcmp(mode, "abrt") == 0) {
        abort();
    } else if (strcmp(mode, "segv") == 0) {
        *nowhere = 1;
    } else if (strcmp(mode, "bus") == 0) {
        write_past_end_of_file();
    } else if (strcmp(mode, "wait") == 0) {
        printf("ready\n");
        fflush(stdout);
        for (int i = 0; i < 300; i++) {
            struct timespec tenth = {0, 100 * 1000 * 1000};
            nanosleep(&tenth, NULL);
        }
    } else if (strcmp(mode, "_exit") == 0) {
        _exit(3);
    } else if (strcmp(mode, "_Exit") == 0) {
        _Exit(3);
    }
    fprintf(stderr, "sudden_end: %s did not end the process\n", mode);
    return 1;
}
