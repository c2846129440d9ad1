/*
 * unwind_nofp.c: allocations under frames that a frame-pointer walk gets wrong, the way a
 * release build of a library is compiled.
 *
 * gpumemprof-build: cflags=-O2,-fomit-frame-pointer
 *
 * The stack at each cudaMalloc, innermost first (every function is noinline and does work
 * after its call, so none is a tail call or folded away):
 *   alloc_pair       -O2 leaf caller, CFA = rsp + small offset
 *   recurse x depth  rsp-based frames
 *   big_frame        a 64 KiB local array: CFA = rsp + 0x10000 and more
 *   realigned        a 64-byte aligned local and alloca: gcc realigns the stack through a
 *                    saved pointer; CFA and rbp are DWARF expressions on rbp
 *   with_alloca      alloca: a frame pointer after all, CFA = rbp + 16
 *   rbp_as_register  uses rbp as an ordinary register around its call (saved, then the
 *                    frames above need the restored value)
 *   with_alloca      again, above the function that clobbered rbp
 *   run              the thread's entry (main thread and one pthread)
 *
 * Usage: unwind_nofp [depth=12] [rounds=50] [jit]
 * Each round allocates and frees 4096 bytes once on the main thread, then again on a second
 * thread; then the last round's main-thread pair is allocated once more and kept (one leak of
 * 4096 bytes, at the marked line of `alloc_pair`), so reports show the whole stack.
 * With `jit`, one more pair is allocated and freed under a frame of generated code (a few
 * instructions copied to an executable page: no object, no unwind information), as under a
 * JIT compiler's code. Prints "pairs=<n>" (events: 2*n + 1).
 */
#include <alloca.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static volatile unsigned long sink;
static int depth = 12;
static int rounds = 50;
static long pairs;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) static void alloc_pair(int keep)
{
    void *p;
    if (cudaMalloc(&p, 4096) != cudaSuccess) /* GPUMEMPROF-KEEP */
        exit(1);
    if (!keep && cudaFree(p) != cudaSuccess)
        exit(1);
    sink += (unsigned long)keep;
}

__attribute__((noinline)) static int recurse(int n, int keep)
{
    if (n <= 0) {
        alloc_pair(keep);
        return 0;
    }
    int r = recurse(n - 1, keep);
    sink++;
    return r + 1;
}

__attribute__((noinline)) static int big_frame(int keep)
{
    volatile char big[65536];
    big[sink & 0xffff] = 1;
    int r = recurse(depth, keep);
    return r + big[(sink + 7) & 0xffff];
}

/* A 64-byte aligned local and alloca: gcc realigns through a saved pointer (DRAP), and at
 * the call its CFA is *(rbp - 16) and rbp is saved at *rbp (two DWARF expressions). */
__attribute__((noinline)) static int realigned(int keep)
{
    char buf[64] __attribute__((aligned(64)));
    char *a = alloca(16 + (sink & 7));
    memset(buf, (int)sink, sizeof buf);
    a[0] = 3;
    __asm__ volatile("" : : "r"(buf), "r"(a) : "memory");
    int r = big_frame(keep);
    return r + buf[sink & 63] + a[0];
}

__attribute__((noinline)) static int with_alloca(int n, int keep, int (*next)(int, int))
{
    char *a = alloca((size_t)n + 16);
    memset(a, 1, (size_t)n + 16);
    __asm__ volatile("" : : "r"(a) : "memory");
    int r = next(keep, n);
    return r + a[n];
}

static int realigned_next(int keep, int n)
{
    (void)n;
    return realigned(keep);
}

/* Enough live values across the call that gcc spills into rbp as well. */
__attribute__((noinline)) static int rbp_as_register(int keep, int n)
{
    unsigned long a = sink + 1, b = sink * 3, c = sink ^ 5, d = sink + 7, e = sink * 11;
    unsigned long f = sink + 13, g = sink ^ 17, h = sink + 19;
    __asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g),
                     "+r"(h));
    int r = with_alloca(n + 8, keep, realigned_next);
    __asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g),
                     "+r"(h));
    sink += a + b + c + d + e + f + g + h;
    return r + 1;
}

__attribute__((noinline)) static int run(int keep)
{
    int r = with_alloca(24 + (int)(sink & 7), keep, rbp_as_register);
    pthread_mutex_lock(&count_lock);
    pairs += !keep;
    pthread_mutex_unlock(&count_lock);
    return r;
}

/* sub rsp, 8; call rdi; add rsp, 8; ret: calls its argument from a frame no unwind table
 * describes. */
static const unsigned char trampoline_code[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0xd7,
                                                0x48, 0x83, 0xc4, 0x08, 0xc3};

static void jit_pair(void)
{
    alloc_pair(0);
    pthread_mutex_lock(&count_lock);
    pairs++;
    pthread_mutex_unlock(&count_lock);
}

static void through_generated_code(void)
{
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        exit(1);
    memcpy(page, trampoline_code, sizeof trampoline_code);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0)
        exit(1);
    void (*trampoline)(void (*)(void)) = (void (*)(void (*)(void)))page;
    trampoline(jit_pair);
    munmap(page, 4096);
}

static void *thread_main(void *arg)
{
    (void)arg;
    run(0);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        depth = atoi(argv[1]);
    if (argc > 2)
        rounds = atoi(argv[2]);
    for (int i = 0; i < rounds; i++) {
        run(0);
        pthread_t t;
        if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0)
            return 1;
    }
    run(1);
    if (argc > 3 && strcmp(argv[3], "jit") == 0)
        through_generated_code();
    printf("pairs=%ld\n", pairs);
    return 0;
}
