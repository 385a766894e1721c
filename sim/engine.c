/* SPDX-License-Identifier: MIT */
/*
 * The replay (sim_run): a virtual clock in milliseconds that jumps from event to event (arrivals,
 * attempt ends, stopped gangs, spot notices, nodes going and coming back, timers), and after each
 * instant in which something changed, one scheduling pass of the policy (policy.c), as musterd runs
 * a pass when it is dirty.  Committing and releasing GPUs goes through the core's cluster model
 * only; the check mode keeps its own record of every committed GPU and compares it with the core's
 * after every instant, so an over-commit anywhere is caught where it happens.
 *
 * Spot interruptions are drawn per node from its own seeded stream, so every policy of one run
 * sees the same interruptions at the same virtual times; or they follow a spot availability
 * trace (on_avail), the same for every policy too.  Work is counted in seconds of progress:
 * an attempt makes progress after its restart cost, keeps what a checkpoint saved when it stops,
 * and every GPU-second it held beyond that is lost work, charged to its cause.
 */
#include "sim/internal.h"

#include <stdlib.h>
#include <string.h>

#include "cfg_sched/cfg_sched.h"

#include "common/mu_banned.h"

enum ev_kind { EV_END = 0, EV_STOPPED, EV_GONE, EV_BACK, EV_NOTICE, EV_AVAIL, EV_WAKE };

#define MAX_SAMPLES 20000
#define TIME_CAP_MS (366LL * 86400 * 1000) /* past the last arrival: the replay gives up */
#define MS          1000                   /* a second on the replay's clock */

/* ---- the event heap: (t, kind, seq), so one instant's releases come before its notices ---- */

static bool ev_less(const struct sim_event *a, const struct sim_event *b)
{
    if (a->t != b->t)
        return a->t < b->t;
    if (a->kind != b->kind)
        return a->kind < b->kind;
    return a->seq < b->seq;
}

/* 0, or -1 with e->err.  A failure is sticky (e->failed ends the replay with e->err at the next
 * event), so callers in the middle of a change may drop the result. */
static int ev_push(struct sim_engine *e, int64_t t, enum ev_kind kind, int id, uint32_t gen)
{
    struct sim_event ev = { .t = t, .seq = e->seq++, .kind = (uint16_t)kind, .gen = gen, .id = id };
    int i;
    if (e->nheap == e->cap_heap) {
        int cap = e->cap_heap ? e->cap_heap * 2 : 1024;
        struct sim_event *h = realloc(e->heap, (size_t)cap * sizeof(*h));
        if (!h) {
            e->failed = true;
            return mu_errf(e->err, MU_E_NOMEM, "out of memory for events");
        }
        e->heap = h;
        e->cap_heap = cap;
    }
    i = e->nheap++;
    while (i > 0 && ev_less(&ev, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = ev;
    if (kind != EV_NOTICE)
        e->active_events++;
    return 0;
}

static struct sim_event ev_pop(struct sim_engine *e)
{
    struct sim_event top = e->heap[0];
    struct sim_event last = e->heap[--e->nheap];
    int i = 0;
    for (;;) {
        int k = 2 * i + 1;
        if (k >= e->nheap)
            break;
        if (k + 1 < e->nheap && ev_less(&e->heap[k + 1], &e->heap[k]))
            k++;
        if (!ev_less(&e->heap[k], &last))
            break;
        e->heap[i] = e->heap[k];
        i = k;
    }
    if (e->nheap > 0)
        e->heap[i] = last;
    if (top.kind != EV_NOTICE)
        e->active_events--;
    return top;
}

void sim_wake_at(struct sim_engine *e, int64_t t_ms)
{
    (void)ev_push(e, t_ms, EV_WAKE, -1, 0);
}

/* ---- jobs ---- */

int64_t sim_job_run_s(const struct sim_engine *e, int j)
{
    return sched_time_limit_s(e->jobs[j].time_limit_s, e->s->cfg.default_time_limit_s);
}

int64_t sim_job_progress_ms(const struct sim_engine *e, int j, int64_t t_ms)
{
    const struct sim_sjob *s = &e->sj[j];
    int64_t p = t_ms - s->att_start_ms - s->overhead_ms;
    int64_t left = e->jobs[j].duration_s * MS - s->done_ms;
    return p < 0 ? 0 : p > left ? left : p;
}

int64_t sim_job_periodic_ms(const struct sim_engine *e, int j, int64_t progress_ms)
{
    int64_t iv = e->jobs[j].ckpt_interval_s * MS;
    return iv > 0 ? progress_ms / iv * iv : 0;
}

static double job_gpus(const struct sim_engine *e, int j)
{
    return (double)e->jobs[j].tasks * e->jobs[j].gpus_per_task;
}

/* Accounting and, in check mode, our own record of the GPUs, for a commit (+1) or release. */
static int slots_account(struct sim_engine *e, int j, int sign)
{
    const struct sim_sjob *s = &e->sj[j];
    for (int t = 0; t < s->req.tasks; t++) {
        int n = s->slots[t].node;
        int g = s->req.gpus_per_task;
        int pool = sched_cluster_node_spec(e->c, n)->pool;
        bool ready = sched_cluster_node_state(e->c, n) == SCHED_NODE_READY;
        if (e->mask) {
            uint64_t m = s->slots[t].gpus;
            bool bad = sign > 0 ? (e->mask[n] & m) != 0 : (e->mask[n] & m) != m;
            if (bad || __builtin_popcountll(m) != g) {
                e->failed = true;
                return mu_errf(e->err, MU_E_STATE,
                               "check: t=%llds job line %d: GPUs 0x%llx of node n%d %s",
                               (long long)sim_now_s(e), e->jobs[j].line, (unsigned long long)m, n,
                               sign > 0 ? "committed twice" : "released but not committed");
            }
            e->mask[n] ^= m;
        }
        if (sign > 0 && e->node_used[n] == 0)
            e->busy_nodes[pool]++;
        e->node_used[n] += sign * g;
        if (sign < 0 && e->node_used[n] == 0)
            e->busy_nodes[pool]--;
        e->used_gpus += sign * g;
        if (ready)
            e->used_ready += sign * g;
    }
    e->held_gpus[e->jobs[j].queue] += sign * job_gpus(e, j);
    e->user_held[e->jobs[j].user] += sign * job_gpus(e, j);
    return 0;
}

int sim_job_start(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    const struct sim_job *tj = &e->jobs[j];
    int64_t left = tj->duration_s * MS - s->done_ms;
    int64_t natural, limit_end;

    if (slots_account(e, j, +1) != 0)
        return -1;
    sim_pending_remove(e, j);
    s->state = SJ_RUNNING;
    s->head = false; /* as d_gang_start: first in its queue only until it starts */
    s->att_start_ms = e->now_ms;
    s->attempts++;
    s->overhead_ms = s->gen > 0 ? (int64_t)e->s->restart_s * MS : 0;
    s->run_idx = e->nrunning;
    e->running[e->nrunning++] = j;
    if (s->first_start_ms < 0) {
        s->first_start_ms = e->now_ms;
        s->first_cap =
            (int)sched_cluster_pool(e->c, sched_cluster_node_spec(e->c, s->slots[0].node)->pool)
                ->capacity;
        e->res->start_order[e->res->nstarted++] = j;
    }
    natural = e->now_ms + s->overhead_ms + left;
    /* A replay of a recorded run ends the job when the recorded one ended, in whichever attempt
     * runs then (a preempted gang of t2008 restarts and ends on its recorded instant). */
    if (tj->end_ms > e->now_ms)
        natural = tj->end_ms;
    /* Only a limit the trace gives stops a job: the pass plans with the default one, as musterd
     * does, but a replayed job without one ran as long as it ran.  A job past its limit ends
     * there (TIMEOUT, never requeued, as sched_react_time_limit says; no grace is modelled). */
    limit_end = sched_time_limit_end_ms(e->now_ms, tj->time_limit_s, 0);
    s->timed_out = limit_end < natural;
    return ev_push(e, s->timed_out ? limit_end : natural, EV_END, j, s->gen);
}

static int job_release(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    int last = e->running[--e->nrunning];
    sched_cluster_release(e->c, &s->req, s->slots);
    e->running[s->run_idx] = last;
    e->sj[last].run_idx = s->run_idx;
    s->run_idx = -1;
    e->dirty = true;
    return slots_account(e, j, -1);
}

void sim_job_stop(
    struct sim_engine *e, int j, int64_t release_ms, int64_t save_ms, enum sim_cause c)
{
    struct sim_sjob *s = &e->sj[j];
    double lost = (double)(release_ms - s->att_start_ms - save_ms) / MS;
    e->lost_gpu_s[c] += (lost > 0 ? lost : 0) * job_gpus(e, j);
    s->state = SJ_STOPPING;
    s->release_ms = release_ms;
    s->save_ms = save_ms;
    s->cause = c;
    (void)ev_push(e, release_ms, EV_STOPPED, j, s->gen);
}

static void job_end(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    if (job_release(e, j) != 0)
        return;
    /* the restart cost of this attempt is lost to whatever stopped the one before */
    e->lost_gpu_s[s->cause] += (double)s->overhead_ms / MS * job_gpus(e, j);
    s->state = SJ_DONE;
    s->end_ms = e->now_ms;
    e->left--;
}

/* A stopped gang goes back to the pending jobs, in arrival order, with what it saved. */
static void job_requeue(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    if (job_release(e, j) != 0)
        return;
    s->done_ms += s->save_ms;
    s->gen++;
    s->state = SJ_PENDING;
    s->head = s->cause == SIM_CAUSE_SPOT && e->policy == SIM_MUSTER;
    if (s->preempted_for >= 0 && e->sj[s->preempted_for].victims_stopping > 0)
        e->sj[s->preempted_for].victims_stopping--;
    s->preempted_for = -1;
    (void)sim_pending_add(e, j);
}

/* ---- spot nodes ---- */

static void node_state(struct sim_engine *e, int n, enum sched_node_state st)
{
    int g = sched_cluster_node_spec(e->c, n)->ngpus;
    bool was_ready = sched_cluster_node_state(e->c, n) == SCHED_NODE_READY;
    if (was_ready && st != SCHED_NODE_READY) {
        e->ready_gpus -= g;
        e->used_ready -= e->node_used[n];
    } else if (!was_ready && st == SCHED_NODE_READY) {
        e->ready_gpus += g;
        e->used_ready += e->node_used[n];
    }
    sched_cluster_node_set_state(e->c, n, st);
    e->dirty = true;
}

static int next_notice(struct sim_engine *e, int n)
{
    int pool = sched_cluster_node_spec(e->c, n)->pool;
    double rate = e->s->spot_rate[pool];
    if (rate <= 0 || e->s->avail)
        return 0; /* an availability trace says when nodes go instead */
    return ev_push(e, e->now_ms + MS * (1 + (int64_t)sim_rng_exp(&e->rng[n], 3600.0 / rate)),
                   EV_NOTICE, n, 0);
}

/* The gang j on a node that got a notice: musterd checkpoints the whole gang (the reaction r's
 * stop, by r->stop_by_ms) and requeues it first in its queue (job_requeue); a per-node
 * termination handler (every other policy) kills it at once and it restarts from its last
 * periodic checkpoint.  A checkpoint takes the replay's ckpt_write_s once signalled. */
static void notice_gang(struct sim_engine *e, int j, const struct sched_reaction *r)
{
    const struct sim_setup *s = e->s;
    int64_t p = sim_job_progress_ms(e, j, e->now_ms);
    int64_t by_ms = r->stop_by_ms - e->now_ms; /* the most a stop may take */
    if (e->policy != SIM_MUSTER) {
        sim_job_stop(e, j, e->now_ms, sim_job_periodic_ms(e, j, p), SIM_CAUSE_SPOT);
    } else if (e->jobs[j].ckpt_interval_s > 0 && (int64_t)s->ckpt_write_s * MS <= by_ms) {
        sim_job_stop(e, j, e->now_ms + (int64_t)s->ckpt_write_s * MS, p, SIM_CAUSE_SPOT);
    } else {
        int64_t grace = e->jobs[j].ckpt_interval_s > 0 ? by_ms : (int64_t)s->cfg.kill_grace_s * MS;
        if (grace > by_ms)
            grace = by_ms;
        sim_job_stop(e, j, e->now_ms + grace,
                     sim_job_periodic_ms(e, j, sim_job_progress_ms(e, j, e->now_ms + grace)),
                     SIM_CAUSE_SPOT);
    }
}

static bool job_on_node(const struct sim_engine *e, int j, int n)
{
    for (int t = 0; t < e->sj[j].req.tasks; t++)
        if (e->sj[j].slots[t].node == n)
            return true;
    return false;
}

/* musterd's reaction to the notice (core/react.c, as d_spot_notice), on the replay's clock: the
 * node goes notice_s from now, and the replay stops gangs with no margin before that.  Only
 * muster's policy cools the pool down. */
static void on_notice(struct sim_engine *e, int n)
{
    int pool = sched_cluster_node_spec(e->c, n)->pool;
    int64_t gone_ms = e->now_ms + (int64_t)e->s->notice_s * MS;
    struct sched_reaction r = sched_react_spot_notice(
        e->now_ms, gone_ms, 0, e->policy == SIM_MUSTER ? e->s->cfg.spot_cooldown_s : -1);
    e->res->st.spot_notices++;
    node_state(e, n, r.node_state);
    if (r.cool_down) {
        /* The core's clock is whole seconds: the cool-down ends with the pass at its second. */
        sched_cluster_pool_cooldown(e->c, pool, r.cooldown_until_s);
        sim_wake_at(e, r.cooldown_until_s * MS);
    }
    for (int i = 0; i < e->nrunning; i++) {
        int j = e->running[i];
        if (e->sj[j].state == SJ_RUNNING && job_on_node(e, j, n)) {
            e->res->st.interruptions++;
            notice_gang(e, j, &r);
        }
    }
    (void)ev_push(e, gone_ms, EV_GONE, n, 0);
}

static void on_gone(struct sim_engine *e, int n)
{
    /* a gang still stopping there is cut short: it keeps what it had planned to save */
    for (int i = 0; i < e->nrunning; i++) {
        int j = e->running[i];
        if (e->sj[j].state == SJ_STOPPING && job_on_node(e, j, n)) {
            job_requeue(e, j);
            i = -1; /* the running array changed */
        }
    }
    node_state(e, n, sched_react_node_lost(false).node_state);
    e->node_up[n] = 0;
    e->up_gpus -= sched_cluster_node_spec(e->c, n)->ngpus;
    e->up_nodes[sched_cluster_node_spec(e->c, n)->pool]--;
    if (!e->s->avail) /* with an availability trace, it comes back when the trace says */
        (void)ev_push(e, e->now_ms + (int64_t)e->s->replace_s * MS, EV_BACK, n, 0);
}

static void on_back(struct sim_engine *e, int n)
{
    e->node_up[n] = 1;
    e->up_gpus += sched_cluster_node_spec(e->c, n)->ngpus;
    e->up_nodes[sched_cluster_node_spec(e->c, n)->pool]++;
    node_state(e, n, SCHED_NODE_READY);
    (void)next_notice(e, n);
}

/* Row i of the availability trace: the pool's nodes that are up and not on notice go down to
 * the row's count (a notice for the highest-numbered first) or its gone nodes come back up to
 * it (the lowest-numbered first); a node on notice still goes.  Then the next row's event. */
static void on_avail(struct sim_engine *e, int i)
{
    const struct sim_avail *a = &sim_avail_rows(e->s->avail)[i];
    int target = a->nodes < e->s->nodes[a->pool] ? a->nodes : e->s->nodes[a->pool];
    int avail = 0;

    for (int n = 0; n < e->nnodes; n++)
        if (sched_cluster_node_spec(e->c, n)->pool == a->pool && e->node_up[n]
            && sched_cluster_node_state(e->c, n) != SCHED_NODE_TERMINATING)
            avail++;
    for (int n = e->nnodes - 1; n >= 0 && avail > target; n--) {
        if (sched_cluster_node_spec(e->c, n)->pool == a->pool && e->node_up[n]
            && sched_cluster_node_state(e->c, n) != SCHED_NODE_TERMINATING) {
            on_notice(e, n);
            avail--;
        }
    }
    for (int n = 0; n < e->nnodes && avail < target; n++) {
        if (sched_cluster_node_spec(e->c, n)->pool == a->pool && !e->node_up[n]) {
            on_back(e, n);
            avail++;
        }
    }
    if (i + 1 < sim_avail_count(e->s->avail))
        (void)ev_push(e, sim_avail_rows(e->s->avail)[i + 1].t_s * MS, EV_AVAIL, i + 1, 0);
}

/* ---- the clock ---- */

/* Integrates the accounting from the last instant to t_ms, and fair-share usage as d_usage.c. */
static void advance(struct sim_engine *e, int64_t t_ms)
{
    double dt = (double)(t_ms - e->last_ms) / MS;
    const struct cfg *cfg = &e->s->cfg;
    if (dt <= 0)
        return;
    e->cap_gpu_s += e->up_gpus * dt;
    e->busy_gpu_s += e->used_gpus * dt;
    if (e->npending > 0)
        e->idle_wait_gpu_s += (e->ready_gpus - e->used_ready) * dt;
    for (int p = 0; p < cfg->npools; p++) {
        e->cost_usd += e->busy_nodes[p] * cfg->pools[p].price_per_hour * dt / 3600.0;
        e->cost_static_usd += e->up_nodes[p] * cfg->pools[p].price_per_hour * dt / 3600.0;
    }
    for (int q = 0; q <= cfg->nqueues; q++)
        e->usage[q] =
            sched_usage_accrue(e->usage[q], e->held_gpus[q], dt, cfg->fair_share_half_life_s);
    for (int u = 0; u < e->nusers; u++)
        e->user_usage[u] =
            sched_usage_accrue(e->user_usage[u], e->user_held[u], dt, cfg->fair_share_half_life_s);
    while (e->next_sample_ms <= t_ms) {
        struct sim_sample sm = { (double)e->next_sample_ms / MS, e->npending, e->nrunning,
                                 (double)e->used_gpus };
        /* Samples only feed the plots: no memory for one more ends the sampling, as
         * MAX_SAMPLES does, not the replay (tests/unit/test_oom.c counts on it). */
        if (e->res->nsamples >= MAX_SAMPLES || sim_result_sample(e->res, &sm) != 0)
            break;
        e->next_sample_ms += e->sample_step_ms;
    }
    e->last_ms = t_ms;
}

/* Check mode: the core's free GPUs agree with our record on every node. */
static int check_nodes(struct sim_engine *e)
{
    for (int n = 0; n < e->nnodes; n++) {
        int g = sched_cluster_node_spec(e->c, n)->ngpus;
        int used = __builtin_popcountll(e->mask[n]);
        if (used != e->node_used[n] || used > g
            || g - used != sched_cluster_node_gpus_free(e->c, n)) {
            e->failed = true;
            return mu_errf(
                e->err, MU_E_STATE,
                "check: t=%llds node n%d: %d GPUs committed of %d, the core says %d free",
                (long long)sim_now_s(e), n, used, g, sched_cluster_node_gpus_free(e->c, n));
        }
    }
    return 0;
}

static void on_event(struct sim_engine *e, const struct sim_event *ev)
{
    e->res->st.events++;
    switch ((enum ev_kind)ev->kind) {
    case EV_END:
        if (e->sj[ev->id].state == SJ_RUNNING && e->sj[ev->id].gen == ev->gen)
            job_end(e, ev->id);
        break;
    case EV_STOPPED:
        if (e->sj[ev->id].state == SJ_STOPPING && e->sj[ev->id].gen == ev->gen)
            job_requeue(e, ev->id);
        break;
    case EV_NOTICE:
        on_notice(e, ev->id);
        break;
    case EV_GONE:
        on_gone(e, ev->id);
        break;
    case EV_BACK:
        on_back(e, ev->id);
        break;
    case EV_AVAIL:
        on_avail(e, ev->id);
        break;
    case EV_WAKE:
        e->dirty = true;
        break;
    }
}

/* With pass_interval_s, a pass only every so often: a change before then asks for one then. */
static bool pass_due(struct sim_engine *e)
{
    int64_t at = e->last_pass_ms + (int64_t)e->s->pass_interval_s * MS;
    if (e->s->pass_interval_s <= 0 || e->last_pass_ms < 0 || e->now_ms >= at)
        return true;
    if (e->pass_wake_ms != at) {
        e->pass_wake_ms = at;
        sim_wake_at(e, at);
    }
    return false;
}

/* One instant (ms): its events, its arrivals, then a pass if anything changed. */
static int instant(struct sim_engine *e, int64_t t_ms)
{
    advance(e, t_ms);
    e->now_ms = t_ms;
    while (e->nheap > 0 && e->heap[0].t == t_ms && !e->failed) {
        struct sim_event ev = ev_pop(e);
        on_event(e, &ev);
    }
    while (e->next_arrival < e->njobs && e->jobs[e->next_arrival].submit_ms == t_ms) {
        int j = e->next_arrival++;
        if (e->sj[j].state == SJ_NEVER)
            continue;
        e->sj[j].state = SJ_PENDING;
        if (sim_pending_add(e, j) != 0)
            return -1;
        e->dirty = true;
    }
    if (e->failed)
        return -1;
    if (e->dirty && e->npending > 0 && pass_due(e)) {
        e->dirty = false;
        e->last_pass_ms = e->now_ms;
        e->res->st.passes++;
        if (sim_pass(e) != 0)
            return -1;
    }
    return e->mask ? check_nodes(e) : 0;
}

static bool same_shape(const struct sched_request *a, const struct sched_request *b)
{
    return a->tasks == b->tasks && a->gpus_per_task == b->gpus_per_task
           && a->ncapacity == b->ncapacity && a->capacity[0] == b->capacity[0]
           && a->capacity[1] == b->capacity[1] && a->required_level == b->required_level;
}

/* Marks the jobs that cannot run even on the idle cluster (one placement per distinct shape). */
static void never_fit(struct sim_engine *e)
{
    struct shape {
        struct sched_request r;
        int fits;
    } memo[256];
    int nmemo = 0;
    char why[SCHED_REASON_MAX];

    for (int j = 0; j < e->njobs; j++) {
        const struct sched_request *r = &e->sj[j].req;
        int fits = -1;
        for (int k = 0; k < nmemo && fits < 0; k++)
            if (same_shape(&memo[k].r, r))
                fits = memo[k].fits;
        if (fits < 0) {
            fits = sched_place(e->c, r, 0, e->sj[j].slots, why, sizeof(why));
            if (nmemo < 256)
                memo[nmemo++] = (struct shape){ *r, fits };
        }
        if (!fits) {
            e->sj[j].state = SJ_NEVER;
            e->left--;
            e->res->st.never_fit++;
        }
    }
}

static struct sched_request job_request(const struct sim_job *j)
{
    struct sched_request r = sched_request_make(j->tasks, j->gpus_per_task);
    r.ncapacity = j->ncapacity;
    r.capacity[0] = j->capacity[0];
    r.capacity[1] = j->capacity[1];
    r.required_level = j->required_level;
    return r;
}

static int engine_init(struct sim_engine *e, const struct sim_trace *t, enum sim_policy p)
{
    size_t ntasks = 0;
    int n = sim_trace_count(t);

    e->jobs = sim_trace_jobs(t);
    e->njobs = n;
    e->left = n;
    e->policy = p;
    if (!(e->c = sim_cluster_build(e->s, e->err)))
        return -1;
    e->nnodes = sched_cluster_node_count(e->c);
    for (int j = 0; j < n; j++)
        ntasks += (size_t)e->jobs[j].tasks;
    e->sj = calloc((size_t)n + 1, sizeof(*e->sj));
    e->slot_pool = calloc(ntasks + 1, sizeof(*e->slot_pool));
    e->pending = calloc((size_t)n + 1, sizeof(int));
    e->running = calloc((size_t)n + 1, sizeof(int));
    e->node_up = calloc((size_t)e->nnodes, 1);
    e->node_used = calloc((size_t)e->nnodes, sizeof(int));
    e->rng = calloc((size_t)e->nnodes, sizeof(uint64_t));
    e->mask = e->s->check ? calloc((size_t)e->nnodes, sizeof(uint64_t)) : NULL;
    e->res = sim_result_new(p, n);
    e->order = sched_order_new();
    e->shapes = calloc(1, sizeof(*e->shapes));
    e->shape_list = calloc(SCHED_SHAPES_MAX, sizeof(*e->shape_list));
    e->shape_left = calloc(SCHED_SHAPES_MAX, sizeof(*e->shape_left));
    e->nusers = sim_trace_users(t);
    e->user_usage = calloc((size_t)e->nusers + 1, sizeof(*e->user_usage));
    e->user_held = calloc((size_t)e->nusers + 1, sizeof(*e->user_held));
    e->users = calloc((size_t)e->nusers + 1, sizeof(*e->users));
    if (!e->sj || !e->slot_pool || !e->pending || !e->running || !e->node_up || !e->node_used
        || !e->rng || (e->s->check && !e->mask) || !e->res || !e->order || !e->shapes
        || !e->shape_list || !e->shape_left || !e->user_usage || !e->user_held || !e->users)
        return mu_errf(e->err, MU_E_NOMEM, "out of memory for %d jobs", n);
    ntasks = 0;
    for (int j = 0; j < n; j++) {
        e->sj[j].req = job_request(&e->jobs[j]);
        e->sj[j].slots = &e->slot_pool[ntasks];
        e->sj[j].first_start_ms = -1;
        e->sj[j].run_idx = -1;
        e->sj[j].preempted_for = -1;
        (void)mu_snprintf(e->sj[j].id, sizeof(e->sj[j].id), "%011d", j);
        ntasks += (size_t)e->jobs[j].tasks;
    }
    for (int i = 0; i < e->nnodes; i++) {
        const struct sched_node_spec *ns = sched_cluster_node_spec(e->c, i);
        e->node_up[i] = 1;
        e->up_gpus += ns->ngpus;
        e->ready_gpus += ns->ngpus;
        e->up_nodes[ns->pool]++;
        e->rng[i] = sim_rng_mix(e->s->seed, (uint64_t)i);
        if (next_notice(e, i) != 0)
            return -1;
    }
    if (e->s->avail && sim_avail_count(e->s->avail) > 0
        && ev_push(e, sim_avail_rows(e->s->avail)[0].t_s * MS, EV_AVAIL, 0, 0) != 0)
        return -1;
    e->nquota = cfg_sched_quotas(&e->s->cfg, e->qcfg) + 1; /* the same as musterd's */
    never_fit(e);
    e->sample_step_ms =
        MS * (n > 0 && e->jobs[n - 1].submit_s / 500 > 60 ? e->jobs[n - 1].submit_s / 500 : 60);
    return 0;
}

static void engine_release(struct sim_engine *e)
{
    sched_order_free(e->order);
    free(e->shapes);
    free(e->shape_list);
    free(e->shape_left);
    free(e->users);
    free(e->user_held);
    free(e->user_usage);
    free(e->plan_slots);
    free(e->plan_victims);
    free(e->pp);
    free(e->vic_job);
    free(e->who);
    free(e->vic);
    free(e->run);
    free(e->dec);
    free(e->pj);
    free(e->mask);
    free(e->rng);
    free(e->node_used);
    free(e->node_up);
    free(e->heap);
    free(e->running);
    free(e->pending);
    free(e->slot_pool);
    free(e->sj);
    sched_cluster_free(e->c);
}

/* Nothing can change any more: no arrivals, nothing running, no node or timer event ahead. */
static bool stuck(const struct sim_engine *e)
{
    return e->next_arrival >= e->njobs && e->nrunning == 0 && e->active_events == 0;
}

struct sim_result *sim_run(const struct sim_setup *s,
                           const struct sim_trace *t,
                           enum sim_policy p,
                           struct mu_err *err)
{
    struct sim_engine e;
    struct sim_result *r = NULL;
    uint64_t instants = 0;

    memset(&e, 0, sizeof(e));
    e.s = s;
    e.last_pass_ms = -1;
    e.err = err;
    if (engine_init(&e, t, p) != 0)
        goto out;
    while (e.left > 0 && !stuck(&e)) {
        int64_t next = -1;
        if (e.nheap > 0)
            next = e.heap[0].t;
        if (e.next_arrival < e.njobs && (next < 0 || e.jobs[e.next_arrival].submit_ms < next))
            next = e.jobs[e.next_arrival].submit_ms;
        if (next < 0 || next > (e.njobs ? e.jobs[e.njobs - 1].submit_ms : 0) + TIME_CAP_MS)
            break;
        if (instant(&e, next) != 0)
            goto out;
        if (s->progress_fn && (++instants & 4095) == 0)
            s->progress_fn(s->progress_arg, 1.0 - (double)e.left / (e.njobs ? e.njobs : 1));
    }
    sim_result_finish(&e);
    r = e.res;
    e.res = NULL;
out:
    sim_result_free(e.res);
    engine_release(&e);
    return r;
}
