/* SPDX-License-Identifier: MIT */
/*
 * A growable byte buffer with a hard cap (docs/style.md §1.5: every growable buffer has one), used
 * to build JSON, log lines and wire messages.  Exceeding the cap is an error, never a crash.
 *
 * Also the two whole-file reads built on it: mu_file_read for files the caller trusts, and
 * mu_file_read_small, the one guarded read (no symlink, no FIFO, regular files only, a size cap
 * checked before and while reading) for files a task or another process may have planted.
 */
#include "common/mu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mu_banned.h"

#define MU_BUF_DEFAULT_MAX ((size_t)64 * 1024 * 1024)

void mu_buf_init(struct mu_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max ? max : MU_BUF_DEFAULT_MAX;
}

void mu_buf_release(struct mu_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

static int buf_reserve(struct mu_buf *b, size_t extra, struct mu_err *err)
{
    size_t need;
    size_t cap;
    char *p;

    if (extra > b->max || b->len > b->max - extra)
        return mu_errf(err, MU_E_TOOBIG, "buffer would exceed its cap of %zu bytes", b->max);
    need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    p = realloc(b->data, cap);
    if (!p) {
        /* -1 spelled out: the analyzer cannot see that mu_errf (another file) returns it. */
        (void)mu_errf(err, MU_E_NOMEM, "out of memory growing a buffer to %zu bytes", cap);
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

int mu_buf_append(struct mu_buf *b, const void *data, size_t len, struct mu_err *err)
{
    if (buf_reserve(b, len, err) != 0)
        return -1;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int mu_buf_appendf(struct mu_buf *b, struct mu_err *err, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return mu_errf(err, MU_E_INVAL, "bad format string");
    if (buf_reserve(b, (size_t)n, err) != 0)
        return -1;
    va_start(ap, fmt);
    (void)vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int mu_buf_append_json_str(struct mu_buf *b, const char *s, struct mu_err *err)
{
    const unsigned char *p = (const unsigned char *)s;

    if (mu_buf_append(b, "\"", 1, err) != 0)
        return -1;
    for (;;) {
        /* The longest run that needs no escape goes in one append (status entries and reasons
         * are built from thousands of these a second). */
        const unsigned char *run = p;
        char esc[8];
        const char *out = esc;
        size_t n = 2;
        while (*p >= 0x20 && *p != '"' && *p != '\\')
            p++;
        if (p > run && mu_buf_append(b, run, (size_t)(p - run), err) != 0)
            return -1;
        if (!*p)
            break;
        switch (*p) {
        case '"':
            out = "\\\"";
            break;
        case '\\':
            out = "\\\\";
            break;
        case '\n':
            out = "\\n";
            break;
        case '\r':
            out = "\\r";
            break;
        case '\t':
            out = "\\t";
            break;
        default:
            (void)snprintf(esc, sizeof(esc), "\\u%04x", *p);
            n = 6;
        }
        if (mu_buf_append(b, out, n, err) != 0)
            return -1;
        p++;
    }
    return mu_buf_append(b, "\"", 1, err);
}

char *mu_buf_take(struct mu_buf *b)
{
    char *p = b->data;
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}

char *mu_file_read(const char *path, size_t max_bytes, size_t *len_out, struct mu_err *err)
{
    FILE *f = NULL;
    struct mu_buf b;
    char chunk[8192];
    char *result = NULL;
    size_t n;

    mu_buf_init(&b, max_bytes);
    f = fopen(path, "rb");
    if (!f) {
        mu_errf(err, MU_E_IO, "cannot open '%s': %s", path, strerror(errno));
        goto out;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (mu_buf_append(&b, chunk, n, err) != 0) {
            mu_err_prefix(err, "'%s': ", path);
            goto out;
        }
    }
    if (ferror(f)) {
        mu_errf(err, MU_E_IO, "cannot read '%s': %s", path, strerror(errno));
        goto out;
    }
    if (mu_buf_append(&b, "", 0, err) != 0)
        goto out;
    if (len_out)
        *len_out = b.len;
    result = mu_buf_take(&b);
out:
    if (f)
        (void)fclose(f);
    mu_buf_release(&b);
    return result;
}

/* The rest of the open file fd (path: for messages) into b, at most max_bytes in all. */
static int read_capped(
    int fd, const char *path, size_t max_bytes, struct mu_buf *b, struct mu_err *err)
{
    char chunk[4096];

    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return mu_errf(err, MU_E_IO, "cannot read '%s': %s", path, strerror(errno));
        if (n == 0)
            return mu_buf_append(b, "", 0, err); /* data non-NULL even for an empty file */
        if ((size_t)n > max_bytes - b->len)
            return mu_errf(err, MU_E_TOOBIG, "'%s' is larger than %zu bytes", path, max_bytes);
        if (mu_buf_append(b, chunk, (size_t)n, err) != 0)
            return -1;
    }
}

int mu_file_read_small(const char *path,
                       size_t max_bytes,
                       char **out,
                       size_t *len_out,
                       uint64_t *mtime_ms,
                       struct mu_err *err)
{
    struct mu_buf b;
    struct stat st;
    int fd;
    int rc = -1;

    fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return mu_errf(err, MU_E_IO, "cannot open '%s': %s", path, strerror(errno));
    }
    /* The buffer's own cap stays out of the way (0 = its default): read_capped checks ours. */
    mu_buf_init(&b, max_bytes);
    if (fstat(fd, &st) != 0) {
        mu_errf(err, MU_E_IO, "cannot stat '%s': %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        mu_errf(err, MU_E_IO, "'%s' is not a regular file", path);
        goto out;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > (uint64_t)max_bytes) {
        mu_errf(err, MU_E_TOOBIG, "'%s' is larger than %zu bytes", path, max_bytes);
        goto out;
    }
    if (read_capped(fd, path, max_bytes, &b, err) != 0)
        goto out;
    if (len_out)
        *len_out = b.len;
    if (mtime_ms)
        *mtime_ms = (uint64_t)st.st_mtim.tv_sec * 1000u + (uint64_t)st.st_mtim.tv_nsec / 1000000u;
    *out = mu_buf_take(&b);
    rc = 1;
out:
    mu_buf_release(&b);
    (void)close(fd);
    return rc;
}
