/* SPDX-License-Identifier: MIT */
/*
 * mu_opt: one table per program's command-line options that drives both getopt_long and the
 * option lines of --help, so that a flag is named once in the code (issue #41).  The man pages
 * and README are held to --help by tests/docs/check-options.sh.
 */
#ifndef MUSTER_COMMON_MU_OPT_H
#define MUSTER_COMMON_MU_OPT_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

/* The most rows a table may have (the struct option array a caller provides has one more). */
#define MU_OPT_MAX 48

struct mu_opt {
    const char *name;    /* the long name, without "--": "config" */
    int val;             /* getopt_long's value: the short letter ('c'), or an id >= 256 */
    const char *arg;     /* the argument's name in --help ("FILE"); NULL: it takes none */
    const char *help;    /* its help, lines joined by '\n', no newline at the end */
    const char *heading; /* printed just before this row ("\nOptions:\n"); NULL: none */
};

/*
 * Fills longopts (n + 1 entries, the last all zero) and shortopts: prefix (":" or "") and then,
 * for each row with a short letter, the letter, with ':' when it takes an argument.  0, or -1
 * when n > MU_OPT_MAX or shortopts (size bytes) is too small.
 */
int mu_opt_getopt(const struct mu_opt *opts,
                  size_t n,
                  const char *prefix,
                  struct option *longopts,
                  char *shortopts,
                  size_t size);

/*
 * Writes the rows as --help shows them: "  -c, --config FILE" ("      --name ARG" for a long-only
 * row of a table that has short letters, "  --name ARG" in one that has none), the help's first
 * line at column col (two spaces after a flag that reaches it), its other lines indented to col.
 */
void mu_opt_help(FILE *f, const struct mu_opt *opts, size_t n, int col);

#endif
