/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd: who may do what (issue #46, docs/security.md).  The rules and their
 * decisions are the access module's (access/access.h, pure); here they meet what musterd knows:
 * who wrote an entry (the stream it came from), whose job a command names, how many jobs a user
 * has waiting and how many GPUs running.  A refusal is a sentence that names the rule: a
 * REJECTED job, or the verdict a command's asker reads on reply:<entry id>.
 */
#ifndef MUSTER_SCHEDULER_D_ACCESS_H
#define MUSTER_SCHEDULER_D_ACCESS_H

#include <stdbool.h>
#include <stddef.h>

#include "access/access.h"
#include "queue/queue.h"

struct musterd;
struct d_job;

/* The rules of the config file at path (NULL: no file, single-user mode), or NULL with err. */
struct access *d_access_load(const char *path, struct mu_err *err);
/* Puts a in force (owned from now; the old rules are freed): the intake reads the known users'
 * own streams.  0, or -1 with err (no memory; a is freed, the old rules stay). */
int d_access_set(struct musterd *d, struct access *a, struct mu_err *err);
/* Whether tasks run as their job's user (proven identity), else as the worker's own user. */
bool d_access_proven(const struct musterd *d);

/* Submission e, parsed into j: 0 when it may be queued (j->spec.user is the user it belongs to,
 * j->owner who wrote it), or -1 with why (size >= 256): who may not, by which rule, including a
 * user's max_pending_jobs. */
int d_access_submit(
    struct musterd *d, const struct queue_entry *e, struct d_job *j, char *why, size_t size);
/* A new intake batch: the pending counts are recounted at the next submission that needs them. */
void d_access_batch_begin(struct musterd *d);

/* Control entry e (its job j, NULL when none is active or not a job command: a job command then
 * names nothing to guard, and an early cancel is judged at intake): 0 when its writer may send
 * it, else -1 with why. */
int d_access_control(
    struct musterd *d, const struct queue_entry *e, const struct d_job *j, char *why, size_t size);
/* Tells the writer of e, when it came on their own stream, what became of it: applied (error
 * NULL) or refused (error).  why/forget answer on their own keys; every other command here. */
void d_access_verdict(struct musterd *d, const struct queue_entry *e, const char *error);

/* The pass (d_pass.c): each user's running GPUs as of now, counted once per pass when some user
 * has a max_running_gpus; d_access_over_cap says whether j's start would take its user past it
 * (with the reason), d_access_started counts a start of this pass. */
void d_access_pass_begin(struct musterd *d);
bool d_access_over_cap(struct musterd *d, const struct d_job *j, char *reason, size_t size);
void d_access_started(struct musterd *d, const struct d_job *j);
/* Frees the rules and counts (at exit). */
void d_access_free(struct musterd *d);

#endif
