/* SPDX-License-Identifier: MIT */
/*
 * musterctl status: which musterd leads (issue #14), since when, with which fencing epoch and
 * how much of its lease is left, and which stand by (queue_leadership_read: plain reads, so a
 * read-only operator may ask).  The lease left is Redis's own count (PTTL); the ages compare
 * Redis's clock (when the lease was taken) with this host's, so they are as good as NTP.
 */
#include "cli/internal.h"

#include <stdio.h>
#include <time.h>

#include "common/mu_banned.h"

int ctl_cmd_status(struct ctl *ctl, const struct ctl_args *args)
{
    struct mu_err err = { 0 };
    struct queue *q = ctl_queue(ctl);
    cJSON *doc = NULL;
    const cJSON *s;
    char hbuf[256];
    const char *holder;
    char age[32];
    char when[32] = "?";
    struct tm tm;
    time_t since;
    uint64_t now;
    int rc;

    (void)args;
    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_leadership_read(q, &doc, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (ctl->output == CTL_OUT_JSON) {
        rc = ctl_json_print(ctl, doc);
        cJSON_Delete(doc);
        return rc;
    }
    now = (uint64_t)ctl_json_int(doc, "now_ms", 0);
    holder = ctl_json_text(doc, "holder", hbuf, sizeof(hbuf));
    ctl_format_age(now, (uint64_t)ctl_json_int(doc, "since_ms", 0), age, sizeof(age));
    since = (time_t)(ctl_json_int(doc, "since_ms", 0) / 1000);
    if (gmtime_r(&since, &tm) && strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        when[0] = '\0';
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "leading")))
        (void)printf("leader:   %s (pid %lld)\nepoch:    %lld\nsince:    %s (%s ago)\n"
                     "lease:    %.1f s left\n",
                     holder, (long long)ctl_json_int(doc, "pid", 0),
                     (long long)ctl_json_int(doc, "epoch", 0), when, age,
                     (double)ctl_json_int(doc, "lease_ms_left", 0) / 1000.0);
    else if (ctl_json_int(doc, "epoch", 0) > 0)
        (void)printf("leader:   none (the lease is free; the last leader was %s, epoch %lld, "
                     "from %s)\n",
                     holder, (long long)ctl_json_int(doc, "epoch", 0), when);
    else
        (void)printf("leader:   none (no musterd has led on this Redis)\n");
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(doc, "standbys"))
    {
        holder = ctl_json_text(s, "holder", hbuf, sizeof(hbuf));
        ctl_format_age(now, (uint64_t)ctl_json_int(s, "seen_ms", 0), age, sizeof(age));
        (void)printf("standby:  %s (seen %s ago)\n", holder, age);
    }
    cJSON_Delete(doc);
    return CTL_EXIT_OK;
}
