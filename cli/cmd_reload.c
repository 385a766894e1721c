/* SPDX-License-Identifier: MIT */
/*
 * musterctl reload: asks musterd to read its config file again (the control command "reload",
 * as SIGHUP does on its host) and waits for its answer, so that an operator who just edited a
 * quota learns right here whether it took effect or why it was refused (the key path of a bad
 * value, or the part of the config that only a restart changes).  musterd writes the answer to
 * the reload hash with the request's id.  The request is sent only while a musterd leads (else
 * this fails at once) and carries --timeout as its deadline: musterd drops it unread past that,
 * so a reload nobody answered is never applied later (issue #40).
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

#define POLL_MS 100
/* musterctl waits this much past the request's deadline before it says nobody answered: an entry
 * musterd read in time is answered within a moment. */
#define MARGIN_MS 1000

int ctl_cmd_reload(struct ctl *ctl, const struct ctl_args *args)
{
    struct mu_err err = { 0 };
    struct queue *q = ctl_queue(ctl);
    struct queue_control_req c = { "reload", NULL, -1, 0, false, 0 };
    enum queue_post posted;
    char id[64];
    char got[64];
    char result[600];
    int64_t timeout_s = 10;
    int64_t waited_ms = 0;

    if (ctl_args_int(ctl, args, "timeout", 1, 3600, &timeout_s) != 0)
        return CTL_EXIT_USAGE;
    if (!q)
        return CTL_EXIT_FAIL;
    c.timeout_ms = (int)timeout_s * 1000;
    if (ctl_post(ctl, &c, &posted, id, sizeof(id)) != 0)
        return CTL_EXIT_FAIL;
    if (posted != QUEUE_POST_SENT)
        return ctl_no_leader(ctl, "nothing was sent; the config is read when musterd starts");
    for (;;) {
        if (queue_reload_result(q, got, sizeof(got), result, sizeof(result), &err) != 0)
            return ctl_fail(ctl, "%s", err.msg);
        if (strcmp(got, id) == 0)
            break;
        if (waited_ms >= timeout_s * 1000 + MARGIN_MS)
            return ctl_fail(ctl,
                            "no answer from musterd within %llds (is it stuck, or on another "
                            "Redis?); the request %s expired and is never applied",
                            (long long)timeout_s, id);
        ctl_sleep_ms(POLL_MS);
        waited_ms += POLL_MS;
    }
    return ctl_answer_print(ctl, id, -1, result);
}
