/* SPDX-License-Identifier: MIT */
/*
 * Error values with messages (docs/style.md §1.3).  The code list is one X-macro in mu.h so that
 * the enum, the names and the default texts can never drift apart.  mu_errf keeps errno so callers
 * can still read it after building the message.
 */
#include "common/mu.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/mu_banned.h"

#define MU_ERR_NAME_CASE(name, value, text) \
    case value:                             \
        return #name;
#define MU_ERR_TEXT_CASE(name, value, text) \
    case value:                             \
        return text;

const char *mu_err_name(int code)
{
    switch (code) {
        MU_ERR_LIST(MU_ERR_NAME_CASE)
    default:
        return "unknown";
    }
}

const char *mu_err_text(int code)
{
    switch (code) {
        MU_ERR_LIST(MU_ERR_TEXT_CASE)
    default:
        return "unknown";
    }
}

int mu_errf(struct mu_err *err, int code, const char *fmt, ...)
{
    int saved = errno;
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        (void)vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    errno = saved;
    return -1;
}

void mu_err_prefix(struct mu_err *err, const char *fmt, ...)
{
    char prefix[sizeof(err->msg)];
    char old[sizeof(err->msg)];
    va_list ap;
    int saved = errno;

    if (!err)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    /* Copy by hand: the combined text is meant to be cut at the buffer's end.  Not with
     * mu_strlcpy: str.c builds errors, so err.c stays below it (lint calls). */
    size_t plen = strlen(prefix);
    size_t olen = strlen(old);
    if (olen > sizeof(err->msg) - 1 - plen)
        olen = sizeof(err->msg) - 1 - plen;
    memcpy(err->msg, prefix, plen);
    memcpy(err->msg + plen, old, olen);
    err->msg[plen + olen] = '\0';
    errno = saved;
}

void mu_err_clear(struct mu_err *err)
{
    if (err) {
        err->code = MU_E_OK;
        err->msg[0] = '\0';
    }
}
