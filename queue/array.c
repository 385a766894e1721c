/* SPDX-License-Identifier: MIT */
/*
 * Job arrays (spec "array", issue #12): Slurm's --array syntax, "0-99", "1,3,5-7", "0-999:10",
 * with "%N" for at most N elements running at once.  The items are taken as Slurm takes them
 * (issue #43): in any order, repeated or overlapping ("5,1,3" is {1,3,5}, "1,1,2" is {1,2}),
 * empty items skipped ("1,,2", "1,2,"), blanks before a number allowed ("1, 3"), and "%0" or a
 * bare "%" meaning no throttle.  The text is kept as submitted; the parsed form is the set of
 * indices normalised into increasing ranges with a step, never the indices: a 1,000,000-element
 * array costs one range, and an element's index is found from its position (and back) by
 * walking them.  Normalising cuts the number line at every item's ends (at most 2 *
 * QUEUE_ARRAY_RANGES cuts) and, between two cuts, takes the one item there as it is, or a step
 * 1 item's span, and walks the indices only where items of different steps overlap.
 *
 * Invariants of a parsed array: 1..QUEUE_ARRAY_RANGES ranges, each first <= last with step >= 1
 * and last on the step (last = first + k * step), every index in 0..QUEUE_ARRAY_INDEX_MAX, and
 * the ranges strictly increasing (no index twice), so positions and indices map one to one.
 */
#include "queue/queue.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define STR_(x)   #x
#define MU_STR(x) STR_(x) /* a number macro as a string literal, for the messages */

/* Skips blanks, as Slurm's strtol does before a number. */
static void skip_blanks(const char **p)
{
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

/* Reads decimal digits at *p into *out (at most max); -1 when there are none or the number is
 * too large. */
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

/* One item at *p: "A", "A-B" or "A-B:S", into r; *step_text is set to S when the item gives
 * one (Slurm's SLURM_ARRAY_TASK_STEP is the first step written). */
static int read_item(const char **p,
                     const char *text,
                     struct queue_array_range *r,
                     int64_t *step_text,
                     struct mu_err *err)
{
    int64_t first;
    int64_t last;
    int64_t step = 1;

    skip_blanks(p);
    if (read_num(p, QUEUE_ARRAY_INDEX_MAX, &first) != 0)
        return bad(err, text, "an index (0.." MU_STR(QUEUE_ARRAY_INDEX_MAX) ") missing");
    last = first;
    if (**p == '-') {
        (*p)++;
        skip_blanks(p);
        if (read_num(p, QUEUE_ARRAY_INDEX_MAX, &last) != 0)
            return bad(err, text, "a range's end (0.." MU_STR(QUEUE_ARRAY_INDEX_MAX) ") missing");
        if (last < first)
            return bad(err, text, "a range ends before it starts");
        if (**p == ':') {
            (*p)++;
            skip_blanks(p);
            if (read_num(p, QUEUE_ARRAY_INDEX_MAX, &step) != 0 || step < 1)
                return bad(err, text, "a step of 1.." MU_STR(QUEUE_ARRAY_INDEX_MAX) " missing");
            if (*step_text == 0)
                *step_text = step;
        }
    }
    r->first = (int32_t)first;
    r->step = (int32_t)step;
    r->last = (int32_t)(first + (last - first) / step * step); /* on the step */
    return 0;
}

/* Appends the indices first..last by step (increasing, after every index out has) to out,
 * joining the last range when they continue it.  -1 when a new range would not fit. */
static int range_add(struct queue_array *out, int64_t first, int64_t last, int64_t step)
{
    struct queue_array_range *prev = out->nranges ? &out->ranges[out->nranges - 1] : NULL;
    int64_t n = (last - first) / step + 1;

    if (prev && prev->first == prev->last && (n == 1 || first - prev->first == step)) {
        prev->step = (int32_t)(first - prev->first); /* a lone index takes the gap as its step */
        prev->last = (int32_t)last;
    } else if (prev && first == (int64_t)prev->last + prev->step
               && (n == 1 || step == prev->step)) {
        prev->last = (int32_t)last;
    } else if (out->nranges == QUEUE_ARRAY_RANGES) {
        return -1;
    } else {
        out->ranges[out->nranges++] = (struct queue_array_range){ (int32_t)first, (int32_t)last,
                                                                  (int32_t)(n == 1 ? 1 : step) };
    }
    out->count += n;
    return 0;
}

/* The first index of r at or after lo. */
static int64_t first_from(const struct queue_array_range *r, int64_t lo)
{
    return lo <= r->first ? r->first : r->first + (lo - r->first + r->step - 1) / r->step * r->step;
}

/* The indices lo..hi of the items in[0..n) that span it (act[0..nact)), into out; each item
 * either covers all of lo..hi or none of it (the cuts are at every item's ends). */
static int segment_add(struct queue_array *out,
                       const struct queue_array_range *const *act,
                       int nact,
                       int64_t lo,
                       int64_t hi)
{
    int64_t next[QUEUE_ARRAY_RANGES];
    int64_t x;

    for (int i = 0; i < nact; i++) {
        if (act[i]->step == 1)
            return range_add(out, lo, hi, 1);
    }
    if (nact == 1) {
        int64_t f = first_from(act[0], lo);
        if (f > hi)
            return 0;
        return range_add(out, f, f + (hi - f) / act[0]->step * act[0]->step, act[0]->step);
    }
    /* Different steps overlap: walk the union, the smallest next index of the items each time. */
    for (int i = 0; i < nact; i++)
        next[i] = first_from(act[i], lo);
    for (;;) {
        x = hi + 1;
        for (int i = 0; i < nact; i++)
            x = next[i] < x ? next[i] : x;
        if (x > hi)
            return 0;
        if (out->count >= QUEUE_ARRAY_COUNT_MAX || range_add(out, x, x, 1) != 0)
            return -1;
        for (int i = 0; i < nact; i++) {
            if (next[i] == x)
                next[i] += act[i]->step;
        }
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a;
    int64_t y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The union of the items in[0..n) into out's ranges, normalised. */
static int normalise(const struct queue_array_range *in,
                     int n,
                     struct queue_array *out,
                     const char *text,
                     struct mu_err *err)
{
    int64_t cut[2 * QUEUE_ARRAY_RANGES] = { 0 };
    const struct queue_array_range *act[QUEUE_ARRAY_RANGES];
    int ncut = 0;

    for (int i = 0; i < n; i++) {
        cut[ncut++] = in[i].first;
        cut[ncut++] = (int64_t)in[i].last + 1;
    }
    qsort(cut, (size_t)ncut, sizeof(cut[0]), cmp_i64);
    for (int c = 0; c + 1 < ncut; c++) {
        int64_t lo = cut[c];
        int64_t hi = cut[c + 1] - 1;
        int nact = 0;
        if (hi < lo)
            continue; /* the same cut twice */
        for (int i = 0; i < n; i++) {
            if (in[i].first <= lo && in[i].last >= hi)
                act[nact++] = &in[i];
        }
        if (nact > 0 && segment_add(out, act, nact, lo, hi) != 0)
            return out->count >= QUEUE_ARRAY_COUNT_MAX
                       ? bad(err, text,
                             "items of different steps overlap over more than " MU_STR(
                                 QUEUE_ARRAY_COUNT_MAX) " indices")
                       : bad(err, text,
                             "more than " MU_STR(QUEUE_ARRAY_RANGES) " ranges once merged");
    }
    return 0;
}

/* The throttle after '%' at *p: "%N", "%0" or a bare "%" (no throttle, as in Slurm). */
static int read_throttle(const char **p,
                         const char *text,
                         struct queue_array *out,
                         struct mu_err *err)
{
    int64_t n = 0;

    (*p)++;
    skip_blanks(p);
    if (**p != '\0' && read_num(p, QUEUE_ARRAY_THROTTLE_MAX, &n) != 0)
        return bad(err, text,
                   "'%' takes a count of 0.." MU_STR(QUEUE_ARRAY_THROTTLE_MAX) " (0: no limit)");
    out->throttle = (int)n;
    return 0;
}

static int array_parse(const char *text, struct queue_array *out, struct mu_err *err)
{
    struct queue_array_range items[QUEUE_ARRAY_RANGES];
    int nitems = 0;
    int64_t step_text = 0;
    const char *p = text;

    if (strlen(text) >= sizeof(out->text))
        return mu_errf(err, MU_E_SPEC, "array: longer than %zu characters", sizeof(out->text) - 1);
    for (int i = 0; i < QUEUE_ARRAY_RANGES; i++)
        items[i] = (struct queue_array_range){ 0, 0, 1 }; /* read_item fills nitems of them */
    for (;;) {
        while (*p == ',')
            p++; /* an empty item is none, as Slurm's strtok_r skips it */
        if (*p == '\0' || *p == '%')
            break;
        if (nitems == QUEUE_ARRAY_RANGES)
            return bad(err, text, "more than " MU_STR(QUEUE_ARRAY_RANGES) " items");
        if (read_item(&p, text, &items[nitems], &step_text, err) != 0)
            return -1;
        nitems++;
        if (*p != ',' && *p != '%' && *p != '\0')
            return bad(err, text, "unexpected character");
    }
    if (nitems == 0)
        return bad(err, text, "an index (0.." MU_STR(QUEUE_ARRAY_INDEX_MAX) ") missing");
    if (*p == '%' && read_throttle(&p, text, out, err) != 0)
        return -1;
    if (*p != '\0')
        return bad(err, text, "unexpected character");
    if (normalise(items, nitems, out, text, err) != 0)
        return -1;
    out->step = step_text ? (int32_t)step_text : 1;
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
