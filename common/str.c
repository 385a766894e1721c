/* SPDX-License-Identifier: MIT */
/*
 * String and number helpers that report errors instead of guessing: every count, port and
 * priority that comes from a user goes through mu_parse_i64 with explicit bounds.
 */
#include "common/mu.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/mu_banned.h"

size_t mu_strlcpy(char *dst, const char *src, size_t size)
{
    size_t len = strlen(src);
    if (size) {
        size_t n = len < size - 1 ? len : size - 1;
        memcpy(dst, src, n);
        dst[n] = '\0';
    }
    return len;
}

uint64_t mu_hash_more(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint64_t mu_hash(const void *p, size_t n)
{
    return mu_hash_more(MU_HASH_START, p, n);
}

int mu_snprintf(char *dst, size_t size, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(dst, size, fmt, ap);
    va_end(ap);
    return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

int mu_parse_i64(const char *text, int64_t min, int64_t max, int64_t *out, struct mu_err *err)
{
    char *end = NULL;
    long long v;

    if (!text || !*text || isspace((unsigned char)*text))
        return mu_errf(err, MU_E_PARSE, "expected an integer, got '%s'", text ? text : "");
    errno = 0;
    v = strtoll(text, &end, 10);
    if (*end != '\0')
        return mu_errf(err, MU_E_PARSE, "expected an integer, got '%s'", text);
    if (errno == ERANGE || v < min || v > max)
        return mu_errf(err, MU_E_RANGE, "'%s' is out of range %lld..%lld", text, (long long)min,
                       (long long)max);
    *out = (int64_t)v;
    return 0;
}

int mu_parse_double(const char *text, double min, double max, double *out, struct mu_err *err)
{
    char *end = NULL;
    double v;

    if (!text || !*text || isspace((unsigned char)*text))
        return mu_errf(err, MU_E_PARSE, "expected a number, got '%s'", text ? text : "");
    errno = 0;
    v = strtod(text, &end);
    if (*end != '\0')
        return mu_errf(err, MU_E_PARSE, "expected a number, got '%s'", text);
    if (errno == ERANGE || !isfinite(v) || v < min || v > max)
        return mu_errf(err, MU_E_RANGE, "'%s' is out of range %g..%g", text, min, max);
    *out = v;
    return 0;
}

bool mu_name_is_valid(const char *s, size_t max_len)
{
    size_t n = 0;
    if (!s || !*s)
        return false;
    for (; s[n]; n++) {
        unsigned char c = (unsigned char)s[n];
        if (n >= max_len || !(isalnum(c) || c == '.' || c == '_' || c == '-' || c == ':'))
            return false;
    }
    return true;
}

/* Skips digits at *p (at least one, at most 4) and then the literal lit; false if either is
 * missing. */
static bool digits_then(const char **p, const char *lit)
{
    int n = 0;
    while (isdigit((unsigned char)**p) && n < 5) {
        (*p)++;
        n++;
    }
    if (n == 0 || n > 4 || strncmp(*p, lit, strlen(lit)) != 0)
        return false;
    *p += strlen(lit);
    return true;
}

bool mu_mig_profile_is_valid(const char *s)
{
    const char *p = s;
    const char *dot;
    if (!s || strlen(s) > 31)
        return false;
    /* An optional compute-instance prefix "Nc." */
    dot = strchr(p, '.');
    if (dot && dot > p && dot[-1] == 'c') {
        if (!digits_then(&p, "c."))
            return false;
    }
    if (!digits_then(&p, "g.") || !digits_then(&p, "gb"))
        return false;
    if (*p == '\0')
        return true;
    if (*p++ != '+' || !*p)
        return false;
    for (; *p; p++) {
        if (!isalnum((unsigned char)*p))
            return false;
    }
    return true;
}

static const struct {
    const char *name;
    int sig;
} signal_table[] = {
    { "HUP", SIGHUP },   { "INT", SIGINT },   { "QUIT", SIGQUIT },   { "KILL", SIGKILL },
    { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "TERM", SIGTERM },   { "ALRM", SIGALRM },
    { "CONT", SIGCONT }, { "STOP", SIGSTOP }, { "WINCH", SIGWINCH },
};

int mu_signal_parse(const char *name)
{
    int64_t num = 0;
    if (!name)
        return -1;
    if (mu_parse_i64(name, 1, 64, &num, NULL) == 0)
        return (int)num;
    if (strncasecmp(name, "SIG", 3) == 0)
        name += 3;
    for (size_t i = 0; i < MU_ARRAY_LEN(signal_table); i++) {
        if (strcasecmp(name, signal_table[i].name) == 0)
            return signal_table[i].sig;
    }
    return -1;
}

const char *mu_signal_name(int sig)
{
    static const char *const full[] = { "SIGHUP",  "SIGINT",  "SIGQUIT", "SIGKILL",
                                        "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGALRM",
                                        "SIGCONT", "SIGSTOP", "SIGWINCH" };
    for (size_t i = 0; i < MU_ARRAY_LEN(signal_table); i++) {
        if (signal_table[i].sig == sig)
            return full[i];
    }
    return "SIG?";
}

/* Appends v's digits (v >= 0), at least min_digits of them, at *pos within size - 1. */
static void put_digits(char *buf, size_t size, size_t *pos, int64_t v, int min_digits)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0 || n < min_digits);
    while (n > 0 && *pos + 1 < size)
        buf[(*pos)++] = tmp[--n];
}

/* Without snprintf: a scheduling pass formats one per waiting job. */
void mu_duration_format(int64_t s, char *buf, size_t size)
{
    size_t pos = 0;
    if (size == 0)
        return;
    if (s < 0)
        s = 0;
    if (s < 60) {
        put_digits(buf, size, &pos, s, 1);
        if (pos + 1 < size)
            buf[pos++] = 's';
    } else if (s < 3600) {
        put_digits(buf, size, &pos, (s + 59) / 60, 1);
        if (pos + 1 < size)
            buf[pos++] = 'm';
    } else {
        put_digits(buf, size, &pos, s / 3600, 1);
        if (pos + 1 < size)
            buf[pos++] = 'h';
        put_digits(buf, size, &pos, (s % 3600) / 60, 2);
        if (pos + 1 < size)
            buf[pos++] = 'm';
    }
    buf[pos] = '\0';
}
