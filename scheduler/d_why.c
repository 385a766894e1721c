/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): "why is my job pending?" on demand (musterctl why, issue
 * #18).  The question is a control entry (cmd why, arg the job id); the answer is one JSON
 * document on <prefix>why:<entry id> (queue/answer.c), computed now by the same pure core that
 * schedules, never in every pass:
 *
 *  - the job's state and its pending reason as the last pass wrote it, with the estimated start
 *    of its reservation (from the running gangs' time limits) when the last pass gave it one;
 *  - its queue's quota: whether it admits the gang now, or the core's reason (at quota, what the
 *    cohort can lend);
 *  - per capacity type of the job, in its order: sched_place on that type alone (fits now, or
 *    the core's reason: no node with enough free GPUs, the largest free domain, ...);
 *  - per pool: whether the job may use it (capacity type, gpu_type), its cool-down left, its
 *    max_gpus cap against what it uses;
 *  - a preemption preview: the plan sched_preempt_plan would make now (victims and the work each
 *    would lose) or why there is none (too young for min_runtime_s, not lower priority, waiting is
 *    sooner with its estimated start), a dry run that stops nothing and leaves the cluster as it
 *    was;
 *  - sched_explain (core/explain.c): per topology level the largest free domain and the largest
 *    that exists, the start the pass's reservation search finds with the running gang whose end
 *    makes room, and whether it could backfill beside another job's reservation;
 *  - where it stands: its dependencies, its place in the pass's fair-share order.
 */

#include "scheduler/d_handlers.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

static const char *capacity_name(enum sched_capacity c)
{
    return c == SCHED_SPOT ? "spot" : "on-demand";
}

/* The core's placement per capacity type of the job, in its order. */
static bool add_capacity(
    cJSON *doc, struct musterd *d, const struct d_job *j, int64_t now_s, struct sched_slot *slots)
{
    cJSON *arr = cJSON_AddArrayToObject(doc, "capacity");

    for (int c = 0; arr && c < j->req.ncapacity; c++) {
        struct sched_request one = j->req;
        char reason[SCHED_REASON_MAX] = "";
        cJSON *o = cJSON_CreateObject();
        int fits;

        one.capacity[0] = j->req.capacity[c];
        one.ncapacity = 1;
        fits = sched_place(d->cluster, &one, now_s, slots, reason, sizeof(reason));
        if (!o || !cJSON_AddItemToArray(arr, o)
            || !cJSON_AddStringToObject(o, "type", capacity_name(one.capacity[0]))
            || !cJSON_AddBoolToObject(o, "fits", fits == 1)
            || !cJSON_AddStringToObject(o, "reason", fits == 1 ? "fits now" : reason))
            return false;
    }
    return arr != NULL;
}

/* One pool's limits for the job: usable by it, cool-down left, cap against use. */
static cJSON *pool_facts(struct musterd *d, const struct d_job *j, int p, int64_t now_s)
{
    const struct sched_pool *pool = sched_cluster_pool(d->cluster, p);
    int64_t until = sched_cluster_pool_cooldown_until(d->cluster, p);
    bool type_ok = false;
    cJSON *o = cJSON_CreateObject();

    for (int c = 0; c < j->req.ncapacity; c++)
        type_ok = type_ok || j->req.capacity[c] == pool->capacity;
    if (!o || !cJSON_AddStringToObject(o, "pool", pool->name)
        || !cJSON_AddStringToObject(o, "capacity", capacity_name(pool->capacity))
        || !cJSON_AddBoolToObject(o, "capacity_allowed", type_ok)
        || !cJSON_AddBoolToObject(
            o, "gpu_type_ok", !j->spec.gpu_type[0] || strcmp(j->spec.gpu_type, pool->gpu_type) == 0)
        || !cJSON_AddNumberToObject(o, "cooldown_s", (double)(until > now_s ? until - now_s : 0))
        || !cJSON_AddNumberToObject(o, "max_gpus", pool->max_gpus)
        || !cJSON_AddNumberToObject(o, "gpus_used", sched_cluster_pool_gpus_used(d->cluster, p))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static bool add_pools(cJSON *doc, struct musterd *d, const struct d_job *j, int64_t now_s)
{
    cJSON *arr = cJSON_AddArrayToObject(doc, "pools");

    for (int p = 0; arr && p < sched_cluster_pool_count(d->cluster); p++) {
        cJSON *o = pool_facts(d, j, p, now_s);
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            return false;
        }
    }
    return arr != NULL;
}

/* The job's queue: whether its quota (and its cohort's lending) admits the gang now, and why not
 * (as of the last pass's use). */
static bool add_queue(cJSON *doc, const struct musterd *d, const struct d_job *j)
{
    struct sched_request req;
    char why[SCHED_REASON_MAX] = "";
    cJSON *o = cJSON_AddObjectToObject(doc, "queue");
    bool ok =
        sched_quota_filter(d->pass.quota, d->cfg.nqueues + 1, j->queue_idx, &j->req, &req) > 0;

    if (!ok)
        sched_quota_reason(d->pass.quota, d->cfg.nqueues + 1, j->queue_idx, &j->req, why,
                           sizeof(why));
    return o && cJSON_AddStringToObject(o, "name", j->spec.queue)
           && cJSON_AddBoolToObject(o, "quota_ok", ok)
           && cJSON_AddStringToObject(o, "quota_reason", why);
}

/* The planner's dry run: {"plan", "reason", "victims": [{job, priority, lost_gpu_s}], ...}. */
static bool add_preview(
    cJSON *doc, struct musterd *d, const struct d_job *j, int64_t now_ms, struct sched_slot *slots)
{
    int64_t now_s = now_ms / 1000;
    struct sched_preempt_plan plan;
    int rc = d_preempt_preview(d, j, now_ms, &plan, slots);
    cJSON *o = cJSON_AddObjectToObject(doc, "preemption");
    cJSON *victims = o ? cJSON_AddArrayToObject(o, "victims") : NULL;

    if (!victims || !cJSON_AddBoolToObject(o, "plan", rc == 1)
        || !cJSON_AddStringToObject(o, "reason", plan.reason)
        || !cJSON_AddNumberToObject(o, "lost_gpu_s", (double)plan.lost_gpu_ms / 1000.0)
        || (plan.est_start_s > 0
            && !cJSON_AddNumberToObject(o, "est_start_in_s", (double)(plan.est_start_s - now_s)))
        || (plan.retry_at_ms > now_ms
            && !cJSON_AddNumberToObject(o, "victims_of_age_in_s",
                                        (double)(plan.retry_at_ms - now_ms) / 1000.0)))
        return false;
    for (int i = 0; rc == 1 && i < plan.nvictims; i++) {
        const struct d_job *v = d->pass.victim_jobs[plan.victims[i]];
        cJSON *vo = cJSON_CreateObject();
        if (!vo || !cJSON_AddItemToArray(victims, vo) || !cJSON_AddStringToObject(vo, "job", v->id)
            || !cJSON_AddNumberToObject(vo, "priority", (double)v->spec.priority)
            || !cJSON_AddNumberToObject(
                vo, "lost_gpu_s",
                (double)sched_preempt_lost_gpu_ms(&d->pass.victims[plan.victims[i]], now_ms)
                    / 1000.0))
            return false;
    }
    return true;
}

/* The running gangs as d_preempt_collect left them (same order as d->pass.victim_jobs), as the
 * pass sees them: request, slots, expected end.  NULL with none or without memory. */
static struct sched_running *running_list(const struct musterd *d)
{
    struct sched_running *run = NULL;

    if (d->pass.nvictims > 0)
        run = calloc((size_t)d->pass.nvictims, sizeof(*run));
    for (int i = 0; run && i < d->pass.nvictims; i++) {
        run[i].req = d->pass.victims[i].req;
        run[i].slots = d->pass.victims[i].slots;
        run[i].end_s = d->pass.victims[i].end_s;
    }
    return run;
}

/* The reservation of the last pass when another job, still pending, holds it; else false. */
static bool other_reservation(const struct musterd *d,
                              const struct d_job *j,
                              struct sched_reservation *res,
                              const struct d_job **holder)
{
    const struct d_job *h = d->pass.reserved[0] ? mu_map_get(d->jobs, d->pass.reserved) : NULL;

    if (!h || h == j || h->state != QUEUE_PENDING || h->placed || !h->slots || h->est_start_s <= 0)
        return false;
    *res = (struct sched_reservation){ &h->req, h->slots, h->est_start_s };
    *holder = h;
    return true;
}

static bool add_levels(cJSON *doc, const struct musterd *d, const struct sched_explain *e, int req)
{
    cJSON *o = cJSON_AddObjectToObject(doc, "topology");
    const char *rname = sched_cluster_level_name(d->cluster, req);
    cJSON *arr = NULL;

    if (!o
        || !(rname ? cJSON_AddStringToObject(o, "required", rname)
                   : cJSON_AddNullToObject(o, "required"))
        || !(arr = cJSON_AddArrayToObject(o, "levels")))
        return false;
    for (int l = 0; l < e->nlevels; l++) {
        const struct sched_explain_level *v = &e->levels[l];
        cJSON *lo = cJSON_CreateObject();
        if (!lo || !cJSON_AddItemToArray(arr, lo)
            || !cJSON_AddStringToObject(lo, "level", sched_cluster_level_name(d->cluster, l))
            || !cJSON_AddNumberToObject(lo, "free_tasks", v->free_tasks)
            || !cJSON_AddNumberToObject(lo, "max_tasks", v->max_tasks)
            || !cJSON_AddStringToObject(lo, "state",
                                        v->fits_now    ? "fits"
                                        : v->fits_idle ? "busy"
                                                       : "until_nodes_join"))
            return false;
    }
    return true;
}

/* When it could start: the core's reservation search, naming the gang whose end makes room
 * (freed_when: time_limit or stops, with freed_by; cooldown_ends), or, for a job that would delay
 * another's reservation, that reservation's start (reservation_starts). */
static bool add_start(
    cJSON *doc, const struct musterd *d, const struct sched_explain *e, bool own, int64_t now_s)
{
    cJSON *o = cJSON_AddObjectToObject(doc, "start");
    bool behind = e->backfill == SCHED_BACKFILL_DELAYS;
    const struct d_job *by = !behind && e->freed_by >= 0 && e->freed_by < d->pass.nvictims
                                 ? d->pass.victim_jobs[e->freed_by]
                                 : NULL;
    const char *when = behind ? "reservation_starts"
                       : by   ? (by->end != D_END_NONE ? "stops" : "time_limit")
                              : "cooldown_ends";

    if (!o || !cJSON_AddBoolToObject(o, "reservation", own)
        || !cJSON_AddBoolToObject(o, "fits_now", e->fits_now))
        return false;
    if (e->est_start_s <= 0)
        return true;
    return cJSON_AddNumberToObject(o, "est_start_s", (double)e->est_start_s)
           && cJSON_AddNumberToObject(o, "in_s",
                                      (double)(e->est_start_s > now_s ? e->est_start_s - now_s : 0))
           && (!by || cJSON_AddStringToObject(o, "freed_by", by->id))
           && cJSON_AddStringToObject(o, "freed_when", when);
}

/* Why a job that fits now does not start beside the pass's reservation for another job. */
static bool add_backfill(cJSON *doc,
                         const struct musterd *d,
                         const struct d_job *j,
                         const struct sched_explain *e,
                         const struct d_job *holder,
                         int64_t now_s)
{
    cJSON *o = cJSON_AddObjectToObject(doc, "backfill");
    const char *state = e->backfill == SCHED_BACKFILL_DELAYS ? "delays_reservation"
                        : e->backfill == SCHED_BACKFILL_FITS ? "fits"
                                                             : "none";

    if (!o || !cJSON_AddStringToObject(o, "state", state))
        return false;
    if (e->backfill == SCHED_BACKFILL_NONE || !holder)
        return true;
    return cJSON_AddStringToObject(o, "reservation_job", holder->id)
           && cJSON_AddNumberToObject(
               o, "reservation_in_s",
               (double)(holder->est_start_s > now_s ? holder->est_start_s - now_s : 0))
           && cJSON_AddNumberToObject(o, "run_s", (double)d_job_run_s(d, j))
           && cJSON_AddBoolToObject(o, "time_limit", j->spec.time_limit_s > 0);
}

/* sched_explain for j, after add_preview (which collected the running gangs). */
static bool add_explain(cJSON *doc, struct musterd *d, const struct d_job *j, int64_t now_ms)
{
    int64_t now_s = now_ms / 1000;
    int64_t next_s = 0;
    int64_t waited_s =
        now_ms > (int64_t)j->submitted_ms ? (now_ms - (int64_t)j->submitted_ms) / 1000 : 0;
    struct sched_request req = j->req;
    struct sched_reservation res;
    const struct d_job *holder = NULL;
    struct sched_running *run = running_list(d);
    struct sched_explain e;
    struct mu_err err;
    bool has_res = other_reservation(d, j, &res, &holder);
    bool ok;

    if (d->pass.nvictims > 0 && !run)
        return false;
    /* The level the pass uses after waiting (sched_relaxed_level), like pass_request. */
    req.required_level =
        sched_relaxed_level(j->req.required_level, waited_s, j->spec.topo_relax_after_s, &next_s);
    if (sched_explain(d->cluster, &req, d_job_run_s(d, j), run, d->pass.nvictims,
                      has_res ? &res : NULL, now_s, &e, &err)
        != 0) {
        free(run);
        return cJSON_AddStringToObject(doc, "explain_error", err.msg) != NULL;
    }
    free(run);
    ok = add_levels(doc, d, &e, req.required_level)
         && add_start(doc, d, &e, strcmp(d->pass.reserved, j->id) == 0, now_s)
         && add_backfill(doc, d, j, &e, holder, now_s);
    return ok;
}

/* Where j stands before placement: its dependencies, and its place in the order now
 * (d_pending_standing). */
static bool add_standing(cJSON *doc, struct musterd *d, const struct d_job *j)
{
    cJSON *o = cJSON_AddObjectToObject(doc, "order");
    bool in_pass = j->pending_at && !j->held;
    char deps[256] = "";
    int ahead = 0;
    int ahead_other = 0;
    struct mu_err err;

    if (!o)
        return false;
    if (j->deps_open > 0)
        d_deps_reason(j, deps, sizeof(deps));
    if (in_pass && d_pending_standing(d, j, &ahead, &ahead_other, &err) != 0)
        return false;
    return cJSON_AddBoolToObject(o, "in_pass", in_pass)
           && cJSON_AddNumberToObject(o, "ahead", ahead)
           && cJSON_AddNumberToObject(o, "ahead_other_queues", ahead_other)
           && cJSON_AddNumberToObject(o, "dependencies_open", j->deps_open)
           && cJSON_AddStringToObject(o, "dependencies", deps);
}

/* The document for job j (NULL without memory). */
static cJSON *why_doc(struct musterd *d, const struct d_job *j)
{
    int64_t now_ms = (int64_t)mu_time_wall_ms();
    int64_t now_s = now_ms / 1000;
    struct sched_slot *slots = calloc((size_t)j->spec.tasks, sizeof(*slots));
    cJSON *doc = slots ? cJSON_CreateObject() : NULL;
    bool ok = doc && cJSON_AddStringToObject(doc, "job", j->id)
              && cJSON_AddStringToObject(doc, "state", queue_state_name(j->state))
              && cJSON_AddStringToObject(doc, "reason", j->reason)
              && cJSON_AddBoolToObject(doc, "held", j->held);

    if (ok && j->state == QUEUE_PENDING && !j->held && j->est_start_s > now_s)
        ok = cJSON_AddNumberToObject(doc, "est_start_s", (double)j->est_start_s)
             && cJSON_AddNumberToObject(doc, "est_start_in_s", (double)(j->est_start_s - now_s));

    if (ok && j->state == QUEUE_PENDING && !j->placed)
        ok = add_queue(doc, d, j) && add_standing(doc, d, j)
             && add_capacity(doc, d, j, now_s, slots) && add_pools(doc, d, j, now_s)
             && add_preview(doc, d, j, now_ms, slots) && add_explain(doc, d, j, now_ms);
    free(slots);
    if (!ok) {
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

void d_why(struct musterd *d, const char *entry_id, const char *job_id)
{
    const struct d_job *j = mu_map_get(d->jobs, job_id);
    cJSON *doc = j ? why_doc(d, j) : cJSON_CreateObject();
    char key[QUEUE_JOB_ID_MAX + 8];
    char *text = NULL;
    struct mu_err err;

    if (doc && !j
        && (!cJSON_AddStringToObject(doc, "job", job_id)
            || !cJSON_AddStringToObject(doc, "error",
                                        "not active in musterd (finished, or not taken in yet)"))) {
        cJSON_Delete(doc);
        doc = NULL;
    }
    text = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    (void)mu_snprintf(key, sizeof(key), QUEUE_K_WHY "%s", entry_id);
    if (!text)
        mu_log(MU_LOG_ERROR, "sched", "why %s: out of memory for the answer", job_id);
    else if (d->store.ops->answer_push(d->store.ctx, key, text, strlen(text), &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "why", 5, "why %s: %s", job_id, err.msg);
        d->redis_down = true;
    }
    free(text);
}
