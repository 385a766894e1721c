/* SPDX-License-Identifier: MIT */
/*
 * The fair-share order (issue #11, docs/fair-share.md), kept across passes and produced lazily
 * (issue #15): the pass of a scheduler with 100,000 queued jobs looks at a prefix of the order,
 * so the order must cost what that prefix costs, not a sort of every job.  Each queue keeps its
 * jobs' keys sorted (priority and spot requeue as one rank, then user, then age, then id, then the
 * order of adding) in one compact array; jobs added since the last iteration wait in a batch,
 * removed ones are marked dead, and both are folded in by one sequential merge when the next
 * iteration begins.  An iteration takes the next job of the queue standing lowest (a heap of
 * queues); within a queue, a band (the jobs of one rank) is interleaved between its users only
 * when the iteration enters it, with a heap of the users' runs found by binary search.
 *
 * Invariants: while iterating, no key is dead and no batch is pending (add and remove end the
 * iteration); seq is unique per o, so the key order is total.  sched_order_jobs is this
 * machinery run over all its jobs, so the policy has one implementation.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/sort.h"

#include "common/mu_banned.h"

#define KEYS_MAX (INT32_MAX / 2) /* keys of one queue: sizes in int, twice that never overflows */

/* A job's key within its queue, copied so that ordering reads no job. */
struct order_key {
    int64_t rank; /* priority, then requeued by a spot interruption: larger first */
    uint64_t submitted_ms;
    const char *id; /* borrowed while the key is in the order */
    uint64_t seq;   /* the order of adding: the last tie-break */
    void *handle;   /* the caller's, returned by next */
    double cost;    /* GPU-seconds, >= 0: what taking the job charges its queue and user */
    int user;
    bool dead; /* removed; dropped by the next merge */
};

/* Queues, or the users' runs of one band, in a binary min-heap by standing, then tie (a queue's
 * index; a user's next job's submission time), then index. */
struct heap_item {
    double standing;
    uint64_t tie;
    int index; /* a queue, or the position of a user's next job in the band */
};

/* One queue's keys and its place in the iteration. */
struct order_queue {
    struct order_key *mem;   /* the keys' allocation, of cap keys */
    struct order_key *keys;  /* mem + head: [0..n) sorted, some dead until the next merge */
    struct order_key *batch; /* [0..nbatch) added since the last merge, unsorted */
    struct heap_item *users; /* the current band's users' runs, a heap of nusers */
    int *user_keys;          /* [0..cap_user_keys): live keys of keys[0..n) by user */
    int n, cap, head, ndead;
    int nbatch, cap_batch;
    int nusers, cap_users;
    int cap_user_keys;
    int first_dead, last_dead; /* no key outside them is dead (valid while ndead > 0) */
    int max_user;              /* the largest user with live keys in keys[0..n); -1 when none */
    int pos;      /* the iteration: the next key, or the end of the band being interleaved */
    int band_end; /* the end of the band whose runs are in users */
    double base;  /* the iteration's standing (usage + committed) / weight */
    double weight;
    double charged; /* what the jobs taken in this iteration are expected to use */
};

/* A user's standing in the iteration, charged across the bands of its queue. */
struct user_standing {
    double base;    /* usage + committed */
    double charged; /* what the jobs taken in this iteration are expected to use */
};

struct sched_order {
    struct order_queue queues[SCHED_MAX_QUEUES];
    struct order_key *tmp;                   /* scratch for sorting a batch */
    struct user_standing *user;              /* [0..nusers) of the iteration */
    struct heap_item heap[SCHED_MAX_QUEUES]; /* the queues with jobs left, by standing */
    uint64_t seq;                            /* the next key's */
    int cap_tmp, cap_user;
    int nqueues, nusers; /* of the iteration; nusers 0: no interleave between users */
    int nheap;
    bool iterating; /* begin was called and no add or remove came since */
};

struct sched_order *sched_order_new(void)
{
    struct sched_order *o = calloc(1, sizeof(*o));
    if (o) {
        for (int q = 0; q < SCHED_MAX_QUEUES; q++)
            o->queues[q].max_user = -1;
    }
    return o;
}

void sched_order_free(struct sched_order *o)
{
    if (!o)
        return;
    for (int q = 0; q < SCHED_MAX_QUEUES; q++) {
        free(o->queues[q].mem);
        free(o->queues[q].batch);
        free(o->queues[q].users);
        free(o->queues[q].user_keys);
    }
    free(o->tmp);
    free(o->user);
    free(o);
}

static bool item_less(const struct heap_item *a, const struct heap_item *b)
{
    if (a->standing != b->standing)
        return a->standing < b->standing;
    if (a->tie != b->tie)
        return a->tie < b->tie;
    return a->index < b->index;
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

/* Ids: the shorter first, then by bytes, so that stream IDs of one millisecond go by sequence
 * number ("…-9" before "…-10"), as they were submitted. */
static inline int id_cmp(const char *x, const char *y)
{
    size_t lx = strlen(x);
    size_t ly = strlen(y);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return memcmp(x, y, lx);
}

/* The key without seq: rank (larger first), user, age, then id.  Two NULL ids are equal; a NULL
 * id goes before any other (a total order, which the sorted keys need). */
static inline int prefix_cmp(const struct order_key *x, const struct order_key *y)
{
    if (x->rank != y->rank)
        return x->rank > y->rank ? -1 : 1;
    if (x->user != y->user)
        return x->user < y->user ? -1 : 1;
    if (x->submitted_ms != y->submitted_ms)
        return x->submitted_ms < y->submitted_ms ? -1 : 1;
    if (x->id && y->id)
        return id_cmp(x->id, y->id);
    return (x->id != NULL) - (y->id != NULL);
}

static inline bool key_less(const void *ctx, const struct order_key *x, const struct order_key *y)
{
    int c = prefix_cmp(x, y);
    (void)ctx;
    return c != 0 ? c < 0 : x->seq < y->seq;
}

/* keys_sort(keys, tmp, n, NULL): keys[0..n) by key_less, through tmp[0..n) (sort.h). */
SCHED_SORT_DEFINE(keys_sort, struct order_key, const void *, key_less)

/* Priority, then a spot requeue first, as one key (priorities are far inside +-2^61). */
static int64_t rank_of(const struct sched_order_job *j)
{
    int64_t p = j->priority;
    const int64_t lim = INT64_C(1) << 61;
    p = p > lim ? lim : p < -lim ? -lim : p;
    return p * 2 + (j->head_of_queue ? 1 : 0);
}

static struct order_key key_of(const struct sched_order_job *j, void *handle, uint64_t seq)
{
    return (struct order_key){ rank_of(j), j->submitted_ms,           j->id,   seq,
                               handle,     j->cost > 0 ? j->cost : 0, j->user, false };
}

/* Grows *p, an array of *cap elements of size, to at least want; 0 or -1 (out of memory). */
static int grow(void **p, int *cap, int want, size_t size)
{
    int c = *cap > 0 ? *cap : 16;
    void *np;
    if (want <= *cap)
        return 0;
    if (want > KEYS_MAX)
        return -1;
    while (c < want)
        c = c > KEYS_MAX / 2 ? KEYS_MAX : c * 2;
    if (!(np = realloc(*p, (size_t)c * size)))
        return -1;
    *p = np;
    *cap = c;
    return 0;
}

int sched_order_add(struct sched_order *o,
                    const struct sched_order_job *job,
                    void *handle,
                    struct mu_err *err)
{
    struct order_queue *q;

    if (job->queue < 0 || job->queue >= SCHED_MAX_QUEUES)
        return mu_errf(err, MU_E_INVAL, "order: job names queue %d, want 0..%d", job->queue,
                       SCHED_MAX_QUEUES - 1);
    if (job->user < 0)
        return mu_errf(err, MU_E_INVAL, "order: job names user %d", job->user);
    if (!handle)
        return mu_errf(err, MU_E_INVAL, "order: a job without a handle");
    q = &o->queues[job->queue];
    if (q->n + q->nbatch >= KEYS_MAX
        || grow((void **)&q->batch, &q->cap_batch, q->nbatch + 1, sizeof(*q->batch)) != 0)
        return mu_errf(err, MU_E_NOMEM, "order: out of memory for %d jobs of queue %d",
                       q->n + q->nbatch + 1, job->queue);
    q->batch[q->nbatch++] = key_of(job, handle, o->seq++);
    o->iterating = false;
    return 0;
}

bool sched_order_remove(struct sched_order *o,
                        const struct sched_order_job *job,
                        const void *handle)
{
    struct order_queue *q;
    struct order_key want;
    int lo = 0;
    int hi;

    if (job->queue < 0 || job->queue >= SCHED_MAX_QUEUES)
        return false;
    q = &o->queues[job->queue];
    want = key_of(job, NULL, 0);
    /* The first key whose prefix is not before the job's, then the keys equal to it. */
    for (hi = q->n; lo < hi;) {
        int mid = lo + (hi - lo) / 2;
        if (prefix_cmp(&q->keys[mid], &want) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int i = lo; i < q->n && prefix_cmp(&q->keys[i], &want) == 0; i++) {
        if (!q->keys[i].dead && q->keys[i].handle == handle) {
            q->keys[i].dead = true;
            q->first_dead = q->ndead == 0 || i < q->first_dead ? i : q->first_dead;
            q->last_dead = q->ndead == 0 || i > q->last_dead ? i : q->last_dead;
            q->ndead++;
            q->user_keys[q->keys[i].user]--;
            while (q->max_user >= 0 && q->user_keys[q->max_user] == 0)
                q->max_user--;
            o->iterating = false;
            return true;
        }
    }
    for (int i = 0; i < q->nbatch; i++) {
        if (q->batch[i].handle == handle && prefix_cmp(&q->batch[i], &want) == 0) {
            q->batch[i] = q->batch[--q->nbatch];
            o->iterating = false;
            return true;
        }
    }
    return false;
}

/* Points q->keys at q->mem + head (both stay NULL until the first merge). */
static void keys_at(struct order_queue *q, int head)
{
    q->head = head;
    if (q->mem)
        q->keys = q->mem + head;
}

void sched_order_clear(struct sched_order *o)
{
    for (int q = 0; q < SCHED_MAX_QUEUES; q++) {
        struct order_queue *oq = &o->queues[q];
        for (int u = 0; u <= oq->max_user; u++)
            oq->user_keys[u] = 0;
        oq->n = oq->ndead = oq->nbatch = 0;
        oq->max_user = -1;
        keys_at(oq, 0);
    }
    o->iterating = false;
}

int sched_order_count(const struct sched_order *o)
{
    int n = 0;
    for (int q = 0; q < SCHED_MAX_QUEUES; q++)
        n += o->queues[q].n - o->queues[q].ndead + o->queues[q].nbatch;
    return n;
}

/* Drops q's dead keys.  The started jobs are the ones a pass removes, and they come first, so
 * when the dead keys are nearer the front than the back, the live keys before them move back and
 * the keys start later in mem (keys_at): a queue of 100,000 moves a few keys, not all of them. */
static void queue_compact(struct order_queue *q)
{
    if (q->last_dead + 1 <= q->n - q->first_dead) {
        int w = q->last_dead;
        for (int r = q->last_dead; r >= 0; r--) {
            if (!q->keys[r].dead)
                q->keys[w--] = q->keys[r];
        }
        keys_at(q, q->head + q->ndead);
        q->n -= q->ndead;
    } else {
        int n = q->first_dead;
        for (int r = n; r < q->n; r++) {
            if (!q->keys[r].dead)
                q->keys[n++] = q->keys[r];
        }
        q->n = n;
    }
    q->ndead = 0;
}

/* Makes room in q->mem for want keys after q->keys; 0 or -1 (out of memory). */
static int queue_room(struct order_queue *q, int want)
{
    if (q->head + want <= q->cap)
        return 0;
    if (q->head > 0) {
        memmove(q->mem, q->keys, (size_t)q->n * sizeof(*q->keys));
        keys_at(q, 0);
    }
    if (grow((void **)&q->mem, &q->cap, want, sizeof(*q->mem)) != 0)
        return -1;
    keys_at(q, 0);
    return 0;
}

/* Folds the batch into the keys and drops the dead ones: compaction (queue_compact), then a merge
 * from the back, so nothing but the batch's sort needs scratch.  0 or -1 with err. */
static int queue_merge(struct sched_order *o, struct order_queue *q, int qi, struct mu_err *err)
{
    int nb = q->nbatch;
    int max_user = q->max_user;

    for (int j = 0; j < nb; j++)
        max_user = q->batch[j].user > max_user ? q->batch[j].user : max_user;
    if (grow((void **)&o->tmp, &o->cap_tmp, nb, sizeof(*o->tmp)) != 0
        || grow((void **)&q->user_keys, &q->cap_user_keys, max_user + 1, sizeof(*q->user_keys))
               != 0)
        return mu_errf(err, MU_E_NOMEM, "order: out of memory for %d jobs of queue %d",
                       q->n - q->ndead + nb, qi);
    for (int u = q->max_user + 1; u <= max_user; u++)
        q->user_keys[u] = 0;
    if (q->ndead > 0)
        queue_compact(q);
    if (queue_room(q, q->n + nb) != 0)
        return mu_errf(err, MU_E_NOMEM, "order: out of memory for %d jobs of queue %d", q->n + nb,
                       qi);
    if (nb > 1)
        keys_sort(q->batch, o->tmp, nb, NULL);
    for (int i = q->n - 1, j = nb - 1, w = q->n + nb - 1; j >= 0; w--) {
        if (i >= 0 && key_less(NULL, &q->batch[j], &q->keys[i])) {
            q->keys[w] = q->keys[i--];
        } else {
            q->keys[w] = q->batch[j--];
            q->user_keys[q->keys[w].user]++;
        }
    }
    q->max_user = max_user;
    q->n += nb;
    q->nbatch = 0;
    return 0;
}

int sched_order_begin(struct sched_order *o,
                      const struct sched_share_queue *queues,
                      int nqueues,
                      const struct sched_share_user *users,
                      int nusers,
                      struct mu_err *err)
{
    o->iterating = false;
    if (nqueues < 1 || nqueues > SCHED_MAX_QUEUES)
        return mu_errf(err, MU_E_INVAL, "order: %d queues, want 1..%d", nqueues, SCHED_MAX_QUEUES);
    if (nusers < 0 || (nusers > 0 && !users))
        return mu_errf(err, MU_E_INVAL, "order: %d users without a table", nusers);
    for (int q = nqueues; q < SCHED_MAX_QUEUES; q++) {
        if (o->queues[q].n - o->queues[q].ndead + o->queues[q].nbatch > 0)
            return mu_errf(err, MU_E_INVAL, "order: a job names queue %d of %d", q, nqueues);
    }
    for (int q = 0; q < nqueues; q++) {
        struct order_queue *oq = &o->queues[q];
        if ((oq->nbatch > 0 || oq->ndead > 0) && queue_merge(o, oq, q, err) != 0)
            return -1;
        if (nusers > 0 && oq->max_user >= nusers)
            return mu_errf(err, MU_E_INVAL, "order: a job of queue %d names user %d of %d", q,
                           oq->max_user, nusers);
        /* A band has at most one run per user (and nusers >= 1 here when it has users). */
        if (nusers > 0
            && grow((void **)&oq->users, &oq->cap_users, oq->n < nusers ? oq->n : nusers,
                    sizeof(*oq->users))
                   != 0)
            return mu_errf(err, MU_E_NOMEM, "order: out of memory for %d users", nusers);
    }
    if (grow((void **)&o->user, &o->cap_user, nusers, sizeof(*o->user)) != 0)
        return mu_errf(err, MU_E_NOMEM, "order: out of memory for %d users", nusers);

    for (int u = 0; u < nusers; u++)
        o->user[u] = (struct user_standing){ users[u].usage + users[u].committed, 0 };
    o->nusers = nusers;
    o->nheap = 0;
    for (int q = 0; q < nqueues; q++) {
        struct order_queue *oq = &o->queues[q];
        oq->pos = oq->band_end = oq->nusers = 0;
        oq->base = sched_share_standing(&queues[q]);
        oq->weight = sched_share_weight(&queues[q]);
        oq->charged = 0;
        if (oq->n > 0)
            o->heap[o->nheap++] = (struct heap_item){ oq->base, (uint64_t)q, q };
    }
    for (int i = o->nheap / 2 - 1; i >= 0; i--)
        heap_down(o->heap, o->nheap, i);
    o->iterating = true;
    return 0;
}

/* The first position in keys[lo..hi) whose rank is below rank (keys go by rank, larger first). */
static int rank_end(const struct order_key *keys, int lo, int hi, int64_t rank)
{
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (keys[mid].rank >= rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The first position in keys[lo..hi) whose user is above user (a band goes by user). */
static int user_end(const struct order_key *keys, int lo, int hi, int user)
{
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (keys[mid].user <= user)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Enters the band at q->pos: one heap item per user's run, standing as of now. */
static void band_enter(struct sched_order *o, struct order_queue *q)
{
    const struct order_key *k = q->keys;
    int lo = q->pos;
    int hi = rank_end(k, lo, q->n, k[lo].rank);

    q->nusers = 0;
    for (int i = lo; i < hi; i = user_end(k, i, hi, k[i].user)) {
        const struct user_standing *u = &o->user[k[i].user];
        q->users[q->nusers++] = (struct heap_item){ u->base + u->charged, k[i].submitted_ms, i };
    }
    for (int i = q->nusers / 2 - 1; i >= 0; i--)
        heap_down(q->users, q->nusers, i);
    q->pos = q->band_end = hi;
}

/* The position of q's next job: the next of the band's user standing lowest, who is charged. */
static int queue_take(struct sched_order *o, struct order_queue *q)
{
    struct heap_item *h = q->users;
    int i;
    int user;

    if (o->nusers == 0)
        return q->pos++;
    if (q->nusers == 0)
        band_enter(o, q);
    i = h[0].index;
    user = q->keys[i].user;
    o->user[user].charged += q->keys[i].cost;
    if (i + 1 < q->band_end && q->keys[i + 1].user == user)
        h[0] = (struct heap_item){ o->user[user].base + o->user[user].charged,
                                   q->keys[i + 1].submitted_ms, i + 1 };
    else
        h[0] = h[--q->nusers];
    heap_down(h, q->nusers, 0);
    return i;
}

void *sched_order_next(struct sched_order *o)
{
    struct order_queue *q;
    const struct order_key *key;

    if (!o->iterating || o->nheap == 0)
        return NULL;
    q = &o->queues[o->heap[0].index];
    key = &q->keys[queue_take(o, q)];
    q->charged += key->cost;
    if (q->pos < q->n || q->nusers > 0)
        o->heap[0].standing = q->base + q->charged / q->weight;
    else
        o->heap[0] = o->heap[--o->nheap];
    heap_down(o->heap, o->nheap, 0);
    return key->handle;
}

bool sched_order_rest_priority(const struct sched_order *o, int64_t *max)
{
    bool any = false;
    int64_t best = INT64_MIN;
    if (!o->iterating)
        return false;
    for (int k = 0; k < o->nheap; k++) {
        const struct order_queue *q = &o->queues[o->heap[k].index];
        /* A band being interleaved holds the queue's highest rank left; else the next key. */
        int64_t rank = q->nusers > 0 ? q->keys[q->band_end - 1].rank : q->keys[q->pos].rank;
        if (rank > best)
            best = rank;
        any = true;
    }
    *max = (best - (best & 1)) / 2; /* rank = priority * 2 + requeued */
    return any;
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
    int k = 0;
    void *h;

    if (n < 0 || nqueues < 1 || nqueues > SCHED_MAX_QUEUES)
        return mu_errf(err, MU_E_INVAL, "order: %d queues, want 1..%d", nqueues, SCHED_MAX_QUEUES);
    if (nusers < 0 || (nusers > 0 && !users))
        return mu_errf(err, MU_E_INVAL, "order: %d users without a table", nusers);
    for (int i = 0; i < n; i++) {
        if (jobs[i].queue < 0 || jobs[i].queue >= nqueues)
            return mu_errf(err, MU_E_INVAL, "order: job %d names queue %d of %d", i, jobs[i].queue,
                           nqueues);
        if (nusers > 0 && (jobs[i].user < 0 || jobs[i].user >= nusers))
            return mu_errf(err, MU_E_INVAL, "order: job %d names user %d of %d", i, jobs[i].user,
                           nusers);
    }
    sched_order_clear(o);
    for (int i = 0; i < n; i++) {
        struct sched_order_job j = jobs[i];
        if (nusers == 0)
            j.user = 0; /* without users, every job of a queue is one user's: by age alone */
        /* Handles are index + 1: next's NULL is the end. */
        if (sched_order_add(o, &j, (void *)((intptr_t)i + 1), err) != 0)
            return -1;
    }
    if (sched_order_begin(o, queues, nqueues, users, nusers, err) != 0)
        return -1;
    while ((h = sched_order_next(o)) != NULL)
        order[k++] = (int)((intptr_t)h - 1);
    return 0;
}
