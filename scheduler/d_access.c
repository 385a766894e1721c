/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd (d_access.h): the access rules (access/access.h) applied to entries and
 * jobs.  Counting is lazy: a user's jobs not yet started are counted once per intake batch, and
 * only when some user has max_pending_jobs; running GPUs once per pass, only when some user has
 * max_running_gpus.  A cluster without caps pays nothing.
 */
#include "scheduler/d_access.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

struct d_access_count {
    int64_t pending; /* jobs not started yet (an array's unmade elements each count) */
    int64_t running; /* GPUs running, with this pass's starts */
};

struct access *d_access_load(const char *path, struct mu_err *err)
{
    struct access *a;
    size_t len = 0;
    char *text;

    if (!path)
        return access_new_default();
    text = mu_file_read(path, CFG_FILE_MAX, &len, err);
    if (!text)
        return NULL;
    a = access_parse(text, len, err);
    free(text);
    if (!a)
        mu_err_prefix(err, "%s: ", path);
    return a;
}

static void counts_clear(struct musterd *d)
{
    size_t pos = 0;
    struct d_access_count *c;

    while ((c = mu_map_next(d->access_counts, &pos)) != NULL)
        free(c);
    mu_map_free(d->access_counts);
    d->access_counts = NULL;
    d->access_pending_fresh = false;
    d->access_running_on = false;
}

int d_access_set(struct musterd *d, struct access *a, struct mu_err *err)
{
    int n = access_identity(a) == ACCESS_REDIS_ACL ? access_nusers(a) : 0;
    const char **users = n > 0 ? calloc((size_t)n, sizeof(*users)) : NULL;
    int rc = -1;

    if (n > 0 && !users) {
        mu_errf(err, MU_E_NOMEM, "out of memory for %d users", n);
        goto out;
    }
    for (int i = 0; i < n; i++)
        users[i] = access_user(a, i);
    if (d->qi && queue_intake_users(d->qi, users, n, err) != 0)
        goto out;
    access_free(d->access);
    d->access = a;
    a = NULL;
    counts_clear(d);
    rc = 0;
out:
    free(users);
    access_free(a);
    return rc;
}

bool d_access_proven(const struct musterd *d)
{
    return d->access && access_identity(d->access) == ACCESS_REDIS_ACL;
}

void d_access_free(struct musterd *d)
{
    counts_clear(d);
    access_free(d->access);
    d->access = NULL;
}

/* user's counts, made when missing; NULL without memory. */
static struct d_access_count *count_of(struct musterd *d, const char *user)
{
    struct d_access_count *c;
    struct mu_err err;

    if (!d->access_counts && !(d->access_counts = mu_map_new()))
        return NULL;
    if ((c = mu_map_get(d->access_counts, user)) != NULL)
        return c;
    if (!(c = calloc(1, sizeof(*c))))
        return NULL;
    if (mu_map_put(d->access_counts, user, c, &err) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

/* The jobs j stands for that have not started: an array's unmade elements, else 1 or 0. */
static int64_t unstarted(const struct d_job *j)
{
    if (j->array)
        return j->spec.array->count - j->array->next;
    return j->state == QUEUE_PENDING && !j->placed ? 1 : 0;
}

/* Every user's jobs not started yet, counted from the job table. */
static int pending_count(struct musterd *d)
{
    size_t pos = 0;
    struct d_job *j;
    struct d_access_count *c;

    while ((c = mu_map_next(d->access_counts, &pos)) != NULL)
        c->pending = 0;
    pos = 0;
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        int64_t n = queue_state_is_final(j->state) ? 0 : unstarted(j);
        if (n == 0)
            continue;
        if (!(c = count_of(d, j->spec.user)))
            return -1;
        c->pending += n;
    }
    d->access_pending_fresh = true;
    return 0;
}

void d_access_batch_begin(struct musterd *d)
{
    d->access_pending_fresh = false;
}

/* The user's max_pending_jobs against what they have waiting, with this submission's jobs. */
static int pending_cap(struct musterd *d, const struct d_job *j, char *why, size_t size)
{
    struct access_caps caps;
    struct d_access_count *c;
    int64_t adds = j->spec.array ? j->spec.array->count : 1;

    access_caps(d->access, j->spec.user, &caps);
    if (caps.max_pending_jobs <= 0)
        return 0;
    if ((!d->access_pending_fresh && pending_count(d) != 0) || !(c = count_of(d, j->spec.user))) {
        (void)mu_snprintf(why, size, "musterd is out of memory counting %s's jobs; submit again",
                          j->spec.user);
        return -1;
    }
    if (c->pending + adds > caps.max_pending_jobs) {
        (void)mu_snprintf(why, size,
                          "%s has %lld job(s) waiting to start; %lld more would pass the cap of "
                          "%lld (%s)",
                          j->spec.user, (long long)c->pending, (long long)adds,
                          (long long)caps.max_pending_jobs, caps.pending_rule);
        return -1;
    }
    c->pending += adds;
    return 0;
}

int d_access_submit(
    struct musterd *d, const struct queue_entry *e, struct d_job *j, char *why, size_t size)
{
    char user[ACCESS_NAME_MAX];
    struct mu_err err;
    struct access_submit s = { .owner = d_access_proven(d) ? e->owner : "",
                               .user = j->spec.user,
                               .queue = j->spec.queue,
                               .priority = j->spec.priority,
                               .preemptible = j->spec.preemptible };

    if (d_access_proven(d) && !e->owner[0]) {
        (void)mu_snprintf(why, size,
                          "muster proves who submits (access.identity \"redis-acl\"): submit as "
                          "your own Redis user, which writes to %s" QUEUE_K_SUBMIT
                          ":<you>, not to the shared "
                          "%s" QUEUE_K_SUBMIT,
                          d->cfg.key_prefix, d->cfg.key_prefix);
        return -1;
    }
    if (access_submit_check(d->access, &s, user, sizeof(user), &err) != 0) {
        (void)mu_snprintf(why, size, "%s", err.msg);
        return -1;
    }
    if (!user[0] && e->owner[0])
        mu_strlcpy(user, e->owner, sizeof(user)); /* single-user: the stream names the writer */
    mu_strlcpy(j->spec.user, user, sizeof(j->spec.user));
    mu_strlcpy(j->owner, e->owner, sizeof(j->owner));
    return pending_cap(d, j, why, size);
}

int d_access_control(
    struct musterd *d, const struct queue_entry *e, const struct d_job *j, char *why, size_t size)
{
    struct mu_err err;

    /* The shared stream is written by musterd's own Redis user and whoever the ACL lets: in
     * redis-acl mode, operators (docs/security.md). */
    if (!d_access_proven(d) || !e->owner[0])
        return 0;
    if (access_control_check(d->access, e->owner, e->cmd, j ? j->spec.user : NULL, j ? j->id : NULL,
                             &err)
        == 0)
        return 0;
    (void)mu_snprintf(why, size, "%s", err.msg);
    return -1;
}

void d_access_verdict(struct musterd *d, const struct queue_entry *e, const char *error)
{
    static const char ok[] = "{\"ok\":true}";
    char key[QUEUE_JOB_ID_MAX + 16];
    struct mu_buf text;
    struct mu_err err;

    if (!e->owner[0])
        return;
    if (strcmp(e->cmd, "why") == 0 || strcmp(e->cmd, "forget") == 0) {
        if (!error)
            return; /* answered by the command itself */
        (void)mu_snprintf(key, sizeof(key), "%s:%s", e->cmd, e->id);
    } else {
        (void)mu_snprintf(key, sizeof(key), QUEUE_K_REPLY "%s", e->id);
    }
    mu_buf_init(&text, 4096);
    if (error ? mu_buf_append(&text, "{\"error\":", 9, &err) != 0
                    || mu_buf_append_json_str(&text, error, &err) != 0
                    || mu_buf_append(&text, "}", 1, &err) != 0
              : mu_buf_append(&text, ok, sizeof(ok) - 1, &err) != 0)
        mu_log(MU_LOG_ERROR, "sched", "control %s (entry %s): no verdict: %s", e->cmd, e->id,
               err.msg);
    else if (d->store.ops->answer_push(d->store.ctx, key, text.data, text.len, &err) != 0)
        d->redis_down = true;
    mu_buf_release(&text);
}

void d_access_pass_begin(struct musterd *d)
{
    struct d_access_count *c;
    size_t pos = 0;

    d->access_running_on = false;
    if (!d_access_proven(d) || !access_has_running_caps(d->access))
        return;
    while ((c = mu_map_next(d->access_counts, &pos)) != NULL)
        c->running = 0;
    for (int i = 0; i < d->usage.nusers; i++) {
        const struct d_user *u = d->usage.users[i];
        if (u->held_gpus > 0 && (c = count_of(d, u->name)) != NULL)
            c->running += u->held_gpus;
    }
    d->access_running_on = true;
}

static int64_t job_gpus(const struct d_job *j)
{
    return (int64_t)j->spec.tasks * j->spec.gpus_per_task;
}

bool d_access_over_cap(struct musterd *d, const struct d_job *j, char *reason, size_t size)
{
    struct access_caps caps;
    const struct d_access_count *c;
    int64_t running;

    if (!d->access_running_on)
        return false;
    access_caps(d->access, j->spec.user, &caps);
    if (caps.max_running_gpus <= 0)
        return false;
    c = mu_map_get(d->access_counts, j->spec.user);
    running = c ? c->running : 0;
    if (running + job_gpus(j) <= caps.max_running_gpus)
        return false;
    (void)mu_snprintf(reason, size, "%s runs %lld of their %lld GPUs; this job needs %lld (%s)",
                      j->spec.user, (long long)running, (long long)caps.max_running_gpus,
                      (long long)job_gpus(j), caps.running_rule);
    return true;
}

void d_access_started(struct musterd *d, const struct d_job *j)
{
    struct d_access_count *c;

    if (d->access_running_on && (c = count_of(d, j->spec.user)) != NULL)
        c->running += job_gpus(j);
}
