/* SPDX-License-Identifier: MIT */
/*
 * The spot watcher (docs/design.md §5 "Spot interruption"): polls the EC2 instance metadata service
 * the IMDSv2 way and turns what it finds into events for the agent.
 *
 * Why it is built this way:
 * - libcurl's multi "socket" interface: curl tells us which sockets to watch, curl_multi_timeout
 *   when its next timeout is due, and the agent puts those fds in its one zmq_poll.  (Not a
 *   CURLMOPT_TIMERFUNCTION copy of the timer: curl 7.88 does not call it again when a timeout
 *   fired a fraction of a millisecond early left the expiry unchanged, and the transfer then
 *   stalled until something else woke the loop.)  A slow or dead metadata service
 *   therefore never stalls the worker's loop; each request still ends after timeout_ms.
 * - One request at a time, one easy handle reused: a cycle is a short list of GETs (identity
 *   while unknown, then instance-action and rebalance), preceded by a token PUT whenever the
 *   token is missing, about to expire (a quarter of its TTL, at most 60 s, before), or refused
 *   with 401 (then the GET is retried once with the new token).
 * - Nothing here is fatal after wrk_imds_new: an unreachable or garbled service is logged
 *   (rate-limited) and the next cycle tries again.  A transport failure ends the cycle early so
 *   that a dead endpoint costs one timeout per interval, not one per path.
 * - A notice is reported once per distinct (action, time), a recommendation once per distinct
 *   noticeTime; the agent remembers the latest and repeats it after a re-registration.
 */
#include "worker/wrk.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/mu_banned.h"

#define MOD          "wrk"
#define MAX_SOCKS    8
#define MAX_EVENTS   8
#define MAX_PLAN     8
#define TOKEN_MAX    256
#define LOG_EVERY_S  30 /* rate limit of the "unreachable" and "garbled" lines */
#define IDENTITY_MAX 64

enum req_kind {
    REQ_TOKEN,
    REQ_TYPE,
    REQ_ZONE,
    REQ_LIFECYCLE,
    REQ_ID,
    REQ_ACTION,
    REQ_REBALANCE,
};

static const char *const req_paths[] = {
    [REQ_TOKEN] = "/latest/api/token",
    [REQ_TYPE] = "/latest/meta-data/instance-type",
    [REQ_ZONE] = "/latest/meta-data/placement/availability-zone",
    [REQ_LIFECYCLE] = "/latest/meta-data/instance-life-cycle",
    [REQ_ID] = "/latest/meta-data/instance-id",
    [REQ_ACTION] = "/latest/meta-data/spot/instance-action",
    [REQ_REBALANCE] = "/latest/meta-data/events/recommendations/rebalance",
};

struct imds_sock {
    int fd;
    int what; /* CURL_POLL_IN / OUT / INOUT */
};

struct wrk_imds {
    char base[256]; /* "http://169.254.169.254", no trailing slash */
    int interval_ms;
    int ttl_s;
    int timeout_ms;

    CURLM *multi;
    CURL *easy;
    struct curl_slist *headers; /* of the request in flight */
    char errbuf[CURL_ERROR_SIZE];
    struct mu_buf body; /* capped at WRK_IMDS_MAX_BODY */
    bool body_too_big;
    int ttl_reply_s; /* X-aws-ec2-metadata-token-ttl-seconds of the token reply; 0 = none */

    struct imds_sock socks[MAX_SOCKS];
    int nsocks;

    bool busy; /* a request is in flight */
    enum req_kind cur;
    bool in_cycle;
    enum req_kind plan[MAX_PLAN];
    int nplan;
    int step;
    bool retried; /* the current GET already got a fresh token after a 401 */
    uint64_t next_cycle_ms;

    char token[TOKEN_MAX];
    uint64_t token_renew_ms; /* monotonic: fetch a new token from then on */

    bool want_identity;
    bool have_type;
    bool have_zone;
    bool have_lifecycle;
    bool have_id;
    bool identity_reported;
    struct wrk_imds_identity id;

    bool have_action;
    struct wrk_imds_action last_action;
    uint64_t last_rebalance_ms;

    struct wrk_imds_event events[MAX_EVENTS];
    int nevents;

    struct wrk_imds_stats stats;
};

/* ---- events ---- */

static void push_event(struct wrk_imds *w, const struct wrk_imds_event *ev)
{
    if (w->nevents == MAX_EVENTS) {
        /* Cannot happen while the agent drains after every turn; keep the newest. */
        memmove(&w->events[0], &w->events[1], sizeof(w->events[0]) * (MAX_EVENTS - 1));
        w->nevents--;
    }
    w->events[w->nevents++] = *ev;
}

bool wrk_imds_event_next(struct wrk_imds *w, struct wrk_imds_event *ev)
{
    if (w->nevents == 0)
        return false;
    *ev = w->events[0];
    memmove(&w->events[0], &w->events[1], sizeof(w->events[0]) * (size_t)(w->nevents - 1));
    w->nevents--;
    return true;
}

/* ---- curl callbacks ---- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *userp)
{
    struct wrk_imds *w = userp;
    size_t n = size * nmemb;
    if (w->body.len + n > WRK_IMDS_MAX_BODY) {
        w->body_too_big = true;
        return 0; /* CURLE_WRITE_ERROR ends the transfer */
    }
    if (mu_buf_append(&w->body, data, n, NULL) != 0)
        return 0;
    return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *userp)
{
    static const char name[] = "x-aws-ec2-metadata-token-ttl-seconds:";
    struct wrk_imds *w = userp;
    size_t n = size * nmemb;
    char line[64];
    int64_t v;

    if (n > sizeof(name) - 1 && n < sizeof(line)
        && strncasecmp(data, name, sizeof(name) - 1) == 0) {
        size_t i = sizeof(name) - 1;
        size_t len;
        while (i < n && (data[i] == ' ' || data[i] == '\t'))
            i++;
        len = n - i;
        while (
            len > 0
            && (data[i + len - 1] == '\r' || data[i + len - 1] == '\n' || data[i + len - 1] == ' '))
            len--;
        memcpy(line, data + i, len);
        line[len] = '\0';
        if (mu_parse_i64(line, 1, WRK_IMDS_TOKEN_TTL_S, &v, NULL) == 0)
            w->ttl_reply_s = (int)v;
    }
    return n;
}

static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct wrk_imds *w = userp;
    (void)easy;
    (void)socketp;
    for (int i = 0; i < w->nsocks; i++) {
        if (w->socks[i].fd == (int)s) {
            if (what == CURL_POLL_REMOVE)
                w->socks[i] = w->socks[--w->nsocks];
            else
                w->socks[i].what = what;
            return 0;
        }
    }
    if (what == CURL_POLL_REMOVE)
        return 0;
    if (w->nsocks == MAX_SOCKS) {
        /* Not with one request at a time; the request then times out instead. */
        mu_log_limited(MU_LOG_WARN, MOD, "imds-socks", LOG_EVERY_S,
                       "imds: more than %d sockets wanted, one ignored", MAX_SOCKS);
        return 0;
    }
    w->socks[w->nsocks].fd = (int)s;
    w->socks[w->nsocks].what = what;
    w->nsocks++;
    return 0;
}

/* ---- requests ---- */

static bool token_due(const struct wrk_imds *w, uint64_t now)
{
    return !w->token[0] || now >= w->token_renew_ms;
}

static void end_cycle(struct wrk_imds *w)
{
    w->in_cycle = false;
}

static int start_request(struct wrk_imds *w, enum req_kind kind)
{
    char url[512];
    char header[TOKEN_MAX + 64];
    struct curl_slist *h;
    CURLMcode mc;

    if (mu_snprintf(url, sizeof(url), "%s%s", w->base, req_paths[kind]) != 0)
        return -1;
    if (kind == REQ_TOKEN)
        (void)mu_snprintf(header, sizeof(header), "X-aws-ec2-metadata-token-ttl-seconds: %d",
                          w->ttl_s);
    else
        (void)mu_snprintf(header, sizeof(header), "X-aws-ec2-metadata-token: %s", w->token);
    h = curl_slist_append(NULL, header);
    if (!h)
        return -1;
    curl_slist_free_all(w->headers);
    w->headers = h;
    mu_buf_release(&w->body);
    mu_buf_init(&w->body, WRK_IMDS_MAX_BODY);
    w->body_too_big = false;
    w->ttl_reply_s = 0;
    w->errbuf[0] = '\0';

    curl_easy_reset(w->easy);
    (void)curl_easy_setopt(w->easy, CURLOPT_URL, url);
    (void)curl_easy_setopt(w->easy, CURLOPT_HTTPHEADER, w->headers);
    (void)curl_easy_setopt(w->easy, CURLOPT_ERRORBUFFER, w->errbuf);
    (void)curl_easy_setopt(w->easy, CURLOPT_TIMEOUT_MS, (long)w->timeout_ms);
    (void)curl_easy_setopt(w->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)w->timeout_ms);
    (void)curl_easy_setopt(w->easy, CURLOPT_NOSIGNAL, 1L);
    (void)curl_easy_setopt(w->easy, CURLOPT_PROXY, ""); /* never through an http_proxy */
    (void)curl_easy_setopt(w->easy, CURLOPT_FOLLOWLOCATION, 0L);
    (void)curl_easy_setopt(w->easy, CURLOPT_PROTOCOLS_STR, "http");
    (void)curl_easy_setopt(w->easy, CURLOPT_WRITEFUNCTION, on_body);
    (void)curl_easy_setopt(w->easy, CURLOPT_WRITEDATA, w);
    (void)curl_easy_setopt(w->easy, CURLOPT_HEADERFUNCTION, on_header);
    (void)curl_easy_setopt(w->easy, CURLOPT_HEADERDATA, w);
    if (kind == REQ_TOKEN)
        (void)curl_easy_setopt(w->easy, CURLOPT_CUSTOMREQUEST, "PUT");
    mc = curl_multi_add_handle(w->multi, w->easy);
    if (mc != CURLM_OK) {
        mu_log_limited(MU_LOG_WARN, MOD, "imds-curl", LOG_EVERY_S, "imds: curl: %s",
                       curl_multi_strerror(mc));
        return -1;
    }
    w->busy = true;
    w->cur = kind;
    w->stats.requests++;
    return 0;
}

/* Starts the next request of the cycle, or ends the cycle. */
static void advance(struct wrk_imds *w)
{
    if (w->busy || !w->in_cycle)
        return;
    if (w->step >= w->nplan) {
        end_cycle(w);
        return;
    }
    if (start_request(w, token_due(w, mu_time_mono_ms()) ? REQ_TOKEN : w->plan[w->step]) != 0)
        end_cycle(w);
}

static void start_cycle(struct wrk_imds *w, uint64_t now)
{
    w->nplan = 0;
    if (w->want_identity) {
        if (!w->have_type)
            w->plan[w->nplan++] = REQ_TYPE;
        if (!w->have_zone)
            w->plan[w->nplan++] = REQ_ZONE;
        if (!w->have_lifecycle)
            w->plan[w->nplan++] = REQ_LIFECYCLE;
        if (!w->have_id)
            w->plan[w->nplan++] = REQ_ID;
    }
    w->plan[w->nplan++] = REQ_ACTION;
    w->plan[w->nplan++] = REQ_REBALANCE;
    w->step = 0;
    w->retried = false;
    w->in_cycle = true;
    w->next_cycle_ms = now + (uint64_t)w->interval_ms;
    w->stats.cycles++;
    advance(w);
}

/* A short text/plain value: trimmed, printable, shorter than size; false if not. */
static bool take_text(const struct mu_buf *b, char *out, size_t size)
{
    size_t start = 0;
    size_t end = b->len;
    if (!b->data)
        return false;
    while (start < end && (b->data[start] == ' ' || b->data[start] == '\n'))
        start++;
    while (end > start
           && (b->data[end - 1] == ' ' || b->data[end - 1] == '\n' || b->data[end - 1] == '\r'))
        end--;
    if (end == start || end - start >= size)
        return false;
    for (size_t i = start; i < end; i++) {
        unsigned char c = (unsigned char)b->data[i];
        if (c <= 0x20 || c >= 0x7f)
            return false;
    }
    memcpy(out, b->data + start, end - start);
    out[end - start] = '\0';
    return true;
}

static void garbled(struct wrk_imds *w, const char *what, const char *why)
{
    w->stats.garbled++;
    mu_log_limited(MU_LOG_WARN, MOD, "imds-garbled", LOG_EVERY_S,
                   "imds: %s: garbled reply from %s: %s", what, w->base, why);
}

static void got_token(struct wrk_imds *w, long code)
{
    uint64_t now = mu_time_mono_ms();
    uint64_t ttl_ms;
    uint64_t margin_ms;
    char token[TOKEN_MAX];

    if (code != 200 || !take_text(&w->body, token, sizeof(token))) {
        char why[64];
        (void)mu_snprintf(why, sizeof(why), "HTTP %ld%s", code,
                          code == 200 ? " with no usable token" : "");
        garbled(w, "token", why);
        w->token[0] = '\0';
        end_cycle(w);
        return;
    }
    mu_strlcpy(w->token, token, sizeof(w->token));
    ttl_ms = (uint64_t)(w->ttl_reply_s > 0 && w->ttl_reply_s < w->ttl_s ? w->ttl_reply_s : w->ttl_s)
             * 1000u;
    margin_ms = ttl_ms / 4 < 60000 ? ttl_ms / 4 : 60000;
    w->token_renew_ms = now + ttl_ms - margin_ms;
    w->stats.tokens++;
    mu_log(MU_LOG_DEBUG, MOD, "imds: token for %" PRIu64 " s", ttl_ms / 1000);
}

static void got_identity(struct wrk_imds *w, enum req_kind kind, long code)
{
    static const char *const names[] = { [REQ_TYPE] = "instance-type",
                                         [REQ_ZONE] = "placement/availability-zone",
                                         [REQ_LIFECYCLE] = "instance-life-cycle",
                                         [REQ_ID] = "instance-id" };
    char *dst = kind == REQ_TYPE        ? w->id.instance_type
                : kind == REQ_ZONE      ? w->id.zone
                : kind == REQ_LIFECYCLE ? w->id.lifecycle
                                        : w->id.instance_id;
    size_t size = kind == REQ_TYPE        ? sizeof(w->id.instance_type)
                  : kind == REQ_ZONE      ? sizeof(w->id.zone)
                  : kind == REQ_LIFECYCLE ? sizeof(w->id.lifecycle)
                                          : sizeof(w->id.instance_id);
    bool *have = kind == REQ_TYPE        ? &w->have_type
                 : kind == REQ_ZONE      ? &w->have_zone
                 : kind == REQ_LIFECYCLE ? &w->have_lifecycle
                                         : &w->have_id;

    if (code == 404) {
        /* Not every instance has every item: known to be absent, not asked again. */
        dst[0] = '\0';
        *have = true;
    } else if (code == 200 && take_text(&w->body, dst, size)) {
        *have = true;
    } else {
        char why[32];
        (void)mu_snprintf(why, sizeof(why), "HTTP %ld", code);
        garbled(w, names[kind], why);
    }
    if (w->have_type && w->have_zone && w->have_lifecycle && w->have_id && !w->identity_reported) {
        struct wrk_imds_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.type = WRK_IMDS_IDENTITY;
        w->identity_reported = true;
        push_event(w, &ev);
    }
}

static void got_action(struct wrk_imds *w, long code)
{
    struct wrk_imds_action act;
    struct wrk_imds_event ev;
    struct mu_err err;

    if (code == 404)
        return; /* no notice: the normal answer */
    if (code != 200) {
        char why[32];
        (void)mu_snprintf(why, sizeof(why), "HTTP %ld", code);
        garbled(w, "spot/instance-action", why);
        return;
    }
    memset(&act, 0, sizeof(act));
    if (wrk_imds_parse_action(w->body.data, w->body.len, &act, &err) != 0) {
        garbled(w, "spot/instance-action", err.msg);
        return;
    }
    if (w->have_action && strcmp(act.action, w->last_action.action) == 0
        && act.time_ms == w->last_action.time_ms)
        return;
    w->have_action = true;
    w->last_action = act;
    memset(&ev, 0, sizeof(ev));
    ev.type = WRK_IMDS_SPOT;
    mu_strlcpy(ev.action, act.action, sizeof(ev.action));
    ev.time_ms = act.time_ms;
    push_event(w, &ev);
}

static void got_rebalance(struct wrk_imds *w, long code)
{
    struct wrk_imds_event ev;
    struct mu_err err;
    uint64_t ms = 0;

    if (code == 404)
        return;
    if (code != 200) {
        char why[32];
        (void)mu_snprintf(why, sizeof(why), "HTTP %ld", code);
        garbled(w, "events/recommendations/rebalance", why);
        return;
    }
    if (wrk_imds_parse_rebalance(w->body.data, w->body.len, &ms, &err) != 0) {
        garbled(w, "events/recommendations/rebalance", err.msg);
        return;
    }
    if (ms == w->last_rebalance_ms)
        return;
    w->last_rebalance_ms = ms;
    memset(&ev, 0, sizeof(ev));
    ev.type = WRK_IMDS_REBALANCE;
    mu_strlcpy(ev.action, "rebalance", sizeof(ev.action));
    ev.time_ms = ms;
    push_event(w, &ev);
}

/* One finished transfer: what it means, then the next request. */
static void finished(struct wrk_imds *w, CURLcode res)
{
    enum req_kind kind = w->cur;
    long code = 0;

    (void)curl_multi_remove_handle(w->multi, w->easy);
    w->busy = false;
    if (res != CURLE_OK) {
        w->stats.failures++;
        if (w->body_too_big)
            garbled(w, req_paths[kind], "reply larger than 64 KiB");
        else
            mu_log_limited(MU_LOG_WARN, MOD, "imds-unreachable", LOG_EVERY_S,
                           "imds: %s%s unreachable: %s; retrying every %d s", w->base,
                           req_paths[kind], w->errbuf[0] ? w->errbuf : curl_easy_strerror(res),
                           w->interval_ms / 1000);
        end_cycle(w);
        return;
    }
    (void)curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &code);
    if (kind == REQ_TOKEN) {
        got_token(w, code);
        advance(w);
        return;
    }
    if (code == 401) {
        /* Expired or revoked: one fresh token and one retry of the same path. */
        w->stats.unauthorized++;
        w->token[0] = '\0';
        if (!w->retried) {
            w->retried = true;
            advance(w);
            return;
        }
        garbled(w, req_paths[kind], "HTTP 401 with a fresh token");
    } else if (kind == REQ_ACTION) {
        got_action(w, code);
    } else if (kind == REQ_REBALANCE) {
        got_rebalance(w, code);
    } else {
        got_identity(w, kind, code);
    }
    w->step++;
    w->retried = false;
    advance(w);
}

/* ---- public ---- */

struct wrk_imds *wrk_imds_new(const struct wrk_imds_config *cfg, struct mu_err *err)
{
    struct wrk_imds *w = NULL;
    size_t len;

    if (!cfg->url || strncmp(cfg->url, "http://", 7) != 0 || !cfg->url[7]) {
        mu_errf(err, MU_E_INVAL, "--imds '%s': expected http://HOST[:PORT]",
                cfg->url ? cfg->url : "");
        return NULL;
    }
    if (cfg->interval_s < 1 || cfg->interval_s > 300) {
        mu_errf(err, MU_E_RANGE, "--imds-interval-s %d: expected 1..300", cfg->interval_s);
        return NULL;
    }
    if (cfg->token_ttl_s < 0 || cfg->token_ttl_s > WRK_IMDS_TOKEN_TTL_S) {
        mu_errf(err, MU_E_RANGE, "imds token TTL %d s: expected 1..%d", cfg->token_ttl_s,
                WRK_IMDS_TOKEN_TTL_S);
        return NULL;
    }
    w = calloc(1, sizeof(*w));
    if (!w) {
        mu_errf(err, MU_E_NOMEM, "out of memory for the metadata watcher");
        return NULL;
    }
    len = mu_strlcpy(w->base, cfg->url, sizeof(w->base));
    if (len >= sizeof(w->base)) {
        mu_errf(err, MU_E_TOOBIG, "--imds '%.40s...': longer than %zu bytes", cfg->url,
                sizeof(w->base) - 1);
        free(w);
        return NULL;
    }
    while (len > 7 && w->base[len - 1] == '/')
        w->base[--len] = '\0';
    w->interval_ms = cfg->interval_s * 1000;
    w->ttl_s = cfg->token_ttl_s > 0 ? cfg->token_ttl_s : WRK_IMDS_TOKEN_TTL_S;
    w->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : WRK_IMDS_TIMEOUT_MS;
    w->want_identity = cfg->want_identity;
    mu_buf_init(&w->body, WRK_IMDS_MAX_BODY);

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        mu_errf(err, MU_E_SYS, "cannot initialise libcurl");
        free(w);
        return NULL;
    }
    w->multi = curl_multi_init();
    w->easy = curl_easy_init();
    if (!w->multi || !w->easy) {
        mu_errf(err, MU_E_NOMEM, "cannot create curl handles");
        wrk_imds_free(w);
        return NULL;
    }
    (void)curl_multi_setopt(w->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    (void)curl_multi_setopt(w->multi, CURLMOPT_SOCKETDATA, w);
    w->next_cycle_ms = mu_time_mono_ms(); /* the first cycle at the first service call */
    return w;
}

void wrk_imds_free(struct wrk_imds *w)
{
    if (!w)
        return;
    if (w->multi && w->easy && w->busy)
        (void)curl_multi_remove_handle(w->multi, w->easy);
    if (w->easy)
        curl_easy_cleanup(w->easy);
    if (w->multi)
        (void)curl_multi_cleanup(w->multi);
    curl_slist_free_all(w->headers);
    mu_buf_release(&w->body);
    curl_global_cleanup();
    free(w);
}

int wrk_imds_fds(const struct wrk_imds *w, struct pollfd *fds, int max)
{
    int n = 0;
    for (int i = 0; i < w->nsocks && n < max; i++) {
        fds[n].fd = w->socks[i].fd;
        fds[n].events = 0;
        fds[n].revents = 0;
        if (w->socks[i].what & CURL_POLL_IN)
            fds[n].events |= POLLIN;
        if (w->socks[i].what & CURL_POLL_OUT)
            fds[n].events |= POLLOUT;
        n++;
    }
    return n;
}

int wrk_imds_timeout_ms(const struct wrk_imds *w, uint64_t now, int max_ms)
{
    uint64_t next = now + (uint64_t)(max_ms < 0 ? 0 : max_ms);
    long curl_ms = -1;
    if (w->busy && curl_multi_timeout(w->multi, &curl_ms) == CURLM_OK && curl_ms >= 0
        && now + (uint64_t)curl_ms < next)
        next = now + (uint64_t)curl_ms;
    if (!w->in_cycle && w->next_cycle_ms < next)
        next = w->next_cycle_ms;
    return next <= now ? 0 : (int)(next - now);
}

/* Lets curl act on socket s (or its timeouts), then handles the transfers that ended. */
static void drive(struct wrk_imds *w, curl_socket_t s, int flags)
{
    int running = 0;
    int left = 0;
    CURLMsg *msg;

    (void)curl_multi_socket_action(w->multi, s, flags, &running);
    while ((msg = curl_multi_info_read(w->multi, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == w->easy && w->busy)
            finished(w, msg->data.result); /* may start the next request */
    }
}

/* Runs curl's due timeouts: a new request's start, and timeouts of requests in flight. */
static void drive_timeouts(struct wrk_imds *w)
{
    /* Bounded: a timeout that curl still sees a fraction of a millisecond ahead reads as 0. */
    for (int i = 0; i < 8 && w->busy; i++) {
        long ms = -1;
        if (curl_multi_timeout(w->multi, &ms) != CURLM_OK || ms != 0)
            return;
        drive(w, CURL_SOCKET_TIMEOUT, 0);
    }
}

void wrk_imds_service(struct wrk_imds *w, const struct pollfd *fds, int nfds)
{
    uint64_t now;

    for (int i = 0; i < nfds; i++) {
        int flags = 0;
        if (fds[i].revents & (POLLIN | POLLHUP))
            flags |= CURL_CSELECT_IN;
        if (fds[i].revents & POLLOUT)
            flags |= CURL_CSELECT_OUT;
        if (fds[i].revents & (POLLERR | POLLNVAL))
            flags |= CURL_CSELECT_ERR;
        if (flags)
            drive(w, fds[i].fd, flags);
    }
    drive_timeouts(w);
    now = mu_time_mono_ms();
    if (!w->in_cycle && !w->busy && now >= w->next_cycle_ms) {
        start_cycle(w, now);
        drive_timeouts(w); /* send the first request now rather than next turn */
    }
}

int wrk_imds_wait_identity(struct wrk_imds *w, int budget_ms)
{
    uint64_t deadline = mu_time_mono_ms() + (uint64_t)(budget_ms < 0 ? 0 : budget_ms);
    uint64_t cycles = w->stats.cycles;

    for (;;) {
        struct pollfd fds[MAX_SOCKS];
        uint64_t now = mu_time_mono_ms();
        int n;
        if (w->identity_reported)
            return 0;
        /* One whole cycle that did not complete the identity: the service is not answering. */
        if ((w->stats.cycles > cycles + 1 || (w->stats.cycles > cycles && !w->in_cycle))
            || now >= deadline)
            return -1;
        n = wrk_imds_fds(w, fds, MAX_SOCKS);
        (void)poll(fds, (nfds_t)n, wrk_imds_timeout_ms(w, now, (int)(deadline - now)));
        wrk_imds_service(w, fds, n);
    }
}

const struct wrk_imds_identity *wrk_imds_identity_get(const struct wrk_imds *w)
{
    return w->identity_reported ? &w->id : NULL;
}

void wrk_imds_stats_get(const struct wrk_imds *w, struct wrk_imds_stats *out)
{
    *out = w->stats;
}
