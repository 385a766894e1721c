/* SPDX-License-Identifier: MIT */
/*
 * musterctl drain NODE [--grace S] [--wait [--timeout S]]: asks musterd, through the control
 * stream (cmd "drain", arg the node, grace_s with --grace), to place no new work on the node and
 * to move its gangs elsewhere: each gets its checkpoint signal and grace (at most --grace
 * seconds), is stopped and requeued without counting a failure, and resumes from its newest
 * checkpoint.  A node that never registered is refused here; the drain is kept in
 * <prefix>node:wanted (ctl_node_command), so a node that is away, or a musterd that is, gets it
 * when it comes back.  --wait then follows the nodes hash until the node runs no job, saying on
 * stderr what it waits for; it exits 1 when --timeout runs out.
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

#define WAIT_POLL_MS 500

/* The jobs the node's status lists (0 when none), into jobs as "ID ID ...". */
static int node_jobs(struct queue *q, const char *name, char *jobs, size_t size, struct mu_err *err)
{
    cJSON *node = NULL;
    const cJSON *it;
    int n = 0;

    jobs[0] = '\0';
    if (queue_node_read(q, name, &node, err) != 0)
        return -1;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(node, "jobs"))
    {
        size_t len = strlen(jobs);
        if (cJSON_IsString(it))
            (void)snprintf(jobs + len, size - len, "%s%s", n ? " " : "", it->valuestring);
        n++;
    }
    cJSON_Delete(node);
    return n;
}

static int drain_wait(struct ctl *ctl, struct queue *q, const char *name, int64_t timeout_s)
{
    uint64_t deadline = timeout_s > 0 ? mu_time_mono_ms() + (uint64_t)timeout_s * 1000u : 0;
    char jobs[512];
    char said[512] = "";
    struct mu_err err = { 0 };

    /* musterd applies the command within a moment and rewrites the status at once; the first
     * read may still show the jobs it is about to stop, which is what we wait for anyway. */
    for (;;) {
        int n = node_jobs(q, name, jobs, sizeof(jobs), &err);
        if (n < 0)
            return ctl_fail(ctl, "drain: node '%s': %s", name, err.msg);
        if (n == 0)
            break;
        if (strcmp(jobs, said) != 0) {
            (void)fprintf(stderr, "musterctl: drain: waiting for %d job(s) on %s to stop: %s\n", n,
                          name, jobs);
            mu_strlcpy(said, jobs, sizeof(said));
        }
        if (deadline && mu_time_mono_ms() >= deadline)
            return ctl_fail(ctl, "drain: node '%s' still runs %d job(s) after %lld s: %s", name, n,
                            (long long)timeout_s, jobs);
        ctl_sleep_ms(WAIT_POLL_MS);
    }
    (void)fprintf(stderr, "musterctl: drain: node %s runs no job\n", name);
    return CTL_EXIT_OK;
}

int ctl_cmd_drain(struct ctl *ctl, const struct ctl_args *args)
{
    const char *name = args->argv[0];
    enum queue_post posted = QUEUE_POST_NO_LEADER;
    struct queue *q = NULL;
    int64_t grace = -1;
    int64_t timeout = 0;
    int rc;
    bool wait = ctl_args_get(ctl, args, "wait") != NULL;

    if (ctl_args_int(ctl, args, "grace", 0, 86400, &grace) != 0
        || ctl_args_int(ctl, args, "timeout", 1, INT64_C(1) << 31, &timeout) != 0)
        return CTL_EXIT_USAGE;
    if (timeout && !wait)
        return ctl_usage(ctl, "--timeout needs --wait");
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    rc = ctl_node_command(ctl, "drain", name, (int)grace, &posted);
    (void)fflush(stdout);
    if (rc != CTL_EXIT_OK || !wait)
        return rc;
    if (posted != QUEUE_POST_SENT)
        return ctl_no_leader(ctl, "nothing moves the node's jobs until one does; not waiting");
    return drain_wait(ctl, q, name, timeout);
}
