/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd (d_usage.h): the queues' fair-share usage.  The arithmetic (decay, exact
 * accrual over an interval) is the core's (core/share.c), so musterd, the tests and a later
 * simulator count usage the same way.
 */

#include "scheduler/d_usage.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

void d_usage_accrue(struct musterd *d, uint64_t now_ms)
{
    struct d_usage *u = &d->usage;
    double dt_s = u->at_ms && now_ms > u->at_ms ? (double)(now_ms - u->at_ms) / 1000.0 : 0;

    if (dt_s > 0) {
        for (int q = 0; q <= d->cfg.nqueues; q++)
            u->gpu_s[q] = sched_usage_accrue(u->gpu_s[q], (double)u->held_gpus[q], dt_s,
                                             d->cfg.fair_share_half_life_s);
        for (int i = 0; i < u->nusers; i++)
            u->users[i]->gpu_s =
                sched_usage_accrue(u->users[i]->gpu_s, (double)u->users[i]->held_gpus, dt_s,
                                   d->cfg.fair_share_half_life_s);
    }
    if (now_ms > u->at_ms)
        u->at_ms = now_ms;
}

/* Finds or makes the user `name` of queue `queue`; NULL when out of memory (err set). */
static struct d_user *user_get(struct d_usage *u,
                               const char *queue,
                               const char *name,
                               struct mu_err *err)
{
    char key[sizeof(((struct d_user *)0)->queue) + sizeof(((struct d_user *)0)->name)];
    struct d_user *du;

    (void)mu_snprintf(key, sizeof(key), "%s\x1f%s", queue, name);
    if (!u->by_key && !(u->by_key = mu_map_new()))
        goto nomem;
    if ((du = mu_map_get(u->by_key, key)) != NULL)
        return du;
    if (u->nusers == u->cap_users) {
        int cap = u->cap_users ? 2 * u->cap_users : 16;
        /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        struct d_user **users = realloc(u->users, (size_t)cap * sizeof(*users));
        if (!users)
            goto nomem;
        u->users = users;
        u->cap_users = cap;
    }
    if (!(du = calloc(1, sizeof(*du))))
        goto nomem;
    mu_strlcpy(du->queue, queue, sizeof(du->queue));
    mu_strlcpy(du->name, name, sizeof(du->name));
    du->slot = u->nusers;
    if (mu_map_put(u->by_key, key, du, err) != 0) {
        free(du);
        return NULL;
    }
    u->users[u->nusers++] = du;
    return du;
nomem:
    mu_errf(err, MU_E_NOMEM, "out of memory for the usage of user %s in queue %s", name, queue);
    return NULL;
}

struct d_user *d_usage_user(struct musterd *d, struct d_job *j, struct mu_err *err)
{
    if (!j->user)
        j->user = user_get(&d->usage, j->spec.queue, j->spec.user, err);
    return j->user;
}

void d_usage_free(struct musterd *d)
{
    for (int i = 0; i < d->usage.nusers; i++)
        free(d->usage.users[i]);
    free(d->usage.users);
    mu_map_free(d->usage.by_key);
    d->usage.users = NULL;
    d->usage.by_key = NULL;
    d->usage.nusers = d->usage.cap_users = 0;
}

static void held_add(int64_t *held, int64_t gpus)
{
    *held += gpus;
    if (MU_NEVER(*held < 0))
        *held = 0;
}

void d_usage_hold(struct musterd *d, struct d_job *j, int tasks)
{
    int64_t gpus = (int64_t)tasks * j->spec.gpus_per_task;
    struct mu_err err;
    struct d_user *user;

    d_usage_accrue(d, mu_time_wall_ms());
    held_add(&d->usage.held_gpus[j->queue_idx], gpus);
    if ((user = d_usage_user(d, j, &err)) != NULL)
        held_add(&user->held_gpus, gpus);
    else
        mu_log_limited(MU_LOG_ERROR, "sched", "usage-user", 5, "%s", err.msg);
}

void d_usage_recount_users(struct musterd *d)
{
    size_t pos = 0;
    struct d_job *j;

    for (int i = 0; i < d->usage.nusers; i++)
        d->usage.users[i]->held_gpus = 0;
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        struct mu_err err;
        struct d_user *user = NULL;
        for (int t = 0; j->tasks && t < j->spec.tasks; t++) {
            if (j->tasks[t].committed && (user || (user = d_usage_user(d, j, &err))))
                user->held_gpus += j->spec.gpus_per_task;
        }
    }
}

double d_usage_share(const struct musterd *d, int q)
{
    double total = 0;
    for (int i = 0; i <= d->cfg.nqueues; i++)
        total += d->usage.gpu_s[i];
    return total > 0 ? d->usage.gpu_s[q] / total : 0;
}

/* The stored usage of queue cq's users ({"alice":{"usage_gpu_s":…},…}), decayed over dt_s. */
static int users_recover(struct musterd *d,
                         const struct cfg_queue *cq,
                         const cJSON *users,
                         double dt_s,
                         struct mu_err *err)
{
    const cJSON *u;

    cJSON_ArrayForEach(u, users)
    {
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(u, "usage_gpu_s");
        struct d_user *du;
        if (!u->string || strlen(u->string) >= sizeof(du->name) || !cJSON_IsNumber(usage)
            || !(usage->valuedouble >= 0) || usage->valuedouble > 1e18)
            continue; /* not ours: that user starts from 0 */
        if (!(du = user_get(&d->usage, cq->name, u->string, err)))
            return -1;
        du->gpu_s = sched_usage_decay(usage->valuedouble, dt_s, d->cfg.fair_share_half_life_s);
    }
    return 0;
}

int d_usage_recover(struct musterd *d, struct mu_err *err)
{
    uint64_t now_ms = mu_time_wall_ms();
    cJSON *queues = NULL;
    const cJSON *q;
    int rc = 0;

    if (queue_status_read(d->q, QUEUE_K_QUEUES, &queues, err) != 0)
        return -1;
    cJSON_ArrayForEach(q, queues)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(q, "name");
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(q, "usage_gpu_s");
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(q, "usage_at");
        const struct cfg_queue *cq =
            cJSON_IsString(name) ? cfg_queue_find(&d->cfg, name->valuestring) : NULL;
        double dt_s;
        if (!cq || !cJSON_IsNumber(usage) || !cJSON_IsNumber(at) || !(usage->valuedouble >= 0)
            || usage->valuedouble > 1e18)
            continue; /* from an older version, or not ours: start from 0 */
        dt_s = at->valuedouble < (double)now_ms ? ((double)now_ms - at->valuedouble) / 1000.0 : 0;
        d->usage.gpu_s[cq - d->cfg.queues] =
            sched_usage_decay(usage->valuedouble, dt_s, d->cfg.fair_share_half_life_s);
        if ((rc = users_recover(d, cq, cJSON_GetObjectItemCaseSensitive(q, "users"), dt_s, err))
            != 0)
            break;
    }
    cJSON_Delete(queues);
    d->usage.at_ms = now_ms;
    return rc;
}
