/* SPDX-License-Identifier: MIT */
/*
 * musterctl cancel ID...: asks musterd (through the control stream) to cancel each job.
 * Every id is looked up first so that a typo is reported instead of silently queued; a job that
 * has already finished is left alone and said so (cancelling it again is harmless, and scripts
 * that cancel "whatever is left" should not fail).  One missing id does not stop the others; the
 * exit status is 1 if any was missing.  With no musterd leading nothing is sent and it exits 1
 * at once: a cancel left in the stream would apply whenever one starts (issue #40).
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

int ctl_cmd_cancel(struct ctl *ctl, const struct ctl_args *args)
{
    struct queue *q = ctl_queue(ctl);
    cJSON *sent = NULL;
    int rc = CTL_EXIT_OK;

    if (!q)
        return CTL_EXIT_FAIL;
    sent = cJSON_CreateArray();
    if (!sent)
        return ctl_fail(ctl, "out of memory");
    for (int i = 0; i < args->argc; i++) {
        const char *id = args->argv[i];
        char state[32] = "";
        bool found = false;
        struct queue_control_req c = { "cancel", id, -1, 0, false, 0 };
        enum queue_post posted;
        char entry_id[QUEUE_JOB_ID_MAX];
        cJSON *entry;

        if (ctl_job_lookup(ctl, id, &found, state, sizeof(state)) != 0) {
            rc = CTL_EXIT_FAIL;
            continue;
        }
        if (!found) {
            rc = ctl_fail(ctl, "job '%s' not found", id);
            continue;
        }
        if (ctl_state_is_final(state)) {
            (void)fprintf(stderr, "musterctl: cancel: job '%s' is already %s; nothing to do\n", id,
                          state);
            continue;
        }
        if (ctl_post(ctl, &c, &posted, entry_id, sizeof(entry_id)) != 0) {
            rc = CTL_EXIT_FAIL;
            continue;
        }
        if (posted != QUEUE_POST_SENT) {
            rc = ctl_no_leader(ctl, "nothing was sent; cancel again once one leads");
            break; /* the others would be refused the same way */
        }
        entry = ctl_json_control("cancel", id);
        if (!entry || !cJSON_AddItemToArray(sent, entry)) {
            cJSON_Delete(entry);
            rc = ctl_fail(ctl, "out of memory");
            continue;
        }
        if (ctl->output == CTL_OUT_TABLE)
            printf("cancel requested for job %s\n", id);
    }
    if (ctl->output == CTL_OUT_JSON && ctl_json_print(ctl, sent) != CTL_EXIT_OK)
        rc = CTL_EXIT_FAIL;
    cJSON_Delete(sent);
    return rc;
}
