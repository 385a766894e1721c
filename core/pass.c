/* SPDX-License-Identifier: MIT */
/*
 * One scheduling pass (docs/design.md §4.5, no starvation): EASY backfill as Slurm does it. Pending
 * jobs are taken in the order given and started while they fit.  The first job that does not fit
 * but would once running gangs end gets the reservation: a binary search over the running
 * gangs' expected ends (releasing them in end order in the cluster itself, then committing them
 * back) finds the earliest time it fits and where.  Later jobs start only if they end by then
 * or leave the reserved GPUs (and the CPUs/memory the reservation needs there) alone; that rule
 * is the cluster's "holds", counted as used while holds_on.
 *
 * Every job that does not fit now is also asked "would it fit on the idle view of today's
 * nodes" (every gang ended, every cool-down over), whether or not a reservation is out: one that
 * would not waits with a reason that says so ("cannot fit until nodes join") and blocks nobody.
 *
 * Cost: nothing is freed during a pass, so a shape that failed stays failed.  A memo keyed by
 * the shape's family (everything but the task count and the preferred level, which never
 * changes feasibility) keeps the smallest failing task count and the reason data; the idle
 * view changes only with the eligible nodes, so its memo (largest fitting task count too)
 * outlives the pass.  The free-GPU histograms give a quick bound before any scan, and lead the
 * timeline search to its first candidate.  10,000 pending jobs that cannot fit cost a few hash
 * probes each plus a few searches per family, and one timeline search.  Scratch grows in the
 * cluster, never shrinks.  A caller with 100,000 jobs steps the pass (sched_pass_step) and stops
 * once sched_pass_settled (pass_stop.c) says no later job's shape can start or take the
 * reservation.
 */
#include "core/internal.h"
#include "core/sort.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

/* The hash of r's family, computed once per job; each probe mixes its mode in.  Every field
 * family_same compares, packed into words (a field out of its range only collides: entries are
 * compared in full) and mixed one multiply a word; the GPU type eight bytes a word. */
uint32_t sched_family_hash(const struct sched_request *r)
{
    const uint64_t mul = 0x9e3779b97f4a7c15ULL;
    const unsigned char *t = (const unsigned char *)(r->gpu_type ? r->gpu_type : "");
    uint64_t cap1 = r->ncapacity > 1 ? (uint64_t)(r->capacity[1] & 0xff) : 0xff;
    uint64_t w[3] = {
        (uint64_t)r->memory_mb_per_task,
        (uint64_t)(uint32_t)r->cpus_per_task | (uint64_t)(uint32_t)r->gpu_milli << 32,
        (uint64_t)(r->gpus_per_task & 0xff) | (uint64_t)(r->ncapacity & 0xff) << 8
            | (uint64_t)(r->capacity[0] & 0xff) << 16 | cap1 << 24
            | (uint64_t)((r->required_level + 1) & 0xffff) << 32
            | (uint64_t)(r->slice_profile & 0xffff) << 48,
    };
    uint64_t h = 0;
    uint64_t word = 0;
    int k = 0;

    for (size_t i = 0; i < MU_ARRAY_LEN(w); i++)
        h = (h ^ w[i]) * mul;
    for (; *t; t++) {
        word |= (uint64_t)*t << (8 * k);
        if (++k == 8) {
            h = (h ^ word) * mul;
            word = 0;
            k = 0;
        }
    }
    h = (h ^ word ^ (uint64_t)k << 56) * mul;
    return (uint32_t)(h ^ (h >> 32));
}

static bool family_same(const struct sched_memo *m, const struct sched_request *r, int mode)
{
    return m->mode == mode && m->gpus_per_task == r->gpus_per_task
           && m->slice_profile == r->slice_profile && m->gpu_milli == r->gpu_milli
           && m->cpus_per_task == r->cpus_per_task && m->memory_mb_per_task == r->memory_mb_per_task
           && m->ncapacity == r->ncapacity && m->capacity[0] == r->capacity[0]
           && (r->ncapacity < 2 || m->capacity[1] == r->capacity[1])
           && m->required_level == r->required_level && sched_type_same(m->gpu_type, r->gpu_type);
}

/* The memo slot of r's family (fam = sched_family_hash(r)) in this pass: its entry, or the empty
 * slot to fill (NULL when the table is full: then nothing is remembered). */
static struct sched_memo *memo_slot(struct sched_cluster *c,
                                    const struct sched_request *r,
                                    uint32_t fam,
                                    int mode)
{
    uint32_t h = fam ^ (uint32_t)mode * 0x9e3779b9u;
    for (uint32_t i = 0; i < 32; i++) {
        struct sched_memo *m = &c->memo[(h + i) & (SCHED_MEMO_SIZE - 1)];
        if (m->pass != c->pass_id || family_same(m, r, mode))
            return m;
    }
    return NULL;
}

/* r's memo entry in this pass, made empty (nothing known) if it was not there; NULL when the
 * table is full. */
static struct sched_memo *memo_entry(struct sched_cluster *c,
                                     const struct sched_request *r,
                                     uint32_t fam,
                                     int mode)
{
    struct sched_memo *m = memo_slot(c, r, fam, mode);
    if (!m || m->pass == c->pass_id)
        return m;
    m->pass = c->pass_id;
    m->mode = mode;
    m->gpus_per_task = r->gpus_per_task;
    m->slice_profile = r->slice_profile;
    m->gpu_milli = r->gpu_milli;
    m->cpus_per_task = r->cpus_per_task;
    m->memory_mb_per_task = r->memory_mb_per_task;
    m->gpu_type = r->gpu_type;
    m->ncapacity = r->ncapacity;
    m->capacity[0] = r->capacity[0];
    m->capacity[1] = r->capacity[1];
    m->required_level = r->required_level;
    m->min_tasks = INT_MAX;
    m->max_fit_tasks = 0;
    m->fit_starts = 0;
    return m;
}

/* True when the memo says r fails in mode; *fail gets the reason data. */
bool sched_memo_fails(struct sched_cluster *c,
                      const struct sched_request *r,
                      uint32_t fam,
                      int mode,
                      struct sched_fail *fail)
{
    struct sched_memo *m = memo_slot(c, r, fam, mode);
    if (m && m->pass == c->pass_id && r->tasks >= m->min_tasks) {
        *fail = m->fail;
        return true;
    }
    return false;
}

void sched_memo_note(struct sched_cluster *c,
                     const struct sched_request *r,
                     uint32_t fam,
                     int mode,
                     const struct sched_fail *fail)
{
    struct sched_memo *m = memo_entry(c, r, fam, mode);
    if (m && r->tasks < m->min_tasks) {
        m->min_tasks = r->tasks;
        m->fail = *fail;
        /* Not one task fits (no cap in the way): nothing is freed in a pass, so every size of
         * the family fails the same way, with the same words.  On a full pool the family then
         * costs one node scan, not one per size.  (A best above 0 may shrink as the pass
         * starts jobs, and the reason says it: it settles only the sizes above.) */
        if (fail->best == 0 && fail->best_uncapped == 0 && fail->capped_pool < 0)
            m->min_tasks = 1;
    }
}

bool sched_place_now(struct sched_cluster *c,
                     const struct sched_request *r,
                     bool held,
                     int64_t now_s,
                     struct sched_slot *slots,
                     struct sched_fail *fail)
{
    bool placed;
    c->holds_on = held;
    placed = sched_place_may_fit(c, r, now_s, fail) && sched_place_in(c, r, now_s, slots, fail);
    c->holds_on = false;
    return placed;
}

/* Tries to place r now in mode (SCHED_MODE_NOW or SCHED_MODE_HELD); remembers failures.  1 placed;
 * 0 not placed; -1 not placed, and known not to fit even ignoring the reservation's hold. */
static int try_now(struct sched_cluster *c,
                   const struct sched_request *r,
                   uint32_t fam,
                   int mode,
                   int64_t now_s,
                   struct sched_slot *slots,
                   struct sched_fail *fail)
{
    if (sched_memo_fails(c, r, fam, SCHED_MODE_NOW, fail))
        return -1;
    if (mode == SCHED_MODE_HELD && sched_memo_fails(c, r, fam, mode, fail))
        return 0;
    if (sched_place_now(c, r, mode == SCHED_MODE_HELD, now_s, slots, fail))
        return 1;
    sched_memo_note(c, r, fam, mode, fail);
    return mode == SCHED_MODE_NOW ? -1 : 0;
}

/* Whether the memo knows that r fits now in mode: between two starts of the pass (started: its
 * start count) nothing changes what fits now, and any smaller size of the family fits too. */
bool sched_fit_known(
    struct sched_cluster *c, const struct sched_request *r, uint32_t fam, int mode, int started)
{
    const struct sched_memo *m = memo_slot(c, r, fam, mode);
    return m && m->pass == c->pass_id && m->fit_starts == started && r->tasks <= m->max_fit_tasks;
}

/* Remembers that r fits now in mode, until the next start. */
void sched_fit_note(
    struct sched_cluster *c, const struct sched_request *r, uint32_t fam, int mode, int started)
{
    struct sched_memo *m = memo_entry(c, r, fam, mode);
    if (m && m->fit_starts != started) {
        m->fit_starts = started;
        m->max_fit_tasks = 0;
    }
    if (m && r->tasks > m->max_fit_tasks)
        m->max_fit_tasks = r->tasks;
}

/* Whether r, which does not fit beside the reservation, fits now on the GPUs it holds: only
 * the answer is wanted (the job waits either way, held back).  The fit is kept until the next
 * start, so a queue of jobs held back costs one placement per family between starts, not one
 * per job. */
static bool fits_held_back(struct sched_cluster *c,
                           const struct sched_request *r,
                           uint32_t fam,
                           int64_t now_s,
                           int started,
                           struct sched_slot *slots,
                           struct sched_fail *fail)
{
    if (sched_fit_known(c, r, fam, SCHED_MODE_NOW, started))
        return true;
    if (try_now(c, r, fam, SCHED_MODE_NOW, now_s, slots, fail) != 1)
        return false;
    sched_fit_note(c, r, fam, SCHED_MODE_NOW, started);
    return true;
}

/* The timeline's order: by time, then by run (unique for gangs; cool-downs, run -1, that end
 * together are equal bytes), so any sort gives the same array. */
static inline bool event_before(const void *ctx,
                                const struct sched_event *x,
                                const struct sched_event *y)
{
    (void)ctx;
    return x->t_s != y->t_s ? x->t_s < y->t_s : x->run < y->run;
}

SCHED_SORT_DEFINE(events_sort, struct sched_event, const void *, event_before)

struct timeline {
    int nevents;
    int released; /* events[0..released) are applied: their gangs released in the cluster */
};

static void timeline_move(struct sched_cluster *c, struct timeline *tl, int k)
{
    while (tl->released < k) {
        const struct sched_event *e = &c->events[tl->released++];
        if (e->run >= 0)
            sched_cluster_release(c, c->runs[e->run].req, c->runs[e->run].slots);
    }
    while (tl->released > k) {
        const struct sched_event *e = &c->events[--tl->released];
        if (e->run >= 0)
            sched_cluster_commit(c, c->runs[e->run].req, c->runs[e->run].slots);
    }
}

static int64_t event_time(const struct sched_cluster *c, int k, int64_t now_s)
{
    int64_t t = c->events[k - 1].t_s;
    return t > now_s ? t : now_s;
}

/* r's entry in the idle memo (kept across passes for c->nodes_gen), or the slot to fill; NULL
 * when the table is full. */
static struct sched_idle_memo *idle_slot(struct sched_cluster *c,
                                         const struct sched_request *r,
                                         uint32_t fam)
{
    uint32_t h = fam ^ (uint32_t)SCHED_MODE_IDLE * 0x9e3779b9u;
    for (uint32_t i = 0; i < 32; i++) {
        struct sched_idle_memo *e = &c->idle_memo[(h + i) & (SCHED_MEMO_SIZE - 1)];
        if (e->m.pass != c->nodes_gen || family_same(&e->m, r, SCHED_MODE_IDLE))
            return e;
    }
    return NULL;
}

/* r's idle entry, made empty if it was not there (its GPU type copied: the entry outlives the
 * pass); NULL when the table is full or the type too long to keep. */
static struct sched_memo *idle_entry(struct sched_cluster *c,
                                     const struct sched_request *r,
                                     uint32_t fam)
{
    struct sched_idle_memo *e = idle_slot(c, r, fam);
    struct sched_memo *m;
    if (!e)
        return NULL;
    m = &e->m;
    if (m->pass == c->nodes_gen)
        return m;
    if (r->gpu_type && strlen(r->gpu_type) >= sizeof(e->gpu_type))
        return NULL;
    *m = (struct sched_memo){ .pass = c->nodes_gen,
                              .mode = SCHED_MODE_IDLE,
                              .gpus_per_task = r->gpus_per_task,
                              .slice_profile = r->slice_profile,
                              .gpu_milli = r->gpu_milli,
                              .cpus_per_task = r->cpus_per_task,
                              .memory_mb_per_task = r->memory_mb_per_task,
                              .gpu_type = NULL,
                              .ncapacity = r->ncapacity,
                              .capacity = { r->capacity[0], r->capacity[1] },
                              .required_level = r->required_level,
                              .min_tasks = INT_MAX,
                              .max_fit_tasks = 0 };
    if (r->gpu_type) {
        memcpy(e->gpu_type, r->gpu_type, strlen(r->gpu_type) + 1);
        m->gpu_type = e->gpu_type;
    }
    return m;
}

/* What the idle memo knows of r: 1 it fits, 0 it does not (*known: the entry, with the reason
 * data), -1 nothing yet. */
static int idle_memo_says(struct sched_cluster *c,
                          const struct sched_request *r,
                          uint32_t fam,
                          const struct sched_memo **known)
{
    struct sched_idle_memo *e = idle_slot(c, r, fam);
    if (!e || e->m.pass != c->nodes_gen)
        return -1;
    *known = &e->m;
    if (r->tasks >= e->m.min_tasks)
        return 0;
    return r->tasks <= e->m.max_fit_tasks ? 1 : -1;
}

/*
 * Whether r fits on the idle view of today's nodes: every gang ended, every cool-down over.
 * When it does not, nothing running or cooling down will make room, and *fail (marked never)
 * says what today's nodes hold at most.  The idle view changes only when a node is added or
 * relabelled or starts or stops taking work (c->nodes_gen), not with gangs or passes, so fits
 * are memoized as well as failures, across passes.  A failure also settles the whole family:
 * its best (the most tasks one domain holds, caps applied) is exact when below the task count,
 * so best or fewer tasks fit and more do not.  One search per shape family while the nodes stay
 * as they are, then a hash probe.  Nothing is packed: only the answer is wanted.  now is
 * why r does not fit now: no ready node of its type and size is the same on the idle view.
 */
static bool fits_idle(struct sched_cluster *c,
                      const struct sched_request *r,
                      uint32_t fam,
                      const struct sched_fail *now,
                      struct sched_fail *fail)
{
    const struct sched_memo *known = NULL;
    struct sched_memo *m;
    bool fits;
    int says;

    if (now->kind == SCHED_FAIL_NO_NODES) {
        *fail = *now;
        fail->never = true;
        return false;
    }
    says = idle_memo_says(c, r, fam, &known);
    if (says == 0)
        *fail = known->fail;
    if (says >= 0)
        return says == 1;
    c->idle_view = true;
    if (r->required_level < 0 && r->gpus_per_task > 0 && r->slice_profile == 0
        && r->gpu_milli == 0) {
        /* No domain to fit in: r fits when the eligible capacity (caps applied) holds its tasks.
         * Asked for every task there is, the search fails with that capacity as its best and
         * the failure (reason data) any size that fails gets; so this one search settles the
         * family for every size, where a search per size fitted would settle one.  Whole GPUs
         * only: a node then holds at most its GPUs' worth of tasks, so the sums cannot overflow
         * (a task without GPUs would count INT_MAX on every node). */
        struct sched_request all = *r;
        all.tasks = INT_MAX;
        if (sched_place_idle_count(c, &all, fail) < 0)
            (void)sched_place_in(c, &all, INT64_MAX, NULL, fail);
        fits = r->tasks <= fail->best;
        m = idle_entry(c, r, fam);
        fail->never = true;
        if (m && fail->best < m->min_tasks - 1) {
            m->min_tasks = fail->best + 1;
            m->fail = *fail;
        }
        if (m && fail->best > m->max_fit_tasks)
            m->max_fit_tasks = fail->best;
        c->idle_view = false;
        return fits;
    }
    fits = sched_place_in(c, r, INT64_MAX, NULL, fail) == 1;
    c->idle_view = false;
    m = idle_entry(c, r, fam);
    if (fits) {
        if (m && r->tasks > m->max_fit_tasks)
            m->max_fit_tasks = r->tasks;
        return true;
    }
    fail->never = true;
    if (m && r->tasks < m->min_tasks) {
        m->min_tasks = r->tasks;
        m->fail = *fail;
        if (fail->best < r->tasks) {
            m->min_tasks = fail->best + 1;
            if (fail->best > m->max_fit_tasks)
                m->max_fit_tasks = fail->best;
        }
    }
    return false;
}

/* fits_idle's answer without remembering it (or the reason data a job would get from it). */
bool sched_idle_fits_quiet(struct sched_cluster *c, const struct sched_request *r, uint32_t fam)
{
    const struct sched_memo *known;
    struct sched_fail fail;
    bool fits;
    int says = idle_memo_says(c, r, fam, &known);
    if (says >= 0)
        return says == 1;
    c->idle_view = true;
    fits = sched_place_in(c, r, INT64_MAX, NULL, &fail) == 1;
    c->idle_view = false;
    return fits;
}

/*
 * The earliest time r, which fits on the idle view (fits_idle), fits as running gangs end and
 * cool-downs expire: 1 with *at_s, slots and *freed_run (the c->runs index of the gang whose end
 * makes room, -1 for a cool-down's end), or 0 (it does not fit even then: a gang the pass was not
 * told of holds resources; *fail says why).  The cluster is left as it was.
 */
static int reserve(struct sched_cluster *c,
                   const struct sched_request *r,
                   uint32_t fam,
                   int nruns,
                   int64_t now_s,
                   struct sched_slot *slots,
                   int64_t *at_s,
                   int *freed_run,
                   struct sched_fail *fail)
{
    struct timeline tl = { 0, 0 };
    int lo = 1;
    int hi;
    bool found = false; /* placed (with slots) at hi by the sweep */

    if (sched_memo_fails(c, r, fam, SCHED_MODE_EVER, fail))
        return 0;
    for (int i = 0; i < nruns; i++) {
        c->events[tl.nevents].t_s = c->runs[i].end_s;
        c->events[tl.nevents++].run = i;
    }
    for (int p = 0; p < c->npools; p++) {
        if (c->pool_cool_s[p] > now_s) {
            c->events[tl.nevents].t_s = c->pool_cool_s[p];
            c->events[tl.nevents++].run = -1;
        }
    }
    events_sort(c->events, c->events_tmp, tl.nevents, NULL);
    hi = tl.nevents;
    /* The histograms' bound is necessary for a fit and, like a fit, only grows along the
     * timeline: sweep to the first event where it allows r (O(pools) a step, where a placement
     * scans every node) and place r there.  Usually it fits, and that is the earliest (a pool
     * in cool-down for the whole horizon, or ends that free too little, cost no placement);
     * else the binary search goes on after it. */
    if (hi > 0 && r->gpus_per_task > 0) {
        timeline_move(c, &tl, lo);
        while (lo < hi && sched_place_bound(c, r, event_time(c, lo, now_s)) < r->tasks)
            timeline_move(c, &tl, ++lo);
        if (lo < hi) {
            found = sched_place_in(c, r, event_time(c, lo, now_s), slots, fail) == 1;
            if (found)
                hi = lo; /* and slots are filled: no search, no second placement */
            else
                lo++;
        }
    }
    timeline_move(c, &tl, hi);
    /* Only the last placement packs: the search needs to know whether it fits, not where. */
    if (!found && (hi == 0 || !sched_place_in(c, r, event_time(c, hi, now_s), NULL, fail))) {
        timeline_move(c, &tl, 0);
        /* Nothing ends and no pool cools down: the cluster as it is now is the last word, and
         * its reason the one to remember (fail is written by a placement only). */
        if (hi == 0)
            (void)sched_place_in(c, r, now_s, NULL, fail);
        sched_memo_note(c, r, fam, SCHED_MODE_EVER, fail);
        return 0;
    }
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        struct sched_fail f;
        timeline_move(c, &tl, mid);
        if (sched_place_in(c, r, event_time(c, mid, now_s), NULL, &f))
            hi = mid;
        else
            lo = mid + 1;
    }
    timeline_move(c, &tl, hi);
    if (!found && !sched_place_in(c, r, event_time(c, hi, now_s), slots, fail)) {
        /* Cannot happen: fitting grows with every release.  Report no reservation. */
        timeline_move(c, &tl, 0);
        return 0;
    }
    *at_s = event_time(c, hi, now_s);
    *freed_run = c->events[hi - 1].run;
    timeline_move(c, &tl, 0);
    return 1;
}

void sched_holds_set(struct sched_cluster *c,
                     const struct sched_request *r,
                     const struct sched_slot *slots)
{
    for (int i = 0; i < r->tasks; i++) {
        struct sched_node *n = &c->nodes[slots[i].node];
        n->gpus_held |= slots[i].gpus;
        n->cpus_held += r->cpus_per_task;
        n->memory_mb_held += r->memory_mb_per_task;
    }
}

/* Over every node, not the reserved slots: the caller's buffer is not ours to trust. */
void sched_holds_clear(struct sched_cluster *c)
{
    for (int i = 0; i < c->nnodes; i++) {
        c->nodes[i].gpus_held = 0;
        c->nodes[i].cpus_held = 0;
        c->nodes[i].memory_mb_held = 0;
    }
}

static int scratch_reserve(struct sched_cluster *c, int nruns, int nevents, struct mu_err *err)
{
    if (nruns > c->cap_runs && nruns > 0) {
        struct sched_running *p = realloc(c->runs, (size_t)nruns * sizeof(*p));
        if (!p)
            return mu_errf(err, MU_E_NOMEM, "scheduling pass: out of memory");
        c->runs = p;
        c->cap_runs = nruns;
    }
    if (nevents > c->cap_events && nevents > 0) {
        struct sched_event *p = realloc(c->events, (size_t)nevents * sizeof(*p));
        struct sched_event *t = NULL;
        if (p)
            c->events = p;
        if (p)
            t = realloc(c->events_tmp, (size_t)nevents * sizeof(*t));
        if (!t)
            return mu_errf(err, MU_E_NOMEM, "scheduling pass: out of memory");
        c->events_tmp = t;
        c->cap_events = nevents;
    }
    return 0;
}

/* A new pass (or explanation): running copied to c->runs (room reserved), a fresh memo. */
static void pass_begin(struct sched_cluster *c, const struct sched_running *running, int nrunning)
{
    if (nrunning)
        memcpy(c->runs, running, (size_t)nrunning * sizeof(*running));
    if (++c->pass_id == 0) {
        memset(c->memo, 0, sizeof(c->memo)); /* wrapped: old entries must not match */
        memset(c->reasons, 0, sizeof(c->reasons));
        c->pass_id = 1;
    }
    sched_topo_refresh(c);
}

int sched_reserve_search(struct sched_cluster *c,
                         const struct sched_request *r,
                         const struct sched_running *running,
                         int nrunning,
                         int64_t now_s,
                         struct sched_slot *slots,
                         int64_t *at_s,
                         int *freed_by,
                         struct mu_err *err)
{
    struct sched_fail fail;

    if (scratch_reserve(c, nrunning, nrunning + c->npools, err) != 0)
        return -1;
    pass_begin(c, running, nrunning);
    return reserve(c, r, sched_family_hash(r), nrunning, now_s, slots, at_s, freed_by, &fail);
}

int sched_pass(struct sched_cluster *c,
               const struct sched_pass_job *pending,
               int npending,
               const struct sched_running *running,
               int nrunning,
               int64_t now_s,
               struct sched_decision *out,
               struct mu_err *err)
{
    return sched_pass_quota(c, NULL, 0, pending, npending, running, nrunning, now_s, out, err);
}

int sched_pass_quota(struct sched_cluster *c,
                     struct sched_quota_queue *quota,
                     int nquota,
                     const struct sched_pass_job *pending,
                     int npending,
                     const struct sched_running *running,
                     int nrunning,
                     int64_t now_s,
                     struct sched_decision *out,
                     struct mu_err *err)
{
    if (npending < 0 || (npending && (!pending || !out)))
        return mu_errf(err, MU_E_INVAL, "scheduling pass: bad arguments");
    if (sched_pass_open(c, quota, nquota, npending, running, nrunning, now_s, err) != 0)
        return -1;
    for (int i = 0; i < npending; i++)
        (void)sched_pass_step(c, &pending[i], &out[i]);
    return sched_pass_close(c);
}

int sched_pass_open(struct sched_cluster *c,
                    struct sched_quota_queue *quota,
                    int nquota,
                    int max_jobs,
                    const struct sched_running *running,
                    int nrunning,
                    int64_t now_s,
                    struct mu_err *err)
{
    if (max_jobs < 0 || nrunning < 0 || (nrunning && !running) || max_jobs > INT_MAX / 2 - nrunning
        || (quota && nquota < 0))
        return mu_errf(err, MU_E_INVAL, "scheduling pass: bad arguments");
    if (scratch_reserve(c, nrunning + max_jobs, nrunning + max_jobs + c->npools, err) != 0
        || (quota && sched_pass_quota_scratch(c, max_jobs, nquota, err) != 0))
        return -1;
    pass_begin(c, running, nrunning);
    c->pass = (struct sched_pass_state){ .open = true,
                                         .quota = quota,
                                         .nquota = quota ? nquota : 0,
                                         .max_jobs = max_jobs,
                                         .nruns = nrunning,
                                         .now_s = now_s };
    return 0;
}

int sched_pass_step(struct sched_cluster *c,
                    const struct sched_pass_job *j,
                    struct sched_decision *d)
{
    struct sched_pass_state *ps = &c->pass;
    const struct sched_request *r = j->req;
    int64_t now_s = ps->now_s;
    struct sched_fail fail;
    struct sched_fail ever = { 0 }; /* fits_idle may answer from its memo without it */
    const char *bad = r && j->slots ? sched_request_invalid(c, r) : "invalid request";
    int64_t end_s = j->run_s > 0 && j->run_s < INT64_MAX - now_s ? now_s + j->run_s : INT64_MAX;
    int mode = ps->reserved && !sched_done_by(j->run_s, now_s, ps->res_s) ? SCHED_MODE_HELD
                                                                          : SCHED_MODE_NOW;
    int i = ps->njobs;
    uint32_t fam;
    int placed;

    memset(d, 0, sizeof(*d));
    d->verdict = SCHED_WAIT;
    if (!ps->open || i >= ps->max_jobs) { /* a caller's bug */
        mu_strlcpy(d->reason, "scheduling pass: more jobs than it was opened for",
                   sizeof(d->reason));
        return 0;
    }
    ps->njobs++;
    if (bad) {
        mu_strlcpy(d->reason, bad, sizeof(d->reason));
        return 0;
    }
    if (!sched_pass_quota_cut(c, ps->quota, ps->nquota, j, i, &r, d))
        return 0; /* over quota: not a reservation, blocks nobody */
    fam = sched_family_hash(r);
    placed = try_now(c, r, fam, mode, now_s, j->slots, &fail);
    if (placed == 1) {
        sched_pass_quota_started(c, ps->quota, ps->nquota, j, r, d);
        sched_cluster_commit(c, r, j->slots);
        c->runs[ps->nruns].req = r;
        c->runs[ps->nruns].slots = j->slots;
        c->runs[ps->nruns++].end_s = end_s;
        d->verdict = SCHED_START;
        ps->started++;
        return 1;
    }
    if (placed == 0 && mode == SCHED_MODE_HELD
        && fits_held_back(c, r, fam, now_s, ps->started, j->slots, &fail)) {
        sched_pass_held_back(ps->res_s, now_s, d); /* fits, but only on the reserved GPUs */
        return 0;
    }
    if (!fits_idle(c, r, fam, &fail, &ever)) {
        /* Whether or not a reservation is out: it never blocks anyone, and says so. */
        sched_pass_reason_set(c, r, fam, &ever, now_s, d);
        return 0;
    }
    if (!ps->reserved) {
        int64_t at_s = 0;
        int freed = -1;
        if (reserve(c, r, fam, ps->nruns, now_s, j->slots, &at_s, &freed, &ever)) {
            char in[24];
            ps->reserved = true;
            ps->res_s = at_s;
            sched_holds_set(c, r, j->slots);
            mu_duration_format(at_s - now_s, in, sizeof(in));
            d->verdict = SCHED_RESERVED;
            d->est_start_s = at_s;
            (void)mu_snprintf(d->reason, sizeof(d->reason),
                              "waiting for reservation (est. start in %s)", in);
            return 0;
        }
    }
    sched_pass_reason_set(c, r, fam, &fail, now_s, d);
    return 0;
}

int sched_pass_close(struct sched_cluster *c)
{
    int started = c->pass.started;
    if (c->pass.reserved)
        sched_holds_clear(c);
    c->pass = (struct sched_pass_state){ 0 };
    return started;
}

int sched_relaxed_level(int required_level, int64_t waited_s, int relax_after_s, int64_t *next_in_s)
{
    int64_t steps;

    *next_in_s = 0;
    if (relax_after_s <= 0 || required_level < 0)
        return required_level;
    if (waited_s < 0)
        waited_s = 0;
    steps = waited_s / relax_after_s;
    if (steps > required_level)
        return -1; /* past the widest level: anywhere */
    *next_in_s = (steps + 1) * (int64_t)relax_after_s - waited_s;
    return required_level - (int)steps;
}
