/*
 * sim_env.h: how every simulated library (libcuda, libamdhip64, libnvidia-ml) reads its
 * environment variables, so they all accept and reject the same spellings.
 *
 * A value is decimal digits only (no sign, no blanks, no suffix); empty means unset. A malformed
 * or out-of-range value is reported once on stderr, naming the variable and what the library does
 * instead, and the caller treats its configuration as broken.
 */
#ifndef GPUMEMPROF_SIM_ENV_H
#define GPUMEMPROF_SIM_ENV_H

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Reads `name` into *out (`def` when unset). Returns 0, or -1 after saying on stderr, prefixed by
 * `tag`, that the value is malformed and `consequence`. */
static inline int sim_env_number(const char *tag, const char *name, unsigned long long def,
                                 unsigned long long min, unsigned long long max,
                                 const char *consequence, unsigned long long *out)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    /* strtoull would accept leading blanks and a minus sign: demand digits only. */
    if (!isdigit((unsigned char)s[0]) || *end != '\0' || errno != 0 || v < min || v > max) {
        fprintf(stderr, "%s: %s=\"%s\" is not a decimal number in [%llu, %llu]; %s\n", tag, name, s,
                min, max, consequence);
        return -1;
    }
    *out = v;
    return 0;
}

#endif /* GPUMEMPROF_SIM_ENV_H */
