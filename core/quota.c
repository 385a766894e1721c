/* SPDX-License-Identifier: MIT */
/*
 * Queue quotas, cohorts and borrowing (issue #11, docs/quotas.md), with Kueue's meaning: a queue
 * owns a nominal quota of GPUs per capacity type and may always use it; the queues of a cohort
 * lend each other the part of their quota they do not use, each lending at most lend_limit and
 * borrowing at most borrow_limit.  A gang that starts beyond its queue's nominal quota runs on
 * borrowed quota, and the owner may take that back (reclaim) by preemption.
 *
 * The cohort's shared pool, per capacity type: each member puts in its lendable part
 * (min(nominal, lend_limit)) and keeps the rest (guaranteed = nominal - lendable) to itself.  A
 * member's use beyond its guaranteed part is drawn from the pool, so a start is admitted when
 *
 *     used + gpus <= nominal                                   (within quota), or
 *     used + gpus - nominal <= borrow_limit  and
 *     Σ over members of max(0, used' - guaranteed) <= Σ lendable     (borrowing)
 *
 * A queue without a quota is not limited (best effort, as before quotas).  Pure: the caller
 * counts what each queue uses; O(members) per question.
 */

#include <stdio.h>
#include <string.h>

#include "core/sched.h"

#include "common/mu_banned.h"

static const char *const cap_names[] = { "spot", "on-demand" };

static int lendable(const struct sched_quota_queue *q, int cap)
{
    int n = q->nominal[cap];
    return q->lend_limit >= 0 && q->lend_limit < n ? q->lend_limit : n;
}

static int over(int used, int mark)
{
    return used > mark ? used - mark : 0;
}

/* The cohort pool of capacity cap: *cap_out what its members lend, and what they draw now. */
static int pool_drawn(const struct sched_quota_queue *qs, int nq, int cohort, int cap, int *cap_out)
{
    int drawn = 0;
    *cap_out = 0;
    for (int i = 0; i < nq; i++) {
        if (!qs[i].limited || qs[i].cohort != cohort)
            continue;
        *cap_out += lendable(&qs[i], cap);
        drawn += over(qs[i].used[cap], qs[i].nominal[cap] - lendable(&qs[i], cap));
    }
    return drawn;
}

int sched_quota_lendable(const struct sched_quota_queue *qs, int nq, int q, int cap)
{
    const struct sched_quota_queue *me = &qs[q];
    int pool;
    int drawn;
    int room;
    int own; /* q's own lendable part it does not use: its quota, not a loan */

    if (!me->limited || me->cohort < 0)
        return 0;
    drawn = pool_drawn(qs, nq, me->cohort, cap, &pool);
    /* What the others lend and nobody draws. */
    own = lendable(me, cap) - over(me->used[cap], me->nominal[cap] - lendable(me, cap));
    room = pool - drawn - (own > 0 ? own : 0);
    return room > 0 ? room : 0;
}

int sched_quota_lent(const struct sched_quota_queue *qs, int nq, int q, int cap)
{
    int borrowed = 0;

    if (!qs[q].limited || qs[q].cohort < 0)
        return 0;
    for (int i = 0; i < nq; i++) {
        if (qs[i].limited && qs[i].cohort == qs[q].cohort)
            borrowed += over(qs[i].used[cap], qs[i].nominal[cap]);
    }
    /* The lenders' idle lendable parts cover it in queue order. */
    for (int i = 0; i < nq && borrowed > 0; i++) {
        int idle;
        int lent;
        if (!qs[i].limited || qs[i].cohort != qs[q].cohort)
            continue;
        idle = lendable(&qs[i], cap)
               - over(qs[i].used[cap], qs[i].nominal[cap] - lendable(&qs[i], cap));
        lent = idle < 0 ? 0 : idle < borrowed ? idle : borrowed;
        if (i == q)
            return lent;
        borrowed -= lent;
    }
    return 0;
}

enum sched_quota_fit sched_quota_admits(
    const struct sched_quota_queue *qs, int nq, int q, int cap, int gpus)
{
    const struct sched_quota_queue *me;
    int after;
    int pool;
    int drawn;
    int guaranteed;

    if (q < 0 || q >= nq || !qs[q].limited)
        return SCHED_QUOTA_WITHIN;
    me = &qs[q];
    after = me->used[cap] + gpus;
    if (after <= me->nominal[cap])
        return SCHED_QUOTA_WITHIN;
    if (me->cohort < 0)
        return SCHED_QUOTA_NO;
    if (me->borrow_limit >= 0 && after - me->nominal[cap] > me->borrow_limit)
        return SCHED_QUOTA_NO;
    drawn = pool_drawn(qs, nq, me->cohort, cap, &pool);
    guaranteed = me->nominal[cap] - lendable(me, cap);
    drawn += over(after, guaranteed) - over(me->used[cap], guaranteed);
    return drawn <= pool ? SCHED_QUOTA_BORROWS : SCHED_QUOTA_NO;
}

int sched_quota_filter(const struct sched_quota_queue *qs,
                       int nq,
                       int q,
                       const struct sched_request *r,
                       struct sched_request *out)
{
    int gpus = r->tasks * r->gpus_per_task;
    *out = *r;
    out->ncapacity = 0;
    for (int i = 0; i < r->ncapacity; i++) {
        if (sched_quota_admits(qs, nq, q, (int)r->capacity[i], gpus) != SCHED_QUOTA_NO)
            out->capacity[out->ncapacity++] = r->capacity[i];
    }
    return out->ncapacity;
}

void sched_quota_charge(struct sched_quota_queue *qs, int nq, int q, int cap, int gpus)
{
    if (q >= 0 && q < nq && cap >= 0 && cap < 2)
        qs[q].used[cap] += gpus;
}

void sched_quota_reason(const struct sched_quota_queue *qs,
                        int nq,
                        int q,
                        const struct sched_request *r,
                        char *out,
                        size_t size)
{
    const struct sched_quota_queue *me = &qs[q];
    size_t len;

    (void)snprintf(out, size, "queue %s at quota (", me->name ? me->name : "?");
    for (int i = 0; i < r->ncapacity; i++) {
        int cap = (int)r->capacity[i];
        len = strlen(out);
        (void)snprintf(out + len, size - len, "%s%d/%d %s GPUs", i ? ", " : "", me->used[cap],
                       me->nominal[cap], cap_names[cap]);
    }
    len = strlen(out);
    if (me->cohort < 0) {
        (void)snprintf(out + len, size - len, ")");
        return;
    }
    (void)snprintf(out + len, size - len, "); cohort %s has ",
                   me->cohort_name ? me->cohort_name : "?");
    for (int i = 0; i < r->ncapacity; i++) {
        int cap = (int)r->capacity[i];
        len = strlen(out);
        (void)snprintf(out + len, size - len, "%s%d idle %s", i ? ", " : "",
                       sched_quota_lendable(qs, nq, q, cap), cap_names[cap]);
    }
    len = strlen(out);
    if (me->borrow_limit >= 0)
        (void)snprintf(out + len, size - len, " GPUs to lend (borrow limit %d)", me->borrow_limit);
    else
        (void)snprintf(out + len, size - len, " GPUs to lend");
}

bool sched_quota_within_nominal(const struct sched_quota_queue *qs,
                                int nq,
                                int q,
                                const struct sched_request *r)
{
    int gpus = r->tasks * r->gpus_per_task;
    if (q < 0 || q >= nq || !qs[q].limited)
        return false;
    for (int i = 0; i < r->ncapacity; i++) {
        int cap = (int)r->capacity[i];
        if (qs[q].used[cap] + gpus <= qs[q].nominal[cap])
            return true;
    }
    return false;
}

enum sched_quota_victim sched_quota_victim_kind(const struct sched_quota_queue *qs,
                                                int nq,
                                                int preemptor_q,
                                                bool preemptor_within_nominal,
                                                int victim_q,
                                                bool victim_borrowed)
{
    const struct sched_quota_queue *v;
    if (victim_q == preemptor_q || victim_q < 0 || victim_q >= nq || !qs[victim_q].limited)
        return SCHED_QUOTA_BY_PRIORITY;
    v = &qs[victim_q];
    if (!victim_borrowed)
        return SCHED_QUOTA_PROTECTED; /* another queue's work within its own quota */
    if (preemptor_within_nominal && preemptor_q >= 0 && preemptor_q < nq && v->cohort >= 0
        && qs[preemptor_q].cohort == v->cohort)
        return SCHED_QUOTA_RECLAIM;
    return SCHED_QUOTA_BY_PRIORITY;
}

void sched_quota_queues_init(struct sched_quota_queue *qs,
                             const struct sched_quota_config *cfg,
                             int n)
{
    for (int q = 0; q <= n && q < SCHED_MAX_QUEUES; q++) {
        struct sched_quota_queue *s = &qs[q];
        const struct sched_quota_config *c = q < n ? &cfg[q] : NULL;
        memset(s, 0, sizeof(*s));
        s->cohort = -1;
        if (!c || !c->has_quota)
            continue;
        s->name = c->name;
        s->limited = true;
        s->nominal[SCHED_SPOT] = c->quota[SCHED_SPOT];
        s->nominal[SCHED_ON_DEMAND] = c->quota[SCHED_ON_DEMAND];
        s->borrow_limit = c->borrow_limit;
        s->lend_limit = c->lend_limit;
        for (int o = 0; o <= q && c->cohort && c->cohort[0]; o++) {
            if (cfg[o].has_quota && cfg[o].cohort && strcmp(cfg[o].cohort, c->cohort) == 0) {
                s->cohort = o;
                s->cohort_name = c->cohort;
                break;
            }
        }
    }
}

int sched_quota_preempt_prepare(const struct sched_quota_queue *qs,
                                int nq,
                                int q,
                                const struct sched_request *r,
                                struct sched_request *out,
                                struct sched_victim *victims,
                                int nvictims)
{
    bool within;

    if (sched_quota_filter(qs, nq, q, r, out) == 0)
        return 0;
    within = sched_quota_within_nominal(qs, nq, q, out);
    for (int i = 0; i < nvictims; i++) {
        struct sched_victim *v = &victims[i];
        enum sched_quota_victim kind =
            sched_quota_victim_kind(qs, nq, q, within, v->queue, v->borrowed);
        v->reclaimable = kind == SCHED_QUOTA_RECLAIM;
        if (kind == SCHED_QUOTA_PROTECTED)
            v->preemptible = false;
    }
    return out->ncapacity;
}
