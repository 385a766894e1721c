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

#define MAX_SAMPLES 20000
#define TIME_CAP_MS (366LL * 86400 * 1000) /* past the last arrival: the replay gives up */

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
    return sim_event_push(
        e, e->now_ms + SIM_MS * (1 + (int64_t)sim_rng_exp(&e->rng[n], 3600.0 / rate)),
        SIM_EV_NOTICE, n, 0);
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
    } else if (e->jobs[j].ckpt_interval_s > 0 && (int64_t)s->ckpt_write_s * SIM_MS <= by_ms) {
        sim_job_stop(e, j, e->now_ms + (int64_t)s->ckpt_write_s * SIM_MS, p, SIM_CAUSE_SPOT);
    } else {
        int64_t grace =
            e->jobs[j].ckpt_interval_s > 0 ? by_ms : (int64_t)s->cfg.kill_grace_s * SIM_MS;
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
    int64_t gone_ms = e->now_ms + (int64_t)e->s->notice_s * SIM_MS;
    struct sched_reaction r = sched_react_spot_notice(
        e->now_ms, gone_ms, 0, e->policy == SIM_MUSTER ? e->s->cfg.spot_cooldown_s : -1);
    e->res->st.spot_notices++;
    node_state(e, n, r.node_state);
    if (r.cool_down) {
        /* The core's clock is whole seconds: the cool-down ends with the pass at its second. */
        sched_cluster_pool_cooldown(e->c, pool, r.cooldown_until_s);
        sim_wake_at(e, r.cooldown_until_s * SIM_MS);
    }
    for (int i = 0; i < e->nrunning; i++) {
        int j = e->running[i];
        if (e->sj[j].state == SJ_RUNNING && job_on_node(e, j, n)) {
            e->res->st.interruptions++;
            notice_gang(e, j, &r);
        }
    }
    (void)sim_event_push(e, gone_ms, SIM_EV_GONE, n, 0);
}

static void on_gone(struct sim_engine *e, int n)
{
    /* a gang still stopping there is cut short: it keeps what it had planned to save */
    for (int i = 0; i < e->nrunning; i++) {
        int j = e->running[i];
        if (e->sj[j].state == SJ_STOPPING && job_on_node(e, j, n)) {
            sim_job_requeue(e, j);
            i = -1; /* the running array changed */
        }
    }
    node_state(e, n, sched_react_node_lost(false).node_state);
    e->node_up[n] = 0;
    e->up_gpus -= sched_cluster_node_spec(e->c, n)->ngpus;
    e->up_nodes[sched_cluster_node_spec(e->c, n)->pool]--;
    if (!e->s->avail) /* with an availability trace, it comes back when the trace says */
        (void)sim_event_push(e, e->now_ms + (int64_t)e->s->replace_s * SIM_MS, SIM_EV_BACK, n, 0);
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
        (void)sim_event_push(e, sim_avail_rows(e->s->avail)[i + 1].t_s * SIM_MS, SIM_EV_AVAIL,
                             i + 1, 0);
}

/* ---- the clock ---- */

/* Integrates the accounting from the last instant to t_ms, and fair-share usage as d_usage.c. */
static void advance(struct sim_engine *e, int64_t t_ms)
{
    double dt = (double)(t_ms - e->last_ms) / SIM_MS;
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
        struct sim_sample sm = { (double)e->next_sample_ms / SIM_MS, e->npending, e->nrunning,
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
    switch ((enum sim_ev_kind)ev->kind) {
    case SIM_EV_END:
        if (e->sj[ev->id].state == SJ_RUNNING && e->sj[ev->id].gen == ev->gen)
            sim_job_end(e, ev->id);
        break;
    case SIM_EV_STOPPED:
        if (e->sj[ev->id].state == SJ_STOPPING && e->sj[ev->id].gen == ev->gen)
            sim_job_requeue(e, ev->id);
        break;
    case SIM_EV_NOTICE:
        on_notice(e, ev->id);
        break;
    case SIM_EV_GONE:
        on_gone(e, ev->id);
        break;
    case SIM_EV_BACK:
        on_back(e, ev->id);
        break;
    case SIM_EV_AVAIL:
        on_avail(e, ev->id);
        break;
    case SIM_EV_WAKE:
        e->dirty = true;
        break;
    }
}

/* With pass_interval_s, a pass only every so often: a change before then asks for one then. */
static bool pass_due(struct sim_engine *e)
{
    int64_t at = e->last_pass_ms + (int64_t)e->s->pass_interval_s * SIM_MS;
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
        struct sim_event ev = sim_event_pop(e);
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
        && sim_event_push(e, sim_avail_rows(e->s->avail)[0].t_s * SIM_MS, SIM_EV_AVAIL, 0, 0) != 0)
        return -1;
    e->nquota = cfg_sched_quotas(&e->s->cfg, e->qcfg) + 1; /* the same as musterd's */
    never_fit(e);
    e->sample_step_ms =
        SIM_MS * (n > 0 && e->jobs[n - 1].submit_s / 500 > 60 ? e->jobs[n - 1].submit_s / 500 : 60);
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
