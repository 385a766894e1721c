/* SPDX-License-Identifier: MIT */
/*
 * The fair-share order kept across passes (issue #15, core/order.c) against the order as it was
 * computed before, eagerly, every pass: a copy of that implementation is the oracle here.  Random
 * job sets (ties in every field, weights <= 0, costs <= 0, with and without users and ids) must
 * come out job for job as the reference orders them; jobs added and removed over rounds, and an
 * iteration stopped after a few jobs, must give sched_order_jobs's order of the same set; and the
 * errors.  test_share.c has the policy's own cases.  Deterministic: a fixed xorshift seed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/mu.h"
#include "core/sched.h"

#include "common/mu_banned.h"

#define HOUR 3600.0

/* ---- the pre-change reference: sched_order_jobs as it was before the order was kept across
 * passes (core/share.c before issue #15), the oracle of the tests below.  The same policy, eager:
 * every job sorted, every band interleaved, every pass.  Sorted with qsort instead of sort.h's
 * merge sort: the key is a total order when ids are all set or all NULL, as here, so any sort
 * gives the same result. ---- */

struct ref_key {
    int64_t rank;
    uint64_t submitted_ms;
    const char *id;
    int job;
    int user;
};

struct ref_item {
    double standing;
    uint64_t tie;
    int index;
};

static bool ref_item_less(const struct ref_item *a, const struct ref_item *b)
{
    if (a->standing != b->standing)
        return a->standing < b->standing;
    if (a->tie != b->tie)
        return a->tie < b->tie;
    return a->index < b->index;
}

static void ref_heap_down(struct ref_item *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1;
        int m = i;
        struct ref_item t;
        if (l < n && ref_item_less(&h[l], &h[m]))
            m = l;
        if (l + 1 < n && ref_item_less(&h[l + 1], &h[m]))
            m = l + 1;
        if (m == i)
            return;
        t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static int ref_key_cmp(const void *a, const void *b)
{
    const struct ref_key *x = a;
    const struct ref_key *y = b;
    if (x->rank != y->rank)
        return x->rank > y->rank ? -1 : 1;
    if (x->user != y->user)
        return x->user < y->user ? -1 : 1;
    if (x->submitted_ms != y->submitted_ms)
        return x->submitted_ms < y->submitted_ms ? -1 : 1;
    if (x->id && y->id) { /* the shorter first, then bytes (stream IDs by sequence number) */
        size_t lx = strlen(x->id);
        size_t ly = strlen(y->id);
        int c = lx != ly ? (lx < ly ? -1 : 1) : strcmp(x->id, y->id);
        if (c != 0)
            return c;
    }
    return x->job < y->job ? -1 : x->job > y->job;
}

static int64_t ref_rank(const struct sched_order_job *j)
{
    int64_t p = j->priority;
    const int64_t lim = INT64_C(1) << 61;
    p = p > lim ? lim : p < -lim ? -lim : p;
    return p * 2 + (j->head_of_queue ? 1 : 0);
}

static double ref_cost(const struct sched_order_job *j)
{
    return j->cost > 0 ? j->cost : 0;
}

static double ref_weight(const struct sched_share_queue *q)
{
    return q->weight > 0 ? q->weight : 1;
}

static double ref_standing(const struct sched_share_queue *q)
{
    return (q->usage + q->committed) / ref_weight(q);
}

static void ref_band(struct ref_key *k,
                     struct ref_key *band,
                     struct ref_item *heap,
                     double *charged,
                     const struct sched_order_job *jobs,
                     int lo,
                     int hi,
                     const struct sched_share_user *users)
{
    int nheap = 0;
    int out = 0;

    for (int i = lo; i < hi; i++) {
        if (i == lo || k[i].user != k[i - 1].user) {
            const struct sched_share_user *u = &users[k[i].user];
            heap[nheap++] = (struct ref_item){ u->usage + u->committed + charged[k[i].user],
                                               k[i].submitted_ms, i };
        }
    }
    for (int i = nheap / 2 - 1; i >= 0; i--)
        ref_heap_down(heap, nheap, i);
    while (nheap > 0) {
        int i = heap[0].index;
        int user = k[i].user;
        band[out++] = k[i];
        charged[user] += ref_cost(&jobs[k[i].job]);
        if (i + 1 < hi && k[i + 1].user == user) {
            heap[0] = (struct ref_item){ users[user].usage + users[user].committed + charged[user],
                                         k[i + 1].submitted_ms, i + 1 };
        } else {
            heap[0] = heap[--nheap];
        }
        ref_heap_down(heap, nheap, 0);
    }
    memcpy(&k[lo], band, (size_t)(hi - lo) * sizeof(*k));
}

/* The reference order of jobs[0..n) into order[]; the inputs are valid (the tests' own). */
static void ref_order_jobs(const struct sched_order_job *jobs,
                           int n,
                           const struct sched_share_queue *queues,
                           int nqueues,
                           const struct sched_share_user *users,
                           int nusers,
                           int *order)
{
    struct ref_key *k = calloc((size_t)n + 1, sizeof(*k));
    struct ref_key *band = calloc((size_t)n + 1, sizeof(*band));
    struct ref_item *uheap = calloc((size_t)n + 1, sizeof(*uheap));
    double *uch = calloc((size_t)nusers + 1, sizeof(*uch));
    struct ref_item heap[SCHED_MAX_QUEUES];
    int start[SCHED_MAX_QUEUES + 1] = { 0 };
    int next[SCHED_MAX_QUEUES];
    double charged[SCHED_MAX_QUEUES];
    int nheap = 0;
    int out = 0;

    assert_true(k && band && uheap && uch);
    for (int i = 0; i < n; i++)
        start[jobs[i].queue + 1]++;
    for (int q = 0; q < nqueues; q++) {
        start[q + 1] += start[q];
        next[q] = start[q];
    }
    for (int i = 0; i < n; i++) {
        const struct sched_order_job *j = &jobs[i];
        k[next[j->queue]++] =
            (struct ref_key){ ref_rank(j), j->submitted_ms, j->id, i, nusers > 0 ? j->user : 0 };
    }
    for (int q = 0; q < nqueues; q++)
        qsort(&k[start[q]], (size_t)(start[q + 1] - start[q]), sizeof(*k), ref_key_cmp);
    if (nusers > 0) {
        for (int q = 0; q < nqueues; q++) {
            for (int lo = start[q], hi; lo < start[q + 1]; lo = hi) {
                for (hi = lo + 1; hi < start[q + 1] && k[hi].rank == k[lo].rank; hi++)
                    ;
                if (k[hi - 1].user != k[lo].user) {
                    ref_band(k, band, uheap, uch, jobs, lo, hi, users);
                } else {
                    for (int i = lo; i < hi; i++)
                        uch[k[i].user] += ref_cost(&jobs[k[i].job]);
                }
            }
        }
    }
    for (int q = 0; q < nqueues; q++) {
        charged[q] = 0;
        next[q] = start[q];
        if (start[q] < start[q + 1])
            heap[nheap++] = (struct ref_item){ ref_standing(&queues[q]), (uint64_t)q, q };
    }
    for (int i = nheap / 2 - 1; i >= 0; i--)
        ref_heap_down(heap, nheap, i);
    while (nheap > 0) {
        int q = heap[0].index;
        int job = k[next[q]++].job;
        order[out++] = job;
        charged[q] += ref_cost(&jobs[job]);
        if (next[q] < start[q + 1])
            heap[0].standing = ref_standing(&queues[q]) + charged[q] / ref_weight(&queues[q]);
        else
            heap[0] = heap[--nheap];
        ref_heap_down(heap, nheap, 0);
    }
    free(uch);
    free(uheap);
    free(band);
    free(k);
}

/* ---- random job sets ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static int rnd(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

#define RMAX 12000

/* A random world: queues with weights (some <= 0) and usages (some equal), users of one queue
 * each (disjoint indices, as musterd and muster-sim number them), and jobs with few distinct
 * priorities and submission times so that ties are common. */
struct world {
    struct sched_order_job jobs[RMAX];
    char ids[RMAX][16];
    struct sched_share_queue queues[SCHED_MAX_QUEUES];
    struct sched_share_user users[64];
    int nqueues, nusers, upq; /* upq: users per queue; nusers = nqueues * upq, or 0 */
    bool with_ids;
};

static void world_random(struct world *w, int maxq)
{
    w->nqueues = 1 + rnd(maxq);
    w->upq = 1 + rnd(4);
    w->nusers = rnd(5) == 0 ? 0 : w->nqueues * w->upq;
    w->with_ids = rnd(2) == 0;
    for (int q = 0; q < w->nqueues; q++)
        w->queues[q] = (struct sched_share_queue){ .weight = rnd(6) - 1,
                                                   .usage = rnd(3) == 0 ? 0 : rnd(4) * HOUR,
                                                   .committed = rnd(2) * HOUR };
    for (int u = 0; u < w->nusers; u++)
        w->users[u] = (struct sched_share_user){ .usage = rnd(3) * HOUR,
                                                 .committed = rnd(3) == 0 ? HOUR : 0 };
}

static void job_random(struct world *w, int i)
{
    int q = rnd(w->nqueues);
    (void)mu_snprintf(w->ids[i], sizeof(w->ids[i]), "j%d", rnd(40));
    w->jobs[i] = (struct sched_order_job){
        .queue = q,
        .user = q * w->upq + rnd(w->upq),
        .priority = rnd(3) - 1,
        .head_of_queue = rnd(8) == 0,
        .submitted_ms = (uint64_t)rnd(30),
        .id = w->with_ids ? w->ids[i] : NULL,
        .cost = rnd(5) == 0 ? 0 : (rnd(6) - 1) * HOUR,
    };
}

/* Many random job sets: the order is the reference's, job for job. */
static void test_order_matches_reference(void **state)
{
    struct world *w = calloc(1, sizeof(*w));
    struct sched_order *o = sched_order_new();
    int *got = calloc(RMAX, sizeof(*got));
    int *want = calloc(RMAX, sizeof(*want));
    struct mu_err err;
    (void)state;
    assert_true(w && o && got && want);
    for (int trial = 0; trial < 400; trial++) {
        int n = trial % 50 == 0 ? 0 : rnd(trial < 390 ? 300 : RMAX);
        world_random(w, trial % 3 == 0 ? 1 : 6);
        for (int i = 0; i < n; i++)
            job_random(w, i);
        if (w->nusers == 0) { /* users are ignored then, whatever the jobs say */
            for (int i = 0; i < n; i++)
                w->jobs[i].user = rnd(7);
        }
        ref_order_jobs(w->jobs, n, w->queues, w->nqueues, w->users, w->nusers, want);
        assert_int_equal(sched_order_jobs(o, w->jobs, n, w->queues, w->nqueues,
                                          w->nusers ? w->users : NULL, w->nusers, got, &err),
                         0);
        for (int i = 0; i < n; i++) {
            if (got[i] != want[i])
                fail_msg("trial %d: position %d of %d: job %d, want %d", trial, i, n, got[i],
                         want[i]);
        }
    }
    sched_order_free(o);
    free(want);
    free(got);
    free(w);
}

/* Iterates o fully into handles[]; returns how many. */
static int drain(struct sched_order *o, int *handles)
{
    int k = 0;
    void *h;
    while ((h = sched_order_next(o)) != NULL)
        handles[k++] = (int)((intptr_t)h - 1);
    return k;
}

/* Jobs and what the tests below know of o: added[i] is 0 when job i is not in o, else the number
 * of its (last) add. */
struct kept {
    struct world *w;
    struct sched_order *o, *full;
    struct sched_order_job *in;
    int *in_job, *got, *want;
    uint64_t *added;
    uint64_t nadds;
};

static void kept_add(struct kept *k, int i)
{
    struct mu_err err;
    assert_int_equal(sched_order_add(k->o, &k->w->jobs[i], (void *)((intptr_t)i + 1), &err), 0);
    k->added[i] = ++k->nadds;
}

static void kept_remove(struct kept *k, int i)
{
    assert_true(sched_order_remove(k->o, &k->w->jobs[i], (void *)((intptr_t)i + 1)));
    k->added[i] = 0;
}

/* o's whole order (after a partial iteration when partial) is sched_order_jobs's over the jobs in
 * o, listed in the order they were (last) added. */
static void kept_check(struct kept *k, int pool, bool partial)
{
    struct world *w = k->w;
    struct mu_err err;
    int n = 0;
    for (uint64_t a = 1; a <= k->nadds; a++) {
        for (int i = 0; i < pool; i++) {
            if (k->added[i] == a) {
                k->in[n] = w->jobs[i];
                k->in_job[n++] = i;
            }
        }
    }
    assert_int_equal(sched_order_count(k->o), n);
    assert_int_equal(sched_order_jobs(k->full, k->in, n, w->queues, w->nqueues, w->users, w->nusers,
                                      k->want, &err),
                     0);
    assert_int_equal(sched_order_begin(k->o, w->queues, w->nqueues, w->users, w->nusers, &err), 0);
    if (partial) { /* a partial iteration, then the pass begins again */
        for (int t = 0; t < 5; t++)
            (void)sched_order_next(k->o);
        assert_int_equal(sched_order_begin(k->o, w->queues, w->nqueues, w->users, w->nusers, &err),
                         0);
    }
    assert_int_equal(drain(k->o, k->got), n);
    for (int t = 0; t < n; t++)
        assert_int_equal(k->got[t], k->in_job[k->want[t]]);
}

static void kept_init(struct kept *k)
{
    *k = (struct kept){ .w = calloc(1, sizeof(*k->w)),
                        .o = sched_order_new(),
                        .full = sched_order_new(),
                        .in = calloc(RMAX, sizeof(*k->in)),
                        .in_job = calloc(RMAX, sizeof(*k->in_job)),
                        .got = calloc(RMAX, sizeof(*k->got)),
                        .want = calloc(RMAX, sizeof(*k->want)),
                        .added = calloc(RMAX, sizeof(*k->added)) };
    assert_true(k->w && k->o && k->full && k->in && k->in_job && k->got && k->want && k->added);
}

static void kept_world(struct kept *k, int maxq, int pool)
{
    world_random(k->w, maxq);
    if (k->w->nusers == 0)
        k->w->nusers = k->w->nqueues * k->w->upq;
    sched_order_clear(k->o);
    memset(k->added, 0, RMAX * sizeof(*k->added));
    for (int i = 0; i < pool; i++)
        job_random(k->w, i);
}

static void kept_free(struct kept *k)
{
    sched_order_free(k->full);
    sched_order_free(k->o);
    free(k->want);
    free(k->got);
    free(k->added);
    free(k->in_job);
    free(k->in);
    free(k->w);
}

/* Jobs added and removed over rounds, anywhere in the order: each round's order is
 * sched_order_jobs's over the jobs in o. */
static void test_order_incremental(void **state)
{
    struct kept k;
    const int pool = 600;
    (void)state;
    kept_init(&k);
    for (int world = 0; world < 6; world++) {
        kept_world(&k, 5, pool);
        for (int round = 0; round < 25; round++) {
            int changes = round == 0 ? pool / 2 : rnd(40);
            for (int c = 0; c < changes; c++) {
                int i = rnd(pool);
                if (!k.added[i]) {
                    kept_add(&k, i);
                    continue;
                }
                kept_remove(&k, i);
                if (rnd(2) == 0)
                    job_random(k.w, i); /* changed: removed, then added anew */
            }
            kept_check(&k, pool, round % 3 == 1);
            /* Standings move between passes: the same keys, another order. */
            k.w->queues[rnd(k.w->nqueues)].usage += HOUR;
            k.w->users[rnd(k.w->nusers)].usage += HOUR;
        }
    }
    kept_free(&k);
}

/* As passes change it: the first jobs of the order start and leave, new ones come, now and then
 * one leaves from anywhere; for long enough that the keys' start moves through their whole
 * allocation (core/order.c: queue_compact, queue_room). */
static void test_order_starts_leave_first(void **state)
{
    struct kept k;
    const int pool = 3000;
    int *started = calloc(64, sizeof(*started));
    struct mu_err err;
    (void)state;
    assert_true(started);
    kept_init(&k);
    for (int world = 0; world < 3; world++) {
        kept_world(&k, world == 0 ? 1 : 4, pool);
        for (int i = 0; i < pool / 2; i++)
            kept_add(&k, i);
        for (int round = 0; round < 150; round++) {
            int nstart = 1 + rnd(40);
            int n = 0;
            void *h;
            assert_int_equal(
                sched_order_begin(k.o, k.w->queues, k.w->nqueues, k.w->users, k.w->nusers, &err),
                0);
            while (n < nstart && (h = sched_order_next(k.o)) != NULL)
                started[n++] = (int)((intptr_t)h - 1);
            for (int s = 0; s < n; s++)
                kept_remove(&k, started[s]);
            if (rnd(4) == 0) {
                int i = rnd(pool);
                if (k.added[i])
                    kept_remove(&k, i);
            }
            for (int c = 0; c < nstart; c++) { /* newcomers, and some of the started come back */
                int i = rnd(pool);
                if (!k.added[i]) {
                    job_random(k.w, i);
                    kept_add(&k, i);
                }
            }
            if (round % 10 == 0 || round == 149)
                kept_check(&k, pool, round % 20 == 10);
        }
    }
    kept_free(&k);
    free(started);
}

/* 10 jobs of 10,000 taken, then a new iteration: the whole order again, as sched_order_jobs. */
static void test_order_partial_then_full(void **state)
{
    struct world *w = calloc(1, sizeof(*w));
    struct sched_order *o = sched_order_new();
    int *got = calloc(RMAX, sizeof(*got));
    int *want = calloc(RMAX, sizeof(*want));
    struct mu_err err;
    const int n = 10000;
    (void)state;
    assert_true(w && o && got && want);
    world_random(w, 6);
    w->nusers = w->nqueues * w->upq;
    for (int i = 0; i < n; i++) {
        job_random(w, i);
        assert_int_equal(sched_order_add(o, &w->jobs[i], (void *)((intptr_t)i + 1), &err), 0);
    }
    ref_order_jobs(w->jobs, n, w->queues, w->nqueues, w->users, w->nusers, want);
    assert_int_equal(sched_order_begin(o, w->queues, w->nqueues, w->users, w->nusers, &err), 0);
    for (int k = 0; k < 10; k++)
        assert_int_equal((int)((intptr_t)sched_order_next(o) - 1), want[k]);
    assert_int_equal(sched_order_begin(o, w->queues, w->nqueues, w->users, w->nusers, &err), 0);
    assert_int_equal(drain(o, got), n);
    assert_memory_equal(got, want, (size_t)n * sizeof(*got));
    sched_order_free(o);
    free(want);
    free(got);
    free(w);
}

/* Removing what is not there, bad indices, and an iteration ended by a change. */
static void test_order_errors(void **state)
{
    struct sched_order *o = sched_order_new();
    struct sched_share_queue queues[2] = { { .weight = 1 }, { .weight = 1 } };
    struct sched_share_user users[3] = { { 0 } };
    struct sched_order_job a = { .queue = 0, .user = 1, .submitted_ms = 5, .id = "a" };
    struct sched_order_job b = a;
    struct mu_err err;
    (void)state;
    assert_non_null(o);
    mu_err_clear(&err);
    assert_false(sched_order_remove(o, &a, (void *)1)); /* empty */
    assert_null(sched_order_next(o));                   /* no iteration */
    assert_int_equal(sched_order_add(o, &a, (void *)1, &err), 0);
    assert_false(sched_order_remove(o, &a, (void *)2)); /* another handle, in the batch */
    assert_int_equal(sched_order_begin(o, queues, 2, users, 3, &err), 0);
    assert_false(sched_order_remove(o, &a, (void *)2)); /* another handle, merged */
    b.submitted_ms = 6;
    assert_false(sched_order_remove(o, &b, (void *)1)); /* other fields */
    b.queue = SCHED_MAX_QUEUES;
    assert_false(sched_order_remove(o, &b, (void *)1));
    assert_int_equal(sched_order_count(o), 1);
    assert_ptr_equal(sched_order_next(o), (void *)1);
    assert_null(sched_order_next(o));

    /* Bad indices: a queue at add, a queue or a user beyond the standings at begin. */
    assert_int_equal(sched_order_add(o, &b, (void *)2, &err), -1);
    assert_int_equal(err.code, MU_E_INVAL);
    b.queue = -1;
    assert_int_equal(sched_order_add(o, &b, (void *)2, &err), -1);
    b.queue = 1;
    b.user = -2;
    assert_int_equal(sched_order_add(o, &b, (void *)2, &err), -1);
    b.user = 0;
    assert_int_equal(sched_order_add(o, &b, NULL, &err), -1); /* NULL is next's end */
    assert_int_equal(sched_order_count(o), 1);
    assert_int_equal(sched_order_add(o, &b, (void *)2, &err), 0);
    assert_null(sched_order_next(o)); /* a change ends the iteration */
    assert_int_equal(sched_order_begin(o, queues, 1, users, 3, &err), -1);
    assert_non_null(strstr(err.msg, "queue 1 of 1"));
    assert_null(sched_order_next(o));
    assert_int_equal(sched_order_begin(o, queues, 2, users, 1, &err), -1);
    assert_non_null(strstr(err.msg, "user 1 of 1"));
    assert_int_equal(sched_order_begin(o, queues, 2, NULL, 2, &err), -1);
    assert_int_equal(sched_order_begin(o, queues, 0, users, 3, &err), -1);
    assert_true(sched_order_remove(o, &a, (void *)1));
    assert_false(sched_order_remove(o, &a, (void *)1)); /* twice */
    assert_int_equal(sched_order_begin(o, queues, 2, users, 1, &err), 0);
    assert_ptr_equal(sched_order_next(o), (void *)2);
    sched_order_clear(o);
    assert_int_equal(sched_order_count(o), 0);
    assert_int_equal(sched_order_begin(o, queues, 1, NULL, 0, &err), 0);
    assert_null(sched_order_next(o));
    sched_order_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_matches_reference),
        cmocka_unit_test(test_order_incremental),
        cmocka_unit_test(test_order_starts_leave_first),
        cmocka_unit_test(test_order_partial_then_full),
        cmocka_unit_test(test_order_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
