/* SPDX-License-Identifier: MIT */
/*
 * mu_opt: getopt_long's arrays and the option lines of --help, both from one table per program
 * (common/mu_opt.h), so that adding a flag is one row and --help cannot forget it.
 */
#include "common/mu_opt.h"

#include <stdbool.h>
#include <string.h>

#include "common/mu_banned.h"

static bool has_short(const struct mu_opt *o)
{
    return o->val > 0 && o->val < 128;
}

int mu_opt_getopt(const struct mu_opt *opts,
                  size_t n,
                  const char *prefix,
                  struct option *longopts,
                  char *shortopts,
                  size_t size)
{
    size_t len = strlen(prefix);

    if (n > MU_OPT_MAX || len >= size)
        return -1;
    memcpy(shortopts, prefix, len + 1);
    for (size_t i = 0; i < n; i++) {
        longopts[i] = (struct option){ .name = opts[i].name,
                                       .has_arg = opts[i].arg ? required_argument : no_argument,
                                       .flag = NULL,
                                       .val = opts[i].val };
        if (!has_short(&opts[i]))
            continue;
        if (len + 3 > size)
            return -1;
        shortopts[len++] = (char)opts[i].val;
        if (opts[i].arg)
            shortopts[len++] = ':';
        shortopts[len] = '\0';
    }
    longopts[n] = (struct option){ 0 };
    return 0;
}

void mu_opt_help(FILE *f, const struct mu_opt *opts, size_t n, int col)
{
    bool any_short = false;

    for (size_t i = 0; i < n; i++)
        any_short = any_short || has_short(&opts[i]);
    for (size_t i = 0; i < n; i++) {
        const struct mu_opt *o = &opts[i];
        const char *line = o->help;
        int w;
        if (o->heading)
            (void)fputs(o->heading, f);
        if (has_short(o))
            w = fprintf(f, "  -%c, --%s", o->val, o->name);
        else
            w = fprintf(f, "%s--%s", any_short ? "      " : "  ", o->name);
        if (o->arg)
            w += fprintf(f, " %s", o->arg);
        (void)fprintf(f, "%*s", w < col ? col - w : 2, "");
        for (;;) {
            size_t len = strcspn(line, "\n");
            (void)fprintf(f, "%.*s\n", (int)len, line);
            if (!line[len])
                break;
            line += len + 1;
            (void)fprintf(f, "%*s", col, "");
        }
    }
}
