/* SPDX-License-Identifier: MIT */
/*
 * Quotas inside a pass (core/pass.c, docs/quotas.md): a job's request as its queue's quota admits
 * it, cut to the capacity types with room, and the charge of each start.  Within a pass use only
 * grows, so per queue a memo keeps the fewest GPUs refused and, until the next start anywhere
 * (which may use what a cohort lends), the most admitted; a queue of thousands of jobs costs a few
 * quota checks.
 */
#include "core/internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static int caps_key(const struct sched_request *r)
{
    return r->ncapacity * 4 + (int)r->capacity[0] * 2
           + (r->ncapacity > 1 ? (int)r->capacity[1] : 0);
}

/* Whether queue q's quota admits gpus more GPUs of capacity cap, through m.  Within a pass use
 * only grows, so a size refused stays refused (and any larger size), and a size admitted holds
 * for any smaller size until the next start anywhere (which may use what the cohort lends). */
static bool quota_admits_memo(struct sched_cluster *c,
                              struct sched_quota_memo *m,
                              const struct sched_quota_queue *quota,
                              int nquota,
                              int q,
                              int cap,
                              int gpus)
{
    bool ok;
    if (m->admit_gen == c->quota_gen && gpus <= m->admit_max[cap])
        return true;
    if (gpus >= m->refuse_min[cap])
        return false;
    ok = sched_quota_admits(quota, nquota, q, cap, gpus) != SCHED_QUOTA_NO;
    if (!ok) {
        m->refuse_min[cap] = gpus;
    } else {
        if (m->admit_gen != c->quota_gen) {
            m->admit_gen = c->quota_gen;
            m->admit_max[0] = m->admit_max[1] = -1;
        }
        m->admit_max[cap] = gpus;
    }
    return ok;
}

/* Job i's request as its queue's quota admits it: *r unchanged, or cut to the capacity types
 * with room (in c->quota_reqs[i]).  False when there is none: d says so (the reason has no
 * size in it, so one text per capacity list and queue serves the pass). */
bool sched_pass_quota_cut(struct sched_cluster *c,
                          const struct sched_quota_queue *quota,
                          int nquota,
                          const struct sched_pass_job *j,
                          int i,
                          const struct sched_request **r,
                          struct sched_decision *d)
{
    struct sched_request *cut = &c->quota_reqs[i];
    struct sched_quota_memo *m;
    int gpus = (*r)->tasks * (*r)->gpus_per_task;
    int n = 0;
    enum sched_capacity caps[2];
    if (!quota || j->queue < 0 || j->queue >= nquota)
        return true;
    m = &c->quota_memo[j->queue];
    if (m->pass != c->pass_id) {
        *m = (struct sched_quota_memo){ .pass = c->pass_id,
                                        .admit_gen = c->quota_gen,
                                        .admit_max = { -1, -1 },
                                        .refuse_min = { INT_MAX, INT_MAX },
                                        .reason_caps = -1 };
    }
    for (int k = 0; k < (*r)->ncapacity && k < 2; k++) {
        if (quota_admits_memo(c, m, quota, nquota, j->queue, (int)(*r)->capacity[k], gpus))
            caps[n++] = (*r)->capacity[k];
    }
    if (n == (*r)->ncapacity)
        return true;
    if (n > 0) {
        *cut = **r;
        cut->ncapacity = n;
        memcpy(cut->capacity, caps, (size_t)n * sizeof(caps[0]));
        *r = cut;
        return true;
    }
    d->over_quota = true;
    if (m->reason_caps != caps_key(*r)) {
        sched_quota_reason(quota, nquota, j->queue, *r, m->reason, sizeof(m->reason));
        m->reason_caps = caps_key(*r);
    }
    mu_strlcpy(d->reason, m->reason, sizeof(d->reason));
    return false;
}

/* Charges a started job to its queue's quota in the capacity type it landed in. */
void sched_pass_quota_started(struct sched_cluster *c,
                              struct sched_quota_queue *quota,
                              int nquota,
                              const struct sched_pass_job *j,
                              const struct sched_request *r,
                              struct sched_decision *d)
{
    int cap;
    int gpus = r->tasks * r->gpus_per_task;
    if (!quota || j->queue < 0 || j->queue >= nquota || r->tasks < 1)
        return;
    cap = (int)c->pools[c->nodes[j->slots[0].node].pool].capacity;
    d->borrowed = sched_quota_admits(quota, nquota, j->queue, cap, gpus) == SCHED_QUOTA_BORROWS;
    sched_quota_charge(quota, nquota, j->queue, cap, gpus);
    c->quota_memo[j->queue].pass = 0; /* its use grew: its reasons' numbers changed */
    c->quota_gen++;                   /* and what its cohort can lend may have shrunk */
}

int sched_pass_quota_scratch(struct sched_cluster *c, int npending, int nquota, struct mu_err *err)
{
    struct sched_request *p;
    if (nquota > c->cap_quota_memo) {
        struct sched_quota_memo *m = realloc(c->quota_memo, (size_t)nquota * sizeof(*m));
        if (!m)
            return mu_errf(err, MU_E_NOMEM, "scheduling pass: out of memory");
        c->quota_memo = m;
        c->cap_quota_memo = nquota;
    }
    for (int q = 0; q < nquota; q++)
        c->quota_memo[q].pass = 0;
    if (npending <= c->cap_quota_reqs)
        return 0;
    p = realloc(c->quota_reqs, (size_t)npending * sizeof(*p));
    if (!p)
        return mu_errf(err, MU_E_NOMEM, "scheduling pass: out of memory");
    c->quota_reqs = p;
    c->cap_quota_reqs = npending;
    return 0;
}
