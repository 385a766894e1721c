/* SPDX-License-Identifier: MIT */
/*
 * Fair share between queues (issue #11, docs/fair-share.md): the order in which the pass sees the
 * pending jobs.  Each queue has a weight and a usage in GPU-seconds that halves every half-life,
 * so last week's big run weighs less than this morning's.  A queue's standing is
 *
 *     (usage + committed + charged) / weight
 *
 * where committed is what its running gangs are still expected to use and charged is what the
 * jobs already taken in this order are expected to use.  The order repeatedly takes the next job
 * of the queue that stands lowest (ties: the queue listed first), then charges it; so a team that
 * floods the queue with 1,000 jobs gets its turn in proportion to its weight, not 1,000 turns
 * first.  Within a queue: priority, then a gang requeued by a spot interruption; among jobs equal
 * in both, the same rule one level down (Slurm's fair-share tree): the next job of the user
 * whose usage + committed + charged in this queue is lowest, every user of a queue weighing the
 * same; then age.  So one user's 500 jobs do not keep a colleague's one job waiting either.
 *
 * Pure, like the rest of the core: usage and time come in as numbers.  O(n log n + n log q +
 * n log u) for u users in a band; without users (musterd always has them) the last term is 0.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/sched.h"
#include "core/sort.h"

#include "common/mu_banned.h"

#define LN2 0.69314718055994530942 /* ln 2 (M_LN2 is not in C11) */

/* A job's sort key within its queue, copied so that sorting reads no job (and the core has no
 * global); 32 bytes, a cache line holds two. */
struct order_key {
    int64_t rank; /* priority, then requeued by a spot interruption: larger first */
    uint64_t submitted_ms;
    const char *id;
    int job;  /* index into the caller's jobs */
    int user; /* index into the caller's users; 0 without users */
};

/* Queues, or the users of one band, in a binary min-heap by standing, then tie (a queue's index;
 * a user's next job's submission time), then index. */
struct heap_item {
    double standing;
    uint64_t tie;
    int index; /* a queue, or a run of one user's jobs in the band */
};

static bool item_less(const struct heap_item *a, const struct heap_item *b)
{
    if (a->standing != b->standing)
        return a->standing < b->standing;
    if (a->tie != b->tie)
        return a->tie < b->tie;
    return a->index < b->index;
}

struct sched_order {
    struct order_key *keys; /* sorted by queue, then the order within the queue */
    struct order_key *band; /* scratch: one band in its users' fair order */
    struct heap_item *heap; /* scratch: the users of one band */
    double *charged;        /* by user: what the jobs taken so far are expected to use */
    int cap;                /* of keys, band and heap */
    int cap_users;          /* of charged */
};

double sched_usage_decay(double usage, double dt_s, double half_life_s)
{
    if (dt_s <= 0 || half_life_s <= 0 || usage <= 0)
        return usage > 0 ? usage : 0;
    return usage * exp2(-dt_s / half_life_s);
}

double sched_usage_accrue(double usage, double gpus, double dt_s, double half_life_s)
{
    double decayed = sched_usage_decay(usage, dt_s, half_life_s);
    if (dt_s <= 0 || gpus <= 0)
        return decayed;
    if (half_life_s <= 0)
        return decayed + gpus * dt_s;
    return decayed + gpus * half_life_s / LN2 * (1 - exp2(-dt_s / half_life_s));
}

double sched_share_gpu_s(int tasks, int gpus_per_task, int64_t dt_s)
{
    return dt_s > 0 ? (double)tasks * gpus_per_task * (double)dt_s : 0;
}

/* A weight <= 0 counts as 1 (sched.h). */
static double weight_of(const struct sched_share_queue *q)
{
    return q->weight > 0 ? q->weight : 1;
}

double sched_share_standing(const struct sched_share_queue *q)
{
    return (q->usage + q->committed) / weight_of(q);
}

struct sched_order *sched_order_new(void)
{
    return calloc(1, sizeof(struct sched_order));
}

void sched_order_free(struct sched_order *o)
{
    if (!o)
        return;
    free(o->keys);
    free(o->band);
    free(o->heap);
    free(o->charged);
    free(o);
}

static inline int within_queue_cmp(const struct order_key *x, const struct order_key *y)
{
    if (x->rank != y->rank)
        return x->rank > y->rank ? -1 : 1;
    if (x->user != y->user)
        return x->user < y->user ? -1 : 1;
    if (x->submitted_ms != y->submitted_ms)
        return x->submitted_ms < y->submitted_ms ? -1 : 1;
    if (x->id && y->id) {
        int c = strcmp(x->id, y->id);
        if (c != 0)
            return c;
    }
    return x->job < y->job ? -1 : x->job > y->job;
}

static inline bool key_less(const void *ctx, const struct order_key *x, const struct order_key *y)
{
    (void)ctx;
    return within_queue_cmp(x, y) < 0;
}

/* keys_sort(keys, tmp, n, NULL): keys[0..n) by within_queue_cmp, through tmp[0..n) (sort.h). */
SCHED_SORT_DEFINE(keys_sort, struct order_key, const void *, key_less)

/* Priority, then a spot requeue first, as one key (priorities are far inside +-2^61). */
static int64_t rank_of(const struct sched_order_job *j)
{
    int64_t p = j->priority;
    const int64_t lim = INT64_C(1) << 61;
    p = p > lim ? lim : p < -lim ? -lim : p;
    return p * 2 + (j->head_of_queue ? 1 : 0);
}

static void heap_down(struct heap_item *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1;
        int m = i;
        struct heap_item t;
        if (l < n && item_less(&h[l], &h[m]))
            m = l;
        if (l + 1 < n && item_less(&h[l + 1], &h[m]))
            m = l + 1;
        if (m == i)
            return;
        t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static int scratch_reserve(struct sched_order *o, int n, int nusers, struct mu_err *err)
{
    if (n > o->cap) {
        struct order_key *keys = realloc(o->keys, (size_t)n * sizeof(*keys));
        struct order_key *band = keys ? realloc(o->band, (size_t)n * sizeof(*band)) : NULL;
        struct heap_item *heap = band ? realloc(o->heap, (size_t)n * sizeof(*heap)) : NULL;
        if (keys)
            o->keys = keys;
        if (band)
            o->band = band;
        if (!heap)
            return mu_errf(err, MU_E_NOMEM, "order: out of memory for %d jobs", n);
        o->heap = heap;
        o->cap = n;
    }
    if (nusers > 0 && nusers > o->cap_users) {
        double *charged = realloc(o->charged, (size_t)nusers * sizeof(*charged));
        if (!charged)
            return mu_errf(err, MU_E_NOMEM, "order: out of memory for %d users", nusers);
        o->charged = charged;
        o->cap_users = nusers;
    }
    return 0;
}

/* Buckets the jobs by queue into o->keys (a counting sort, start[q]..start[q+1]), then sorts
 * each queue's alone: n log(n/q) comparisons instead of n log n.  0, or -1 with err. */
static int bucket_sort(struct sched_order *o,
                       const struct sched_order_job *jobs,
                       int n,
                       int nqueues,
                       int nusers,
                       int *start,
                       struct mu_err *err)
{
    int next[SCHED_MAX_QUEUES];

    memset(start, 0, (size_t)(nqueues + 1) * sizeof(*start));
    for (int i = 0; i < n; i++) {
        if (jobs[i].queue < 0 || jobs[i].queue >= nqueues)
            return mu_errf(err, MU_E_INVAL, "order: job %d names queue %d of %d", i, jobs[i].queue,
                           nqueues);
        if (nusers > 0 && (jobs[i].user < 0 || jobs[i].user >= nusers))
            return mu_errf(err, MU_E_INVAL, "order: job %d names user %d of %d", i, jobs[i].user,
                           nusers);
        start[jobs[i].queue + 1]++;
    }
    for (int q = 0; q < nqueues; q++) {
        start[q + 1] += start[q];
        next[q] = start[q];
    }
    for (int i = 0; i < n; i++) {
        const struct sched_order_job *j = &jobs[i];
        o->keys[next[j->queue]++] = (struct order_key){
            rank_of(j), j->submitted_ms, j->id, i, nusers > 0 ? j->user : 0,
        };
    }
    for (int q = 0; q < nqueues; q++) {
        if (start[q + 1] - start[q] > 1) /* (keys is NULL while no job was ever ordered) */
            keys_sort(&o->keys[start[q]], o->band, start[q + 1] - start[q], NULL);
    }
    return 0;
}

static double cost_of(const struct sched_order_job *j)
{
    return j->cost > 0 ? j->cost : 0;
}

/* keys[lo..hi): one band (one rank) sorted by user, then age.  Reorders it so that the next job
 * is always the next of the user standing lowest, charging each job taken to its user. */
static void band_interleave(struct sched_order *o,
                            const struct sched_order_job *jobs,
                            int lo,
                            int hi,
                            const struct sched_share_user *users)
{
    struct order_key *k = o->keys;
    struct heap_item *heap = o->heap;
    int nheap = 0;
    int out = 0;

    /* One heap item per user's run; a run's next job is keys[item.index]. */
    for (int i = lo; i < hi; i++) {
        if (i == lo || k[i].user != k[i - 1].user) {
            const struct sched_share_user *u = &users[k[i].user];
            heap[nheap++] = (struct heap_item){ u->usage + u->committed + o->charged[k[i].user],
                                                k[i].submitted_ms, i };
        }
    }
    for (int i = nheap / 2 - 1; i >= 0; i--)
        heap_down(heap, nheap, i);
    while (nheap > 0) {
        int i = heap[0].index;
        int user = k[i].user;
        o->band[out++] = k[i];
        o->charged[user] += cost_of(&jobs[k[i].job]);
        if (i + 1 < hi && k[i + 1].user == user) {
            heap[0] =
                (struct heap_item){ users[user].usage + users[user].committed + o->charged[user],
                                    k[i + 1].submitted_ms, i + 1 };
        } else {
            heap[0] = heap[--nheap];
        }
        heap_down(heap, nheap, 0);
    }
    memcpy(&k[lo], o->band, (size_t)(hi - lo) * sizeof(*k));
}

/* Fair share between the users of each queue (its keys start[q]..start[q+1]): every band of one
 * rank that has jobs of more than one user is interleaved; a band of one user is only charged to
 * it. */
static void users_interleave(struct sched_order *o,
                             const struct sched_order_job *jobs,
                             const int *start,
                             int nqueues,
                             const struct sched_share_user *users,
                             int nusers)
{
    const struct order_key *k = o->keys;

    memset(o->charged, 0, (size_t)nusers * sizeof(*o->charged));
    for (int q = 0; q < nqueues; q++) {
        for (int lo = start[q], hi; lo < start[q + 1]; lo = hi) {
            for (hi = lo + 1; hi < start[q + 1] && k[hi].rank == k[lo].rank; hi++)
                ;
            if (k[hi - 1].user != k[lo].user) {
                band_interleave(o, jobs, lo, hi, users);
            } else {
                for (int i = lo; i < hi; i++)
                    o->charged[k[i].user] += cost_of(&jobs[k[i].job]);
            }
        }
    }
}

int sched_order_jobs(struct sched_order *o,
                     const struct sched_order_job *jobs,
                     int n,
                     const struct sched_share_queue *queues,
                     int nqueues,
                     const struct sched_share_user *users,
                     int nusers,
                     int *order,
                     struct mu_err *err)
{
    struct heap_item heap[SCHED_MAX_QUEUES];
    int start[SCHED_MAX_QUEUES + 1];
    double charged[SCHED_MAX_QUEUES];
    int next[SCHED_MAX_QUEUES];
    int nheap = 0;
    int k = 0;

    if (n < 0 || nqueues < 1 || nqueues > SCHED_MAX_QUEUES)
        return mu_errf(err, MU_E_INVAL, "order: %d queues, want 1..%d", nqueues, SCHED_MAX_QUEUES);
    if (nusers < 0 || (nusers > 0 && !users))
        return mu_errf(err, MU_E_INVAL, "order: %d users without a table", nusers);
    if (scratch_reserve(o, n, nusers, err) != 0
        || bucket_sort(o, jobs, n, nqueues, nusers, start, err) != 0)
        return -1;
    if (nusers > 0)
        users_interleave(o, jobs, start, nqueues, users, nusers);

    for (int q = 0; q < nqueues; q++) {
        charged[q] = 0;
        next[q] = start[q];
        if (start[q] < start[q + 1])
            heap[nheap++] = (struct heap_item){ sched_share_standing(&queues[q]), (uint64_t)q, q };
    }
    for (int i = nheap / 2 - 1; i >= 0; i--)
        heap_down(heap, nheap, i);
    while (nheap > 0) {
        int q = heap[0].index;
        int job = o->keys[next[q]++].job;
        order[k++] = job;
        charged[q] += cost_of(&jobs[job]);
        if (next[q] < start[q + 1]) {
            heap[0].standing =
                sched_share_standing(&queues[q]) + charged[q] / weight_of(&queues[q]);
        } else {
            heap[0] = heap[--nheap];
        }
        heap_down(heap, nheap, 0);
    }
    return 0;
}
