/* SPDX-License-Identifier: MIT */
/*
 * proto transport, the ZAP handler (RFC 27) that enforces the CURVE allow-list
 * (transport_curve.c reads it).  Without a ZAP handler libzmq lets any key in, so the scheduler
 * creates this before its ROUTER.  It is a REP socket the scheduler's single-threaded loop
 * services (no thread of our own), so the allow-list needs no locking.  Refusals are counted
 * (proto_zap_refused) and logged with a rate limit.
 */
#include "protocol/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/mu_banned.h"

#define ZAP_ENDPOINT     "inproc://zeromq.zap.01"
#define ZAP_MAX_FRAMES   8
#define ZAP_LOG_INTERVAL 60

struct proto_zap {
    void *sock; /* REP bound to ZAP_ENDPOINT */
    struct proto_allow *allow;
    int nallow;
    char path[PROTO_PATH_MAX];
    unsigned long refused;
};

struct proto_zap *proto_zap_new(void *ctx, const char *allow_path, struct mu_err *err)
{
    struct proto_zap *z = NULL;
    char *text = NULL;

    if (!proto_curve_available()) {
        (void)mu_errf(err, MU_E_ZMQ,
                      "this libzmq has no CURVE support (zmq_has(\"curve\") is false); install "
                      "a libzmq built with libsodium");
        return NULL;
    }
    z = calloc(1, sizeof(*z));
    if (!z) {
        (void)mu_errf(err, MU_E_NOMEM, "out of memory for the ZAP handler");
        return NULL;
    }
    (void)mu_strlcpy(z->path, allow_path, sizeof(z->path));
    text = mu_file_read(allow_path, 16u << 20, NULL, err);
    if (!text) {
        mu_err_prefix(err, "CURVE allow-list: ");
        goto fail;
    }
    if (proto_allow_parse(text, allow_path, &z->allow, &z->nallow, err) != 0)
        goto fail;
    z->sock = zmq_socket(ctx, ZMQ_REP);
    if (!z->sock) {
        (void)mu_errf(err, MU_E_ZMQ, "cannot create the ZAP socket: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (proto_sock_set_int(z->sock, ZMQ_LINGER, 0, "ZMQ_LINGER", err) != 0)
        goto fail;
    if (zmq_bind(z->sock, ZAP_ENDPOINT) != 0) {
        (void)mu_errf(err, MU_E_ZMQ, "cannot bind the ZAP handler on %s: %s", ZAP_ENDPOINT,
                      zmq_strerror(zmq_errno()));
        goto fail;
    }
    free(text);
    return z;
fail:
    free(text);
    proto_zap_free(z);
    return NULL;
}

void proto_zap_free(struct proto_zap *z)
{
    if (!z)
        return;
    if (z->sock)
        (void)zmq_close(z->sock);
    free(z->allow);
    free(z);
}

int proto_zap_count(const struct proto_zap *z)
{
    return z ? z->nallow : 0;
}

unsigned long proto_zap_refused(const struct proto_zap *z)
{
    return z ? z->refused : 0;
}

void *proto_zap_socket(const struct proto_zap *z)
{
    return z ? z->sock : NULL;
}

int proto_zap_poll_add(const struct proto_zap *z, zmq_pollitem_t *items, int nitems)
{
    if (!z)
        return nitems;
    memset(&items[nitems], 0, sizeof(items[nitems]));
    items[nitems].socket = z->sock;
    items[nitems].events = ZMQ_POLLIN;
    return nitems + 1;
}

/* Receives one whole request (at most ZAP_MAX_FRAMES frames kept); 1 got one, 0 none, -1 err. */
static int zap_recv(void *sock, zmq_msg_t *frames, int *nframes)
{
    int n = 0;
    bool more = true;

    while (more) {
        zmq_msg_t part;
        (void)zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            (void)zmq_msg_close(&part);
            *nframes = n;
            return n == 0 && (zmq_errno() == EAGAIN || zmq_errno() == EINTR) ? 0 : -1;
        }
        more = zmq_msg_more(&part) != 0;
        if (n < ZAP_MAX_FRAMES)
            frames[n++] = part; /* moved: closed by the caller */
        else
            (void)zmq_msg_close(&part);
    }
    *nframes = n;
    return 1;
}

static bool frame_is(zmq_msg_t *m, const char *text)
{
    size_t len = strlen(text);
    return zmq_msg_size(m) == len && memcmp(zmq_msg_data(m), text, len) == 0;
}

/* Frame i as a C string (cut to size). */
static void frame_str(zmq_msg_t *frames, int nframes, int i, char *out, size_t size)
{
    out[0] = '\0';
    if (i < nframes)
        (void)mu_snprintf(out, size, "%.*s", (int)zmq_msg_size(&frames[i]),
                          (const char *)zmq_msg_data(&frames[i]));
}

static int zap_reply(
    void *sock, zmq_msg_t *request_id, const char *status, const char *text, const char *user)
{
    const char *parts[] = { "1.0", NULL, status, text, user, "" };
    int rc = 0;

    for (size_t i = 0; i < MU_ARRAY_LEN(parts); i++) {
        int flags = i + 1 < MU_ARRAY_LEN(parts) ? ZMQ_SNDMORE : 0;
        int sent;
        if (i == 1) {
            sent = request_id
                       ? zmq_send(sock, zmq_msg_data(request_id), zmq_msg_size(request_id), flags)
                       : zmq_send(sock, "", 0, flags);
        } else {
            sent = zmq_send(sock, parts[i], strlen(parts[i]), flags);
        }
        if (sent < 0)
            rc = -1;
    }
    return rc;
}

/* Decides one request: the reply's status, text and user id. */
static void zap_decide(struct proto_zap *z,
                       zmq_msg_t *frames,
                       int nframes,
                       const char **status,
                       const char **text,
                       char *user,
                       size_t user_size)
{
    char mech[16];
    char addr[64];
    char key[PROTO_CURVE_KEY_LEN + 1];
    char logkey[48];

    user[0] = '\0';
    *status = "500";
    *text = "malformed ZAP request";
    if (nframes < 6 || !frame_is(&frames[0], "1.0"))
        return;
    frame_str(frames, nframes, 5, mech, sizeof(mech));
    frame_str(frames, nframes, 3, addr, sizeof(addr));
    *status = "400";
    if (strcmp(mech, "CURVE") != 0 || nframes < 7 || zmq_msg_size(&frames[6]) != 32) {
        *text = "CURVE required";
        z->refused++;
        mu_log_limited(MU_LOG_WARN, "zap", "zap-mech", ZAP_LOG_INTERVAL,
                       "refused a worker at %s: mechanism %s, CURVE required", addr,
                       mech[0] ? mech : "?");
        return;
    }
    if (!zmq_z85_encode(key, zmq_msg_data(&frames[6]), 32)) {
        *status = "500";
        return;
    }
    for (int i = 0; i < z->nallow; i++) {
        if (strcmp(z->allow[i].key, key) != 0)
            continue;
        *status = "200";
        *text = "OK";
        if (z->allow[i].node[0])
            (void)mu_snprintf(user, user_size, "node:%s", z->allow[i].node);
        else
            (void)mu_snprintf(user, user_size, "key:%s", key);
        mu_log(MU_LOG_DEBUG, "zap", "accepted CURVE key %s%s%s from %s", key,
               z->allow[i].node[0] ? " of node " : "", z->allow[i].node, addr);
        return;
    }
    *text = "unknown CURVE key";
    z->refused++;
    (void)mu_snprintf(logkey, sizeof(logkey), "zap:%s", key);
    mu_log_limited(MU_LOG_WARN, "zap", logkey, ZAP_LOG_INTERVAL,
                   "refused a worker at %s: CURVE key %s is not in the allow-list %s", addr, key,
                   z->path);
}

int proto_zap_serve(struct proto_zap *z)
{
    zmq_msg_t frames[ZAP_MAX_FRAMES];
    int answered = 0;

    if (!z)
        return 0;
    for (;;) {
        int nframes = 0;
        int r = zap_recv(z->sock, frames, &nframes);
        const char *status;
        const char *text;
        char user[PROTO_CURVE_KEY_LEN + PROTO_NODE_MAX + 8];

        if (r <= 0) {
            for (int i = 0; i < nframes; i++)
                (void)zmq_msg_close(&frames[i]);
            if (r < 0)
                mu_log_limited(MU_LOG_ERROR, "zap", "zap-recv", ZAP_LOG_INTERVAL, "ZAP receive: %s",
                               zmq_strerror(zmq_errno()));
            break;
        }
        zap_decide(z, frames, nframes, &status, &text, user, sizeof(user));
        if (zap_reply(z->sock, nframes > 1 ? &frames[1] : NULL, status, text, user) != 0)
            mu_log_limited(MU_LOG_ERROR, "zap", "zap-send", ZAP_LOG_INTERVAL, "ZAP reply: %s",
                           zmq_strerror(zmq_errno()));
        for (int i = 0; i < nframes; i++)
            (void)zmq_msg_close(&frames[i]);
        answered++;
    }
    return answered;
}
