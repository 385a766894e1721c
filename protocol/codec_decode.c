/* SPDX-License-Identifier: MIT */
/*
 * proto codec, part 3 of 3: one msgpack map -> struct proto_msg (docs/design.md §7,
 * protocol/README.md), off the field tables of codec_fields.c.
 *
 * Decoding treats the bytes as hostile.  A cheap pre-scan walks the encoding first and rejects
 * truncation, trailing bytes, and array/map counts larger than the bytes that follow: msgpack-c
 * allocates count * sizeof(msgpack_object) from its zone before reading any element, so without
 * the pre-scan a 5-byte input could ask for 64 GiB.  Only then does msgpack_unpack_next build the
 * object tree; every `via` access is guarded by a `type` check, strings are copied with their
 * length, and on any failure `out` is released, so it never holds heap memory.
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

static int dec_scalar(const struct proto_field *f,
                      const msgpack_object *o,
                      void *base,
                      const char *pfx,
                      struct mu_err *err)
{
    void *p = proto_field_ptr(base, f);
    int64_t v = 0;

    switch (f->kind) {
    case PROTO_FK_U64:
        return dec_u64(o, pfx, f->name, p, err);
    case PROTO_FK_INT:
        if (dec_i64(o, f->min, f->max, pfx, f->name, &v, err) != 0)
            return -1;
        *(int *)p = (int)v;
        return 0;
    case PROTO_FK_I64:
        return dec_i64(o, f->min, f->max, pfx, f->name, p, err);
    case PROTO_FK_STR:
        return dec_str(o, p, f->size, pfx, f->name, err);
    case PROTO_FK_BOOL:
        if (o->type != MSGPACK_OBJECT_BOOLEAN)
            return bad_type(err, pfx, f->name, "boolean", o);
        *(bool *)p = o->via.boolean;
        return 0;
    case PROTO_FK_STATE:
        if (o->type != MSGPACK_OBJECT_STR)
            return bad_type(err, pfx, f->name, "string", o);
        for (size_t s = 1; s < MU_ARRAY_LEN(proto_state_names); s++) {
            if (str_eq(o, proto_state_names[s])) {
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

static const struct proto_field *field_find(const struct proto_field *tab,
                                            size_t n,
                                            const msgpack_object *key)
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
typedef int (*dec_field_fn)(const struct proto_field *f,
                            const msgpack_object *o,
                            void *base,
                            const char *pfx,
                            struct mu_err *err);

static int dec_map(const msgpack_object *o,
                   const struct proto_field *tab,
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
        const struct proto_field *f;
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
                      const struct proto_field *tab,
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
    if (tab == proto_ref_fields && !(seen & 1u))
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

static int dec_top_field(const struct proto_field *f,
                         const msgpack_object *o,
                         void *base,
                         const char *pfx,
                         struct mu_err *err)
{
    struct proto_msg *m = base;
    char name[24];

    switch (f->kind) {
    case PROTO_FK_VERSION:
        return 0; /* checked before everything else */
    case PROTO_FK_TYPE:
        return dec_type(o, m, err);
    case PROTO_FK_GPUS:
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
            if (dec_record(&o->via.array.ptr[i], proto_gpu_fields, MU_ARRAY_LEN(proto_gpu_fields),
                           &m->gpus[i], name, err)
                != 0)
                return -1;
        }
        return 0;
    case PROTO_FK_LABELS:
        return dec_labels(o, m, err);
    case PROTO_FK_TASKS:
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
            if (dec_record(&o->via.array.ptr[i], proto_ref_fields, MU_ARRAY_LEN(proto_ref_fields),
                           &m->tasks[i], name, err)
                != 0)
                return -1;
        }
        return 0;
    case PROTO_FK_TASK:
        return dec_record(o, proto_ref_fields, MU_ARRAY_LEN(proto_ref_fields), &m->task, "task",
                          err);
    case PROTO_FK_BIND_GPUS:
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
    case PROTO_FK_ARGV:
        return dec_strv(o, f->name, PROTO_MAX_ARGS, false, &m->argv, &m->argc, err);
    case PROTO_FK_ENV:
        return dec_strv(o, f->name, PROTO_MAX_ENV, true, &m->env, &m->nenv, err);
    case PROTO_FK_DATA:
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
    if (dec_map(root, proto_msg_fields, MU_ARRAY_LEN(proto_msg_fields), out, "", "", dec_top_field,
                &seen, err)
        != 0)
        return -1;
    for (size_t i = 0; i < MU_ARRAY_LEN(required); i++) {
        for (size_t j = 0; j < MU_ARRAY_LEN(proto_msg_fields); j++) {
            if (strcmp(proto_msg_fields[j].name, required[i]) == 0 && !(seen & (UINT64_C(1) << j)))
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
