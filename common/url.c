/* SPDX-License-Identifier: MIT */
/*
 * Redis URLs: "redis://[user:pass@]host[:port][/db]", as redis-cli -u and most clients take them,
 * and "redis+sentinel://[user:pass@]host[:port][,host[:port]...]/master[/db]", the Sentinel
 * form: the hosts are Sentinels (port 26379 by default), asked for the address of the primary
 * named master, which the credentials and db are for (issue #14).  Every program honours
 * MUSTER_REDIS_URL with this syntax (docs/design.md §8).
 *
 * The one parser of that grammar (issue #40): the --redis flags, MUSTER_REDIS_URL, the config's
 * "redis" key, libmuster and through it the Python module all come here.  It lives in mu_base,
 * below config/ and queue/, so that the config can check a URL without depending on Redis code;
 * only parsing happens here, the Sentinels are asked when queue/ connects.
 */
#include "common/mu.h"

#include <stdbool.h>
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

/* "host[:port]" of len bytes at p into host/port (port_default without one). */
static int host_parse(const char *url,
                      const char *p,
                      size_t len,
                      int port_default,
                      char *host,
                      size_t host_size,
                      int *port,
                      struct mu_err *err)
{
    const char *colon = memchr(p, ':', len);
    size_t host_len = colon ? (size_t)(colon - p) : len;
    int64_t num;

    *port = port_default;
    if (colon) {
        char text[16];
        if (copy_part(text, sizeof(text), colon + 1, len - host_len - 1, "port", err) != 0)
            return -1;
        if (mu_parse_i64(text, 1, 65535, &num, err) != 0) {
            mu_err_prefix(err, "redis url '%s': port: ", url);
            return -1;
        }
        *port = (int)num;
    }
    if (host_len == 0)
        return mu_errf(err, MU_E_PARSE, "redis url '%s': missing host", url);
    return copy_part(host, host_size, p, host_len, "host", err);
}

/* "[user:pass@]" at *p: fills out's credentials and moves *p past them. */
static int credentials_parse(const char **p, struct mu_redis_url *out, struct mu_err *err)
{
    const char *slash = strchr(*p, '/');
    const char *at = strchr(*p, '@');
    const char *sep;

    if (!at || (slash && at > slash))
        return 0;
    sep = memchr(*p, ':', (size_t)(at - *p));
    if (sep) {
        if (copy_part(out->user, sizeof(out->user), *p, (size_t)(sep - *p), "user", err) != 0
            || copy_part(out->password, sizeof(out->password), sep + 1, (size_t)(at - sep - 1),
                         "password", err)
                   != 0)
            return -1;
    } else if (copy_part(out->password, sizeof(out->password), *p, (size_t)(at - *p), "password",
                         err)
               != 0) {
        return -1;
    }
    *p = at + 1;
    return 0;
}

/* "/db" (or "") at p. */
static int db_parse(const char *url, const char *p, struct mu_redis_url *out, struct mu_err *err)
{
    int64_t num;

    if (!p || !p[0] || !p[1])
        return 0;
    if (mu_parse_i64(p + 1, 0, 1000, &num, err) != 0) {
        mu_err_prefix(err, "redis url '%s': database: ", url);
        return -1;
    }
    out->db = (int)num;
    return 0;
}

/* The Sentinel form after its scheme: "h1[:p1],h2[:p2]/master[/db]". */
static int sentinel_parse(const char *url,
                          const char *p,
                          struct mu_redis_url *out,
                          struct mu_err *err)
{
    const char *slash = strchr(p, '/');
    const char *master_end;

    if (!slash || slash == p || !slash[1] || slash[1] == '/')
        return mu_errf(err, MU_E_PARSE,
                       "redis url '%s': expected "
                       "redis+sentinel://[user:pass@]host[:port][,host[:port]...]/master[/db]",
                       url);
    for (bool more = true; more;) {
        const char *comma = memchr(p, ',', (size_t)(slash - p));
        const char *end = comma ? comma : slash;
        struct mu_redis_host *h;
        if (out->nsentinels == MU_REDIS_SENTINELS_MAX)
            return mu_errf(err, MU_E_PARSE, "redis url '%s': more than %d sentinels", url,
                           MU_REDIS_SENTINELS_MAX);
        h = &out->sentinels[out->nsentinels];
        if (host_parse(url, p, (size_t)(end - p), 26379, h->host, sizeof(h->host), &h->port, err)
            != 0)
            return -1;
        out->nsentinels++;
        more = comma != NULL; /* "s1,/m" names an empty host: refused on the next turn */
        p = comma ? comma + 1 : slash;
    }
    master_end = strchr(slash + 1, '/');
    if (copy_part(out->master, sizeof(out->master), slash + 1,
                  master_end ? (size_t)(master_end - slash - 1) : strlen(slash + 1), "master name",
                  err)
        != 0)
        return -1;
    /* The primary's address is asked of the Sentinels when connecting (queue_conn_open). */
    mu_strlcpy(out->host, out->sentinels[0].host, sizeof(out->host));
    out->port = 0;
    return db_parse(url, master_end, out, err);
}

int mu_redis_url_parse(const char *url, struct mu_redis_url *out, struct mu_err *err)
{
    static const char scheme[] = "redis://";
    static const char sentinel_scheme[] = "redis+sentinel://";
    const char *p;
    const char *slash;

    memset(out, 0, sizeof(*out));
    out->port = 6379;
    if (url && strncmp(url, sentinel_scheme, sizeof(sentinel_scheme) - 1) == 0) {
        p = url + sizeof(sentinel_scheme) - 1;
        if (credentials_parse(&p, out, err) != 0)
            return -1;
        return sentinel_parse(url, p, out, err);
    }
    if (!url || strncmp(url, scheme, sizeof(scheme) - 1) != 0)
        return mu_errf(err, MU_E_PARSE,
                       "redis url '%s': expected redis://[user:pass@]host[:port][/db] or "
                       "redis+sentinel://[user:pass@]host[:port][,host[:port]...]/master[/db]",
                       url ? url : "");
    p = url + sizeof(scheme) - 1;
    if (credentials_parse(&p, out, err) != 0)
        return -1;
    slash = strchr(p, '/');
    if (host_parse(url, p, slash ? (size_t)(slash - p) : strlen(p), 6379, out->host,
                   sizeof(out->host), &out->port, err)
        != 0)
        return -1;
    return db_parse(url, slash, out, err);
}
