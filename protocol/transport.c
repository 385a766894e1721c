/* SPDX-License-Identifier: MIT */
/*
 * proto transport: the scheduler's ROUTER and the workers' DEALERs over ZeroMQ (docs/design.md §7).
 *
 * Nothing here blocks: sends use ZMQ_DONTWAIT and receives return 0 when nothing is waiting, so
 * both daemons can drive the sockets from their own poll loops.  Receives go through zmq_msg_t,
 * never zmq_recv into a fixed buffer, which truncates silently; ZMQ_MAXMSGSIZE on both sockets
 * makes libzmq drop a peer that sends more than PROTO_MAX_MSG_BYTES before we ever see it.
 * A malformed message (wrong frame count, anonymous peer, bad payload) is consumed whole, every
 * frame of it, and reported as -1 with the sender's identity so the caller can log and go on.
 *
 * CURVE (issue #5, "who may do what"): libzmq encrypts and authenticates; this file only sets
 * the keys on the sockets.  The key files and the allow-list are read in transport_curve.c, and
 * the ZAP handler that enforces the list is transport_zap.c.
 */
#include "protocol/internal.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <zmq.h>

#include "common/mu_banned.h"

#define PROTO_ROUTER_BACKLOG 65535 /* listen(2) takes at most net.core.somaxconn of it */

int proto_sock_set_int(void *sock, int opt, int value, const char *name, struct mu_err *err)
{
    if (zmq_setsockopt(sock, opt, &value, sizeof(value)) != 0)
        return mu_errf(err, MU_E_ZMQ, "cannot set %s: %s", name, zmq_strerror(zmq_errno()));
    return 0;
}

static int set_common(void *sock, struct mu_err *err)
{
    int64_t max = PROTO_MAX_MSG_BYTES;

    if (zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof(max)) != 0)
        return mu_errf(err, MU_E_ZMQ, "cannot set ZMQ_MAXMSGSIZE: %s", zmq_strerror(zmq_errno()));
    return proto_sock_set_int(sock, ZMQ_LINGER, 0, "ZMQ_LINGER", err);
}

void *proto_router_new(void *ctx, const char *endpoint, struct mu_err *err)
{
    return proto_router_new_curve(ctx, endpoint, NULL, err);
}

/* Server side of CURVE: the key pair, and a ZAP domain so that the handler is always asked. */
static int set_curve_server(void *sock, const struct proto_curve *server, struct mu_err *err)
{
    if (!proto_curve_available())
        return mu_errf(err, MU_E_ZMQ,
                       "this libzmq has no CURVE support (zmq_has(\"curve\") is false); "
                       "install a libzmq built with libsodium");
    if (proto_sock_set_int(sock, ZMQ_CURVE_SERVER, 1, "ZMQ_CURVE_SERVER", err) != 0)
        return -1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, server->secret_key, PROTO_CURVE_KEY_LEN) != 0)
        return mu_errf(err, MU_E_ZMQ, "cannot set the CURVE secret key: %s",
                       zmq_strerror(zmq_errno()));
    if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "muster", 6) != 0)
        return mu_errf(err, MU_E_ZMQ, "cannot set ZMQ_ZAP_DOMAIN: %s", zmq_strerror(zmq_errno()));
    return 0;
}

void *proto_router_new_curve(void *ctx,
                             const char *endpoint,
                             const struct proto_curve *server,
                             struct mu_err *err)
{
    void *sock = zmq_socket(ctx, ZMQ_ROUTER);

    if (!sock) {
        (void)mu_errf(err, MU_E_ZMQ, "cannot create a ROUTER socket: %s",
                      zmq_strerror(zmq_errno()));
        return NULL;
    }
    /* A worker that reconnects under the same node name replaces its stale connection.  After a
     * restart every worker connects at once: libzmq's listen backlog of 100 overflowed with
     * 19,840 of them (issue #15), and a connection whose SYN was dropped tries again 1, 2, 4 ...
     * s later, so a third of the fleet came back after the 60 s musterd waits for it. */
    if (set_common(sock, err) != 0
        || proto_sock_set_int(sock, ZMQ_ROUTER_HANDOVER, 1, "ZMQ_ROUTER_HANDOVER", err) != 0
        || proto_sock_set_int(sock, ZMQ_BACKLOG, PROTO_ROUTER_BACKLOG, "ZMQ_BACKLOG", err) != 0)
        goto fail;
    if (server && set_curve_server(sock, server, err) != 0)
        goto fail;
    if (zmq_bind(sock, endpoint) != 0) {
        (void)mu_errf(err, MU_E_ZMQ, "cannot bind '%s': %s", endpoint, zmq_strerror(zmq_errno()));
        goto fail;
    }
    return sock;
fail:
    (void)zmq_close(sock);
    return NULL;
}

void *proto_dealer_new(void *ctx, const char *endpoint, const char *node, struct mu_err *err)
{
    return proto_dealer_new_curve(ctx, endpoint, node, NULL, NULL, err);
}

/* Client side of CURVE: our key pair and the scheduler's public key. */
static int set_curve_client(void *sock,
                            const struct proto_curve *client,
                            const char *server_public,
                            struct mu_err *err)
{
    if (!proto_curve_available())
        return mu_errf(err, MU_E_ZMQ,
                       "this libzmq has no CURVE support (zmq_has(\"curve\") is false); "
                       "install a libzmq built with libsodium");
    if (!proto_curve_key_valid(server_public))
        return mu_errf(err, MU_E_INVAL,
                       "the scheduler's public key is not %d characters of Z85 (see "
                       "'musterctl keygen')",
                       PROTO_CURVE_KEY_LEN);
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_public, PROTO_CURVE_KEY_LEN) != 0
        || zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, client->public_key, PROTO_CURVE_KEY_LEN) != 0
        || zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, client->secret_key, PROTO_CURVE_KEY_LEN) != 0)
        return mu_errf(err, MU_E_ZMQ, "cannot set the CURVE keys: %s", zmq_strerror(zmq_errno()));
    return 0;
}

void *proto_dealer_new_curve(void *ctx,
                             const char *endpoint,
                             const char *node,
                             const struct proto_curve *client,
                             const char *server_public,
                             struct mu_err *err)
{
    void *sock;

    if (!client != !server_public) {
        (void)mu_errf(err, MU_E_INVAL,
                      "CURVE needs both the worker's key pair and the scheduler's public key");
        return NULL;
    }

    if (!mu_name_is_valid(node, PROTO_NODE_MAX - 1)) {
        (void)mu_errf(err, MU_E_INVAL,
                      "invalid node name '%s': expected 1..%d characters of [A-Za-z0-9._:-]",
                      node ? node : "", PROTO_NODE_MAX - 1);
        return NULL;
    }
    sock = zmq_socket(ctx, ZMQ_DEALER);
    if (!sock) {
        (void)mu_errf(err, MU_E_ZMQ, "cannot create a DEALER socket: %s",
                      zmq_strerror(zmq_errno()));
        return NULL;
    }
    if (zmq_setsockopt(sock, ZMQ_ROUTING_ID, node, strlen(node)) != 0) {
        (void)mu_errf(err, MU_E_ZMQ, "cannot set ZMQ_ROUTING_ID to '%s': %s", node,
                      zmq_strerror(zmq_errno()));
        goto fail;
    }
    /* IMMEDIATE 0: messages queue while the scheduler is away and go out on reconnect.  The
     * reconnect backoff stops at 1 s: a worker must be back within its lease (node_lost_after_s,
     * 3 s at least) of a restarted scheduler answering, and a ceiling of 5 s let the lease run
     * out while the worker waited for its next try (t0402 under ASan). */
    if (set_common(sock, err) != 0
        || proto_sock_set_int(sock, ZMQ_RECONNECT_IVL, 100, "ZMQ_RECONNECT_IVL", err) != 0
        || proto_sock_set_int(sock, ZMQ_RECONNECT_IVL_MAX, 1000, "ZMQ_RECONNECT_IVL_MAX", err) != 0
        || proto_sock_set_int(sock, ZMQ_IMMEDIATE, 0, "ZMQ_IMMEDIATE", err) != 0)
        goto fail;
    if (client && set_curve_client(sock, client, server_public, err) != 0)
        goto fail;
    if (zmq_connect(sock, endpoint) != 0) {
        (void)mu_errf(err, MU_E_ZMQ, "cannot connect to '%s': %s", endpoint,
                      zmq_strerror(zmq_errno()));
        goto fail;
    }
    return sock;
fail:
    (void)zmq_close(sock);
    return NULL;
}

static int sock_type(void *sock, int *type, struct mu_err *err)
{
    size_t size = sizeof(*type);

    if (zmq_getsockopt(sock, ZMQ_TYPE, type, &size) != 0)
        return mu_errf(err, MU_E_ZMQ, "cannot read the socket type: %s", zmq_strerror(zmq_errno()));
    return 0;
}

static int send_failed(const char *dest, int e, struct mu_err *err)
{
    if (e == EAGAIN)
        return mu_errf(err, MU_E_ZMQ, "send to %s: would block (peer gone or queue full)", dest);
    return mu_errf(err, MU_E_ZMQ, "send to %s: %s", dest, zmq_strerror(e));
}

int proto_send(void *sock, const char *identity, const struct proto_msg *m, struct mu_err *err)
{
    struct mu_buf buf;
    char dest[PROTO_NODE_MAX + 2];
    int type = 0;
    int rc = -1;

    if (sock_type(sock, &type, err) != 0)
        return -1;
    if (type == ZMQ_ROUTER && (!identity || !identity[0]))
        return mu_errf(err, MU_E_INVAL, "send on a ROUTER needs a destination node");
    if (type != ZMQ_ROUTER && identity)
        return mu_errf(err, MU_E_INVAL, "send to '%s': only a ROUTER takes a destination",
                       identity);
    if (identity)
        (void)mu_snprintf(dest, sizeof(dest), "'%s'", identity);
    else
        (void)mu_strlcpy(dest, "the scheduler", sizeof(dest));

    mu_buf_init(&buf, PROTO_MAX_MSG_BYTES);
    if (proto_msg_encode(m, &buf, err) != 0) {
        mu_err_prefix(err, "send %s to %s: ", proto_type_name(m->type), dest);
        goto out;
    }
    if (identity && zmq_send(sock, identity, strlen(identity), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        (void)send_failed(dest, zmq_errno(), err);
        goto out;
    }
    if (zmq_send(sock, buf.data, buf.len, ZMQ_DONTWAIT) < 0) {
        (void)send_failed(dest, zmq_errno(), err);
        goto out;
    }
    rc = 0;
out:
    mu_buf_release(&buf);
    return rc;
}

/* Receives one frame into part (initialised here); 0 ok, 1 nothing waiting, -1 error. */
static int recv_frame(void *sock, zmq_msg_t *part, struct mu_err *err)
{
    (void)zmq_msg_init(part);
    if (zmq_msg_recv(part, sock, ZMQ_DONTWAIT) >= 0)
        return 0;
    if (zmq_errno() == EAGAIN || zmq_errno() == EINTR)
        return 1;
    return mu_errf(err, MU_E_ZMQ, "receive: %s", zmq_strerror(zmq_errno()));
}

/* Drops the rest of a multipart message after `part`; returns how many frames it dropped. */
static int drain(void *sock, zmq_msg_t *part)
{
    int dropped = 0;

    while (zmq_msg_more(part)) {
        (void)zmq_msg_close(part);
        (void)zmq_msg_init(part);
        if (zmq_msg_recv(part, sock, ZMQ_DONTWAIT) < 0)
            break; /* cannot happen: a multipart message arrives whole */
        dropped++;
    }
    return dropped;
}

/*
 * Copies a ROUTER identity as a C string.  Workers name themselves with printable node names;
 * anything else (libzmq's anonymous 5-byte ids start with a zero byte) is shown in hex.
 */
static int copy_identity(zmq_msg_t *part, char *identity, size_t identity_size, struct mu_err *err)
{
    const unsigned char *p = zmq_msg_data(part);
    size_t len = zmq_msg_size(part);
    bool printable = len > 0;

    for (size_t i = 0; i < len && printable; i++)
        printable = p[i] > 0x20 && p[i] < 0x7f;
    if (printable) {
        if (identity && identity_size > 0)
            (void)mu_snprintf(identity, identity_size, "%.*s", (int)len, (const char *)p);
        if (identity && len >= identity_size)
            return mu_errf(err, MU_E_PROTO, "peer identity of %zu bytes does not fit in %zu", len,
                           identity_size);
        return 0;
    }
    if (identity && identity_size > 0) {
        size_t o = mu_strlcpy(identity, "0x", identity_size);
        for (size_t i = 0; i < len && o + 2 < identity_size; i++, o += 2)
            (void)mu_snprintf(identity + o, identity_size - o, "%02x", p[i]);
    }
    return mu_errf(err, MU_E_PROTO, "peer without a node identity (%zu-byte id)", len);
}

/*
 * With CURVE, the ZAP handler names the node a key is bound to in the connection's User-Id
 * ("node:NAME"); a message from that connection under another routing id is refused, so an
 * allowed worker cannot speak for another node.  Plain connections carry no User-Id.
 */
static int check_bound_node(zmq_msg_t *part, const char *peer, struct mu_err *err)
{
    const char *user = zmq_msg_gets(part, "User-Id");

    if (!user || strncmp(user, "node:", 5) != 0 || strcmp(user + 5, peer) == 0)
        return 0;
    return mu_errf(err, MU_E_PROTO, "node '%s' uses the CURVE key of node '%s'", peer, user + 5);
}

int proto_recv(
    void *sock, char *identity, size_t identity_size, struct proto_msg *out, struct mu_err *err)
{
    zmq_msg_t part;
    char peer[PROTO_NODE_MAX];
    size_t peer_len;
    int type = 0;
    int r;
    int dropped;
    int rc = -1;

    proto_msg_init(out, (enum proto_type)0);
    if (identity && identity_size > 0)
        identity[0] = '\0';
    if (sock_type(sock, &type, err) != 0)
        return -1;
    r = recv_frame(sock, &part, err);
    if (r != 0) {
        (void)zmq_msg_close(&part);
        return r > 0 ? 0 : -1;
    }
    if (type == ZMQ_ROUTER) {
        if (copy_identity(&part, identity, identity_size, err) != 0) {
            (void)drain(sock, &part);
            goto out;
        }
        if (!zmq_msg_more(&part)) {
            (void)mu_errf(err, MU_E_PROTO, "message without a payload frame");
            goto out;
        }
        peer_len = zmq_msg_size(&part) < sizeof(peer) ? zmq_msg_size(&part) : sizeof(peer) - 1;
        memcpy(peer, zmq_msg_data(&part), peer_len);
        peer[peer_len] = '\0';
        (void)zmq_msg_close(&part);
        if (recv_frame(sock, &part, err) != 0) {
            /* Cannot happen either: the identity frame said more was coming. */
            (void)mu_errf(err, MU_E_ZMQ, "receive: payload frame missing");
            goto out;
        }
        if (check_bound_node(&part, peer, err) != 0) {
            (void)drain(sock, &part);
            goto out;
        }
    }
    if (zmq_msg_more(&part)) {
        dropped = drain(sock, &part);
        (void)mu_errf(err, MU_E_PROTO, "message with %d extra frame(s)", dropped);
        goto out;
    }
    if (proto_msg_decode(zmq_msg_data(&part), zmq_msg_size(&part), out, err) != 0)
        goto out;
    rc = 1;
out:
    (void)zmq_msg_close(&part);
    return rc;
}
