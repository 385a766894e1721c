/* SPDX-License-Identifier: MIT */
/*
 * musterctl drain NODE [--grace S] [--wait [--timeout S]]: asks musterd, through the control
 * stream (cmd "drain", arg the node, grace_s with --grace), to place no new work on the node and
 * to move its gangs elsewhere: each gets its checkpoint signal and grace (at most --grace
 * seconds), is stopped and requeued without counting a failure, and resumes from its newest
 * checkpoint.  The node is looked up first so that a typo fails here instead of being queued.
 * --wait then follows the nodes hash until the node runs no job, saying on stderr what it waits
 * for; it exits 1 when --timeout runs out.
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
    struct mu_err err = { 0 };
    struct queue *q = NULL;
    cJSON *node = NULL;
    int64_t grace = -1;
    int64_t timeout = 0;
    bool wait = ctl_args_get(ctl, args, "wait") != NULL;

    if (ctl_args_int(ctl, args, "grace", 0, 86400, &grace) != 0
        || ctl_args_int(ctl, args, "timeout", 1, INT64_C(1) << 31, &timeout) != 0)
        return CTL_EXIT_USAGE;
    if (timeout && !wait)
        return ctl_usage(ctl, "--timeout needs --wait");
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_node_read(q, name, &node, &err) != 0 && err.code != MU_E_PARSE)
        return ctl_fail(ctl, "node '%s': %s", name, err.msg);
    /* A node whose status does not parse is still registered: let musterd handle it. */
    if (!node && err.code != MU_E_PARSE)
        return ctl_fail(ctl, "node '%s' not found", name);
    cJSON_Delete(node);
    if (queue_control_send_grace(q, "drain", name, (int)grace, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (ctl->output == CTL_OUT_JSON) {
        cJSON *doc = ctl_json_control("drain", name);
        int rc = ctl_json_print(ctl, doc);
        cJSON_Delete(doc);
        if (rc != CTL_EXIT_OK || !wait)
            return rc;
    } else {
        printf("drain requested for node ");
        ctl_print_clean(stdout, name);
        putchar('\n');
        (void)fflush(stdout);
    }
    return wait ? drain_wait(ctl, q, name, timeout) : CTL_EXIT_OK;
}
