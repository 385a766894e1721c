/* SPDX-License-Identifier: MIT */
/*
 * proto_fields: prints the protocol's field tables (protocol/codec_fields.c, through
 * proto_key_get) one key a line, so that tests/docs/check-protocol-fields.py can hold
 * protocol/README.md to them:
 *   TABLE<TAB>KEY<TAB>KIND<TAB>RANGE<TAB>TYPES<TAB>ALWAYS
 * TABLE is msg, ref (task-ref map) or gpu; KIND uint, int, str, bool or other; RANGE "MIN..MAX"
 * for integers (INT_MAX and the like by name), the most bytes for strings, "-" otherwise; TYPES
 * the message types that carry a msg key, comma-separated ("ALL" for every type); ALWAYS yes
 * when it is written even when empty.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "protocol/proto.h"

#include "common/mu_banned.h"

static void bound(int64_t v, char *buf, size_t size)
{
    if (v == INT_MAX)
        (void)mu_snprintf(buf, size, "INT_MAX");
    else if (v == INT_MIN)
        (void)mu_snprintf(buf, size, "INT_MIN");
    else if (v == INT64_MAX)
        (void)mu_snprintf(buf, size, "INT64_MAX");
    else
        (void)mu_snprintf(buf, size, "%" PRId64, v);
}

static void print_table(const char *name, enum proto_key_table table)
{
    const unsigned all = (1u << (PROTO_TYPE_LAST + 1)) - 2u;
    struct proto_key k;

    for (int i = 0; proto_key_get(table, i, &k); i++) {
        char range[64] = "-";
        char lo[24];
        char hi[24];
        if (strcmp(k.kind, "int") == 0) {
            bound(k.min, lo, sizeof(lo));
            bound(k.max, hi, sizeof(hi));
            (void)mu_snprintf(range, sizeof(range), "%s..%s", lo, hi);
        } else if (strcmp(k.kind, "str") == 0)
            (void)mu_snprintf(range, sizeof(range), "%zu", k.cap);
        (void)printf("%s\t%s\t%s\t%s\t", name, k.name, k.kind, range);
        if (k.types == all)
            (void)printf("ALL");
        else {
            const char *sep = "";
            for (int t = 1; t <= PROTO_TYPE_LAST; t++) {
                if (k.types & (1u << t)) {
                    (void)printf("%s%s", sep, proto_type_name((enum proto_type)t));
                    sep = ",";
                }
            }
        }
        (void)printf("\t%s\n", k.always ? "yes" : "no");
    }
}

int main(void)
{
    print_table("msg", PROTO_KEYS_MSG);
    print_table("ref", PROTO_KEYS_TASK_REF);
    print_table("gpu", PROTO_KEYS_GPU);
    return 0;
}
