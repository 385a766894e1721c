/* SPDX-License-Identifier: MIT */
/*
 * access: who may do what (issue #46, docs/security.md).  The "access" section of musterd's
 * config file, and the decisions musterd makes from it: may this submission run, as whom; may
 * this person cancel that job; how much may a user hold.  Pure: no I/O, no clock; musterd, the
 * tests and the fuzzer call the same functions.
 *
 * Identity comes from Redis, not from this module: in "redis-acl" mode each known user writes
 * to streams of their own (<prefix>submit:<user>, <prefix>control:<user>) that only their Redis
 * ACL user may write, so musterd knows who wrote an entry by the stream it came from (the
 * entry's owner).  In "single-user" mode (the default, for small clusters of one team) there is
 * one shared stream pair and nobody is proven: the spec's user is a label for fair share, and
 * tasks run as the worker's own user (or --run-as).
 *
 * The section (all keys optional; no "access" key = single-user, no rules):
 *
 *   "access": {
 *     "identity": "redis-acl",                 "single-user" (default) | "redis-acl"
 *     "operators": ["ops", "@admins"],         may cancel, hold, release anyone's jobs, and
 *                                              drain, cordon, uncordon, reload, topology, forget
 *     "defaults": { LIMITS },                  for every known user
 *     "groups": { "vision": { "members": ["alice", "bob"], LIMITS }, ... },
 *     "users":  { "alice": { LIMITS }, "pipeline": { "submit_for": ["alice", "@vision"] }, ... }
 *   }
 *
 *   LIMITS: "queues": ["research", "default"] | ["*"]     queues the user may submit to
 *           "max_priority": 100                           highest spec priority, -1e6..1e6
 *           "non_preemptible": true                       may submit "preemptible": false
 *           "max_running_gpus": 32                        GPUs (whole GPUs, or slices, or shares
 *                                                         counted as one GPU each) running at once;
 *                                                         0 = no cap; jobs past it wait
 *           "max_pending_jobs": 500                       jobs not yet started (each array element
 *                                                         counts); 0 = no cap; past it: REJECTED
 *           "submit_for": ["alice", "@vision", "*"]       (users only) users this one may submit
 *                                                         on behalf of (a pipeline service)
 *
 * A user's limits: each key from the user's own entry when it sets it; else the most generous
 * value among the groups the user is a member of that set it (queues: their union; caps: 0 = no
 * cap wins, else the largest); else "defaults"; else the built-in default: queues ["*"],
 * max_priority 0, non_preemptible false, no caps.  "@name" names a group's members.  Known users
 * are the keys of "users", the members of "groups" and the operators (after "@" expansion).  A
 * name is 1..63 bytes of [A-Za-z0-9._-] (a Redis ACL user name that is also safe in a key).
 * In single-user mode, "operators", "groups", "users" and "defaults" are errors ("access.users:
 * needs identity \"redis-acl\": in single-user mode nobody is proven").
 */
#ifndef MUSTER_ACCESS_ACCESS_H
#define MUSTER_ACCESS_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mu.h"

#define ACCESS_NAME_MAX  64    /* a user or group name with its NUL */
#define ACCESS_USERS_MAX 10000 /* known users at most */

enum access_identity { ACCESS_SINGLE_USER = 0, ACCESS_REDIS_ACL = 1 };

struct access;

/* Single-user mode, no rules: what a config without "access" gives.  NULL only on no memory. */
struct access *access_new_default(void);
/*
 * Parses the "access" key of a whole config document (the same text cfg_parse reads; other keys
 * are ignored here, cfg_parse judges them).  Strict like the config: unknown keys (with a "did
 * you mean"), wrong types, out-of-range values, an unknown "@group", a group that names itself,
 * a repeated name in a list, a bad name, more than ACCESS_USERS_MAX users are errors
 * (MU_E_CONFIG) whose message starts with the key path ("access.groups.vision.members[2]: ...").
 * Returns the rules (access_free) or NULL with err.
 */
struct access *access_parse(const char *json, size_t len, struct mu_err *err);
void access_free(struct access *a);

enum access_identity access_identity(const struct access *a);
/* "single-user" | "redis-acl" */
const char *access_identity_name(enum access_identity id);
/* Whether the two rule sets are the same (a reload that changes nothing says so). */
bool access_equal(const struct access *a, const struct access *b);

/* The known users, sorted by name (strcmp), each once: i in 0..access_nusers-1.  Borrowed. */
int access_nusers(const struct access *a);
const char *access_user(const struct access *a, int i);
bool access_is_known(const struct access *a, const char *user);
bool access_is_operator(const struct access *a, const char *user);

/* A submission as the rules judge it. */
struct access_submit {
    const char *owner; /* the proven writer (the stream's user); "" in single-user mode */
    const char *user;  /* the spec's "user"; "" when the spec names none */
    const char *queue; /* the spec's queue */
    int64_t priority;  /* the spec's priority */
    bool preemptible;  /* the spec's preemptible */
};

/*
 * Decides a submission.  On success user_out (size >= ACCESS_NAME_MAX) gets the user the job
 * belongs to: runs as, is charged to, and is limited as.  Single-user mode: the spec's user as
 * written (may be ""), and every submission is allowed.  redis-acl mode: the owner, or the
 * spec's user when the owner may submit for them (submit_for); then the queue, priority and
 * preemptible rules of that user.  -1 with err (MU_E_STATE) otherwise, a sentence for the
 * submitter that names the rule, e.g.
 *   "user 'bob' is not you (alice): identity comes from your Redis user (access.identity)"
 *   "alice may not submit for bob (access.users.alice.submit_for: carol)"
 *   "queue 'prod' is not open to alice (access.groups.vision.queues: research, default)"
 *   "priority 500 is above alice's highest, 100 (access.defaults.max_priority)"
 *   "alice may not submit non-preemptible jobs (access.users.alice.non_preemptible)"
 * where the path is the entry the value came from ("access.defaults.max_priority unset: built-in
 * default" when none set it).
 */
int access_submit_check(const struct access *a,
                        const struct access_submit *s,
                        char *user_out,
                        size_t user_size,
                        struct mu_err *err);

/* A user's caps (0 = none), with where each came from for messages ("access.users.alice"). */
struct access_caps {
    int64_t max_running_gpus;
    int64_t max_pending_jobs;
    char running_rule[128]; /* "access.groups.vision.max_running_gpus"; "" when no cap */
    char pending_rule[128];
};
/* The caps of user; all 0 for an unknown user and in single-user mode. */
void access_caps(const struct access *a, const char *user, struct access_caps *out);
/* Whether some user has a max_running_gpus (musterd counts running GPUs only then). */
bool access_has_running_caps(const struct access *a);

/*
 * Whether who may send control command cmd.  Job commands ("cancel", "hold", "release"):
 * job_user is the job's user; its owner and operators may (job_user NULL: no such job exists
 * now, nothing to guard: allowed to every known user).  "why" is open to every known user.
 * Node and cluster commands ("drain", "cordon", "uncordon", "reload", "topology", "forget"):
 * operators only.  Single-user mode: everything is allowed (who is "").  0, or -1 with err
 * (MU_E_STATE) naming the rule: "alice may not cancel bob's job 1700000000000-0: a job's owner
 * or an operator may (access.operators)" (job_id may be NULL: then no id in the message).
 */
int access_control_check(const struct access *a,
                         const char *who,
                         const char *cmd,
                         const char *job_user,
                         const char *job_id,
                         struct mu_err *err);

#endif
