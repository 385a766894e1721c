/* SPDX-License-Identifier: MIT */
/*
 * The benchmarks' options, in one place: "--name value" pairs after the program's first
 * arguments (a subcommand counts), looked up by name, and numbers among them checked.
 * Header-only (static inline), as each benchmark is one program linked with as little as it
 * needs.
 */
#ifndef MUSTER_BENCH_ARGS_H
#define MUSTER_BENCH_ARGS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu.h"

/* The value after name in argv[first..argc), or def when name is not there. */
static inline const char *bench_arg(
    int argc, char **argv, int first, const char *name, const char *def)
{
    for (int i = first; i + 1 < argc; i++) {
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    }
    return def;
}

/* name's value as an integer in min..max, or def when name is not there; any other value ends
 * the program (exit 2) saying so, prefixed with prog. */
static inline int64_t bench_num_arg(const char *prog,
                                    int argc,
                                    char **argv,
                                    int first,
                                    const char *name,
                                    int64_t min,
                                    int64_t max,
                                    int64_t def)
{
    int64_t v = def;
    const char *s = bench_arg(argc, argv, first, name, NULL);
    if (s && mu_parse_i64(s, min, max, &v, NULL) != 0) {
        (void)fprintf(stderr, "%s: %s: bad number '%s' (expected %lld..%lld)\n", prog, name, s,
                      (long long)min, (long long)max);
        exit(2);
    }
    return v;
}

#endif
