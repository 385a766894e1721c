/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the job array syntax (queue/array.c, spec "array", issue #12) and the element
 * ids ("<array id>_<index>").  The input is made a C string, as the spec's string value is.  For
 * any bytes the parser must return 0, or -1 with a message and the output all zeroes; a parsed
 * array must hold its invariants: 1..QUEUE_ARRAY_RANGES increasing ranges (normalised, issue
 * #43: no index twice, whatever order the items came in), count their sum, a Slurm step of at
 * least 1, and positions and indices mapping one to one (checked at the ends of every range).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queue/queue.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_array(const struct queue_array *a)
{
    int64_t before = 0;

    if (a->nranges < 1 || a->nranges > QUEUE_ARRAY_RANGES || a->count < 1 || a->throttle < 0
        || a->step < 1)
        abort();
    for (int i = 0; i < a->nranges; i++) {
        const struct queue_array_range *r = &a->ranges[i];
        int64_t n = (int64_t)(r->last - r->first) / r->step + 1;
        if (r->first < 0 || r->last > QUEUE_ARRAY_INDEX_MAX || r->first > r->last || r->step < 1
            || (r->last - r->first) % r->step != 0)
            abort();
        if (i > 0 && r->first <= a->ranges[i - 1].last)
            abort();
        if (queue_array_index(a, before) != r->first
            || queue_array_index(a, before + n - 1) != r->last
            || queue_array_position(a, r->first) != before
            || queue_array_position(a, r->last) != before + n - 1)
            abort();
        before += n;
    }
    if (before != a->count || queue_array_index(a, a->count) != -1)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct queue_array a;
    struct mu_err err;
    char base[QUEUE_JOB_ID_MAX];
    int64_t index = -1;
    char *text;

    if (size > 4096)
        return 0;
    text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    mu_err_clear(&err);
    if (queue_array_parse(text, &a, &err) == 0) {
        check_array(&a);
    } else {
        const unsigned char *p = (const unsigned char *)&a;
        for (size_t i = 0; i < sizeof(a); i++) {
            if (p[i] != 0)
                abort();
        }
        if (err.msg[0] == '\0')
            abort();
    }
    if (queue_job_id_split(text, base, sizeof(base), &index)
        && (index < 0 || index > QUEUE_ARRAY_INDEX_MAX || strlen(base) >= sizeof(base)))
        abort();
    free(text);
    return 0;
}
