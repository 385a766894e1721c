/* SPDX-License-Identifier: MIT */
/*
 * The CSV reading under every trace layout (internal.h), and the seeded random numbers.  The
 * splitter works in place on a copy of one line, so a trace of a million rows makes no
 * allocation per field; RFC 4180 quoting is accepted because exported job lists quote names,
 * but a quoted field may not span lines (each line is read and reported on its own).
 */
#include "sim/internal.h"

#include <math.h>
#include <string.h>

#include "common/mu_banned.h"

static char *trim(char *s, char *end)
{
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *end = '\0';
    return s;
}

/* A quoted field starting at p (after the opening quote): unescapes in place; returns the
 * character after the closing quote, or NULL when there is none. */
static char *unquote(char *p, char **value)
{
    char *out = p;
    *value = p;
    for (;;) {
        if (*p == '\0')
            return NULL;
        if (*p == '"') {
            if (p[1] != '"') {
                *out = '\0';
                return p + 1;
            }
            p++;
        }
        *out++ = *p++;
    }
}

int sim_csv_split(char *line, char **fields, int max, int *n, struct mu_err *err)
{
    char *p = line;
    int k = 0;

    for (;;) {
        char *start;
        if (k == max)
            return mu_errf(err, MU_E_PARSE, "column %d: more than %d columns", k + 1, max);
        while (*p == ' ' || *p == '\t')
            p++;
        start = p;
        if (*p == '"') {
            char *after = unquote(p + 1, &fields[k]);
            if (!after)
                return mu_errf(err, MU_E_PARSE, "column %d: unterminated quote", k + 1);
            while (*after == ' ' || *after == '\t')
                after++;
            if (*after != ',' && *after != '\0')
                return mu_errf(err, MU_E_PARSE, "column %d: text after a closing quote", k + 1);
            p = after;
        } else {
            while (*p != ',' && *p != '\0')
                p++;
        }
        k++;
        if (*p == '\0') {
            if (*start != '"')
                fields[k - 1] = trim(start, p);
            break;
        }
        if (*start != '"')
            fields[k - 1] = trim(start, p);
        *p++ = '\0';
    }
    *n = k;
    return 0;
}

bool sim_csv_next_line(const char *text, size_t len, size_t *pos, const char **line, size_t *n)
{
    const char *nl;
    size_t end;

    if (*pos >= len)
        return false;
    nl = memchr(text + *pos, '\n', len - *pos);
    end = nl ? (size_t)(nl - text) : len;
    *line = text + *pos;
    *n = end - *pos;
    if (*n > 0 && (*line)[*n - 1] == '\r')
        (*n)--;
    *pos = nl ? end + 1 : len;
    return true;
}

uint64_t sim_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double sim_rng_unit(uint64_t *state)
{
    /* 53 random bits, shifted off 0 so that log() below never sees it */
    return ((double)(sim_rng_next(state) >> 11) + 0.5) / 9007199254740992.0;
}

double sim_rng_exp(uint64_t *state, double mean)
{
    return -log(sim_rng_unit(state)) * mean;
}

uint64_t sim_rng_mix(uint64_t a, uint64_t b)
{
    uint64_t s = a ^ (b * 0xd1342543de82ef95ULL);
    return sim_rng_next(&s);
}
