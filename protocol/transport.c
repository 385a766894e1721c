/* SPDX-License-Identifier: MIT */
/*
 * proto transport: the scheduler's ROUTER and the workers' DEALERs over ZeroMQ (DESIGN §7).
 *
 * Nothing here blocks: sends use ZMQ_DONTWAIT and receives return 0 when nothing is waiting, so
 * both daemons can drive the sockets from their own poll loops.  Receives go through zmq_msg_t,
 * never zmq_recv into a fixed buffer, which truncates silently; ZMQ_MAXMSGSIZE on both sockets
 * makes libzmq drop a peer that sends more than PROTO_MAX_MSG_BYTES before we ever see it.
 * A malformed message (wrong frame count, anonymous peer, bad payload) is consumed whole, every
 * frame of it, and reported as -1 with the sender's identity so the caller can log and go on.
 *
 * CURVE (issue #5, "who may do what"): libzmq encrypts and authenticates; we only load keys and
 * answer ZAP.  The ZAP handler is a REP socket the scheduler's single-threaded loop services
 * (no thread of our own), so the allow-list needs no locking.  '#' is a Z85 character, so the
 * key-file parsers treat a line that is exactly one valid key as a key, never a comment.
 */
#include "protocol/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/mu_banned.h"

static int set_int(void *sock, int opt, int value, const char *name, struct mu_err *err)
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
    return set_int(sock, ZMQ_LINGER, 0, "ZMQ_LINGER", err);
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
    if (set_int(sock, ZMQ_CURVE_SERVER, 1, "ZMQ_CURVE_SERVER", err) != 0)
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
    /* A worker that reconnects under the same node name replaces its stale connection. */
    if (set_common(sock, err) != 0
        || set_int(sock, ZMQ_ROUTER_HANDOVER, 1, "ZMQ_ROUTER_HANDOVER", err) != 0)
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
        || set_int(sock, ZMQ_RECONNECT_IVL, 100, "ZMQ_RECONNECT_IVL", err) != 0
        || set_int(sock, ZMQ_RECONNECT_IVL_MAX, 1000, "ZMQ_RECONNECT_IVL_MAX", err) != 0
        || set_int(sock, ZMQ_IMMEDIATE, 0, "ZMQ_IMMEDIATE", err) != 0)
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

/* ---- CURVE keys ---- */

static const char z85_chars[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                ".-:+=^!/*?&<>()[]{}@%$#";

bool proto_curve_available(void)
{
    return zmq_has("curve") != 0;
}

bool proto_curve_key_valid(const char *text)
{
    uint8_t raw[32];

    if (!text || strlen(text) != PROTO_CURVE_KEY_LEN)
        return false;
    for (const char *p = text; *p; p++) {
        if (!strchr(z85_chars, *p))
            return false;
    }
    /* Five characters above 2^32 - 1 are Z85 characters but no key. */
    return zmq_z85_decode(raw, text) != NULL;
}

int proto_curve_keypair(struct proto_curve *out, struct mu_err *err)
{
    memset(out, 0, sizeof(*out));
    if (!proto_curve_available())
        return mu_errf(err, MU_E_ZMQ,
                       "this libzmq has no CURVE support (zmq_has(\"curve\") is false); install "
                       "a libzmq built with libsodium");
    if (zmq_curve_keypair(out->public_key, out->secret_key) != 0)
        return mu_errf(err, MU_E_ZMQ, "zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
    return 0;
}

/*
 * The next line of it (without its newline), with leading and trailing blanks cut.  Returns the
 * line's length, or -1 at the end; it->lineno numbers the line.
 */
static int next_line(struct mu_lines *it, const char **line)
{
    const char *p;
    const char *end;
    size_t len;

    if (!mu_lines_next(it, &p, &len))
        return -1;
    end = p + len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
        end--;
    *line = p;
    len = (size_t)(end - p);
    return len > 4096 ? 4096 : (int)len;
}

/*
 * '#' is a Z85 character, so a line that is exactly one valid key is a key even when it starts
 * with '#'; any other line starting with '#' is a comment.
 */
static bool line_is_key(const char *line, int len)
{
    char key[PROTO_CURVE_KEY_LEN + 1];

    if (len != PROTO_CURVE_KEY_LEN)
        return false;
    memcpy(key, line, PROTO_CURVE_KEY_LEN);
    key[PROTO_CURVE_KEY_LEN] = '\0';
    return proto_curve_key_valid(key);
}

/* The one key of a key file's text (comments and blank lines around it). */
static int parse_key_file(const char *text, const char *path, char *out, struct mu_err *err)
{
    struct mu_lines it;
    const char *line;
    int len;
    bool found = false;

    mu_lines_init(&it, text);
    while ((len = next_line(&it, &line)) >= 0) {
        int lineno = it.lineno;

        if (len == 0 || (line[0] == '#' && !line_is_key(line, len)))
            continue;
        if (!line_is_key(line, len))
            return mu_errf(err, MU_E_CONFIG,
                           "%s:%d: expected a CURVE key (%d Z85 characters, as 'musterctl "
                           "keygen' writes), got %d characters",
                           path, lineno, PROTO_CURVE_KEY_LEN, len);
        if (found)
            return mu_errf(err, MU_E_CONFIG, "%s:%d: more than one key in the file", path, lineno);
        memcpy(out, line, PROTO_CURVE_KEY_LEN);
        out[PROTO_CURVE_KEY_LEN] = '\0';
        found = true;
    }
    if (!found)
        return mu_errf(err, MU_E_CONFIG, "%s: no CURVE key in the file", path);
    return 0;
}

int proto_curve_load_secret(const char *path, struct proto_curve *out, struct mu_err *err)
{
    struct stat st;
    char *text = NULL;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (stat(path, &st) != 0)
        return mu_errf(err, MU_E_IO, "secret key '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return mu_errf(err, MU_E_CONFIG, "secret key '%s': not a regular file", path);
    if ((st.st_mode & 077) != 0)
        return mu_errf(err, MU_E_CONFIG,
                       "secret key '%s': mode %04o lets other users read it; run "
                       "'chmod 600 %s' (or make a new pair with 'musterctl keygen')",
                       path, (unsigned)(st.st_mode & 07777), path);
    text = mu_file_read(path, 64u << 10, NULL, err);
    if (!text) {
        mu_err_prefix(err, "secret key: ");
        return -1;
    }
    if (parse_key_file(text, path, out->secret_key, err) != 0)
        goto out;
    if (zmq_curve_public(out->public_key, out->secret_key) != 0) {
        (void)mu_errf(err, MU_E_CONFIG, "secret key '%s': cannot derive the public key: %s", path,
                      zmq_strerror(zmq_errno()));
        goto out;
    }
    rc = 0;
out:
    if (rc != 0)
        memset(out, 0, sizeof(*out));
    if (text) {
        memset(text, 0, strlen(text));
        free(text);
    }
    return rc;
}

int proto_curve_load_public(const char *key_or_path, char *out, size_t out_size, struct mu_err *err)
{
    char *text;
    int rc;

    if (out_size <= PROTO_CURVE_KEY_LEN)
        return mu_errf(err, MU_E_INVAL, "public key buffer too small");
    out[0] = '\0';
    if (!key_or_path || !key_or_path[0])
        return mu_errf(err, MU_E_INVAL, "empty public key");
    if (proto_curve_key_valid(key_or_path)) {
        (void)mu_strlcpy(out, key_or_path, out_size);
        return 0;
    }
    text = mu_file_read(key_or_path, 64u << 10, NULL, err);
    if (!text) {
        mu_err_prefix(err,
                      "public key: not %d Z85 characters, and as a file: ", PROTO_CURVE_KEY_LEN);
        return -1;
    }
    rc = parse_key_file(text, key_or_path, out, err);
    free(text);
    return rc;
}

/* Writes text to path, created with mode (exclusively when excl). */
static int write_file(
    const char *path, const char *text, mode_t mode, bool excl, struct mu_err *err)
{
    size_t len = strlen(text);
    size_t done = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (excl ? O_EXCL : O_TRUNC), mode);

    if (fd < 0)
        return mu_errf(err, MU_E_IO, "cannot create '%s': %s%s", path, strerror(errno),
                       errno == EEXIST ? " (refusing to overwrite a key; remove it first)" : "");
    /* The mode given to open is filtered by the umask: set it exactly. */
    if (fchmod(fd, mode) != 0) {
        (void)mu_errf(err, MU_E_IO, "chmod '%s': %s", path, strerror(errno));
        goto fail;
    }
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            (void)mu_errf(err, MU_E_IO, "write '%s': %s", path, strerror(errno));
            goto fail;
        }
        done += (size_t)n;
    }
    if (close(fd) != 0)
        return mu_errf(err, MU_E_IO, "close '%s': %s", path, strerror(errno));
    return 0;
fail:
    (void)close(fd);
    (void)unlink(path);
    return -1;
}

int proto_curve_save(const struct proto_curve *keys,
                     const char *secret_path,
                     const char *public_path,
                     struct mu_err *err)
{
    char text[512];
    int rc;

    if (!proto_curve_key_valid(keys->public_key) || !proto_curve_key_valid(keys->secret_key))
        return mu_errf(err, MU_E_INVAL, "not a CURVE key pair");
    (void)mu_snprintf(text, sizeof(text),
                      "# muster CURVE secret key: keep this file private (mode 0600)\n"
                      "# public key: %s\n"
                      "%s\n",
                      keys->public_key, keys->secret_key);
    rc = write_file(secret_path, text, 0600, true, err);
    memset(text, 0, sizeof(text));
    if (rc != 0)
        return -1;
    (void)mu_snprintf(text, sizeof(text), "%s\n", keys->public_key);
    if (write_file(public_path, text, 0644, true, err) != 0) {
        (void)unlink(secret_path);
        return -1;
    }
    return 0;
}

/* ---- allow-list ---- */

/* Splits a line into at most 3 blank-separated words (the third only to spot a comment). */
static int split_words(const char *line, int len, const char **w, int *wl)
{
    int n = 0;
    int i = 0;

    while (i < len && n < 3) {
        while (i < len && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i >= len)
            break;
        w[n] = line + i;
        while (i < len && line[i] != ' ' && line[i] != '\t')
            i++;
        wl[n] = (int)(line + i - w[n]);
        n++;
    }
    return n;
}

static int allow_add(struct proto_allow **list,
                     int *count,
                     int *cap,
                     const struct proto_allow *e,
                     struct mu_err *err)
{
    if (*count == *cap) {
        int ncap = *cap ? *cap * 2 : 16;
        struct proto_allow *n = realloc(*list, (size_t)ncap * sizeof(**list));
        if (!n)
            return mu_errf(err, MU_E_NOMEM, "out of memory for the allow-list");
        *list = n;
        *cap = ncap;
    }
    (*list)[(*count)++] = *e;
    return 0;
}

/* One entry line into e; 0 or -1 with err (without the "origin:line: " prefix). */
static int allow_line(const char *line, int len, struct proto_allow *e, struct mu_err *err)
{
    const char *w[3] = { NULL, NULL, NULL };
    int wl[3] = { 0, 0, 0 };
    int n = split_words(line, len, w, wl);
    const char *key;
    int key_len;

    memset(e, 0, sizeof(*e));
    if (n == 0)
        return mu_errf(err, MU_E_CONFIG, "empty entry"); /* callers skip blank lines */
    if (n >= 2 && w[1][0] == '#' && !line_is_key(w[1], wl[1]))
        n = 1; /* "KEY # comment" */
    else if (n == 3 && w[2][0] != '#')
        return mu_errf(err, MU_E_CONFIG, "expected 'KEY' or 'NODE KEY', got more words");
    if (n == 1) {
        key = w[0];
        key_len = wl[0];
    } else {
        if (wl[0] >= PROTO_NODE_MAX) {
            return mu_errf(err, MU_E_CONFIG, "node name longer than %d characters",
                           PROTO_NODE_MAX - 1);
        }
        memcpy(e->node, w[0], (size_t)wl[0]);
        e->node[wl[0]] = '\0';
        if (!mu_name_is_valid(e->node, PROTO_NODE_MAX - 1))
            return mu_errf(err, MU_E_CONFIG,
                           "node name '%s': expected 1..%d characters of [A-Za-z0-9._:-]", e->node,
                           PROTO_NODE_MAX - 1);
        key = w[1];
        key_len = wl[1];
    }
    if (!line_is_key(key, key_len))
        return mu_errf(err, MU_E_CONFIG,
                       "expected a CURVE public key (%d Z85 characters, as 'musterctl keygen' "
                       "prints), got '%.*s'",
                       PROTO_CURVE_KEY_LEN, key_len > 48 ? 48 : key_len, key);
    memcpy(e->key, key, PROTO_CURVE_KEY_LEN);
    e->key[PROTO_CURVE_KEY_LEN] = '\0';
    return 0;
}

int proto_allow_parse(
    const char *text, const char *origin, struct proto_allow **out, int *count, struct mu_err *err)
{
    struct proto_allow *list = NULL;
    struct proto_allow e;
    const char *line;
    int len;
    int n = 0;
    int cap = 0;
    int bound = 0;
    struct mu_lines it;

    *out = NULL;
    *count = 0;
    mu_lines_init(&it, text);
    while ((len = next_line(&it, &line)) >= 0) {
        if (len == 0 || (line[0] == '#' && !line_is_key(line, len)))
            continue;
        if (allow_line(line, len, &e, err) != 0)
            goto fail_line;
        for (int i = 0; i < n; i++) {
            if (strcmp(list[i].key, e.key) == 0) {
                (void)mu_errf(err, MU_E_CONFIG, "key listed twice (first on an earlier line)");
                goto fail_line;
            }
            if (e.node[0] && strcmp(list[i].node, e.node) == 0) {
                (void)mu_errf(err, MU_E_CONFIG, "node '%s' has two keys", e.node);
                goto fail_line;
            }
        }
        if (n > 0 && (bound > 0) != (e.node[0] != '\0')) {
            (void)mu_errf(err, MU_E_CONFIG,
                          "either every key names its node ('NODE KEY') or none does: an "
                          "unbound key could take a bound node's name");
            goto fail_line;
        }
        if (allow_add(&list, &n, &cap, &e, err) != 0)
            goto fail;
        if (e.node[0])
            bound++;
    }
    *out = list;
    *count = n;
    return 0;
fail_line:
    mu_err_prefix(err, "%s:%d: ", origin, it.lineno);
fail:
    free(list);
    return -1;
}

/* ---- ZAP handler (RFC 27) ---- */

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
    if (set_int(z->sock, ZMQ_LINGER, 0, "ZMQ_LINGER", err) != 0)
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
