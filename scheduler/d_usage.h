/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd: the queues' fair-share usage (docs/fair-share.md), the GPU-seconds each
 * queue's gangs held, decayed by fair_share_half_life_s.  Exact, not sampled: the usage is
 * brought up to date (core's sched_usage_accrue) every time a queue's held GPUs change (a gang
 * committed or released) and at every status write, so a job of a few milliseconds counts too.
 * The same for each user within a queue (the spec's "user"; "" is one user too), which the order
 * weighs between the users of a queue.  Its one stored copy is in the queues status hash
 * (d_status.c, each queue's "usage_gpu_s" and "users"); d_usage_recover reads it back.
 */
#ifndef MUSTER_SCHEDULER_D_USAGE_H
#define MUSTER_SCHEDULER_D_USAGE_H

#include <stdint.h>

#include "core/sched.h"

/* One user of one queue (by queue name, so a reload that renumbers queues keeps it).  Owned by
 * struct d_usage from its first job until musterd exits; jobs borrow it (d_job.user). */
struct d_user {
    char queue[64];
    char name[64];
    int slot;          /* index into d_usage.users, the order's user index */
    double gpu_s;      /* decayed to d_usage.at_ms */
    int64_t held_gpus; /* GPUs committed to the user's gangs in this queue now */
};

/* By queue index; the last used one (nqueues) is for jobs whose queue is no longer configured. */
struct d_usage {
    double gpu_s[SCHED_MAX_QUEUES];      /* decayed to at_ms */
    int64_t held_gpus[SCHED_MAX_QUEUES]; /* GPUs committed to the queue's gangs now */
    uint64_t at_ms;                      /* wall; 0 = not started */
    struct mu_map *by_key;               /* "queue\x1fuser" -> struct d_user (owned) */
    struct d_user **users;               /* by slot */
    int nusers;
    int cap_users;
};

struct musterd;
struct d_job;

/* j's user in its queue, created with no usage on first sight and kept in j->user; NULL when
 * out of memory (err set). */
struct d_user *d_usage_user(struct musterd *d, struct d_job *j, struct mu_err *err);
/* Forgets every user (at musterd exit). */
void d_usage_free(struct musterd *d);

/* Brings every queue's usage up to now_ms (wall). */
void d_usage_accrue(struct musterd *d, uint64_t now_ms);
/* j's queue now holds tasks more tasks' GPUs (fewer when negative): accrued up to now first. */
void d_usage_hold(struct musterd *d, struct d_job *j, int tasks);
/* Queue q's part of all queues' usage, 0..1. */
double d_usage_share(const struct musterd *d, int q);
/* Held GPUs of every user recounted from the jobs (after a reload, as the queues' are). */
void d_usage_recount_users(struct musterd *d);
/* After a restart: each configured queue's stored usage, decayed to now.  0 or -1 with err. */
int d_usage_recover(struct musterd *d, struct mu_err *err);

#endif
