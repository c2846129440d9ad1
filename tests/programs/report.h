/*
 * report.h: how the client programs of tests/programs say what they did. Each prints one
 * "key=value" line per fact on stdout (device addresses in hex: the simulators' addresses are
 * deterministic) and, when a call returns something other than expected, a message on stderr and
 * exit status 1. A program defines PROGRAM (its name, for messages) before including this.
 */
#ifndef GPUMEMPROF_PROGRAMS_REPORT_H
#define GPUMEMPROF_PROGRAMS_REPORT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void put_hex(const char *key, unsigned long long v)
{
    printf("%s=0x%llx\n", key, v);
}

static inline void put_u64(const char *key, unsigned long long v)
{
    printf("%s=%llu\n", key, v);
}

static inline void put_int(const char *key, long long v)
{
    printf("%s=%lld\n", key, v);
}

static inline void put_str(const char *key, const char *v)
{
    printf("%s=%s\n", key, v);
}

/* Exits 1 unless `got` is `want`. */
static inline void expect_rc(const char *what, int got, int want)
{
    if (got != want) {
        fflush(stdout);
        fprintf(stderr, "%s: %s returned %d, expected %d\n", PROGRAM, what, got, want);
        exit(1);
    }
}

/* Exits 1 unless the two values are equal. */
static inline void expect_eq(const char *what, unsigned long long got, unsigned long long want)
{
    if (got != want) {
        fflush(stdout);
        fprintf(stderr, "%s: %s is 0x%llx (%llu), expected 0x%llx (%llu)\n", PROGRAM, what, got,
                got, want, want);
        exit(1);
    }
}

/* Managed and pinned memory is real host memory: page aligned and writable. Its address varies
 * between runs, so it is printed as "host-page-aligned". */
static inline void put_host(const char *key, void *p, size_t size)
{
    if (p == NULL || (uintptr_t)p % 4096 != 0) {
        fflush(stdout);
        fprintf(stderr, "%s: %s: %p is not a page-aligned host pointer\n", PROGRAM, key, p);
        exit(1);
    }
    memset(p, 0xab, size); /* the program really touches it */
    put_str(key, "host-page-aligned");
}

#endif /* GPUMEMPROF_PROGRAMS_REPORT_H */
