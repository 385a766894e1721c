/* SPDX-License-Identifier: MIT */
/*
 * Layer 4 of musterd (d_pass.h): one scheduling pass (docs/design.md §4), and its timer.  The
 * pending jobs in their order go to sched_pass, which starts what fits, gives the first job that
 * does not fit a reservation, and lets later jobs backfill only where they do not delay it; started
 * jobs come back committed and are started here.  Then the first job that may preempt gets a plan
 * (sched_preempt_first, the rule muster-sim shares).
 *
 * The order is fair share between queues, then priority, spot requeues and age within a queue
 * (core/share.c, docs/fair-share.md).
 *
 * A long queue (issue #15): the core's pass goes in steps, and once 1,000 jobs were looked at it
 * stops when sched_pass_settled says none of the pending jobs' shapes (core/shapes.c) can start or
 * take the reservation, and no later job could preempt.  From then on no job's decision depends
 * on another's, so the rest of the queue gets fresh reasons from a sweep: every REASON_REFRESH_MS,
 * the passes that stop each step SWEEP_WINDOW more jobs of d->pending (fewer when time is short),
 * in no order, through the pass still open, until every job was stepped; no pass looks at 100,000
 * jobs at once (docs/placement.md).  A pass that starts gangs leaves its window to the next one,
 * so that starts never wait behind a sweep.  A job's place in the order is counted when musterctl
 * why asks (d_pending_standing).
 *
 * The timer (issue #10 item 3): a pass runs when something changes (a job, a node, a release) and
 * also when the clock alone may let a pending job start: a retry backoff or a fence wait over, a
 * pool's cool-down over, a too-young preemption victim coming of age; and every
 * REASON_REFRESH_MS while a pending reason carries a time ("retrying in 8s", "est. start in
 * 12m"), so it stays current.
 */

#include "scheduler/d_pass.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

#define REASON_REFRESH_MS 10000
/* A pass looks at this many jobs at least before it may stop early: a queue this short gets
 * every reason fresh in every pass, as it costs about a millisecond. */
#define PASS_DEPTH_MIN 1000
/* A sweep steps at most this many jobs a pass, and stops its window after SWEEP_BUDGET_US (checked
 * every SWEEP_CHECK jobs): a few milliseconds, however busy the machine. */
#define SWEEP_WINDOW    4096
#define SWEEP_BUDGET_US 3000
#define SWEEP_CHECK     256

/* Grows the pass's scratch arrays to hold n jobs; 0 or -1. */
static int pass_scratch(struct musterd *d, int npending)
{
    if (npending > d->pass.cap_pending) {
        int cap = npending * 2;
        struct sched_pass_job *jobs = realloc(d->pass.jobs, (size_t)cap * sizeof(*jobs));
        struct sched_decision *out = jobs ? realloc(d->pass.out, (size_t)cap * sizeof(*out)) : NULL;
        /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        struct d_job **who = out ? realloc(d->pass.who, (size_t)cap * sizeof(*who)) : NULL;
        struct sched_request *reqs =
            who ? realloc(d->pass.reqs, (size_t)cap * sizeof(*reqs)) : NULL;
        struct sched_preempt_job *pjobs =
            reqs ? realloc(d->pass.pjobs, (size_t)cap * sizeof(*pjobs)) : NULL;
        if (jobs)
            d->pass.jobs = jobs;
        if (out)
            d->pass.out = out;
        if (who)
            d->pass.who = who;
        if (reqs)
            d->pass.reqs = reqs;
        if (!pjobs)
            return -1;
        d->pass.pjobs = pjobs;
        d->pass.cap_pending = cap;
    }
    return 0;
}

/* The reason of a pending job that waits for its not_before_ms, with the time left. */
static void wait_reason(struct musterd *d, struct d_job *j, uint64_t now_mono)
{
    char in[24];
    char why[480];
    mu_duration_format((int64_t)((j->not_before_ms - now_mono + 999) / 1000), in, sizeof(in));
    if (j->backoff)
        (void)mu_snprintf(why, sizeof(why), "retrying in %s after attempt %d failed: %s", in,
                          j->attempt - 1, d_job_text(j->failure));
    else
        (void)mu_snprintf(why, sizeof(why),
                          "waiting %s for the old attempt on a lost node to stop (its "
                          "supervisors stop it once the node's lease runs out)",
                          in);
    d_job_set_reason(d, j, why);
}

void d_wake_at(struct musterd *d, uint64_t mono_ms)
{
    if (!d->next_pass_ms || mono_ms < d->next_pass_ms)
        d->next_pass_ms = mono_ms;
}

void d_wake_check(struct musterd *d, uint64_t now_mono_ms)
{
    if (d->next_pass_ms && now_mono_ms >= d->next_pass_ms) {
        d->next_pass_ms = 0;
        d->dirty = true;
    }
}

/* After a pass: asks for the next one when a pool's cool-down or (every few seconds, while
 * reasons carry times) a reason's clock runs out.  (A job's own wait is asked for when the pass
 * meets it: no job after the pass's stop can start before something changes.) */
static void wake_plan(struct musterd *d,
                      uint64_t now_mono_ms,
                      int64_t now_wall_ms,
                      bool timed_reasons)
{
    int64_t now_s = now_wall_ms / 1000;

    for (int p = 0; p < d->cfg.npools; p++) {
        int64_t until_s = sched_cluster_pool_cooldown_until(d->cluster, p);
        if (until_s > now_s && d->npending > 0)
            d_wake_at(d, now_mono_ms + (uint64_t)(until_s - now_s) * 1000u);
    }
    if (timed_reasons)
        d_wake_at(d, now_mono_ms + REASON_REFRESH_MS);
}

/* The name of topology level lvl for reasons: the cluster's ("node" below the configured ones),
 * or "anywhere" for no requirement. */
static const char *level_name(const struct musterd *d, int lvl)
{
    const char *name = sched_cluster_level_name(d->cluster, lvl);
    return name ? name : "anywhere";
}

/* j's request for this pass: j->req, or a copy in d->pass.reqs[n] with the first capacity type
 * only while known nodes may come back (regrace), and the required level relaxed by the time
 * waited (sched_relaxed_level). */
static const struct sched_request *pass_request(
    struct musterd *d, struct d_job *j, int n, int64_t now_ms, uint64_t now_mono, bool regrace)
{
    struct sched_request *r = &d->pass.reqs[n];
    int64_t waited_s =
        now_ms > (int64_t)j->submitted_ms ? (now_ms - (int64_t)j->submitted_ms) / 1000 : 0;

    j->relax_level = sched_relaxed_level(j->req.required_level, waited_s,
                                         j->spec.topo_relax_after_s, &j->relax_in_s);
    if (j->relax_in_s > 0)
        d_wake_at(d, now_mono + (uint64_t)j->relax_in_s * 1000u); /* a pass when it widens */
    if (!(regrace && j->req.ncapacity > 1) && j->relax_level == j->req.required_level)
        return &j->req;
    *r = j->req;
    if (regrace)
        r->ncapacity = 1; /* first choice only while known nodes may come back */
    r->required_level = j->relax_level;
    return r;
}

/*
 * When this pass may stop before the end of the queue (issue #15, sched_pass_may_stop): only when
 * every pending job is counted in a shape (core/shapes.c); it weighs the gangs running now
 * (d_preempt_collect) unless no preemption is planned (regrace).  *stop's nshapes is -1 when the
 * pass looks at every job.
 */
static void pass_stop_rule(struct musterd *d,
                           bool regrace,
                           int64_t now_ms,
                           struct sched_pass_stop *stop)
{
    int nshapes;
    *stop = (struct sched_pass_stop){ .nshapes = -1 };
    nshapes = sched_shapes_list(&d->shapes, d->pass.shapes, d->pass.shape_left,
                                d->cfg.default_time_limit_s, &d->pass.span);
    if (nshapes < 0)
        return;
    if (!regrace) /* no preemption while known nodes may come back */
        d_preempt_collect(d, now_ms);
    *stop = (struct sched_pass_stop){ .shapes = d->pass.shapes,
                                      .left = d->pass.shape_left,
                                      .nshapes = nshapes,
                                      .span = &d->pass.span,
                                      .order = d->order,
                                      .quota = d->pass.quota,
                                      .nquota = d->cfg.nqueues + 1,
                                      .victims = d->pass.victims,
                                      .nvictims = d->pass.nvictims,
                                      .preempts = !regrace,
                                      .next_check = PASS_DEPTH_MIN };
}

/*
 * Steps j through the core's pass as its n-th job (d->pass.jobs/out/who[n]), with its request for
 * this pass (pass_request); true when it was stepped and the step succeeded.  A held job, or one
 * whose not_before_ms is still ahead (it gets its reason, *timed_reasons is set and a pass is
 * asked for then), one whose user is at their max_running_gpus (d_access.h), sits this pass out,
 * as does one without memory for its slots.
 */
static bool pass_step(struct musterd *d,
                      struct d_job *j,
                      int n,
                      int64_t now_ms,
                      uint64_t now_mono,
                      bool regrace,
                      bool *timed_reasons,
                      bool *stepped)
{
    char capped[256];
    int started;

    *stepped = false;
    j->stepped_in = d->pass.serial;
    if (j->held) {
        d_job_set_reason(d, j, D_HELD_REASON);
        return false;
    }
    if (d_access_over_cap(d, j, capped, sizeof(capped))) {
        d_job_set_reason(d, j, capped); /* its user's max_running_gpus (access rules) */
        return false;
    }
    if (j->not_before_ms) {
        if (now_mono < j->not_before_ms) {
            wait_reason(d, j, now_mono);
            d_wake_at(d, j->not_before_ms);
            *timed_reasons = true;
            return false;
        }
        j->not_before_ms = 0;
        j->backoff = false;
    }
    if (!j->slots) {
        j->slots = calloc((size_t)j->spec.tasks, sizeof(*j->slots));
        if (!j->slots)
            return false;
    }
    d->pass.jobs[n].req = pass_request(d, j, n, now_ms, now_mono, regrace);
    d->pass.jobs[n].run_s = d_job_run_s(d, j);
    d->pass.jobs[n].slots = j->slots;
    d->pass.jobs[n].queue = j->queue_idx;
    d->pass.who[n] = j;
    *stepped = true;
    started = sched_pass_step(d->cluster, &d->pass.jobs[n], &d->pass.out[n]);
    if (started == 1)
        d_access_started(d, j); /* counts toward its user's max_running_gpus from now */
    return started == 0;
}

/*
 * Steps the core's pass through the pending jobs in their order (order_begin, pass_step); returns
 * how many were stepped, and *seen how many jobs it took from the order.  It stops where
 * sched_pass_may_stop says the rest of the queue cannot change the pass (pass_stop_rule).
 */
static int pass_run(struct musterd *d,
                    struct sched_pass_stop *stop,
                    int64_t now_ms,
                    uint64_t now_mono,
                    bool regrace,
                    bool *timed_reasons,
                    int *seen)
{
    int n = 0;
    struct d_job *j;

    *seen = 0;
    while ((j = sched_order_next(d->order)) != NULL) {
        bool stepped;
        bool ok = pass_step(d, j, n, now_ms, now_mono, regrace, timed_reasons, &stepped);
        (*seen)++;
        sched_pass_stop_taken(stop, j->shape_at);
        if (!stepped)
            continue;
        if (ok && sched_pass_may_stop(d->cluster, stop, n))
            return n + 1;
        n++;
    }
    return n;
}

/* Every pending job has a fresh reason: no sweep until REASON_REFRESH_MS from now. */
static void sweep_done(struct musterd *d, uint64_t now_mono)
{
    d->pass.sweeping = false;
    d->pass.sweep_due_ms = now_mono + REASON_REFRESH_MS;
}

/*
 * After a pass that stopped early, while a sweep is on: steps up to SWEEP_WINDOW more pending
 * jobs (fewer once SWEEP_BUDGET_US passed), from d->pass.sweep_at on, through the pass still
 * open, as its jobs n onwards; returns the new count.  The stop means none of them can start, be
 * held back by the reservation or take it, so each decision is its reason alone and the order does
 * not matter.  The set changes between passes (a job that leaves moves the last in its place), so a
 * sweep may miss a job that the next one reaches.
 */
static int pass_sweep(
    struct musterd *d, int n, int64_t now_ms, uint64_t now_mono, bool regrace, bool *timed_reasons)
{
    uint64_t deadline_us = mu_time_mono_us() + SWEEP_BUDGET_US;
    int window = 0;

    while (d->pass.sweep_at < d->npending && window < SWEEP_WINDOW) {
        struct d_job *j = d->pending[d->pass.sweep_at++];
        bool stepped;
        if (j->stepped_in == d->pass.serial)
            continue; /* this pass's order reached it */
        if (++window % SWEEP_CHECK == 0 && mu_time_mono_us() >= deadline_us) {
            d->pass.sweep_at--; /* j is the next window's first */
            break;
        }
        (void)pass_step(d, j, n, now_ms, now_mono, regrace, timed_reasons, &stepped);
        if (!stepped)
            continue;
        if (MU_NEVER(d->pass.out[n].verdict != SCHED_WAIT)) {
            if (d->pass.out[n].verdict == SCHED_START)
                sched_cluster_release(d->cluster, d->pass.jobs[n].req, j->slots);
            d->dirty = true; /* a pass in order decides it */
            continue;
        }
        n++;
    }
    if (d->pass.sweep_at >= d->npending)
        sweep_done(d, now_mono);
    return n;
}

/* True when the pass's first n decisions start a gang. */
static bool pass_starts(const struct musterd *d, int n)
{
    for (int i = 0; i < n; i++) {
        if (d->pass.out[i].verdict == SCHED_START)
            return true;
    }
    return false;
}

/* A placed gang that could not be started: its slots go back, it waits with a reason, and a pass
 * comes back to it. */
static void start_failed(struct musterd *d, struct d_job *j)
{
    sched_cluster_release(d->cluster, &j->req, j->slots);
    d_job_set_reason(d, j,
                     d->redis_down ? "waiting for Redis to come back to start the gang"
                                   : "out of memory starting the gang; retrying");
    d->dirty = true;
}

/*
 * Starts the gangs the pass placed (each took per_job_s to place), in two halves (issue #15):
 * pass_starts_write appends every STARTING to the pass's batch (d_batch_begin), which goes to
 * Redis in one round trip with the pass's reasons; pass_starts_finish then moves each gang and
 * sends its BINDs when the batch landed.  When it did not, none started: each waits, to be
 * written whole once Redis is back.
 */
static void pass_starts_write(struct musterd *d, int n, double per_job_s)
{
    for (int i = 0; i < n; i++) {
        struct d_job *j = d->pass.who[i];
        if (d->pass.out[i].verdict != SCHED_START)
            continue;
        j->place_s = per_job_s;
        j->borrowed = d->pass.out[i].borrowed;
        (void)d_gang_start_write(d, j); /* when it fails it has no tasks (pass_starts_finish) */
    }
}

static void pass_starts_finish(struct musterd *d, int n, bool landed)
{
    for (int i = 0; i < n; i++) {
        struct d_job *j = d->pass.who[i];
        if (d->pass.out[i].verdict != SCHED_START)
            continue;
        if (j->tasks && landed) {
            d_gang_start_commit(d, j);
            continue;
        }
        if (j->tasks)
            d_gang_start_abandon(d, j);
        start_failed(d, j);
    }
}

/* Gives the jobs the pass did not start their reasons; *timed_reasons is set when a reason
 * carries a time. */
static void pass_reasons(struct musterd *d, int n, bool *timed_reasons)
{
    for (int i = 0; i < n; i++) {
        struct d_job *j = d->pass.who[i];
        const struct sched_decision *dec = &d->pass.out[i];
        if (dec->verdict != SCHED_START) {
            const char *why = dec->reason[0] ? dec->reason : "waiting";
            char relaxed[SCHED_REASON_MAX + 160];
            if (j->relax_in_s > 0) {
                char in[24];
                mu_duration_format(j->relax_in_s, in, sizeof(in));
                (void)mu_snprintf(relaxed, sizeof(relaxed),
                                  "%s; waiting %s more for one %s, then %s%s", why, in,
                                  level_name(d, j->relax_level), j->relax_level > 0 ? "any " : "",
                                  level_name(d, j->relax_level - 1));
                why = relaxed;
                *timed_reasons = true;
            }
            d_job_set_reason(d, j, why);
            j->est_start_s = dec->est_start_s; /* for musterctl why */
            if (dec->verdict == SCHED_RESERVED)
                mu_strlcpy(d->pass.reserved, j->id, sizeof(d->pass.reserved));
            *timed_reasons = *timed_reasons || dec->est_start_s > 0;
        }
    }
}

static bool schedule(struct musterd *d);

/* One pass, timed for the metrics (muster_scheduling_pass_seconds). */
void d_schedule(struct musterd *d)
{
    uint64_t t0;
    uint64_t cpu0;
    double took_s;
    bool stopped;

    d->dirty = false;
    d_deps_wake(d); /* jobs whose dependencies started or ended since the last pass */
    if (d->npending == 0)
        return;
    t0 = mu_time_mono_us();
    cpu0 = mu_time_thread_cpu_us();
    stopped = schedule(d);
    took_s = (double)(mu_time_mono_us() - t0) / 1e6;
    d->metrics.pass_cpu_sum_s += (double)(mu_time_thread_cpu_us() - cpu0) / 1e6;
    d->metrics.pass_sum_s += took_s;
    d->metrics.passes += 1;
    d->metrics.pass_buckets[d_pass_bucket(took_s)] += 1;
    if (stopped) {
        d->metrics.passes_stopped += 1;
        d->metrics.pass_stopped_sum_s += took_s;
    }
}

/* One pass; true when it stopped before the end of the queue. */
static bool schedule(struct musterd *d)
{
    int64_t now_ms = (int64_t)mu_time_wall_ms();
    int64_t now_s = now_ms / 1000;
    uint64_t now_mono = mu_time_mono_ms();
    bool regrace = d_nodes_regrace(d, now_mono);
    bool timed_reasons = false;
    int n;
    int nordered;
    struct sched_pass_stop stop;
    int seen;
    bool stopped;
    bool landed;
    int nrunning;
    struct mu_err err;
    uint64_t t0;
    double per_job_s;

    if (pass_scratch(d, d->npending) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "pass", 10, "out of memory for a scheduling pass");
        d->dirty = true;
        return false;
    }
    if (d_pending_begin(d, now_s, &nrunning, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "pass", 10, "cannot order the pending jobs: %s",
                       err.msg);
        d->dirty = true;
        return false;
    }
    d->pass.serial++;
    d_access_pass_begin(d);
    pass_stop_rule(d, regrace, now_ms, &stop);
    t0 = mu_time_mono_us();
    if (sched_pass_open(d->cluster, d->pass.quota, d->cfg.nqueues + 1, d->npending, d->pass.running,
                        nrunning, now_s, &err)
        != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "pass", 10, "scheduling pass failed: %s", err.msg);
        d->dirty = true;
        return false;
    }
    d_batch_begin(d); /* the pass's writes in one round trip: reasons, then starts */
    n = pass_run(d, &stop, now_ms, now_mono, regrace, &timed_reasons, &seen);
    nordered = n;
    per_job_s = n ? (double)(mu_time_mono_us() - t0) / 1e6 / n : 0; /* to place a gang */
    stopped = seen < d->npending;
    if (!stopped) {
        sweep_done(d, now_mono);
    } else {
        if (!d->pass.sweeping && now_mono >= d->pass.sweep_due_ms) {
            d->pass.sweeping = true;
            d->pass.sweep_at = 0;
        }
        /* A pass that starts gangs leaves its window to the next (woken at once), so that the
         * starts do not wait behind the sweep; but only once in a row. */
        d->pass.sweep_deferred =
            d->pass.sweeping && !d->pass.sweep_deferred && pass_starts(d, nordered);
        if (d->pass.sweeping && !d->pass.sweep_deferred)
            n = pass_sweep(d, n, now_ms, now_mono, regrace, &timed_reasons);
        /* the next window at once, or the next sweep when it is due */
        d_wake_at(d, d->pass.sweeping ? now_mono : d->pass.sweep_due_ms);
    }
    (void)sched_pass_close(d->cluster);
    d->metrics.pass_jobs = n;
    d->metrics.pass_core_sum_s += (double)(mu_time_mono_us() - t0) / 1e6;
    d->pass.reserved[0] = '\0';
    pass_starts_write(d, nordered, per_job_s); /* a sweep's jobs start nothing */
    pass_reasons(d, n, &timed_reasons);
    t0 = mu_time_mono_us();
    landed = d_batch_end(d) == 0;
    d->metrics.pass_write_sum_s += (double)(mu_time_mono_us() - t0) / 1e6;
    pass_starts_finish(d, nordered, landed);
    if (!regrace) { /* one plan per pass: the first job that can preempt (core/preempt_first.c) */
        d_preempt_collect(d, now_ms);
        uint64_t retry = d_preempt_first(d, nordered, now_ms); /* a sweep's jobs cannot */
        if (retry)
            d_wake_at(d, retry); /* a victim comes of age then */
    }
    if (regrace)
        d_wake_at(d, d->regrace_until_ms); /* then fallback capacity and preemption again */
    for (int i = 0; i < nordered; i++) {   /* the started leave the queue */
        if (d->pass.who[i]->placed)
            d_job_pending_remove(d, d->pass.who[i]);
    }
    wake_plan(d, now_mono, now_ms, timed_reasons);
    return stopped;
}

void d_pass_free(struct musterd *d)
{
    free(d->pass.jobs);
    free(d->pass.out);
    free(d->pass.who);
    free(d->pass.running);
    free(d->pass.victims);
    free(d->pass.victim_jobs);
    free(d->pass.plan_victims);
    free(d->pass.reqs);
    free(d->pass.users);
    free(d->pass.pjobs);
    memset(&d->pass, 0, sizeof(d->pass));
}
