/* SPDX-License-Identifier: MIT */
/*
 * musterd's layer 1 (see d_io.h): the worker registry (docs/design.md §2, §7).  A node keeps its
 * cluster index for the life of the daemon; a worker that comes back (restart, reconnect)
 * registers again under the same index.  What a registration means for the jobs (adoption, the
 * tasks a worker reports) is the handlers' business (d_handlers.h), as is a node judged lost.
 */
#ifndef MUSTER_SCHEDULER_D_NODE_H
#define MUSTER_SCHEDULER_D_NODE_H

#include "core/sched.h"
#include "scheduler/d_io.h"

#define D_REFUSALS_CORDON 3 /* node-side refusals in a row before musterd cordons a node */

struct cfg;
struct musterd;
struct d_job;

struct d_node {
    char name[PROTO_NODE_MAX];
    int idx; /* cluster node index */
    char pool[PROTO_NODE_MAX];
    char addr[128];
    char instance_id[64]; /* EC2 instance id from HELLO; "" = not given */
    char confinement[16]; /* HELLO's: "cgroup-v1", "cgroup-v2", "pgroup"; "" = not said */
    bool online;          /* registered and not lost or down */
    bool down;         /* its worker stops cleanly (a stopped exit) or said BYE; until it registers
                          again.  online stays true until the BYE: its last reports are still read */
    bool forgotten;    /* musterctl node forget: no status entry until it registers again */
    char warning[160]; /* what registration found odd (GPUs against the pool's gpus_per_node);
                          "" = nothing */
    uint64_t seen_ms;  /* mono: last message */
    uint64_t seen_wall_ms;
    int unanswered; /* heartbeats left unanswered since the last answer (d_answer_every) */
    enum sched_node_state admin;        /* operator state: ready, cordoned or draining */
    bool terminating;                   /* spot notice received: never ready again */
    bool at_risk;                       /* rebalance recommendation: no new gangs */
    uint64_t terminate_at_ms;           /* wall ms of the spot notice's deadline */
    int refusals;                       /* node-side BIND refusals in a row, one per attempt */
    char refused_job[QUEUE_JOB_ID_MAX]; /* the attempt the last one counted for */
    int refused_attempt;
    char reason[300];       /* why musterd cordoned it ("" = not musterd's doing) */
    uint64_t idle_since_ms; /* wall: since when no task of ours runs here, as of the last status
                               write (d_status.c); 0 = a task runs here */
    uint64_t status_sum;    /* hash of the entry last written to <prefix>nodes; 0 = none yet */
    uint64_t status_hb_ms;  /* the heartbeat_at that entry shows */
    int drain_grace_s;      /* the operator's --grace cap of its drain; -1 = none */
};

/* The operator's wanted state of a node (<prefix>node:wanted), kept whether it is registered or
 * not. */
struct d_wanted {
    enum sched_node_state admin; /* SCHED_NODE_CORDONED or SCHED_NODE_DRAINING */
    int grace_s;                 /* drain's --grace cap; -1 = none */
};

/* The operator's word on a node (cordon, drain with its grace cap, uncordon): it replaces
 * musterd's own reason and refusal count.  The caller tells the core (d_node_state). */
void d_node_admin_set(struct d_node *node, enum sched_node_state admin, int grace_s);

/* The node's state for placement: down (its worker stops) beats lost (not online), which beats
 * terminating (spot notice), which beats the operator's state. */
enum sched_node_state d_node_state(const struct d_node *node);
/* The one way a node's state changes (scripts/lint.sh, check "state"): sets the flag that st
 * stands for (terminating, down, lost: not online, or the operator's ready, cordoned, draining),
 * then the core's copy from d_node_state, and marks the nodes' status to be written. */
void d_node_state_set(struct musterd *d, struct d_node *node, enum sched_node_state st);
/* Whether an autoscaler may take node away (issue #16): online, no spot notice, and no task
 * for consolidate_after_s.  A node that gets work stops being releasable at once. */
bool d_node_releasable(const struct musterd *d, const struct d_node *node, uint64_t now_ms);
/* The registered node called name, or NULL. */
struct d_node *d_node_get(struct musterd *d, const char *name);
const char *d_node_name(const struct musterd *d, int idx);
/*
 * Registers (or re-registers) the worker of HELLO m received from identity and answers it with
 * a HEARTBEAT; the node, or NULL when it cannot join (the answer says why).
 */
struct d_node *d_node_register(struct musterd *d, const char *identity, const struct proto_msg *m);
/*
 * How many of a worker's heartbeats musterd answers one of: 2 when the lease (node_lost_after_s)
 * is at least 5 heartbeats, so that one lost answer still leaves the worker's lease alive until
 * the next; else 1.  Issue #15: at 20,000 nodes the answers were most of the idle CPU.
 */
int d_answer_every(const struct cfg *c);
/* A HEARTBEAT from identity: noted, and answered (ok false when it must send HELLO), or, from a
 * worker that says back d_answer_every, only every that many. */
void d_node_heartbeat(struct musterd *d, const char *identity, const struct proto_msg *m);
/* A node refused a task of j for its own reason: after D_REFUSALS_CORDON attempts in a row
 * (across jobs) musterd cordons it, with the reason shown by musterctl nodes. */
void d_node_refused(struct musterd *d,
                    struct d_node *node,
                    const struct d_job *j,
                    const char *error);
/* How long a node may be silent before it is lost: node_lost_after_s plus two heartbeats (at
 * least 2 s). */
uint64_t d_node_silence_limit_ms(const struct cfg *c);
/* The worker of node reported an exit marked stopped: it is stopping cleanly, and its BYE
 * follows.  No new work goes there from now on (the node shows down), so that an attempt
 * requeued by that exit is not placed on it again before the BYE arrives. */
void d_node_stopping(struct musterd *d, struct d_node *node);
/* The worker of node said BYE (a clean stop): the node is down at once, not judged lost later.
 * The caller then ends what still runs there as for a lost node (d_node_lost_tasks). */
void d_node_down(struct musterd *d, struct d_node *node);
/* Whether a live job still has a task on the node called name (placed, or adopting). */
bool d_node_has_tasks(const struct musterd *d, const char *name);
/*
 * The control command "forget" (musterctl node forget NODE): removes the record of a node that
 * is not registered (lost, down, or not back since a restart) and has no task, from
 * <prefix>nodes, from the nodes a restarted musterd waits for, and its kept cordon or drain
 * (<prefix>node:wanted).  The answer ("ok: ..." or
 * "refused: why") goes to <prefix>forget:<entry_id>.  0, or -1 when Redis failed before the
 * record was removed (nothing changed: the command is to be read again).
 */
int d_node_forget(struct musterd *d, const char *entry_id, const char *name);
/* A node silent past d_node_silence_limit_ms is marked lost; returns its index, or -1 when no
 * more node is due.  Call until -1. */
int d_nodes_expire(struct musterd *d, uint64_t now_ms);
/* After a restart: reads the nodes the last run knew (not lost) and starts the grace, and the
 * operator's wanted states (<prefix>node:wanted), applied as each node registers. */
int d_nodes_recover(struct musterd *d, struct mu_err *err);
/* True while known nodes may still come back (placement then uses first choices only). */
bool d_nodes_regrace(struct musterd *d, uint64_t now_mono_ms);
void d_nodes_free(struct musterd *d);
/* Keeps the operator's wanted state of node name (SCHED_NODE_READY forgets it), for when the node
 * registers; 0, or -1 with err (no memory).  Does not touch a registered node (d_control.c). */
int d_wanted_set(struct musterd *d,
                 const char *name,
                 enum sched_node_state admin,
                 int grace_s,
                 struct mu_err *err);
/* The wanted state kept for name, or NULL; borrowed until the next d_wanted_set of name. */
const struct d_wanted *d_wanted_get(const struct musterd *d, const char *name);

/* ---- the imported EC2 instance topology (d_topo.c, issue #16, docs/deploy.md) ---- */

/* Reads what earlier imports stored (<prefix>topology) into d->topology; an entry that does not
 * read is logged and skipped.  At start, before any worker registers.  0 or -1 (Redis). */
int d_topo_load(struct musterd *d, struct mu_err *err);
/*
 * The labels the imported topology gives the node of instance_id (NULL or "" = none): for each
 * level l, set[l] tells whether labels[l] was filled.  Returns how many levels were set; 0 when
 * the instance was never imported or the config no longer maps what was (logged).
 */
int d_topo_node_labels(const struct musterd *d,
                       const char *instance_id,
                       char (*labels)[SCHED_NAME_MAX],
                       bool *set);
/*
 * The control command "topology" (musterctl topology import): reads the instances staged under
 * token, checks every one against the config's instance_topology, and only when all pass stores
 * them (<prefix>topology, merged with earlier imports) and relabels the registered nodes of
 * those instances at once.  The answer ("ok: N node(s) relabelled, ..." or "refused: why",
 * nothing changed) goes to <prefix>topology:results, field token.
 */
void d_topo_import(struct musterd *d, const char *token);
void d_topo_free(struct musterd *d);

#endif
