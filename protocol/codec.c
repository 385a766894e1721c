/* SPDX-License-Identifier: MIT */
/*
 * proto codec: struct proto_msg <-> one msgpack map (DESIGN §7, protocol/README.md).
 *
 * Both directions run off the same field tables (name, kind, offset, bounds, which types carry
 * it), so a key cannot be encoded under one name and decoded under another, and the README's
 * table reads straight off msg_fields[].  Encoding packs straight into the caller's mu_buf
 * through a msgpack write callback (no second copy) and checks every bound the decoder checks,
 * so we never send what the peer must reject.
 *
 * Decoding treats the bytes as hostile.  A cheap pre-scan walks the encoding first and rejects
 * truncation, trailing bytes, and array/map counts larger than the bytes that follow: msgpack-c
 * allocates count * sizeof(msgpack_object) from its zone before reading any element, so without
 * the pre-scan a 5-byte input could ask for 64 GiB.  Only then does msgpack_unpack_next build the
 * object tree; every `via` access is guarded by a `type` check, strings are copied with their
 * length, and on any failure `out` is released, so it never holds heap memory.
 */
#include "protocol/proto.h"

#include <inttypes.h>
#include <limits.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

enum field_kind {
    FK_U64,   /* uint64_t, unsigned msgpack int only */
    FK_INT,   /* int within [min, max] */
    FK_I64,   /* int64_t within [min, max] */
    FK_STR,   /* char[size], NUL included */
    FK_BOOL,  /* bool */
    FK_STATE, /* enum proto_task_state as "RUNNING" | "EXITED" | "LOST" */
    /* Top-level only: handled with the whole struct proto_msg in hand. */
    FK_VERSION,
    FK_TYPE,
    FK_GPUS,
    FK_LABELS,
    FK_TASKS,
    FK_TASK,
    FK_BIND_GPUS,
    FK_ARGV,
    FK_ENV,
    FK_DATA, /* binary, heap (data, data_len), at most PROTO_LOG_CHUNK_MAX bytes */
};

struct field {
    const char *name; /* the msgpack key */
    enum field_kind kind;
    size_t off;       /* offset in the record (FK_U64 .. FK_STATE) */
    size_t size;      /* FK_STR: destination size, NUL included */
    int64_t min, max; /* FK_INT, FK_I64 */
    unsigned types;   /* bit (1u << type) for every message type whose encoding carries it */
    bool always;      /* encoded even when zero or empty */
};

#define TB(t)     (1u << (t))
#define ALL_TYPES ((1u << (PROTO_TYPE_LAST + 1)) - 2u)
#define LOG_TYPES (TB(PROTO_LOG_READ) | TB(PROTO_LOG_DATA))
#define TASK_TYPES                                                                      \
    (TB(PROTO_BIND) | TB(PROTO_BIND_ACK) | TB(PROTO_TASK_STATUS) | TB(PROTO_CHECKPOINT) \
     | TB(PROTO_KILL) | TB(PROTO_CHECKPOINT_DONE) | LOG_TYPES)
#define MSZ(s, m) sizeof(((s *)NULL)->m)

#define F_U64(s, m, types, always)                         \
    {                                                      \
#m, FK_U64, offsetof(s, m), 0, 0, 0, types, always \
    }
#define F_INT(s, m, lo, hi, types, always)                   \
    {                                                        \
#m, FK_INT, offsetof(s, m), 0, lo, hi, types, always \
    }
#define F_I64(s, m, lo, hi, types, always)                   \
    {                                                        \
#m, FK_I64, offsetof(s, m), 0, lo, hi, types, always \
    }
#define F_STR(s, m, types, always)                                 \
    {                                                              \
#m, FK_STR, offsetof(s, m), MSZ(s, m), 0, 0, types, always \
    }
#define F_SPECIAL(name, kind, types, always)  \
    {                                         \
        name, kind, 0, 0, 0, 0, types, always \
    }

#define M struct proto_msg
static const struct field msg_fields[] = {
    F_SPECIAL("v", FK_VERSION, ALL_TYPES, true),
    F_SPECIAL("type", FK_TYPE, ALL_TYPES, true),
    F_U64(M, seq, ALL_TYPES, true),
    F_U64(M, epoch, ALL_TYPES, true),
    F_STR(M, node, ALL_TYPES, false),
    F_U64(M, sent_ms, ALL_TYPES, false),
    F_STR(M, pool, TB(PROTO_HELLO), false),
    F_STR(M, addr, TB(PROTO_HELLO), false),
    F_STR(M, instance_id, TB(PROTO_HELLO), false),
    F_INT(M, cpus, 0, INT_MAX, TB(PROTO_HELLO), false),
    F_I64(M, memory_mb, 0, INT64_MAX, TB(PROTO_HELLO), false),
    F_SPECIAL("gpus", FK_GPUS, TB(PROTO_HELLO), false),
    F_SPECIAL("labels", FK_LABELS, TB(PROTO_HELLO), false),
    F_SPECIAL("tasks", FK_TASKS, TB(PROTO_HELLO) | TB(PROTO_HEARTBEAT), false),
    F_INT(M, heartbeat_s, 0, INT_MAX, TB(PROTO_HEARTBEAT), false),
    F_INT(M, lease_s, 0, INT_MAX, TB(PROTO_HEARTBEAT), false),
    F_U64(M, echo_ms, TB(PROTO_HELLO) | TB(PROTO_HEARTBEAT), false),
    F_SPECIAL("task", FK_TASK, TASK_TYPES, true),
    F_INT(M, world_size, 0, INT_MAX, TB(PROTO_BIND), false),
    F_INT(M, local_rank, 0, INT_MAX, TB(PROTO_BIND), false),
    F_INT(M, local_world_size, 0, INT_MAX, TB(PROTO_BIND), false),
    F_INT(M, node_rank, 0, INT_MAX, TB(PROTO_BIND), false),
    F_INT(M, nnodes, 0, INT_MAX, TB(PROTO_BIND), false),
    F_STR(M, master_addr, TB(PROTO_BIND), false),
    F_INT(M, master_port, 0, 65535, TB(PROTO_BIND), false),
    F_SPECIAL("gpus_bound", FK_BIND_GPUS, TB(PROTO_BIND), false),
    F_SPECIAL("argv", FK_ARGV, TB(PROTO_BIND), false),
    F_SPECIAL("env", FK_ENV, TB(PROTO_BIND), false),
    F_STR(M, workdir, TB(PROTO_BIND), false),
    F_STR(M, resume_from, TB(PROTO_BIND), false),
    F_U64(M, expires_ms, TB(PROTO_BIND), false),
    F_STR(M, job_user, TB(PROTO_BIND), false),
    { "ok", FK_BOOL, offsetof(M, ok), 0, 0, 0,
      TB(PROTO_BIND_ACK) | TB(PROTO_HEARTBEAT) | TB(PROTO_LOG_DATA), true },
    F_STR(M,
          error,
          TB(PROTO_BIND_ACK) | TB(PROTO_TASK_STATUS) | TB(PROTO_HEARTBEAT) | TB(PROTO_LOG_DATA),
          false),
    { "node_fault", FK_BOOL, offsetof(M, node_fault), 0, 0, 0, TB(PROTO_BIND_ACK), false },
    F_INT(M, signal, 0, 255, TB(PROTO_BIND) | TB(PROTO_CHECKPOINT) | TB(PROTO_KILL), false),
    F_INT(M, grace_s, 0, INT_MAX, TB(PROTO_BIND) | TB(PROTO_CHECKPOINT) | TB(PROTO_KILL), false),
    F_STR(M, path, TB(PROTO_CHECKPOINT_DONE) | TB(PROTO_LOG_DATA), false),
    F_U64(M, at_ms, TB(PROTO_CHECKPOINT_DONE), false),
    F_STR(M, action, TB(PROTO_SPOT_NOTICE) | TB(PROTO_REBALANCE), false),
    F_U64(M, deadline_ms, TB(PROTO_SPOT_NOTICE) | TB(PROTO_REBALANCE), false),
    F_STR(M, req, LOG_TYPES, false),
    F_STR(M, stream, LOG_TYPES, false),
    F_U64(M, offset, LOG_TYPES, false),
    F_INT(M, max_bytes, 0, (int)PROTO_LOG_CHUNK_MAX, TB(PROTO_LOG_READ), false),
    F_U64(M, size, TB(PROTO_LOG_DATA), false),
    { "absent", FK_BOOL, offsetof(M, absent), 0, 0, 0, TB(PROTO_LOG_DATA), false },
    F_SPECIAL("data", FK_DATA, TB(PROTO_LOG_DATA), false),
};
#undef M

#define R struct proto_task_ref
static const struct field ref_fields[] = {
    F_STR(R, job, ALL_TYPES, true),
    F_INT(R, task, 0, INT_MAX, ALL_TYPES, true),
    F_INT(R, attempt, 0, INT_MAX, ALL_TYPES, true),
    { "state", FK_STATE, offsetof(R, state), 0, 0, 0, ALL_TYPES, false },
    F_INT(R, pid, 0, INT_MAX, ALL_TYPES, false),
    F_INT(R, exit_code, INT_MIN, INT_MAX, ALL_TYPES, false),
    F_INT(R, signal, 0, 255, ALL_TYPES, false),
    { "fenced", FK_BOOL, offsetof(R, fenced), 0, 0, 0, ALL_TYPES, false },
    F_STR(R, checkpoint, ALL_TYPES, false),
    F_U64(R, checkpoint_at_ms, ALL_TYPES, false),
};
#undef R

#define G struct proto_gpu
static const struct field gpu_fields[] = {
    F_INT(G, index, 0, INT_MAX, ALL_TYPES, true),
    F_STR(G, uuid, ALL_TYPES, true),
    F_STR(G, model, ALL_TYPES, true),
    F_I64(G, memory_mb, 0, INT64_MAX, ALL_TYPES, true),
    F_STR(G, pci_bus_id, ALL_TYPES, true),
    F_INT(G, island, INT_MIN, INT_MAX, ALL_TYPES, true),
    { "mig", FK_BOOL, offsetof(G, mig), 0, 0, 0, ALL_TYPES, false },
    F_STR(G, profile, ALL_TYPES, false),
    F_INT(G, parent, 0, INT_MAX, ALL_TYPES, false),
};
#undef G

/* Bits of the `seen` masks below. */
_Static_assert(MU_ARRAY_LEN(msg_fields) <= 64, "msg_fields must fit a uint64_t mask");

static const char *const state_names[] = {
    [PROTO_TASK_RUNNING] = "RUNNING",
    [PROTO_TASK_EXITED] = "EXITED",
    [PROTO_TASK_LOST] = "LOST",
};

static void *field_ptr(void *base, const struct field *f)
{
    return (char *)base + f->off;
}

static const void *field_cptr(const void *base, const struct field *f)
{
    return (const char *)base + f->off;
}

/* ------------------------------------------------------------------------------------------ */
/* encoding                                                                                    */
/* ------------------------------------------------------------------------------------------ */

struct enc {
    msgpack_packer pk;
    struct mu_buf *buf;
    size_t start; /* buf->len before this message; restored on failure */
    struct mu_err *err;
    bool failed; /* first failure wins: later writes are dropped and err is kept */
};

static int enc_write(void *data, const char *p, size_t len)
{
    struct enc *e = data;

    if (e->failed)
        return -1;
    if (len > PROTO_MAX_MSG_BYTES - (e->buf->len - e->start)) {
        e->failed = true;
        return mu_errf(e->err, MU_E_TOOBIG, "message larger than the %u-byte cap",
                       PROTO_MAX_MSG_BYTES);
    }
    if (mu_buf_append(e->buf, p, len, e->err) != 0) {
        e->failed = true;
        return -1;
    }
    return 0;
}

/* The packer's return values are ignored: enc_write records the failure in e->failed. */
static void enc_str(struct enc *e, const char *s, size_t len)
{
    (void)msgpack_pack_str(&e->pk, len);
    (void)msgpack_pack_str_body(&e->pk, s, len);
}

static int enc_bad(struct enc *e, int code, const char *pfx, const char *name, const char *what)
{
    e->failed = true;
    return mu_errf(e->err, code, "field '%s%s': %s", pfx, name, what);
}

/* A fixed char array: must be terminated inside its size (and non-empty when nonempty). */
static int enc_fixed_str(
    struct enc *e, const char *s, size_t size, const char *pfx, const char *name, bool nonempty)
{
    size_t len = strnlen(s, size);
    if (len == size)
        return enc_bad(e, MU_E_INVAL, pfx, name, "string not NUL-terminated");
    if (nonempty && len == 0)
        return enc_bad(e, MU_E_INVAL, pfx, name, "empty string");
    enc_str(e, s, len);
    return 0;
}

static int enc_int(struct enc *e, int64_t v, const struct field *f, const char *pfx)
{
    if (v < f->min || v > f->max) {
        e->failed = true;
        return mu_errf(e->err, MU_E_RANGE,
                       "field '%s%s': value %" PRId64 " out of range [%" PRId64 ", %" PRId64 "]",
                       pfx, f->name, v, f->min, f->max);
    }
    (void)msgpack_pack_int64(&e->pk, v);
    return 0;
}

static int enc_count(struct enc *e, int n, int max, bool has_array, const char *name)
{
    if (n < 0 || n > max) {
        e->failed = true;
        return mu_errf(e->err, MU_E_TOOBIG, "field '%s': %d entries, expected 0..%d", name, n, max);
    }
    if (n > 0 && !has_array)
        return enc_bad(e, MU_E_INVAL, "", name, "entries counted but no array");
    return 0;
}

static bool field_is_set(const struct field *f, const void *base)
{
    const void *p = field_cptr(base, f);
    const struct proto_msg *m = base;

    switch (f->kind) {
    case FK_U64:
        return *(const uint64_t *)p != 0;
    case FK_INT:
        return *(const int *)p != 0;
    case FK_I64:
        return *(const int64_t *)p != 0;
    case FK_STR:
        return *(const char *)p != '\0';
    case FK_BOOL:
        return *(const bool *)p;
    case FK_STATE:
        return *(const enum proto_task_state *)p != 0;
    case FK_GPUS:
        return m->ngpus != 0;
    case FK_LABELS:
        return m->nlabels != 0;
    case FK_TASKS:
        return m->ntasks != 0;
    case FK_BIND_GPUS:
        return m->nbind_gpus != 0;
    case FK_ARGV:
        return m->argc != 0;
    case FK_ENV:
        return m->nenv != 0;
    case FK_DATA:
        return m->data_len != 0;
    case FK_VERSION:
    case FK_TYPE:
    case FK_TASK:
        return true;
    }
    return false;
}

static int enc_record(struct enc *e,
                      const struct field *tab,
                      size_t n,
                      const void *base,
                      unsigned type_bit,
                      const char *pfx);

static int enc_strv(struct enc *e, char *const *v, int n, int max, const char *name)
{
    if (enc_count(e, n, max, v != NULL, name) != 0)
        return -1;
    (void)msgpack_pack_array(&e->pk, (size_t)n);
    for (int i = 0; i < n; i++) {
        size_t len;
        if (!v[i]) {
            e->failed = true;
            return mu_errf(e->err, MU_E_INVAL, "field '%s[%d]': NULL string", name, i);
        }
        len = strlen(v[i]);
        if (len >= PROTO_MAX_ARG_BYTES) {
            e->failed = true;
            return mu_errf(e->err, MU_E_TOOBIG, "field '%s[%d]': string longer than %u bytes", name,
                           i, PROTO_MAX_ARG_BYTES - 1);
        }
        enc_str(e, v[i], len);
    }
    return 0;
}

static int enc_special(struct enc *e, const struct field *f, const struct proto_msg *m)
{
    char pfx[32];

    switch (f->kind) {
    case FK_VERSION:
        (void)msgpack_pack_uint64(&e->pk, PROTO_VERSION);
        return 0;
    case FK_TYPE: {
        const char *name = proto_type_name(m->type);
        enc_str(e, name, strlen(name));
        return 0;
    }
    case FK_GPUS:
        if (enc_count(e, m->ngpus, PROTO_MAX_GPUS, m->gpus != NULL, f->name) != 0)
            return -1;
        (void)msgpack_pack_array(&e->pk, (size_t)m->ngpus);
        for (int i = 0; i < m->ngpus; i++) {
            (void)mu_snprintf(pfx, sizeof(pfx), "gpus[%d].", i);
            if (enc_record(e, gpu_fields, MU_ARRAY_LEN(gpu_fields), &m->gpus[i], ALL_TYPES, pfx)
                != 0)
                return -1;
        }
        return 0;
    case FK_LABELS:
        if (enc_count(e, m->nlabels, PROTO_MAX_LABELS, true, f->name) != 0)
            return -1;
        (void)msgpack_pack_map(&e->pk, (size_t)m->nlabels);
        for (int i = 0; i < m->nlabels; i++) {
            const struct proto_label *l = &m->labels[i];
            (void)mu_snprintf(pfx, sizeof(pfx), "labels[%d].", i);
            if (enc_fixed_str(e, l->level, sizeof(l->level), pfx, "level", true) != 0
                || enc_fixed_str(e, l->value, sizeof(l->value), pfx, "value", false) != 0)
                return -1;
        }
        return 0;
    case FK_TASKS:
        if (enc_count(e, m->ntasks, PROTO_MAX_TASKS, m->tasks != NULL, f->name) != 0)
            return -1;
        (void)msgpack_pack_array(&e->pk, (size_t)m->ntasks);
        for (int i = 0; i < m->ntasks; i++) {
            (void)mu_snprintf(pfx, sizeof(pfx), "tasks[%d].", i);
            if (enc_record(e, ref_fields, MU_ARRAY_LEN(ref_fields), &m->tasks[i], ALL_TYPES, pfx)
                != 0)
                return -1;
        }
        return 0;
    case FK_TASK:
        return enc_record(e, ref_fields, MU_ARRAY_LEN(ref_fields), &m->task, ALL_TYPES, "task.");
    case FK_BIND_GPUS:
        if (enc_count(e, m->nbind_gpus, PROTO_MAX_GPUS, true, f->name) != 0)
            return -1;
        (void)msgpack_pack_array(&e->pk, (size_t)m->nbind_gpus);
        for (int i = 0; i < m->nbind_gpus; i++) {
            if (m->bind_gpus[i] < 0) {
                e->failed = true;
                return mu_errf(e->err, MU_E_RANGE, "field 'gpus_bound[%d]': negative index %d", i,
                               m->bind_gpus[i]);
            }
            (void)msgpack_pack_uint64(&e->pk, (uint64_t)m->bind_gpus[i]);
        }
        return 0;
    case FK_ARGV:
        return enc_strv(e, m->argv, m->argc, PROTO_MAX_ARGS, f->name);
    case FK_ENV:
        return enc_strv(e, m->env, m->nenv, PROTO_MAX_ENV, f->name);
    case FK_DATA:
        if (m->data_len > PROTO_LOG_CHUNK_MAX)
            return enc_bad(e, MU_E_TOOBIG, "", f->name, "longer than the log chunk cap");
        if (!m->data)
            return enc_bad(e, MU_E_INVAL, "", f->name, "length set but no buffer");
        (void)msgpack_pack_bin(&e->pk, m->data_len);
        (void)msgpack_pack_bin_body(&e->pk, m->data, m->data_len);
        return 0;
    default:
        break;
    }
    e->failed = true;
    return mu_errf(e->err, MU_E_INVAL, "field '%s': not a top-level field", f->name);
}

static int enc_value(struct enc *e, const struct field *f, const void *base, const char *pfx)
{
    const void *p = field_cptr(base, f);

    switch (f->kind) {
    case FK_U64:
        (void)msgpack_pack_uint64(&e->pk, *(const uint64_t *)p);
        return 0;
    case FK_INT:
        return enc_int(e, *(const int *)p, f, pfx);
    case FK_I64:
        return enc_int(e, *(const int64_t *)p, f, pfx);
    case FK_STR:
        return enc_fixed_str(e, p, f->size, pfx, f->name, false);
    case FK_BOOL:
        if (*(const bool *)p)
            (void)msgpack_pack_true(&e->pk);
        else
            (void)msgpack_pack_false(&e->pk);
        return 0;
    case FK_STATE: {
        enum proto_task_state s = *(const enum proto_task_state *)p;
        if ((int)s <= 0 || (size_t)s >= MU_ARRAY_LEN(state_names)) {
            e->failed = true;
            return mu_errf(e->err, MU_E_INVAL, "field '%s%s': invalid task state %d", pfx, f->name,
                           (int)s);
        }
        enc_str(e, state_names[s], strlen(state_names[s]));
        return 0;
    }
    default:
        return enc_special(e, f, base);
    }
}

static int enc_record(struct enc *e,
                      const struct field *tab,
                      size_t n,
                      const void *base,
                      unsigned type_bit,
                      const char *pfx)
{
    size_t count = 0;

    for (size_t i = 0; i < n; i++)
        if ((tab[i].types & type_bit) && (tab[i].always || field_is_set(&tab[i], base)))
            count++;
    (void)msgpack_pack_map(&e->pk, count);
    for (size_t i = 0; i < n; i++) {
        const struct field *f = &tab[i];
        if (!(f->types & type_bit) || !(f->always || field_is_set(f, base)))
            continue;
        enc_str(e, f->name, strlen(f->name));
        if (enc_value(e, f, base, pfx) != 0)
            return -1;
    }
    return e->failed ? -1 : 0;
}

int proto_msg_encode(const struct proto_msg *m, struct mu_buf *out, struct mu_err *err)
{
    struct enc e = { .buf = out, .start = out->len, .err = err, .failed = false };

    if (strcmp(proto_type_name(m->type), "UNKNOWN") == 0)
        return mu_errf(err, MU_E_INVAL, "cannot encode message type %d", (int)m->type);
    msgpack_packer_init(&e.pk, &e, enc_write);
    if (enc_record(&e, msg_fields, MU_ARRAY_LEN(msg_fields), m, TB(m->type), "") != 0) {
        /* No side effects on failure: drop the partial encoding. */
        out->len = e.start;
        if (out->data)
            out->data[out->len] = '\0';
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* decoding                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static uint64_t be_read(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* How to step over the type bytes 0xc0..0xdf; the others are fixed-size or fix* forms. */
struct wide_form {
    uint8_t valid; /* 0 for 0xc1, which msgpack never uses */
    uint8_t hdr;   /* big-endian length or count bytes after the type byte */
    uint8_t skip;  /* payload bytes: fixed, or added to the length (the ext type byte) */
    uint8_t mul;   /* 1 for arrays, 2 for maps: objects that follow per counted entry */
};

static const struct wide_form wide_forms[32] = {
    [0x00] = { 1, 0, 0, 0 },  /* nil */
    [0x02] = { 1, 0, 0, 0 },  /* false */
    [0x03] = { 1, 0, 0, 0 },  /* true */
    [0x04] = { 1, 1, 0, 0 },  /* bin8 */
    [0x05] = { 1, 2, 0, 0 },  /* bin16 */
    [0x06] = { 1, 4, 0, 0 },  /* bin32 */
    [0x07] = { 1, 1, 1, 0 },  /* ext8 */
    [0x08] = { 1, 2, 1, 0 },  /* ext16 */
    [0x09] = { 1, 4, 1, 0 },  /* ext32 */
    [0x0a] = { 1, 0, 4, 0 },  /* float32 */
    [0x0b] = { 1, 0, 8, 0 },  /* float64 */
    [0x0c] = { 1, 0, 1, 0 },  /* uint8 */
    [0x0d] = { 1, 0, 2, 0 },  /* uint16 */
    [0x0e] = { 1, 0, 4, 0 },  /* uint32 */
    [0x0f] = { 1, 0, 8, 0 },  /* uint64 */
    [0x10] = { 1, 0, 1, 0 },  /* int8 */
    [0x11] = { 1, 0, 2, 0 },  /* int16 */
    [0x12] = { 1, 0, 4, 0 },  /* int32 */
    [0x13] = { 1, 0, 8, 0 },  /* int64 */
    [0x14] = { 1, 0, 2, 0 },  /* fixext1 */
    [0x15] = { 1, 0, 3, 0 },  /* fixext2 */
    [0x16] = { 1, 0, 5, 0 },  /* fixext4 */
    [0x17] = { 1, 0, 9, 0 },  /* fixext8 */
    [0x18] = { 1, 0, 17, 0 }, /* fixext16 */
    [0x19] = { 1, 1, 0, 0 },  /* str8 */
    [0x1a] = { 1, 2, 0, 0 },  /* str16 */
    [0x1b] = { 1, 4, 0, 0 },  /* str32 */
    [0x1c] = { 1, 2, 0, 1 },  /* array16 */
    [0x1d] = { 1, 4, 0, 1 },  /* array32 */
    [0x1e] = { 1, 2, 0, 2 },  /* map16 */
    [0x1f] = { 1, 4, 0, 2 },  /* map32 */
};

/*
 * Checks that data is exactly one well-formed msgpack object whose every string, binary and
 * extension fits in the input and whose every array or map count is at most the number of bytes
 * left (each element takes at least one byte).  That bounds what msgpack-c allocates to a small
 * multiple of len.  Nesting depth is left to msgpack-c, which refuses deep input by itself.
 */
static int prescan(const uint8_t *p, size_t len, struct mu_err *err)
{
    size_t pos = 0;
    uint64_t pending = 1; /* objects still to read; never exceeds len + 1 */

    while (pending > 0) {
        uint8_t c;
        uint64_t skip = 0;  /* payload bytes to step over */
        uint64_t count = 0; /* array or map entries */
        unsigned mul = 0;   /* objects per entry: 1 array, 2 map, 0 neither */

        if (pos >= len)
            return mu_errf(err, MU_E_PROTO, "truncated message (%zu bytes)", len);
        c = p[pos++];
        pending--;
        if (c <= 0x7f || c >= 0xe0) {
            continue; /* fixint */
        } else if (c <= 0x8f) {
            mul = 2;
            count = c & 0x0fu;
        } else if (c <= 0x9f) {
            mul = 1;
            count = c & 0x0fu;
        } else if (c <= 0xbf) {
            skip = c & 0x1fu;
        } else {
            const struct wide_form *w = &wide_forms[c - 0xc0];
            if (!w->valid)
                return mu_errf(err, MU_E_PROTO, "invalid msgpack byte 0x%02x at offset %zu", c,
                               pos - 1);
            if (w->hdr > len - pos)
                return mu_errf(err, MU_E_PROTO, "truncated message (%zu bytes)", len);
            mul = w->mul;
            if (mul)
                count = be_read(p + pos, w->hdr);
            else
                skip = (w->hdr ? be_read(p + pos, w->hdr) : 0) + w->skip;
            pos += w->hdr;
        }
        if (skip > len - pos)
            return mu_errf(err, MU_E_PROTO, "truncated message (%zu bytes)", len);
        pos += (size_t)skip;
        if (mul && count > (len - pos) / mul)
            return mu_errf(err, MU_E_PROTO,
                           "%s at offset %zu declares %" PRIu64
                           " entries but only %zu bytes follow",
                           mul == 2 ? "map" : "array", pos, count, len - pos);
        pending += mul * count;
    }
    if (pos != len)
        return mu_errf(err, MU_E_PROTO, "%zu trailing bytes after the message", len - pos);
    return 0;
}

static const char *obj_type_name(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return "nil";
    case MSGPACK_OBJECT_BOOLEAN:
        return "boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return "unsigned integer";
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return "negative integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return "float";
    case MSGPACK_OBJECT_STR:
        return "string";
    case MSGPACK_OBJECT_ARRAY:
        return "array";
    case MSGPACK_OBJECT_MAP:
        return "map";
    case MSGPACK_OBJECT_BIN:
        return "binary";
    case MSGPACK_OBJECT_EXT:
        return "extension";
    }
    return "unknown";
}

static int bad_type(struct mu_err *err,
                    const char *pfx,
                    const char *name,
                    const char *want,
                    const msgpack_object *o)
{
    return mu_errf(err, MU_E_PROTO, "field '%s%s': expected %s, got %s", pfx, name, want,
                   obj_type_name(o));
}

/* Copies up to 40 bytes of untrusted text for an error message, non-printables as '?'. */
static void quote_untrusted(char *dst, size_t size, const char *p, size_t len)
{
    size_t n = len < size - 1 ? len : size - 1;
    if (n > 40)
        n = 40;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '\'')
            dst[i] = p[i];
        else
            dst[i] = '?';
    }
    dst[n] = '\0';
}

static bool str_eq(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n
           && (n == 0 || memcmp(o->via.str.ptr, s, n) == 0);
}

/* A string into dst[size]: shorter than size, no NUL inside. */
static int dec_str(const msgpack_object *o,
                   char *dst,
                   size_t size,
                   const char *pfx,
                   const char *name,
                   struct mu_err *err)
{
    size_t len;

    if (o->type != MSGPACK_OBJECT_STR)
        return bad_type(err, pfx, name, "string", o);
    len = o->via.str.size;
    if (len >= size)
        return mu_errf(err, MU_E_PROTO, "field '%s%s': string longer than %zu bytes", pfx, name,
                       size - 1);
    if (len > 0 && memchr(o->via.str.ptr, '\0', len))
        return mu_errf(err, MU_E_PROTO, "field '%s%s': string contains a NUL byte", pfx, name);
    if (len > 0)
        memcpy(dst, o->via.str.ptr, len);
    dst[len] = '\0';
    return 0;
}

static int dec_u64(
    const msgpack_object *o, const char *pfx, const char *name, uint64_t *out, struct mu_err *err)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return bad_type(err, pfx, name, "unsigned integer", o);
    *out = o->via.u64;
    return 0;
}

static int dec_i64(const msgpack_object *o,
                   int64_t min,
                   int64_t max,
                   const char *pfx,
                   const char *name,
                   int64_t *out,
                   struct mu_err *err)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (max < 0 || o->via.u64 > (uint64_t)max)
            return mu_errf(err, MU_E_PROTO,
                           "field '%s%s': value %" PRIu64 " out of range [%" PRId64 ", %" PRId64
                           "]",
                           pfx, name, o->via.u64, min, max);
        *out = (int64_t)o->via.u64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        if (o->via.i64 < min || o->via.i64 > max)
            return mu_errf(err, MU_E_PROTO,
                           "field '%s%s': value %" PRId64 " out of range [%" PRId64 ", %" PRId64
                           "]",
                           pfx, name, o->via.i64, min, max);
        *out = o->via.i64;
        return 0;
    }
    return bad_type(err, pfx, name, "integer", o);
}

static int dec_scalar(
    const struct field *f, const msgpack_object *o, void *base, const char *pfx, struct mu_err *err)
{
    void *p = field_ptr(base, f);
    int64_t v = 0;

    switch (f->kind) {
    case FK_U64:
        return dec_u64(o, pfx, f->name, p, err);
    case FK_INT:
        if (dec_i64(o, f->min, f->max, pfx, f->name, &v, err) != 0)
            return -1;
        *(int *)p = (int)v;
        return 0;
    case FK_I64:
        return dec_i64(o, f->min, f->max, pfx, f->name, p, err);
    case FK_STR:
        return dec_str(o, p, f->size, pfx, f->name, err);
    case FK_BOOL:
        if (o->type != MSGPACK_OBJECT_BOOLEAN)
            return bad_type(err, pfx, f->name, "boolean", o);
        *(bool *)p = o->via.boolean;
        return 0;
    case FK_STATE:
        if (o->type != MSGPACK_OBJECT_STR)
            return bad_type(err, pfx, f->name, "string", o);
        for (size_t s = 1; s < MU_ARRAY_LEN(state_names); s++) {
            if (str_eq(o, state_names[s])) {
                *(enum proto_task_state *)p = (enum proto_task_state)s;
                return 0;
            }
        }
        {
            char shown[48];
            quote_untrusted(shown, sizeof(shown), o->via.str.ptr, o->via.str.size);
            return mu_errf(err, MU_E_PROTO,
                           "field '%s%s': expected \"RUNNING\", \"EXITED\" or \"LOST\", got '%s'",
                           pfx, f->name, shown);
        }
    default:
        break;
    }
    return mu_errf(err, MU_E_PROTO, "field '%s%s': not allowed here", pfx, f->name);
}

static const struct field *field_find(const struct field *tab, size_t n, const msgpack_object *key)
{
    for (size_t i = 0; i < n; i++)
        if (str_eq(key, tab[i].name))
            return &tab[i];
    return NULL;
}

/*
 * Walks a map against a table: unknown keys are skipped (their values may be anything), known
 * ones decoded with `dec`, a key given twice is an error.  `name` is the map's own field path.
 */
typedef int (*dec_field_fn)(const struct field *f,
                            const msgpack_object *o,
                            void *base,
                            const char *pfx,
                            struct mu_err *err);

static int dec_map(const msgpack_object *o,
                   const struct field *tab,
                   size_t n,
                   void *base,
                   const char *name,
                   const char *pfx,
                   dec_field_fn dec,
                   uint64_t *seen_out,
                   struct mu_err *err)
{
    uint64_t seen = 0;

    if (o->type != MSGPACK_OBJECT_MAP) {
        if (name[0] == '\0')
            return mu_errf(err, MU_E_PROTO, "expected a map, got %s", obj_type_name(o));
        return bad_type(err, "", name, "map", o);
    }
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        const struct field *f;
        uint64_t bit;

        if (kv->key.type != MSGPACK_OBJECT_STR)
            return mu_errf(err, MU_E_PROTO, "%s%skey #%u: expected string, got %s", name,
                           name[0] ? ": " : "", i, obj_type_name(&kv->key));
        f = field_find(tab, n, &kv->key);
        if (!f)
            continue;
        bit = UINT64_C(1) << (size_t)(f - tab);
        if (seen & bit)
            return mu_errf(err, MU_E_PROTO, "duplicate key '%s%s'", pfx, f->name);
        seen |= bit;
        if (dec(f, &kv->val, base, pfx, err) != 0)
            return -1;
    }
    if (seen_out)
        *seen_out = seen;
    return 0;
}

/* A task-ref or GPU record (only scalar fields); a task-ref must name its job. */
static int dec_record(const msgpack_object *o,
                      const struct field *tab,
                      size_t n,
                      void *base,
                      const char *name,
                      struct mu_err *err)
{
    char pfx[40];
    uint64_t seen = 0;

    (void)mu_snprintf(pfx, sizeof(pfx), "%s.", name);
    if (dec_map(o, tab, n, base, name, pfx, dec_scalar, &seen, err) != 0)
        return -1;
    if (tab == ref_fields && !(seen & 1u))
        return mu_errf(err, MU_E_PROTO, "field '%s': missing key 'job'", name);
    return 0;
}

static int dec_array(const msgpack_object *o, const char *name, uint32_t max, struct mu_err *err)
{
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return bad_type(err, "", name, "array", o);
    if (o->via.array.size > max)
        return mu_errf(err, MU_E_PROTO, "field '%s': %" PRIu32 " entries, at most %" PRIu32, name,
                       o->via.array.size, max);
    return 0;
}

/* argv or env: a NULL-terminated array of heap strings owned by m from the first allocation. */
static int dec_strv(const msgpack_object *o,
                    const char *name,
                    uint32_t max,
                    bool is_env,
                    char ***v_out,
                    int *n_out,
                    struct mu_err *err)
{
    uint32_t n;
    char **v;

    if (dec_array(o, name, max, err) != 0)
        return -1;
    n = o->via.array.size;
    if (n == 0)
        return 0;
    v = calloc((size_t)n + 1, sizeof(*v));
    if (!v)
        return mu_errf(err, MU_E_NOMEM, "field '%s': out of memory", name);
    *v_out = v;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *s = &o->via.array.ptr[i];
        size_t len;

        if (s->type != MSGPACK_OBJECT_STR)
            return mu_errf(err, MU_E_PROTO, "field '%s[%" PRIu32 "]': expected string, got %s",
                           name, i, obj_type_name(s));
        len = s->via.str.size;
        if (len >= PROTO_MAX_ARG_BYTES)
            return mu_errf(err, MU_E_PROTO, "field '%s[%" PRIu32 "]': string longer than %u bytes",
                           name, i, PROTO_MAX_ARG_BYTES - 1);
        if (len > 0 && memchr(s->via.str.ptr, '\0', len))
            return mu_errf(err, MU_E_PROTO, "field '%s[%" PRIu32 "]': string contains a NUL byte",
                           name, i);
        if (is_env && (len == 0 || s->via.str.ptr[0] == '=' || !memchr(s->via.str.ptr, '=', len)))
            return mu_errf(err, MU_E_PROTO, "field '%s[%" PRIu32 "]': expected KEY=VALUE", name, i);
        v[i] = malloc(len + 1);
        if (!v[i])
            return mu_errf(err, MU_E_NOMEM, "field '%s[%" PRIu32 "]': out of memory", name, i);
        if (len > 0)
            memcpy(v[i], s->via.str.ptr, len);
        v[i][len] = '\0';
        (*n_out)++;
    }
    return 0;
}

static int dec_labels(const msgpack_object *o, struct proto_msg *m, struct mu_err *err)
{
    if (o->type != MSGPACK_OBJECT_MAP)
        return bad_type(err, "", "labels", "map", o);
    if (o->via.map.size > PROTO_MAX_LABELS)
        return mu_errf(err, MU_E_PROTO, "field 'labels': %" PRIu32 " entries, at most %d",
                       o->via.map.size, PROTO_MAX_LABELS);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        struct proto_label *l = &m->labels[i];
        char pfx[24];

        (void)mu_snprintf(pfx, sizeof(pfx), "labels[%" PRIu32 "].", i);
        if (dec_str(&o->via.map.ptr[i].key, l->level, sizeof(l->level), pfx, "level", err) != 0
            || dec_str(&o->via.map.ptr[i].val, l->value, sizeof(l->value), pfx, "value", err) != 0)
            return -1;
        if (l->level[0] == '\0')
            return mu_errf(err, MU_E_PROTO, "field '%slevel': empty string", pfx);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(m->labels[j].level, l->level) == 0)
                return mu_errf(err, MU_E_PROTO, "field 'labels': duplicate level '%s'", l->level);
        m->nlabels++;
    }
    return 0;
}

/* The log chunk: binary of at most PROTO_LOG_CHUNK_MAX bytes, copied to the heap. */
static int dec_data(const msgpack_object *o, struct proto_msg *m, struct mu_err *err)
{
    if (o->type != MSGPACK_OBJECT_BIN)
        return bad_type(err, "", "data", "binary", o);
    if (o->via.bin.size > PROTO_LOG_CHUNK_MAX)
        return mu_errf(err, MU_E_PROTO, "field 'data': %" PRIu32 " bytes, at most %u",
                       o->via.bin.size, PROTO_LOG_CHUNK_MAX);
    if (o->via.bin.size == 0)
        return 0;
    m->data = malloc(o->via.bin.size);
    if (!m->data)
        return mu_errf(err, MU_E_NOMEM, "field 'data': out of memory");
    memcpy(m->data, o->via.bin.ptr, o->via.bin.size);
    m->data_len = o->via.bin.size;
    return 0;
}

static int dec_type(const msgpack_object *o, struct proto_msg *m, struct mu_err *err)
{
    char shown[48];

    if (o->type != MSGPACK_OBJECT_STR)
        return bad_type(err, "", "type", "string", o);
    for (int t = PROTO_HELLO; t <= PROTO_TYPE_LAST; t++) {
        if (str_eq(o, proto_type_name((enum proto_type)t))) {
            m->type = (enum proto_type)t;
            return 0;
        }
    }
    quote_untrusted(shown, sizeof(shown), o->via.str.ptr, o->via.str.size);
    return mu_errf(err, MU_E_PROTO, "unknown message type '%s'", shown);
}

static int dec_top_field(
    const struct field *f, const msgpack_object *o, void *base, const char *pfx, struct mu_err *err)
{
    struct proto_msg *m = base;
    char name[24];

    switch (f->kind) {
    case FK_VERSION:
        return 0; /* checked before everything else */
    case FK_TYPE:
        return dec_type(o, m, err);
    case FK_GPUS:
        if (dec_array(o, f->name, PROTO_MAX_GPUS, err) != 0)
            return -1;
        if (o->via.array.size == 0)
            return 0;
        m->gpus = calloc(o->via.array.size, sizeof(*m->gpus));
        if (!m->gpus)
            return mu_errf(err, MU_E_NOMEM, "field 'gpus': out of memory");
        m->ngpus = (int)o->via.array.size;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            (void)mu_snprintf(name, sizeof(name), "gpus[%" PRIu32 "]", i);
            if (dec_record(&o->via.array.ptr[i], gpu_fields, MU_ARRAY_LEN(gpu_fields), &m->gpus[i],
                           name, err)
                != 0)
                return -1;
        }
        return 0;
    case FK_LABELS:
        return dec_labels(o, m, err);
    case FK_TASKS:
        if (dec_array(o, f->name, PROTO_MAX_TASKS, err) != 0)
            return -1;
        if (o->via.array.size == 0)
            return 0;
        m->tasks = calloc(o->via.array.size, sizeof(*m->tasks));
        if (!m->tasks)
            return mu_errf(err, MU_E_NOMEM, "field 'tasks': out of memory");
        m->ntasks = (int)o->via.array.size;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            (void)mu_snprintf(name, sizeof(name), "tasks[%" PRIu32 "]", i);
            if (dec_record(&o->via.array.ptr[i], ref_fields, MU_ARRAY_LEN(ref_fields), &m->tasks[i],
                           name, err)
                != 0)
                return -1;
        }
        return 0;
    case FK_TASK:
        return dec_record(o, ref_fields, MU_ARRAY_LEN(ref_fields), &m->task, "task", err);
    case FK_BIND_GPUS:
        if (dec_array(o, f->name, PROTO_MAX_GPUS, err) != 0)
            return -1;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            int64_t v = 0;
            (void)mu_snprintf(name, sizeof(name), "gpus_bound[%" PRIu32 "]", i);
            if (dec_i64(&o->via.array.ptr[i], 0, INT_MAX, "", name, &v, err) != 0)
                return -1;
            m->bind_gpus[i] = (int)v;
            m->nbind_gpus++;
        }
        return 0;
    case FK_ARGV:
        return dec_strv(o, f->name, PROTO_MAX_ARGS, false, &m->argv, &m->argc, err);
    case FK_ENV:
        return dec_strv(o, f->name, PROTO_MAX_ENV, true, &m->env, &m->nenv, err);
    case FK_DATA:
        return dec_data(o, m, err);
    default:
        return dec_scalar(f, o, base, pfx, err);
    }
}

/* "v" first, so that a newer peer gets the version error rather than one about a new field. */
static int dec_version(const msgpack_object *o, struct proto_msg *m, struct mu_err *err)
{
    uint64_t v = 0;

    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        if (!str_eq(&kv->key, "v"))
            continue;
        if (dec_u64(&kv->val, "", "v", &v, err) != 0)
            return -1;
        if (v != PROTO_VERSION)
            return mu_errf(err, MU_E_PROTO,
                           "unsupported protocol version %" PRIu64 " (this build speaks %d)", v,
                           PROTO_VERSION);
        m->v = (int)v;
        return 0;
    }
    return mu_errf(err, MU_E_PROTO, "missing key 'v'");
}

static int dec_message(const msgpack_object *root, struct proto_msg *out, struct mu_err *err)
{
    static const char *const required[] = { "type", "seq", "epoch" };
    uint64_t seen = 0;

    if (root->type != MSGPACK_OBJECT_MAP)
        return mu_errf(err, MU_E_PROTO, "expected a map, got %s", obj_type_name(root));
    if (dec_version(root, out, err) != 0)
        return -1;
    if (dec_map(root, msg_fields, MU_ARRAY_LEN(msg_fields), out, "", "", dec_top_field, &seen, err)
        != 0)
        return -1;
    for (size_t i = 0; i < MU_ARRAY_LEN(required); i++) {
        for (size_t j = 0; j < MU_ARRAY_LEN(msg_fields); j++) {
            if (strcmp(msg_fields[j].name, required[i]) == 0 && !(seen & (UINT64_C(1) << j)))
                return mu_errf(err, MU_E_PROTO, "missing key '%s'", required[i]);
        }
    }
    return 0;
}

int proto_msg_decode(const void *data, size_t len, struct proto_msg *out, struct mu_err *err)
{
    msgpack_unpacked up;
    msgpack_unpack_return ret;
    size_t off = 0;
    int rc = -1;

    proto_msg_init(out, (enum proto_type)0);
    if (len > PROTO_MAX_MSG_BYTES)
        return mu_errf(err, MU_E_PROTO, "message of %zu bytes exceeds the %u-byte cap", len,
                       PROTO_MAX_MSG_BYTES);
    if (len == 0)
        return mu_errf(err, MU_E_PROTO, "empty message");
    if (prescan(data, len, err) != 0)
        return -1;

    msgpack_unpacked_init(&up);
    ret = msgpack_unpack_next(&up, data, len, &off);
    if (ret == MSGPACK_UNPACK_NOMEM_ERROR) {
        (void)mu_errf(err, MU_E_NOMEM, "out of memory (or nesting too deep) decoding a message");
        goto out;
    }
    if (ret != MSGPACK_UNPACK_SUCCESS || off != len) {
        (void)mu_errf(err, MU_E_PROTO, "malformed msgpack (unpack returned %d at offset %zu)",
                      (int)ret, off);
        goto out;
    }
    if (dec_message(&up.data, out, err) != 0)
        goto out;
    rc = 0;
out:
    msgpack_unpacked_destroy(&up);
    if (rc != 0)
        proto_msg_release(out);
    return rc;
}
