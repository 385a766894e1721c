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
 * first.  Within a queue: priority, then a gang requeued by a spot interruption, then age.
 *
 * Pure, like the rest of the core: usage and time come in as numbers.  O(n log n + n log q).
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/sched.h"

#include "common/mu_banned.h"

#define LN2 0.69314718055994530942 /* ln 2 (M_LN2 is not in C11) */

/* A job's sort key within its queue, copied so that qsort needs no context (and the core no
 * global); 32 bytes, as glibc's qsort sorts larger elements indirectly. */
struct order_key {
    int64_t priority;
    uint64_t submitted_ms;
    const char *id;
    int job; /* index into the caller's jobs */
    bool head_of_queue;
};

struct sched_order {
    struct order_key *keys; /* sorted by queue, then the order within the queue */
    int cap;
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
    free(o);
}

static int within_queue_cmp(const void *a, const void *b)
{
    const struct order_key *x = a;
    const struct order_key *y = b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    if (x->head_of_queue != y->head_of_queue)
        return x->head_of_queue ? -1 : 1;
    if (x->submitted_ms != y->submitted_ms)
        return x->submitted_ms < y->submitted_ms ? -1 : 1;
    if (x->id && y->id) {
        int c = strcmp(x->id, y->id);
        if (c != 0)
            return c;
    }
    return x->job < y->job ? -1 : x->job > y->job;
}

/* The queues in a binary min-heap by standing (then index). */
struct heap_item {
    double standing;
    int queue;
};

static bool item_less(const struct heap_item *a, const struct heap_item *b)
{
    if (a->standing != b->standing)
        return a->standing < b->standing;
    return a->queue < b->queue;
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

int sched_order_jobs(struct sched_order *o,
                     const struct sched_order_job *jobs,
                     int n,
                     const struct sched_share_queue *queues,
                     int nqueues,
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
    if (n > o->cap) {
        struct order_key *keys = realloc(o->keys, (size_t)n * sizeof(*keys));
        if (!keys)
            return mu_errf(err, MU_E_NOMEM, "order: out of memory for %d jobs", n);
        o->keys = keys;
        o->cap = n;
    }
    /* Bucket the jobs by queue (a counting sort), then sort each queue's alone: n log(n/q)
     * comparisons instead of n log n. */
    memset(start, 0, sizeof(start));
    for (int i = 0; i < n; i++) {
        if (jobs[i].queue < 0 || jobs[i].queue >= nqueues)
            return mu_errf(err, MU_E_INVAL, "order: job %d names queue %d of %d", i, jobs[i].queue,
                           nqueues);
        start[jobs[i].queue + 1]++;
    }
    for (int q = 0; q < nqueues; q++) {
        start[q + 1] += start[q];
        next[q] = start[q];
    }
    for (int i = 0; i < n; i++) {
        const struct sched_order_job *j = &jobs[i];
        o->keys[next[j->queue]++] =
            (struct order_key){ j->priority, j->submitted_ms, j->id, i, j->head_of_queue };
    }
    for (int q = 0; q < nqueues; q++) {
        if (start[q + 1] - start[q] > 1) /* (keys is NULL while no job was ever ordered) */
            qsort(&o->keys[start[q]], (size_t)(start[q + 1] - start[q]), sizeof(*o->keys),
                  within_queue_cmp);
    }

    for (int q = 0; q < nqueues; q++) {
        charged[q] = 0;
        next[q] = start[q];
        if (start[q] < start[q + 1])
            heap[nheap++] = (struct heap_item){ sched_share_standing(&queues[q]), q };
    }
    for (int i = nheap / 2 - 1; i >= 0; i--)
        heap_down(heap, nheap, i);
    while (nheap > 0) {
        int q = heap[0].queue;
        int job = o->keys[next[q]++].job;
        const struct sched_order_job *j = &jobs[job];
        order[k++] = job;
        charged[q] += j->cost > 0 ? j->cost : 0;
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
