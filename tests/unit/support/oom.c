/* SPDX-License-Identifier: MIT */
/*
 * The counting allocator behind oom.h.  It is a link-time seam: test_oom links with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup, so the calls that
 * muster's static libraries make to them land in the __wrap_ functions below, which count and
 * fail the Nth, and pass the rest to the C library's (__real_).  Chosen over an mu_malloc hook
 * because the tree calls the C library directly (about 250 sites): a wrapper would touch every
 * one and put a branch in every release allocation, while the seam costs release builds and the
 * other tests nothing.  cJSON is a shared library that --wrap cannot reach, so oom_run also gives
 * it these functions through cJSON_InitHooks.  strdup and strndup are rebuilt on __wrap_malloc
 * so that a copy counts as one allocation (the C library's would call its own malloc unseen).
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "tests/unit/support/oom.h"

#include "common/mu_banned.h"

// NOLINTBEGIN(bugprone-reserved-identifier): the linker's __wrap_/__real_ names
void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
// NOLINTEND(bugprone-reserved-identifier)

#define OOM_MAX_SITES 4096

static long fail_at;          /* the allocation to fail, counted from 1; 0: none */
static long count;            /* allocations since the last arm */
static bool failed;           /* whether allocation fail_at came */
static const void *last_site; /* the caller of the allocation that failed */
static const void *sites[OOM_MAX_SITES];
static int nsites;

static void note_site(const void *site)
{
    for (int i = 0; i < nsites; i++) {
        if (sites[i] == site)
            return;
    }
    if (nsites < OOM_MAX_SITES)
        sites[nsites++] = site;
    if (getenv("MUSTER_OOM_VERBOSE"))
        print_message("oom: new site %p\n", site);
}

/* Whether this allocation fails; site is the caller, recorded when it does. */
static bool fail_now(const void *site)
{
    if (fail_at <= 0)
        return false;
    if (++count != fail_at)
        return false;
    failed = true;
    last_site = site;
    note_site(site);
    return true;
}

// NOLINTBEGIN(bugprone-reserved-identifier): the linker's __wrap_ names
void *__wrap_malloc(size_t size)
{
    if (fail_now(__builtin_return_address(0)))
        return NULL;
    return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (fail_now(__builtin_return_address(0)))
        return NULL;
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    if (fail_now(__builtin_return_address(0)))
        return NULL;
    return __real_realloc(p, size);
}

static char *copy(const char *s, size_t n, const void *site)
{
    char *out;
    if (fail_now(site))
        return NULL;
    out = __real_malloc(n + 1);
    if (out) {
        memcpy(out, s, n);
        out[n] = '\0';
    }
    return out;
}

char *__wrap_strdup(const char *s)
{
    return copy(s, strlen(s), __builtin_return_address(0));
}

char *__wrap_strndup(const char *s, size_t n)
{
    return copy(s, strnlen(s, n), __builtin_return_address(0));
}
// NOLINTEND(bugprone-reserved-identifier)

static void *cjson_malloc(size_t size)
{
    if (fail_now(__builtin_return_address(0)))
        return NULL;
    return __real_malloc(size);
}

static void arm(long n)
{
    fail_at = n;
    count = 0;
    failed = false;
}

void oom_disarm(void)
{
    arm(0);
}

int oom_sites(void)
{
    return nsites;
}

int oom_run(const char *name, oom_scenario_fn fn, void *arg, int *fallbacks)
{
    cJSON_Hooks hooks = { cjson_malloc, free };
    struct mu_err err;
    long clean;
    int rc;

    cJSON_InitHooks(&hooks);
    if (fallbacks)
        *fallbacks = 0;
    /* The clean run counts the allocations (fail_at past any run) and must succeed. */
    arm(LONG_MAX);
    mu_err_clear(&err);
    rc = fn(arg, &err);
    clean = count;
    oom_disarm();
    if (rc != 0)
        fail_msg("%s: fails without injection: %s", name, err.msg);
    for (long n = 1;; n++) {
        bool hit;
        arm(n);
        mu_err_clear(&err);
        rc = fn(arg, &err);
        hit = failed;
        oom_disarm();
        if (!hit) {
            if (rc != 0)
                fail_msg("%s: fails with no allocation failed: %s", name, err.msg);
            break;
        }
        if (rc != 0 && err.msg[0] == '\0')
            fail_msg("%s: allocation %ld failed: -1 with no message", name, n);
        if (rc == 0 && getenv("MUSTER_OOM_VERBOSE"))
            print_message("%s: allocation %ld failed at %p: 0 (a fallback)\n", name, n, last_site);
        if (rc == 0 && fallbacks)
            (*fallbacks)++;
    }
    cJSON_InitHooks(NULL);
    return (int)clean;
}
