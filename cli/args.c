/* SPDX-License-Identifier: MIT */
/*
 * Access to a command's parsed options by name.  main.c parses argv against the command table
 * into struct ctl_args (one slot per option); handlers read the slots here, so the option names
 * in the table are the only place a name is spelled out.
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

const char *ctl_args_get(const struct ctl *ctl, const struct ctl_args *args, const char *name)
{
    size_t idx = 0;

    for (const struct ctl_opt *o = ctl->cmd->options; o && o->name; o++, idx++) {
        if (strcmp(o->name, name) == 0)
            return idx < CTL_MAX_OPTS ? args->value[idx] : NULL;
    }
    (void)MU_NEVER(1); /* a handler asked for an option its table entry does not declare */
    return NULL;
}

int ctl_args_int(const struct ctl *ctl,
                 const struct ctl_args *args,
                 const char *name,
                 int64_t min,
                 int64_t max,
                 int64_t *out)
{
    const char *text = ctl_args_get(ctl, args, name);
    struct mu_err err = { 0 };

    if (!text)
        return 0;
    if (mu_parse_i64(text, min, max, out, &err) != 0) {
        ctl_usage(ctl, "--%s: %s", name, err.msg);
        return -1;
    }
    return 0;
}

size_t ctl_args_all(const struct ctl *ctl,
                    const struct ctl_args *args,
                    const char *name,
                    const char **out,
                    size_t max)
{
    size_t idx = 0;
    size_t n = 0;
    const struct ctl_opt *o = ctl->cmd->options;

    for (; o && o->name && strcmp(o->name, name) != 0; o++)
        idx++;
    if (MU_NEVER(!o || !o->name))
        return 0; /* a handler asked for an option its table entry does not declare */
    for (int i = 0; i < args->nocc; i++) {
        if (args->occ[i].opt != idx)
            continue;
        if (n < max)
            out[n] = args->occ[i].value;
        n++;
    }
    return n;
}
