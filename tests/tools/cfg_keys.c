/* SPDX-License-Identifier: MIT */
/*
 * cfg_keys: prints the config's table of top-level keys (cfg_keys, config/cfg.c), one line per
 * key: "NAME<TAB>DEFAULT<TAB>RANGE<TAB>RELOAD", so that tests/docs/check-config-keys.sh can hold
 * README's "Configuration" table to it.  DEFAULT is JSON for strings ("muster:") and integers,
 * README's words otherwise ([], none); RANGE is MIN..MAX for integers, "-" otherwise; RELOAD is
 * yes or no.
 */
#include <stdio.h>

#include "config/cfg.h"

#include "common/mu_banned.h"

int main(void)
{
    for (int i = 0; i < CFG_NKEYS; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        const char *reload = k->reload ? "yes" : "no";
        if (k->type == CFG_KEY_INT)
            (void)printf("%s\t%d\t%d..%d\t%s\n", k->name, k->def, k->min, k->max, reload);
        else if (k->size > 0)
            (void)printf("%s\t\"%s\"\t-\t%s\n", k->name, k->def_text, reload);
        else
            (void)printf("%s\t%s\t-\t%s\n", k->name, k->def_text, reload);
    }
    return 0;
}
