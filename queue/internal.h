/* SPDX-License-Identifier: MIT */
/* queue's cross-file helpers; never included outside queue/ (a CI grep checks). */
#ifndef MUSTER_QUEUE_INTERNAL_H
#define MUSTER_QUEUE_INTERNAL_H

#include <hiredis/hiredis.h>

#include "queue/queue.h"

struct queue {
    redisContext *ctx; /* NULL while disconnected; a context with err set is freed at once */
    struct mu_redis_url url;
    char prefix[CFG_NAME_MAX];
    /* Fenced writes (lease.c): with fence set, each write pipeline is queued in batch and runs as
     * one script that first checks <prefix>leader still holds fence. */
    char fence[QUEUE_LEASE_TOKEN_MAX]; /* "" = writes are not fenced */
    uint64_t fence_epoch;
    int fence_ttl_ms;
    char fence_sha[48]; /* the fence script's SHA1 once loaded, "" before */
    char **batch;       /* formatted commands (redisFormatCommand), owned */
    int *batch_len;
    int nbatch;
    int cap_batch;
    /* The server of the last connection ("host:port run_id"), and how many times a connection
     * reached another one than the connection before it (conn.c, queue_server_changes). */
    char server[320];
    uint64_t server_changes;
};

struct cJSON;

/* The spec's string checks (spec_text.c), shared by spec.c and spec_deps.c. */
/* A string of at most max_len bytes into *out (borrowed from v); MU_E_SPEC naming path otherwise
 * (and then *out is not set). */
int queue_json_str(
    const struct cJSON *v, const char *path, size_t max_len, const char **out, struct mu_err *err);
/* A string of 1..size-1 bytes, none of them a control character (ASCII only when ascii), copied
 * into dst; MU_E_SPEC naming path otherwise. */
int queue_json_printable(const struct cJSON *v,
                         const char *path,
                         bool ascii,
                         char *dst,
                         size_t size,
                         struct mu_err *err);
/* The "after" and "array" keys into s; MU_E_SPEC naming the key path.  Heap parts are s's
 * (queue_spec_release frees them, also after a failure). */
int queue_spec_after_set(struct queue_spec *s, const struct cJSON *arr, struct mu_err *err);
int queue_spec_array_set(struct queue_spec *s, const struct cJSON *v, struct mu_err *err);

/* Builds a job object from an HGETALL reply (client.c); *out = NULL for an empty hash (no such
 * job).  id fills the "id" field when the hash lacks one. */
int queue_job_from_reply(const redisReply *r,
                         const char *id,
                         struct cJSON **out,
                         struct mu_err *err);

/* A per-job command formatted once but for the key (keyed.c): head "*<argc> $<n> <command>",
 * tail "$<n> <field>" per field, both in the protocol's framing. */
#define QUEUE_KEYED_KEY_MAX 512
struct queue_keyed {
    char head[64];
    char tail[1024];
    size_t head_len;
    size_t tail_len;
};
/* command with nfields fields after the key; MU_E_TOOBIG when they do not fit. */
int queue_keyed_init(struct queue_keyed *k,
                     const char *command,
                     const char *const *fields,
                     size_t nfields,
                     struct mu_err *err);
/* Appends k's command for key to q->ctx (which must be open); REDIS_OK, or REDIS_ERR (no memory,
 * or a key over QUEUE_KEYED_KEY_MAX bytes). */
int queue_keyed_append(struct queue *q,
                       const struct queue_keyed *k,
                       const char *key,
                       size_t key_len);
/* Called with the reply of ids->element[i]: 0 goes on, 1 stops, -1 stops with err filled. */
typedef int queue_keyed_fn(void *ctx, size_t i, const redisReply *r, struct mu_err *err);
/*
 * Sends k for "<prefix>job:<id>" of each string id of ids (an array reply), QUEUE_LOAD_WINDOW
 * ahead of the reply being read, so Redis answers the next ones while fn works on this one, and
 * hands fn each reply in ids' order.  An error reply fails with its message; an id that is not a
 * string, or whose key would not fit, is skipped.  Stopping early drops the connection with the
 * replies still in flight (cheaper than reading them; the next command reconnects).  0 when
 * every id was handed over, 1 when fn stopped, -1 on failure (err filled).
 */
int queue_keyed_each(struct queue *q,
                     const struct queue_keyed *k,
                     const redisReply *ids,
                     queue_keyed_fn *fn,
                     void *ctx,
                     struct mu_err *err);

/* Opens q->ctx from q->url (AUTH, SELECT/PING). */
int queue_conn_open(struct queue *q, struct mu_err *err);
/* queue_command with the words as an argument vector (NUL-terminated strings). */
void *queue_command_argv(struct queue *q, struct mu_err *err, int argc, const char **argv);
/* Frees a dead context so the next command reconnects. */
void queue_conn_drop(struct queue *q);
/* Reads the replies of n pipelined commands; the first error wins, all are drained.  With a
 * fence set, runs the batch queue_append queued instead (one round trip; MU_E_FENCED when this
 * connection's holder no longer leads, and then nothing was written). */
int queue_pipeline_finish(struct queue *q, int n, struct mu_err *err);
/* A write in the current pipeline: appended to q->ctx, or to the batch with a fence set.
 * REDIS_OK or REDIS_ERR, as redisAppendCommand. */
int queue_append(struct queue *q, const char *fmt, ...);
/* The writer's own stream of s first, else the shared one (queue/owned.c): cmd runs the write
 * against stream (own: the writer's own, to be added to only when it exists, answering nil or
 * {"nostream"} when it does not), and is run again for the shared stream when the own one is
 * missing or refused (NOPERM).  Returns cmd's reply (queue_reply_free), *own saying which
 * stream took it; NULL with err. */
typedef void *(*queue_owned_cmd)(
    struct queue *q, const char *stream, bool own, void *arg, struct mu_err *err);
void *queue_owned_write(struct queue *q,
                        enum queue_stream s,
                        queue_owned_cmd cmd,
                        void *arg,
                        bool *own,
                        struct mu_err *err);
int queue_append_argv(struct queue *q, int argc, const char **argv, const size_t *lens);
/* Runs the batch as one fenced script (lease.c); with out, the script's reply (an array of the
 * commands' replies, freeReplyObject) on success.  The batch is empty afterwards. */
int queue_batch_finish(struct queue *q, redisReply **out, struct mu_err *err);
/* Drops a batch that will not run; queue_batch_free also frees its arrays (queue_free). */
void queue_batch_clear(struct queue *q);
void queue_batch_free(struct queue *q);
/* logs.c: a logreq entry's fields (a redisReply array) into *out, checked (out->error). */
void queue_log_req_parse(const void *fields, struct queue_log_req *out);

#endif
