/* SPDX-License-Identifier: MIT */
/*
 * The protocol module's insides, shared by the files it is cut into.  The codec: codec_fields.c
 * (the field tables both directions run off), codec_encode.c (struct proto_msg -> msgpack) and
 * codec_decode.c (msgpack -> struct proto_msg, bytes treated as hostile).  protocol/proto.h stays
 * the module's one public header; scripts/lint.sh keeps this one out of other folders
 * (docs/style.md §1.1).
 *
 * Also here: the one socket helper the transport's files share (transport.c, transport_zap.c).
 *
 * The tables are declared here with their lengths, so that MU_ARRAY_LEN stays a constant in the
 * encoder and decoder; a table that gains or loses an entry without its PROTO_N*_FIELDS changing
 * here fails to compile (the definition's type would conflict with this declaration).
 */
#ifndef MUSTER_PROTOCOL_INTERNAL_H
#define MUSTER_PROTOCOL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/proto.h"

enum proto_field_kind {
    PROTO_FK_U64,   /* uint64_t, unsigned msgpack int only */
    PROTO_FK_INT,   /* int within [min, max] */
    PROTO_FK_I64,   /* int64_t within [min, max] */
    PROTO_FK_STR,   /* char[size], NUL included */
    PROTO_FK_BOOL,  /* bool */
    PROTO_FK_STATE, /* enum proto_task_state as "RUNNING" | "EXITED" | "LOST" */
    /* Top-level only: handled with the whole struct proto_msg in hand. */
    PROTO_FK_VERSION,
    PROTO_FK_TYPE,
    PROTO_FK_GPUS,
    PROTO_FK_LABELS,
    PROTO_FK_TASKS,
    PROTO_FK_TASK,
    PROTO_FK_BIND_GPUS,
    PROTO_FK_ARGV,
    PROTO_FK_ENV,
    PROTO_FK_DATA, /* binary, heap (data, data_len), at most PROTO_LOG_CHUNK_MAX bytes */
};

struct proto_field {
    const char *name; /* the msgpack key */
    enum proto_field_kind kind;
    size_t off;       /* offset in the record (PROTO_FK_U64 .. PROTO_FK_STATE) */
    size_t size;      /* PROTO_FK_STR: destination size, NUL included */
    int64_t min, max; /* PROTO_FK_INT, PROTO_FK_I64 */
    unsigned types;   /* bit (1u << type) for every message type whose encoding carries it */
    bool always;      /* encoded even when zero or empty */
};

/* Bit (1u << type) of a message type in proto_field.types; every type there is. */
#define PROTO_TYPE_BIT(t) (1u << (t))
#define PROTO_ALL_TYPES   ((1u << (PROTO_TYPE_LAST + 1)) - 2u)

/* Table lengths: see the comment at the top. */
enum {
    PROTO_MSG_NFIELDS = 52, /* at most 64: the decoder's `seen` mask is a uint64_t */
    PROTO_REF_NFIELDS = 12,
    PROTO_GPU_NFIELDS = 9,
};

/* The keys of a message, of a task reference ("task", "tasks") and of a GPU ("gpus"). */
extern const struct proto_field proto_msg_fields[PROTO_MSG_NFIELDS];
extern const struct proto_field proto_ref_fields[PROTO_REF_NFIELDS];
extern const struct proto_field proto_gpu_fields[PROTO_GPU_NFIELDS];
/* enum proto_task_state -> its wire name; [0] is NULL (not a state that travels). */
extern const char *const proto_state_names[PROTO_TASK_LOST + 1];

/* Where field f lives in the record at base. */
static inline void *proto_field_ptr(void *base, const struct proto_field *f)
{
    return (char *)base + f->off;
}

static inline const void *proto_field_cptr(const void *base, const struct proto_field *f)
{
    return (const char *)base + f->off;
}

/* zmq_setsockopt of an int option; name is the option's name for the message.  0 or -1 with
 * err (MU_E_ZMQ). */
int proto_sock_set_int(void *sock, int opt, int value, const char *name, struct mu_err *err);

#endif
