/* SPDX-License-Identifier: MIT */
/*
 * proto codec, part 1 of 3: the field tables (docs/design.md §7, protocol/README.md).  Both
 * directions run off them (codec_encode.c, codec_decode.c): name, kind, offset, bounds, which
 * message types carry it.  So a key cannot be encoded under one name and decoded under another;
 * protocol/README.md's tables copy these, and tests/docs/check-protocol-fields.py fails when they
 * disagree.  protocol/internal.h declares them with their lengths.
 */
#include "protocol/internal.h"

#include <limits.h>
#include <stddef.h>

#include "common/mu_banned.h"

#define TB(t)     PROTO_TYPE_BIT(t)
#define ALL_TYPES PROTO_ALL_TYPES
#define LOG_TYPES (TB(PROTO_LOG_READ) | TB(PROTO_LOG_DATA))
#define TASK_TYPES                                                                      \
    (TB(PROTO_BIND) | TB(PROTO_BIND_ACK) | TB(PROTO_TASK_STATUS) | TB(PROTO_CHECKPOINT) \
     | TB(PROTO_KILL) | TB(PROTO_CHECKPOINT_DONE) | LOG_TYPES)
#define MSZ(s, m) sizeof(((s *)NULL)->m)

#define F_U64(s, m, types, always)                               \
    {                                                            \
#m, PROTO_FK_U64, offsetof(s, m), 0, 0, 0, types, always \
    }
#define F_INT(s, m, lo, hi, types, always)                         \
    {                                                              \
#m, PROTO_FK_INT, offsetof(s, m), 0, lo, hi, types, always \
    }
#define F_I64(s, m, lo, hi, types, always)                         \
    {                                                              \
#m, PROTO_FK_I64, offsetof(s, m), 0, lo, hi, types, always \
    }
#define F_STR(s, m, types, always)                                       \
    {                                                                    \
#m, PROTO_FK_STR, offsetof(s, m), MSZ(s, m), 0, 0, types, always \
    }
#define F_SPECIAL(name, kind, types, always)  \
    {                                         \
        name, kind, 0, 0, 0, 0, types, always \
    }

#define M struct proto_msg
const struct proto_field proto_msg_fields[] = {
    F_SPECIAL("v", PROTO_FK_VERSION, ALL_TYPES, true),
    F_SPECIAL("type", PROTO_FK_TYPE, ALL_TYPES, true),
    F_U64(M, seq, ALL_TYPES, true),
    F_U64(M, epoch, ALL_TYPES, true),
    F_STR(M, node, ALL_TYPES, false),
    F_U64(M, sent_ms, ALL_TYPES, false),
    F_STR(M, pool, TB(PROTO_HELLO), false),
    F_STR(M, addr, TB(PROTO_HELLO), false),
    F_STR(M, instance_id, TB(PROTO_HELLO), false),
    F_STR(M, confinement, TB(PROTO_HELLO), false),
    F_INT(M, cpus, 0, INT_MAX, TB(PROTO_HELLO), false),
    F_I64(M, memory_mb, 0, INT64_MAX, TB(PROTO_HELLO), false),
    F_SPECIAL("gpus", PROTO_FK_GPUS, TB(PROTO_HELLO), false),
    F_SPECIAL("labels", PROTO_FK_LABELS, TB(PROTO_HELLO), false),
    F_SPECIAL(
        "tasks", PROTO_FK_TASKS, TB(PROTO_HELLO) | TB(PROTO_HEARTBEAT) | TB(PROTO_BYE), false),
    F_INT(M, heartbeat_s, 0, INT_MAX, TB(PROTO_HEARTBEAT), false),
    F_INT(M, lease_s, 0, INT_MAX, TB(PROTO_HEARTBEAT), false),
    F_INT(M, answer_every, 0, INT_MAX, TB(PROTO_HEARTBEAT), false),
    F_U64(M, echo_ms, TB(PROTO_HELLO) | TB(PROTO_HEARTBEAT), false),
    F_SPECIAL("task", PROTO_FK_TASK, TASK_TYPES, true),
    F_INT(M, world_size, 0, INT_MAX, TB(PROTO_BIND), false),
    F_INT(M, local_rank, 0, INT_MAX, TB(PROTO_BIND), false),
    F_INT(M, local_world_size, 0, INT_MAX, TB(PROTO_BIND), false),
    F_INT(M, node_rank, 0, INT_MAX, TB(PROTO_BIND), false),
    F_INT(M, nnodes, 0, INT_MAX, TB(PROTO_BIND), false),
    F_STR(M, master_addr, TB(PROTO_BIND), false),
    F_INT(M, master_port, 0, 65535, TB(PROTO_BIND), false),
    F_SPECIAL("gpus_bound", PROTO_FK_BIND_GPUS, TB(PROTO_BIND), false),
    F_SPECIAL("argv", PROTO_FK_ARGV, TB(PROTO_BIND), false),
    F_SPECIAL("env", PROTO_FK_ENV, TB(PROTO_BIND), false),
    F_STR(M, workdir, TB(PROTO_BIND), false),
    F_STR(M, resume_from, TB(PROTO_BIND), false),
    F_U64(M, expires_ms, TB(PROTO_BIND), false),
    F_STR(M, job_user, TB(PROTO_BIND), false),
    F_INT(M, cpus_per_task, 0, INT_MAX, TB(PROTO_BIND), false),
    F_I64(M, memory_mb_per_task, 0, INT64_MAX, TB(PROTO_BIND), false),
    { "ok", PROTO_FK_BOOL, offsetof(M, ok), 0, 0, 0,
      TB(PROTO_BIND_ACK) | TB(PROTO_HEARTBEAT) | TB(PROTO_LOG_DATA), true },
    F_STR(M,
          error,
          TB(PROTO_BIND_ACK) | TB(PROTO_TASK_STATUS) | TB(PROTO_HEARTBEAT) | TB(PROTO_LOG_DATA),
          false),
    { "node_fault", PROTO_FK_BOOL, offsetof(M, node_fault), 0, 0, 0, TB(PROTO_BIND_ACK), false },
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
    { "absent", PROTO_FK_BOOL, offsetof(M, absent), 0, 0, 0, TB(PROTO_LOG_DATA), false },
    F_SPECIAL("data", PROTO_FK_DATA, TB(PROTO_LOG_DATA), false),
};
#undef M

#define R struct proto_task_ref
const struct proto_field proto_ref_fields[] = {
    F_STR(R, job, ALL_TYPES, true),
    F_INT(R, task, 0, INT_MAX, ALL_TYPES, true),
    F_INT(R, attempt, 0, INT_MAX, ALL_TYPES, true),
    { "state", PROTO_FK_STATE, offsetof(R, state), 0, 0, 0, ALL_TYPES, false },
    F_INT(R, pid, 0, INT_MAX, ALL_TYPES, false),
    F_INT(R, exit_code, INT_MIN, INT_MAX, ALL_TYPES, false),
    F_INT(R, signal, 0, 255, ALL_TYPES, false),
    { "fenced", PROTO_FK_BOOL, offsetof(R, fenced), 0, 0, 0, ALL_TYPES, false },
    { "oom_killed", PROTO_FK_BOOL, offsetof(R, oom_killed), 0, 0, 0, ALL_TYPES, false },
    { "stopped", PROTO_FK_BOOL, offsetof(R, stopped), 0, 0, 0, ALL_TYPES, false },
    F_STR(R, checkpoint, ALL_TYPES, false),
    F_U64(R, checkpoint_at_ms, ALL_TYPES, false),
};
#undef R

#define G struct proto_gpu
const struct proto_field proto_gpu_fields[] = {
    F_INT(G, index, 0, INT_MAX, ALL_TYPES, true),
    F_STR(G, uuid, ALL_TYPES, true),
    F_STR(G, model, ALL_TYPES, true),
    F_I64(G, memory_mb, 0, INT64_MAX, ALL_TYPES, true),
    F_STR(G, pci_bus_id, ALL_TYPES, true),
    F_INT(G, island, INT_MIN, INT_MAX, ALL_TYPES, true),
    { "mig", PROTO_FK_BOOL, offsetof(G, mig), 0, 0, 0, ALL_TYPES, false },
    F_STR(G, profile, ALL_TYPES, false),
    F_INT(G, parent, 0, INT_MAX, ALL_TYPES, false),
};
#undef G

/* Bits of the decoder's `seen` masks (codec_decode.c). */
_Static_assert(MU_ARRAY_LEN(proto_msg_fields) <= 64, "proto_msg_fields must fit a uint64_t mask");

const char *const proto_state_names[] = {
    [PROTO_TASK_RUNNING] = "RUNNING",
    [PROTO_TASK_EXITED] = "EXITED",
    [PROTO_TASK_LOST] = "LOST",
};

bool proto_key_get(enum proto_key_table table, int i, struct proto_key *out)
{
    static const struct {
        const struct proto_field *fields;
        int n;
    } tables[] = {
        [PROTO_KEYS_MSG] = { proto_msg_fields, PROTO_MSG_NFIELDS },
        [PROTO_KEYS_TASK_REF] = { proto_ref_fields, PROTO_REF_NFIELDS },
        [PROTO_KEYS_GPU] = { proto_gpu_fields, PROTO_GPU_NFIELDS },
    };
    const struct proto_field *f;

    if ((unsigned)table >= MU_ARRAY_LEN(tables) || i < 0 || i >= tables[table].n)
        return false;
    f = &tables[table].fields[i];
    *out = (struct proto_key){
        .name = f->name, .kind = "other", .types = f->types, .always = f->always
    };
    switch (f->kind) {
    case PROTO_FK_U64:
        out->kind = "uint";
        break;
    case PROTO_FK_INT:
    case PROTO_FK_I64:
        out->kind = "int";
        out->min = f->min;
        out->max = f->max;
        break;
    case PROTO_FK_STR:
        out->kind = "str";
        out->cap = f->size - 1;
        break;
    case PROTO_FK_BOOL:
        out->kind = "bool";
        break;
    default:
        break;
    }
    return true;
}
