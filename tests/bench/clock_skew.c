/*
 * clock_skew.c: is a TSC stamp taken after seeing another thread's hand-off ever lower than the
 * stamp that thread took before handing off? The shim's clock question (BENCHMARKS.md, issue 28):
 * `lfence; rdtsc` against a bare `rdtsc`, on two threads passing a token.
 *
 * Build and run: gcc -O2 -pthread tests/bench/clock_skew.c -o /tmp/clock_skew &&
 *                /tmp/clock_skew MODE 2000000
 * MODE 0: both stamps bare; 1: both fenced; 2: the stamp after seeing the hand-off fenced and
 * the one before handing off bare (the shim's: an allocation's stamp fenced, a free's bare).
 * A stamp before a hand-off needs no fence: it is read before it retires, and the store that
 * hands off becomes visible only after it retires.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

static _Atomic uint64_t token;   // (round << 1) | owner
static _Atomic uint64_t stamp;   // the passer's stamp
static int fenced;
static long rounds;
static long inversions[2];
static uint64_t worst[2];

/* The stamp after seeing the hand-off (an allocation's, after its call returned). */
static inline uint64_t now(void) {
    if (fenced) { _mm_lfence(); return __rdtsc(); }
    return __rdtsc();
}

/* The stamp before handing off (a free's, before its call): fenced in mode 1 only; mode 2
 * stamps it bare, as the shim does. */
static inline uint64_t now_before(void) {
    if (fenced == 1) { _mm_lfence(); return __rdtsc(); }
    return __rdtsc();
}

static void *run(void *arg) {
    int me = (int)(intptr_t)arg;
    for (long r = me; r < rounds; r += 2) {
        while (atomic_load_explicit(&token, memory_order_acquire) != (uint64_t)r) ;
        uint64_t seen = now();                      // "the call returned"
        uint64_t before = atomic_load_explicit(&stamp, memory_order_relaxed);
        if (r > 0 && seen < before) { inversions[me]++; if (before - seen > worst[me]) worst[me] = before - seen; }
        uint64_t t = now_before();                  // "the free is called"
        atomic_store_explicit(&stamp, t, memory_order_relaxed);
        atomic_store_explicit(&token, (uint64_t)r + 1, memory_order_release);
    }
    return 0;
}

int main(int argc, char **argv) {
    fenced = atoi(argv[1]);
    rounds = atol(argv[2]);
    pthread_t a, b;
    pthread_create(&a, 0, run, (void *)0);
    pthread_create(&b, 0, run, (void *)1);
    pthread_join(a, 0);
    pthread_join(b, 0);
    static const char *names[] = {"rdtsc", "lfence;rdtsc", "lfence;rdtsc after, rdtsc before"};
    printf("%s: %ld rounds, %ld inversions, worst %lu ticks\n", names[fenced],
           rounds, inversions[0] + inversions[1], worst[0] > worst[1] ? worst[0] : worst[1]);
    return 0;
}
