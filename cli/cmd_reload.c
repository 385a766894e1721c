/* SPDX-License-Identifier: MIT */
/*
 * musterctl reload: asks musterd to read its config file again (the control command "reload",
 * as SIGHUP does on its host) and waits for its answer, so that an operator who just edited a
 * quota learns right here whether it took effect or why it was refused (the key path of a bad
 * value, or the part of the config that only a restart changes).  musterd writes the answer to
 * the reload hash with the request's id; no answer within --timeout means musterd is not
 * reading the control stream (not running, or Redis is not the one it uses).
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

#define POLL_MS 100

int ctl_cmd_reload(struct ctl *ctl, const struct ctl_args *args)
{
    struct mu_err err = { 0 };
    struct queue *q = ctl_queue(ctl);
    char id[64];
    char got[64];
    char result[600];
    int64_t timeout_s = 10;
    int waited_ms = 0;

    if (ctl_args_int(ctl, args, "timeout", 1, 3600, &timeout_s) != 0)
        return CTL_EXIT_USAGE;
    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_reload_request(q, id, sizeof(id), &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    for (;;) {
        if (queue_reload_result(q, got, sizeof(got), result, sizeof(result), &err) != 0)
            return ctl_fail(ctl, "%s", err.msg);
        if (strcmp(got, id) == 0)
            break;
        if (waited_ms >= timeout_s * 1000)
            return ctl_fail(ctl,
                            "no answer from musterd within %llds (is it running, on this Redis?); "
                            "the request %s stays in the control stream",
                            (long long)timeout_s, id);
        ctl_sleep_ms(POLL_MS);
        waited_ms += POLL_MS;
    }
    return ctl_answer_print(ctl, id, -1, result);
}
