/* SPDX-License-Identifier: MIT */
/*
 * proto codec, part 2 of 3: struct proto_msg -> one msgpack map (docs/design.md §7,
 * protocol/README.md), off the field tables of codec_fields.c.  Encoding packs straight into the
 * caller's mu_buf through a msgpack write callback (no second copy) and checks every bound the
 * decoder (codec_decode.c) checks, so we never send what the peer must reject.  On failure the
 * buffer is cut back to where it was: no side effects.
 */
#include "protocol/internal.h"

#include <inttypes.h>
#include <limits.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

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

static int enc_int(struct enc *e, int64_t v, const struct proto_field *f, const char *pfx)
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

static bool field_is_set(const struct proto_field *f, const void *base)
{
    const void *p = proto_field_cptr(base, f);
    const struct proto_msg *m = base;

    switch (f->kind) {
    case PROTO_FK_U64:
        return *(const uint64_t *)p != 0;
    case PROTO_FK_INT:
        return *(const int *)p != 0;
    case PROTO_FK_I64:
        return *(const int64_t *)p != 0;
    case PROTO_FK_STR:
        return *(const char *)p != '\0';
    case PROTO_FK_BOOL:
        return *(const bool *)p;
    case PROTO_FK_STATE:
        return *(const enum proto_task_state *)p != 0;
    case PROTO_FK_GPUS:
        return m->ngpus != 0;
    case PROTO_FK_LABELS:
        return m->nlabels != 0;
    case PROTO_FK_TASKS:
        return m->ntasks != 0;
    case PROTO_FK_BIND_GPUS:
        return m->nbind_gpus != 0;
    case PROTO_FK_ARGV:
        return m->argc != 0;
    case PROTO_FK_ENV:
        return m->nenv != 0;
    case PROTO_FK_DATA:
        return m->data_len != 0;
    case PROTO_FK_VERSION:
    case PROTO_FK_TYPE:
    case PROTO_FK_TASK:
        return true;
    }
    return false;
}

static int enc_record(struct enc *e,
                      const struct proto_field *tab,
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

static int enc_special(struct enc *e, const struct proto_field *f, const struct proto_msg *m)
{
    char pfx[32];

    switch (f->kind) {
    case PROTO_FK_VERSION:
        (void)msgpack_pack_uint64(&e->pk, PROTO_VERSION);
        return 0;
    case PROTO_FK_TYPE: {
        const char *name = proto_type_name(m->type);
        enc_str(e, name, strlen(name));
        return 0;
    }
    case PROTO_FK_GPUS:
        if (enc_count(e, m->ngpus, PROTO_MAX_GPUS, m->gpus != NULL, f->name) != 0)
            return -1;
        (void)msgpack_pack_array(&e->pk, (size_t)m->ngpus);
        for (int i = 0; i < m->ngpus; i++) {
            (void)mu_snprintf(pfx, sizeof(pfx), "gpus[%d].", i);
            if (enc_record(e, proto_gpu_fields, MU_ARRAY_LEN(proto_gpu_fields), &m->gpus[i],
                           PROTO_ALL_TYPES, pfx)
                != 0)
                return -1;
        }
        return 0;
    case PROTO_FK_LABELS:
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
    case PROTO_FK_TASKS:
        if (enc_count(e, m->ntasks, PROTO_MAX_TASKS, m->tasks != NULL, f->name) != 0)
            return -1;
        (void)msgpack_pack_array(&e->pk, (size_t)m->ntasks);
        for (int i = 0; i < m->ntasks; i++) {
            (void)mu_snprintf(pfx, sizeof(pfx), "tasks[%d].", i);
            if (enc_record(e, proto_ref_fields, MU_ARRAY_LEN(proto_ref_fields), &m->tasks[i],
                           PROTO_ALL_TYPES, pfx)
                != 0)
                return -1;
        }
        return 0;
    case PROTO_FK_TASK:
        return enc_record(e, proto_ref_fields, MU_ARRAY_LEN(proto_ref_fields), &m->task,
                          PROTO_ALL_TYPES, "task.");
    case PROTO_FK_BIND_GPUS:
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
    case PROTO_FK_ARGV:
        return enc_strv(e, m->argv, m->argc, PROTO_MAX_ARGS, f->name);
    case PROTO_FK_ENV:
        return enc_strv(e, m->env, m->nenv, PROTO_MAX_ENV, f->name);
    case PROTO_FK_DATA:
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

static int enc_value(struct enc *e, const struct proto_field *f, const void *base, const char *pfx)
{
    const void *p = proto_field_cptr(base, f);

    switch (f->kind) {
    case PROTO_FK_U64:
        (void)msgpack_pack_uint64(&e->pk, *(const uint64_t *)p);
        return 0;
    case PROTO_FK_INT:
        return enc_int(e, *(const int *)p, f, pfx);
    case PROTO_FK_I64:
        return enc_int(e, *(const int64_t *)p, f, pfx);
    case PROTO_FK_STR:
        return enc_fixed_str(e, p, f->size, pfx, f->name, false);
    case PROTO_FK_BOOL:
        if (*(const bool *)p)
            (void)msgpack_pack_true(&e->pk);
        else
            (void)msgpack_pack_false(&e->pk);
        return 0;
    case PROTO_FK_STATE: {
        enum proto_task_state s = *(const enum proto_task_state *)p;
        if ((int)s <= 0 || (size_t)s >= MU_ARRAY_LEN(proto_state_names)) {
            e->failed = true;
            return mu_errf(e->err, MU_E_INVAL, "field '%s%s': invalid task state %d", pfx, f->name,
                           (int)s);
        }
        enc_str(e, proto_state_names[s], strlen(proto_state_names[s]));
        return 0;
    }
    default:
        return enc_special(e, f, base);
    }
}

static int enc_record(struct enc *e,
                      const struct proto_field *tab,
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
        const struct proto_field *f = &tab[i];
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
    if (enc_record(&e, proto_msg_fields, MU_ARRAY_LEN(proto_msg_fields), m, PROTO_TYPE_BIT(m->type),
                   "")
        != 0) {
        /* No side effects on failure: drop the partial encoding. */
        out->len = e.start;
        if (out->data)
            out->data[out->len] = '\0';
        return -1;
    }
    return 0;
}
