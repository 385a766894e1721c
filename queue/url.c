/* SPDX-License-Identifier: MIT */
/*
 * Redis URLs: "redis://[user:pass@]host[:port][/db]", as redis-cli -u and most clients take them.
 * Every program honours MUSTER_REDIS_URL with this syntax (DESIGN §8).
 */
#include "queue/queue.h"

#include <string.h>

#include "common/mu_banned.h"

static int copy_part(
    char *dst, size_t size, const char *src, size_t len, const char *what, struct mu_err *err)
{
    if (len >= size)
        return mu_errf(err, MU_E_PARSE, "redis url: %s longer than %zu bytes", what, size - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

int queue_url_parse(const char *url, struct queue_url *out, struct mu_err *err)
{
    static const char scheme[] = "redis://";
    const char *p;
    const char *at;
    const char *host_end;
    const char *slash;
    const char *colon;
    int64_t num;

    memset(out, 0, sizeof(*out));
    out->port = 6379;
    if (!url || strncmp(url, scheme, sizeof(scheme) - 1) != 0)
        return mu_errf(err, MU_E_PARSE,
                       "redis url '%s': expected redis://[user:pass@]host[:port][/db]",
                       url ? url : "");
    p = url + sizeof(scheme) - 1;
    slash = strchr(p, '/');
    at = strchr(p, '@');
    if (at && slash && at > slash)
        at = NULL;
    if (at) {
        const char *sep = memchr(p, ':', (size_t)(at - p));
        if (sep) {
            if (copy_part(out->user, sizeof(out->user), p, (size_t)(sep - p), "user", err) != 0
                || copy_part(out->password, sizeof(out->password), sep + 1, (size_t)(at - sep - 1),
                             "password", err)
                       != 0)
                return -1;
        } else if (copy_part(out->password, sizeof(out->password), p, (size_t)(at - p), "password",
                             err)
                   != 0) {
            return -1;
        }
        p = at + 1;
    }
    host_end = slash ? slash : p + strlen(p);
    colon = memchr(p, ':', (size_t)(host_end - p));
    if (colon) {
        char port[16];
        if (copy_part(port, sizeof(port), colon + 1, (size_t)(host_end - colon - 1), "port", err)
            != 0)
            return -1;
        if (mu_parse_i64(port, 1, 65535, &num, err) != 0) {
            mu_err_prefix(err, "redis url '%s': port: ", url);
            return -1;
        }
        out->port = (int)num;
        host_end = colon;
    }
    if (host_end == p)
        return mu_errf(err, MU_E_PARSE, "redis url '%s': missing host", url);
    if (copy_part(out->host, sizeof(out->host), p, (size_t)(host_end - p), "host", err) != 0)
        return -1;
    if (slash && slash[1]) {
        if (mu_parse_i64(slash + 1, 0, 1000, &num, err) != 0) {
            mu_err_prefix(err, "redis url '%s': database: ", url);
            return -1;
        }
        out->db = (int)num;
    }
    return 0;
}
