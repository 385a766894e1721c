/* SPDX-License-Identifier: MIT */
/*
 * Job arrays (spec "array", issue #12): Slurm's --array syntax, "0-99", "1,3,5-7", "0-999:10",
 * with "%N" for at most N elements running at once.  The parsed form keeps the ranges, never
 * the indices: a 1,000,000-element array costs 64 ranges, and an element's index is found from
 * its position (and back) by walking them.
 *
 * Invariants of a parsed array: 1..QUEUE_ARRAY_RANGES ranges, each first <= last with step >= 1
 * and last on the step (last = first + k * step), every index in 0..QUEUE_ARRAY_INDEX_MAX, and
 * the ranges strictly increasing (no index twice), so positions and indices map one to one.
 */
#include "queue/queue.h"

#include <string.h>

#include "common/mu_banned.h"

#define STR_(x)   #x
#define MU_STR(x) STR_(x) /* a number macro as a string literal, for the messages */

/* Reads decimal digits at *p into *out (at most QUEUE_ARRAY_INDEX_MAX); -1 when there are none
 * or the number is too large. */
static int read_num(const char **p, int64_t max, int64_t *out)
{
    int64_t v = 0;
    const char *s = *p;

    if (*s < '0' || *s > '9')
        return -1;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s - '0');
        if (v > max)
            return -1;
        s++;
    }
    *p = s;
    *out = v;
    return 0;
}

static int bad(struct mu_err *err, const char *text, const char *why)
{
    return mu_errf(err, MU_E_SPEC,
                   "array: %s in '%.64s'; expected indices such as \"0-99\", \"1,3,5-7\" or "
                   "\"0-999:10\", optionally with \"%%N\" (at most N running)",
                   why, text);
}

/* One item at *p: "A", "A-B" or "A-B:S", into r. */
static int read_item(const char **p,
                     const char *text,
                     struct queue_array_range *r,
                     struct mu_err *err)
{
    int64_t first;
    int64_t last;
    int64_t step = 1;

    if (read_num(p, QUEUE_ARRAY_INDEX_MAX, &first) != 0)
        return bad(err, text, "an index (0.." MU_STR(QUEUE_ARRAY_INDEX_MAX) ") missing");
    last = first;
    if (**p == '-') {
        (*p)++;
        if (read_num(p, QUEUE_ARRAY_INDEX_MAX, &last) != 0)
            return bad(err, text, "a range's end (0.." MU_STR(QUEUE_ARRAY_INDEX_MAX) ") missing");
        if (last < first)
            return bad(err, text, "a range ends before it starts");
        if (**p == ':') {
            (*p)++;
            if (read_num(p, QUEUE_ARRAY_INDEX_MAX, &step) != 0 || step < 1)
                return bad(err, text, "a step of 1.." MU_STR(QUEUE_ARRAY_INDEX_MAX) " missing");
        }
    }
    r->first = (int32_t)first;
    r->step = (int32_t)step;
    r->last = (int32_t)(first + (last - first) / step * step); /* on the step */
    return 0;
}

static int array_parse(const char *text, struct queue_array *out, struct mu_err *err)
{
    const char *p = text;

    if (strlen(text) >= sizeof(out->text))
        return mu_errf(err, MU_E_SPEC, "array: longer than %zu characters", sizeof(out->text) - 1);
    for (;;) {
        struct queue_array_range r = { 0, 0, 1 };
        if (out->nranges == QUEUE_ARRAY_RANGES)
            return bad(err, text, "more than " MU_STR(QUEUE_ARRAY_RANGES) " items");
        if (read_item(&p, text, &r, err) != 0)
            return -1;
        if (out->nranges > 0 && r.first <= out->ranges[out->nranges - 1].last)
            return bad(err, text, "indices not increasing (each item must start after the last)");
        out->ranges[out->nranges++] = r;
        out->count += (int64_t)(r.last - r.first) / r.step + 1;
        if (*p != ',')
            break;
        p++;
    }
    if (*p == '%') {
        int64_t n;
        p++;
        if (read_num(&p, 1000000, &n) != 0 || n < 1)
            return bad(err, text, "'%' needs a count of 1..1000000 after it");
        out->throttle = (int)n;
    }
    if (*p != '\0')
        return bad(err, text, "unexpected character");
    mu_strlcpy(out->text, text, sizeof(out->text));
    return 0;
}

int queue_array_parse(const char *text, struct queue_array *out, struct mu_err *err)
{
    memset(out, 0, sizeof(*out));
    if (array_parse(text, out, err) == 0)
        return 0;
    memset(out, 0, sizeof(*out)); /* on failure: all zeroes */
    return -1;
}

int64_t queue_array_index(const struct queue_array *a, int64_t pos)
{
    for (int i = 0; i < a->nranges && pos >= 0; i++) {
        const struct queue_array_range *r = &a->ranges[i];
        int64_t n = (int64_t)(r->last - r->first) / r->step + 1;
        if (pos < n)
            return r->first + pos * r->step;
        pos -= n;
    }
    return -1;
}

int64_t queue_array_position(const struct queue_array *a, int64_t index)
{
    int64_t before = 0;

    for (int i = 0; i < a->nranges; i++) {
        const struct queue_array_range *r = &a->ranges[i];
        int64_t n = (int64_t)(r->last - r->first) / r->step + 1;
        if (index >= r->first && index <= r->last)
            return (index - r->first) % r->step == 0 ? before + (index - r->first) / r->step : -1;
        before += n;
    }
    return -1;
}

bool queue_job_id_split(const char *id, char *base, size_t base_size, int64_t *index)
{
    const char *us = strchr(id, '_');
    size_t n;
    int64_t v = 0;
    const char *p;

    if (!us)
        return false;
    n = (size_t)(us - id);
    if (n == 0 || n >= base_size)
        return false;
    p = us + 1;
    if (read_num(&p, QUEUE_ARRAY_INDEX_MAX, &v) != 0 || *p != '\0')
        return false;
    memcpy(base, id, n);
    base[n] = '\0';
    *index = v;
    return true;
}
