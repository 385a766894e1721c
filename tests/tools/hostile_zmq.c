/* SPDX-License-Identifier: MIT */
/*
 * hostile_zmq: sends malformed frames to a musterd ROUTER for tests/integration/t1001 (issue #5,
 * "Hostile input").  Each case gets its own DEALER connection (identity "hostile-<case>", or raw
 * bytes for the identity cases), so a case that makes libzmq drop the connection (an oversized
 * frame) cannot hide the next one.  Payloads are built from a real encoding (proto_msg_encode)
 * and then broken, so they stay close to what a buggy or outdated worker would send.
 *
 * Before sending, the tool decodes each payload itself with proto_msg_decode and prints the
 * error ("case wrong-version: rejected: unsupported protocol version 2 ..."): every case whose
 * payload must be refused by the codec and is not makes the tool exit 1, so the test learns of a
 * codec regression even though musterd's own log is rate-limited to one line.
 *
 * usage: hostile_zmq ENDPOINT [CASE...]     (no CASE: all of them; "list" names them)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/mu.h"
#include "protocol/proto.h"

#include "common/mu_banned.h"

#define FLOOD_FRAMES 5000

struct frames {
    struct mu_buf payload; /* the frame the codec sees */
    int nframes;           /* 1, or 3 for the multipart case (payload sent three times) */
    char identity[64];     /* DEALER routing id; may hold non-printable bytes */
    size_t identity_len;
    bool codec_ok; /* true when the payload itself is valid (the transport must refuse it) */
    int repeat;    /* how many times to send the message */
};

/* A realistic HELLO: what a worker with 8 GPUs and two labels sends on connect. */
static int base_hello(struct mu_buf *out, struct mu_err *err)
{
    struct proto_msg m;
    struct proto_gpu gpus[8];
    int rc;

    proto_msg_init(&m, PROTO_HELLO);
    m.seq = 1;
    (void)mu_strlcpy(m.node, "hostile", sizeof(m.node));
    (void)mu_strlcpy(m.pool, "spot-a", sizeof(m.pool));
    (void)mu_strlcpy(m.addr, "127.0.0.1", sizeof(m.addr));
    m.cpus = 16;
    m.memory_mb = 65536;
    memset(gpus, 0, sizeof(gpus));
    for (int i = 0; i < 8; i++) {
        gpus[i].index = i;
        (void)mu_snprintf(gpus[i].model, sizeof(gpus[i].model), "NVIDIA A100-SXM4-40GB");
        gpus[i].memory_mb = 40960;
    }
    m.nlabels = 1;
    (void)mu_strlcpy(m.labels[0].level, "zone", sizeof(m.labels[0].level));
    (void)mu_strlcpy(m.labels[0].value, "z1", sizeof(m.labels[0].value));
    rc = proto_msg_set_gpus(&m, 8, gpus, err);
    if (rc == 0)
        rc = proto_msg_encode(&m, out, err);
    proto_msg_release(&m);
    return rc;
}

static int base_heartbeat(struct mu_buf *out, struct mu_err *err)
{
    struct proto_msg m;
    int rc;

    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.seq = 2;
    (void)mu_strlcpy(m.node, "hostile", sizeof(m.node));
    rc = proto_msg_encode(&m, out, err);
    proto_msg_release(&m);
    return rc;
}

/* Replaces the first `old` in b with `repl` (lengths may differ); -1 if `old` is absent. */
static int splice(struct mu_buf *b,
                  const char *old,
                  size_t old_len,
                  const char *repl,
                  size_t repl_len,
                  struct mu_err *err)
{
    struct mu_buf nb;
    size_t at = 0;

    while (at + old_len <= b->len && memcmp(b->data + at, old, old_len) != 0)
        at++;
    if (at + old_len > b->len)
        return mu_errf(err, MU_E_INVAL, "pattern not found in the base message");
    mu_buf_init(&nb, 0);
    if (mu_buf_append(&nb, b->data, at, err) != 0 || mu_buf_append(&nb, repl, repl_len, err) != 0
        || mu_buf_append(&nb, b->data + at + old_len, b->len - at - old_len, err) != 0) {
        mu_buf_release(&nb);
        return -1;
    }
    mu_buf_release(b);
    *b = nb;
    return 0;
}

static int append_bytes(struct mu_buf *b, int byte, size_t n, struct mu_err *err)
{
    char chunk[4096];
    memset(chunk, byte, sizeof(chunk));
    while (n > 0) {
        size_t k = n < sizeof(chunk) ? n : sizeof(chunk);
        if (mu_buf_append(b, chunk, k, err) != 0)
            return -1;
        n -= k;
    }
    return 0;
}

static const char *const case_names[] = {
    "garbage",       "empty",        "text",         "truncated",    "wrong-version",
    "huge-version",  "trailing",     "not-map",      "deep",         "huge-count",
    "long-string",   "nul-string",   "bad-type",     "unknown-type", "negative-seq",
    "duplicate-key", "three-frames", "bad-identity", "oversized",    "flood",
};

/* Fills f for case `name`; 0 ok, -1 unknown case or build failure. */
static int build_case(const char *name, struct frames *f, struct mu_err *err)
{
    struct mu_buf *p = &f->payload;

    f->nframes = 1;
    f->repeat = 1;
    f->codec_ok = false;
    (void)mu_snprintf(f->identity, sizeof(f->identity), "hostile-%s", name);
    f->identity_len = strlen(f->identity);
    if (strcmp(name, "garbage") == 0) {
        static const unsigned char bytes[] = { 0xc1, 0xff, 0x00, 0x13, 0x37, 0xde, 0xad };
        return mu_buf_append(p, bytes, sizeof(bytes), err);
    }
    if (strcmp(name, "empty") == 0)
        return 0;
    if (strcmp(name, "text") == 0)
        return mu_buf_appendf(p, err, "GET / HTTP/1.1\r\nHost: musterd\r\n\r\n");
    if (strcmp(name, "truncated") == 0) {
        if (base_hello(p, err) != 0)
            return -1;
        p->len /= 2;
        return 0;
    }
    if (strcmp(name, "wrong-version") == 0)
        return base_heartbeat(p, err) != 0 ? -1 : splice(p, "\xa1v\x01", 3, "\xa1v\x02", 3, err);
    if (strcmp(name, "huge-version") == 0)
        return base_heartbeat(p, err) != 0
                   ? -1
                   : splice(p, "\xa1v\x01", 3, "\xa1v\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 11,
                            err);
    if (strcmp(name, "trailing") == 0)
        return base_heartbeat(p, err) != 0 ? -1 : mu_buf_append(p, "\xc0\xc0", 2, err);
    if (strcmp(name, "not-map") == 0)
        return mu_buf_append(p, "\x93\x01\x02\x03", 4, err);
    if (strcmp(name, "deep") == 0) {
        /* {"v":1,"x":[[[[...]]]]}: 100000 nested one-element arrays under an unknown key. */
        if (mu_buf_append(p, "\x82\xa1v\x01\xa1x", 6, err) != 0)
            return -1;
        return append_bytes(p, 0x91, 100000, err) != 0 ? -1 : mu_buf_append(p, "\xc0", 1, err);
    }
    if (strcmp(name, "huge-count") == 0)
        /* A map that claims 4 billion entries in 5 bytes. */
        return mu_buf_append(p, "\xdf\xff\xff\xff\xff\xa1v\x01", 8, err);
    if (strcmp(name, "long-string") == 0) {
        /* HEARTBEAT whose node is a 1 MiB string (the cap is 63 bytes). */
        static const char hdr[] = "\xa4node\xdb\x00\x10\x00\x00";
        if (base_heartbeat(p, err) != 0 || splice(p, "\xa4node", 5, "\xa4nodx", 5, err) != 0)
            return -1;
        p->data[0] = (char)((unsigned char)p->data[0] + 1); /* one more key in the fixmap */
        if (mu_buf_append(p, hdr, sizeof(hdr) - 1, err) != 0)
            return -1;
        return append_bytes(p, 'A', 1u << 20, err);
    }
    if (strcmp(name, "nul-string") == 0)
        return base_heartbeat(p, err) != 0 ? -1
                                           : splice(p, "\xa7hostile", 8, "\xa7hos\x00ile", 8, err);
    if (strcmp(name, "bad-type") == 0)
        /* "seq" as a string. */
        return base_heartbeat(p, err) != 0 ? -1
                                           : splice(p, "\xa3seq\x02", 5, "\xa3seq\xa1\x32", 6, err);
    if (strcmp(name, "unknown-type") == 0)
        return base_heartbeat(p, err) != 0
                   ? -1
                   : splice(p, "\xa9HEARTBEAT", 10, "\xa9HEARTBEEF", 10, err);
    if (strcmp(name, "negative-seq") == 0)
        return base_heartbeat(p, err) != 0 ? -1
                                           : splice(p, "\xa3seq\x02", 5, "\xa3seq\xff", 5, err);
    if (strcmp(name, "duplicate-key") == 0) {
        if (base_heartbeat(p, err) != 0)
            return -1;
        p->data[0] = (char)((unsigned char)p->data[0] + 1);
        return mu_buf_append(p, "\xa3seq\x07", 5, err);
    }
    if (strcmp(name, "three-frames") == 0) {
        f->nframes = 3;
        f->codec_ok = true;
        return base_heartbeat(p, err);
    }
    if (strcmp(name, "bad-identity") == 0) {
        memcpy(f->identity, "\x01\x02\xff\x7f", 4);
        f->identity_len = 4;
        f->codec_ok = true;
        return base_heartbeat(p, err);
    }
    if (strcmp(name, "oversized") == 0)
        /* Over ZMQ_MAXMSGSIZE (4 MiB): libzmq drops the connection before musterd sees it. */
        return append_bytes(p, 0x91, PROTO_MAX_MSG_BYTES + 4096, err);
    if (strcmp(name, "flood") == 0) {
        static const unsigned char bytes[] = { 0x81, 0xa1, 0x76, 0xc3 }; /* {"v": true} */
        f->repeat = FLOOD_FRAMES;
        return mu_buf_append(p, bytes, sizeof(bytes), err);
    }
    return mu_errf(err, MU_E_INVAL, "unknown case '%s' (try: hostile_zmq - list)", name);
}

/* Prints what the codec says about the payload; returns false when a bad payload decoded. */
static bool check_codec(const char *name, const struct frames *f)
{
    struct proto_msg m;
    struct mu_err err;
    int rc;

    mu_err_clear(&err);
    rc = proto_msg_decode(f->payload.data ? f->payload.data : "", f->payload.len, &m, &err);
    proto_msg_release(&m);
    if (rc == 0) {
        (void)printf("case %s: %zu bytes, payload valid%s\n", name, f->payload.len,
                     f->codec_ok ? " (the transport must refuse it)" : ": CODEC ACCEPTED IT");
        return f->codec_ok;
    }
    (void)printf("case %s: %zu bytes, rejected: %s\n", name, f->payload.len, err.msg);
    return !f->codec_ok;
}

static int send_case(void *ctx, const char *endpoint, const struct frames *f, struct mu_err *err)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger_ms = 5000;
    int timeout_ms = 5000;
    int hwm = FLOOD_FRAMES + 10;
    int64_t maxmsg = -1;
    int rc = -1;

    if (!s)
        return mu_errf(err, MU_E_ZMQ, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    if (zmq_setsockopt(s, ZMQ_ROUTING_ID, f->identity, f->identity_len) != 0
        || zmq_setsockopt(s, ZMQ_LINGER, &linger_ms, sizeof(linger_ms)) != 0
        || zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout_ms, sizeof(timeout_ms)) != 0
        || zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm)) != 0
        || zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) != 0) {
        (void)mu_errf(err, MU_E_ZMQ, "zmq_setsockopt: %s", zmq_strerror(zmq_errno()));
        goto out;
    }
    if (zmq_connect(s, endpoint) != 0) {
        (void)mu_errf(err, MU_E_ZMQ, "connect %s: %s", endpoint, zmq_strerror(zmq_errno()));
        goto out;
    }
    for (int r = 0; r < f->repeat; r++) {
        for (int i = 0; i < f->nframes; i++) {
            int flags = i + 1 < f->nframes ? ZMQ_SNDMORE : 0;
            if (zmq_send(s, f->payload.data ? f->payload.data : "", f->payload.len, flags) < 0) {
                (void)mu_errf(err, MU_E_ZMQ, "send: %s", zmq_strerror(zmq_errno()));
                goto out;
            }
        }
    }
    rc = 0;
out:
    (void)zmq_close(s); /* linger: what was queued still goes out before zmq_ctx_term returns */
    return rc;
}

int main(int argc, char **argv)
{
    void *ctx = NULL;
    int failures = 0;
    int ncases;
    const char *const *cases;

    if (argc < 2) {
        (void)fprintf(stderr, "usage: hostile_zmq ENDPOINT [CASE...]   (hostile_zmq - list)\n");
        return 2;
    }
    if (argc == 3 && strcmp(argv[2], "list") == 0) {
        for (size_t i = 0; i < MU_ARRAY_LEN(case_names); i++)
            (void)printf("%s\n", case_names[i]);
        return 0;
    }
    if (argc > 2) {
        cases = (const char *const *)&argv[2];
        ncases = argc - 2;
    } else {
        cases = case_names;
        ncases = (int)MU_ARRAY_LEN(case_names);
    }
    if (strcmp(argv[1], "-") != 0) {
        ctx = zmq_ctx_new();
        if (!ctx) {
            (void)fprintf(stderr, "hostile_zmq: zmq_ctx_new failed\n");
            return 1;
        }
    }
    for (int i = 0; i < ncases; i++) {
        struct frames f;
        struct mu_err err;

        memset(&f, 0, sizeof(f));
        mu_buf_init(&f.payload, (size_t)PROTO_MAX_MSG_BYTES * 2);
        mu_err_clear(&err);
        if (build_case(cases[i], &f, &err) != 0) {
            (void)fprintf(stderr, "hostile_zmq: case %s: %s\n", cases[i], err.msg);
            failures++;
        } else {
            if (!check_codec(cases[i], &f))
                failures++;
            if (ctx && send_case(ctx, argv[1], &f, &err) != 0) {
                (void)fprintf(stderr, "hostile_zmq: case %s: %s\n", cases[i], err.msg);
                failures++;
            }
        }
        mu_buf_release(&f.payload);
    }
    if (ctx)
        (void)zmq_ctx_term(ctx);
    (void)fflush(stdout);
    return failures ? 1 : 0;
}
