/* SPDX-License-Identifier: MIT */
/*
 * musterctl node forget NODE: asks musterd to remove the record of a node that is gone (lost, or
 * down after its worker stopped cleanly), so that it leaves musterctl nodes, the nodes hash and
 * the nodes a restarted musterd waits for (issue #40).  Only musterd knows whether the node is
 * registered or still has tasks, so the question goes on the control stream (cmd forget, arg the
 * node; queue_control_post: only while a musterd leads, with --timeout as its deadline) and this
 * waits for its answer on <prefix>forget:<entry id> (queue/answer.c), printing it and exiting 1
 * on a refusal or when none comes within --timeout.  A name with no record fails here, before
 * anything is sent.
 */
#include "cli/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define ANSWER_MAX 600

static int node_forget(struct ctl *ctl, const char *name, int64_t timeout_s)
{
    struct mu_err err = { 0 };
    struct queue *q = ctl_queue(ctl);
    cJSON *node = NULL;
    char entry[QUEUE_JOB_ID_MAX];
    char key[QUEUE_JOB_ID_MAX + 16];
    char result[ANSWER_MAX];
    char *value = NULL;
    size_t len = 0;
    struct queue_control_req c = { "forget", name, -1, (int)timeout_s * 1000, false, 0 };
    enum queue_post posted;
    int rc;

    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_node_read(q, name, &node, &err) != 0 && err.code != MU_E_PARSE)
        return ctl_fail(ctl, "node '%s': %s", name, err.msg);
    /* A record that does not parse is still a record: let musterd judge it. */
    if (!node && err.code != MU_E_PARSE)
        return ctl_fail(ctl, "node '%s' not found", name);
    cJSON_Delete(node);
    if (queue_control_post(q, &c, &posted, NULL, entry, sizeof(entry), &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (posted != QUEUE_POST_SENT)
        return ctl_fail(ctl,
                        "no musterd leads right now (%s" QUEUE_K_LEADER
                        " is free), so none can forget node "
                        "'%s'; hint: start musterd, or see musterctl status",
                        queue_prefix(q), name);
    (void)mu_snprintf(key, sizeof(key), "forget:%s", entry);
    /* One second past the request's deadline: musterd answers at once what it read in time. */
    for (int64_t s = 0; s <= timeout_s && !value; s++) {
        if (queue_answer_wait(q, key, 1000, &value, &len, &err) != 0)
            return ctl_fail(ctl, "%s", err.msg);
    }
    if (!value)
        return ctl_fail(ctl,
                        "no answer from musterd within %llds; it drops the request once that "
                        "is past",
                        (long long)timeout_s);
    mu_strlcpy(result, value, sizeof(result));
    free(value);
    rc = ctl_answer_print(ctl, entry, -1, result);
    return rc;
}

int ctl_cmd_node(struct ctl *ctl, const struct ctl_args *args)
{
    int64_t timeout_s = 10;

    if (ctl_args_int(ctl, args, "timeout", 1, 3600, &timeout_s) != 0)
        return CTL_EXIT_USAGE;
    if (strcmp(args->argv[0], "forget") != 0)
        return ctl_usage(ctl, "expected 'forget', got '%s'", args->argv[0]);
    return node_forget(ctl, args->argv[1], timeout_s);
}
