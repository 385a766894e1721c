/* SPDX-License-Identifier: MIT */
/*
 * musterctl's cross-file helpers: the command table, option parsing, output (tables and JSON)
 * and the Redis connection.  Never included outside cli/.
 */
#ifndef MUSTER_CLI_INTERNAL_H
#define MUSTER_CLI_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/mu.h"
#include "queue/queue.h"

/* Exit codes (docs/design.md §8). */
enum ctl_exit { CTL_EXIT_OK = 0, CTL_EXIT_FAIL = 1, CTL_EXIT_USAGE = 2 };

enum ctl_output { CTL_OUT_TABLE = 0, CTL_OUT_JSON, CTL_OUT_CSV /* history only */ };

/* One run of musterctl: the global settings and the lazily opened connection. */
struct ctl {
    const char *url;           /* redis URL after flag > env > config > default; borrowed */
    const char *prefix;        /* key prefix, same precedence; borrowed */
    const char *config;        /* --config FILE, or NULL; borrowed */
    struct mu_redis_url where; /* url parsed, for messages */
    enum ctl_output output;
    bool color;                /* stdout is a TTY and NO_COLOR is unset */
    size_t width;              /* columns tables must fit; 0 = unlimited */
    const struct ctl_cmd *cmd; /* the command running, for messages */
    /* main.c's command table, for what reads it (completion): given, not reached for, so that
     * main.c and the commands do not call each other (lint calls) */
    const struct ctl_cmd *commands;
    size_t ncommands;
    struct queue *q; /* NULL until ctl_queue connects; freed by main */
};

/* One option of a command: --name (and -c when short_name is set), taking arg when arg != NULL. */
struct ctl_opt {
    const char *name;
    char short_name; /* 0 = no short form */
    const char *arg; /* metavar such as "N"; NULL = a flag */
    const char *help;
};

#define CTL_MAX_OPTS 32

/* One option as given on the command line, in order (repeatable options such as --env). */
struct ctl_occ {
    size_t opt;        /* index into cmd->options */
    const char *value; /* "" for a flag */
};

/* A command's parsed arguments. */
struct ctl_args {
    const char *value[CTL_MAX_OPTS]; /* per cmd->options entry: NULL unset, "" a set flag; the
                                      * last occurrence wins */
    int argc;                        /* positional arguments */
    char **argv;                     /* borrowed from main's argv; heap array freed by main */
    int dashdash;                    /* argv index of the first argument after "--"; -1 none */
    struct ctl_occ *occ;             /* every option given, in order; heap array freed by main */
    int nocc;
};

/* What a command's positional arguments name, for bash completion. */
enum ctl_arg_kind {
    CTL_ARG_NONE = 0,
    CTL_ARG_JOB,     /* job ids */
    CTL_ARG_NODE,    /* node names */
    CTL_ARG_FILE,    /* a file (or -) */
    CTL_ARG_COMMAND, /* a musterctl command */
    CTL_ARG_SHELL,   /* a shell name (completion) */
    CTL_ARG_IMPORT,  /* "import", then a file (topology) */
    CTL_ARG_FORGET,  /* "forget", then a node name (node) */
};

typedef int ctl_handler_fn(struct ctl *ctl, const struct ctl_args *args);

/* The table that drives parsing, --help and the man page (docs/style.md §1.9). */
struct ctl_cmd {
    const char *name;
    ctl_handler_fn *handler;       /* returns an exit code */
    const char *summary;           /* one line for the command list */
    const char *usage;             /* what follows "musterctl NAME" */
    const char *description;       /* a paragraph for NAME --help */
    const struct ctl_opt *options; /* NULL or terminated by an entry with name NULL */
    int min_args;
    int max_args;           /* -1 = no limit */
    enum ctl_arg_kind kind; /* what the positional arguments are */
};

const struct ctl_cmd *ctl_cmd_find(const char *name);
/* Writes musterctl's overview (NULL) or one command's help to out. */
void ctl_help_print(FILE *out, const struct ctl_cmd *cmd);

ctl_handler_fn ctl_cmd_submit;
ctl_handler_fn ctl_cmd_jobs;
ctl_handler_fn ctl_cmd_show;
ctl_handler_fn ctl_cmd_why;
ctl_handler_fn ctl_cmd_cancel;
ctl_handler_fn ctl_cmd_nodes;
ctl_handler_fn ctl_cmd_events;
ctl_handler_fn ctl_cmd_drain;
ctl_handler_fn ctl_cmd_cordon;
ctl_handler_fn ctl_cmd_uncordon;
ctl_handler_fn ctl_cmd_node;
ctl_handler_fn ctl_cmd_hold;
ctl_handler_fn ctl_cmd_release;
ctl_handler_fn ctl_cmd_queues;
ctl_handler_fn ctl_cmd_reload;
ctl_handler_fn ctl_cmd_topology;
ctl_handler_fn ctl_cmd_pools;
ctl_handler_fn ctl_cmd_top;
ctl_handler_fn ctl_cmd_status;
ctl_handler_fn ctl_cmd_logs;
ctl_handler_fn ctl_cmd_history;
ctl_handler_fn ctl_cmd_completion;
ctl_handler_fn ctl_cmd_help;

/* ---- arguments (args.c) ---- */

/* The value of option `name` of the running command: NULL when not given, "" for a set flag. */
const char *ctl_args_get(const struct ctl *ctl, const struct ctl_args *args, const char *name);
/* Parses option `name` as an integer in [min, max]; *out unchanged when absent.  0 or -1 (usage
 * error printed). */
int ctl_args_int(const struct ctl *ctl,
                 const struct ctl_args *args,
                 const char *name,
                 int64_t min,
                 int64_t max,
                 int64_t *out);

/* Collects the values of every occurrence of option `name`, in command-line order, into out (at
 * most max); returns how many were given (may exceed max). */
size_t ctl_args_all(const struct ctl *ctl,
                    const struct ctl_args *args,
                    const char *name,
                    const char **out,
                    size_t max);

/* ---- messages and connection (util.c) ---- */

/* "musterctl: CMD: message" on stderr; returns CTL_EXIT_FAIL. */
int ctl_fail(const struct ctl *ctl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "musterctl: usage: CMD: message" plus the command's usage line on stderr; CTL_EXIT_USAGE. */
int ctl_usage(const struct ctl *ctl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Connects on first use; on failure prints why (with a hint) and returns NULL.  The handle is
 * owned by ctl and valid until main frees it. */
struct queue *ctl_queue(struct ctl *ctl);

/* Prints item with cJSON_Print and a newline; CTL_EXIT_OK, or CTL_EXIT_FAIL on no memory. */
int ctl_json_print(const struct ctl *ctl, const cJSON *item);
/* Prints musterd's answer to a control request ("ok: …" or "refused: …"): the text on stdout,
 * or a refusal as an error; with -o json {"id", "ok", "instances" (only when instances >= 0),
 * "result"}.  CTL_EXIT_OK when musterd said ok, else CTL_EXIT_FAIL. */
int ctl_answer_print(const struct ctl *ctl, const char *id, int instances, const char *result);
/* {"cmd": cmd, "arg": arg}, as the control stream holds it; NULL on no memory (cJSON_Delete). */
cJSON *ctl_json_control(const char *cmd, const char *arg);

/* A string field, "" when absent; a number field is formatted into buf. Valid while obj and buf
 * are. */
const char *ctl_json_text(const cJSON *obj, const char *key, char *buf, size_t size);
/* An integer field (number, or a string that is one); def when absent or not an integer. */
int64_t ctl_json_int(const cJSON *obj, const char *key, int64_t def);

/* "5s", "3m", "2h", "4d": how long ago then_ms was, seen at now_ms. */
void ctl_format_age(uint64_t now_ms, uint64_t then_ms, char *buf, size_t size);
/* Writes s with control characters replaced by '?', so that stored text cannot drive the
 * terminal. */
void ctl_print_clean(FILE *out, const char *s);

/*
 * Checks that job id exists (a hash, or still in the submit stream).  *found set; *state_out
 * (may be NULL) receives the state ("SUBMITTED" while only in the stream).  0 or -1 (printed).
 */
int ctl_job_lookup(struct ctl *ctl, const char *id, bool *found, char *state_out, size_t size);
/* *found: id is an element ("<array id>_<index>") of an active array that musterd has not made
 * yet (it has no hash of its own; it counts as PENDING).  -1 on a Redis error (printed). */
int ctl_array_element_unmade(struct ctl *ctl, const char *id, bool *found);

/* cmd_why.c: asks musterd why job id waits (cmd why on the control stream) and waits up to
 * wait_s for the answer.  0 with *doc (free with cJSON_Delete), or -1 with err (Redis, no answer
 * in wait_s, an answer that is not a JSON object) and *doc NULL. */
int ctl_why_ask(struct queue *q, const char *id, int wait_s, cJSON **doc, struct mu_err *err);
/* Prints musterd's why answer as text on stdout (musterctl why, and show for a pending job). */
void ctl_why_print(const cJSON *doc);

/* True for the final states of queue_state_is_final: SUCCEEDED, FAILED, CANCELLED, REJECTED and
 * TIMEOUT ("SUBMITTED" and unknown text are not final). */
bool ctl_state_is_final(const char *state);

/* Sleeps ms milliseconds (interrupted early by a signal). */
void ctl_sleep_ms(int ms);

/* Sends `cmd arg` on the control stream and confirms it ("hold requested for job ID").  what
 * is "node" (ctl_node_command) or "job"; an unknown job, a job in a final state ("job 'ID' is
 * SUCCEEDED, not active"), or no musterd leading (ctl_no_leader) is an error printed here
 * (CTL_EXIT_FAIL) and sends nothing. */
int ctl_control_one(struct ctl *ctl, const char *cmd, const char *what, const char *arg);
/* cordon, drain (grace_s >= 0: its --grace) or uncordon of node: the wanted state is recorded in
 * <prefix>node:wanted (uncordon clears it) and, while a musterd leads, the command sent; with
 * none leading it is only recorded, said so, and still CTL_EXIT_OK (musterd applies it when it
 * leads and the node registers).  A node never seen is an error (CTL_EXIT_FAIL), nothing kept.
 * *posted (may be NULL) says which it was. */
int ctl_node_command(
    struct ctl *ctl, const char *cmd, const char *node, int grace_s, enum queue_post *posted);
#define CTL_VERDICT_TIMEOUT_S 10 /* the wait for musterd's word on a command of one's own */
/* queue_control_post through ctl's connection; 0, or -1 with the error printed.  A command sent
 * on the user's own stream (proven identity, access/access.h) waits for musterd's verdict
 * (queue_control_verdict), within its deadline or else CTL_VERDICT_TIMEOUT_S: a refusal, or no
 * answer, is that error. */
int ctl_post(struct ctl *ctl,
             const struct queue_control_req *c,
             enum queue_post *result,
             char *id,
             size_t id_size);
/* "no musterd leads right now (<prefix>leader is free): <what>; hint: ..." on stderr;
 * CTL_EXIT_FAIL. */
int ctl_no_leader(const struct ctl *ctl, const char *what);

/* ---- tables (table.c) ---- */

struct ctl_table;

/* A table with ncols columns titled headers (borrowed for the table's life). Free with
 * ctl_table_free.  NULL on no memory. */
struct ctl_table *ctl_table_new(const char *const *headers, size_t ncols);
void ctl_table_free(struct ctl_table *t);
/* Column col may be cut (with "…") to make the table fit ctl->width. */
void ctl_table_set_flex(struct ctl_table *t, size_t col);
/* Column col is coloured by ctl_state_color of its text. */
void ctl_table_set_state(struct ctl_table *t, size_t col);
/* Appends a row of ncols cells (copied; NULL means ""); 0 or -1 on no memory. */
int ctl_table_add(struct ctl_table *t, const char *const *cells);
/* Prints the table, fitted and coloured as ctl says. */
void ctl_table_print(const struct ctl_table *t, const struct ctl *ctl, FILE *out);
/* ANSI colour for a job or node state, or NULL for none. */
const char *ctl_state_color(const char *state);

/* ---- tables shared by queues, pools and top (cmd_queues.c, cmd_pools.c, cmd_jobs.c) ---- */

/* The QUEUE … OLDEST_WAIT table of a status array from queue_status_read; NULL on no memory. */
struct ctl_table *ctl_queues_table(const cJSON *queues, uint64_t now_ms);
/* The POOL … COOLDOWN table; NULL on no memory. */
struct ctl_table *ctl_pools_table(const cJSON *pools, uint64_t now_ms);
/* cmd_nodes.c: MIG slices (issue #17) of a node or pool status entry's "slices" object as
 * "1g.10gb:5/7,3g.40gb:1/2" ("-" when none), and whether any entry of a list has some. */
void ctl_slices_text(const cJSON *slices, char *buf, size_t size);
bool ctl_any_slices(const cJSON *list);
typedef struct ctl_table *ctl_status_table_fn(const cJSON *items, uint64_t now_ms);
/* The body of `queues` and `pools`: reads the status hash `hash` ("queues", "pools") and prints
 * it as JSON or as the table `build` makes.  Returns the exit code. */
int ctl_status_show(struct ctl *ctl, const char *hash, ctl_status_table_fn *build);
/* The jobs the filter passes, as rows of the fields the jobs table shows (queue_job_rows_read). */
int ctl_job_rows_read(struct queue *q,
                      const struct queue_jobs_filter *f,
                      struct queue_job_rows *out,
                      struct mu_err *err);
/* True for a row of ctl_job_rows_read whose job is PENDING. */
bool ctl_job_row_is_pending(const struct queue_job_row *r);
/* The jobs table (ID … REASON) of rows from ctl_job_rows_read, at most max_rows rows (0 = all);
 * NULL on no memory. */
struct ctl_table *ctl_jobs_table(const struct queue_job_rows *rows,
                                 uint64_t now_ms,
                                 size_t max_rows);

#endif
