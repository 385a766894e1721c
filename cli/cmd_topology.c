/* SPDX-License-Identifier: MIT */
/*
 * musterctl topology import FILE: labels nodes from the EC2 instance topology AWS publishes
 * (issue #16, docs/deploy.md).  FILE is what `aws ec2 describe-instance-topology` prints; it is
 * read whole and checked here first (cfg_topo_parse), so that a file that is not JSON, lacks
 * fields or names an instance twice fails before anything is sent.  The instances are staged in
 * Redis under a fresh token (queue/topo.c) and the control command "topology" asks musterd to
 * apply them: musterd alone knows which level each network layer sets (its config's
 * instance_topology), so it checks every instance against that and either takes the whole
 * file or refuses it with the reason, changing nothing.  Like reload, this waits for musterd's
 * answer and exits 1 on a refusal or when none comes within --timeout; the command is sent only
 * while a musterd leads and carries --timeout as its deadline, past which musterd drops it.
 */
#include "cli/internal.h"

#include <stdlib.h>
#include <string.h>

#include "config/cfg.h"

#include "common/mu_banned.h"

#define POLL_MS        100
#define STAGE_TTL_S    3600 /* a staged import musterd never read goes away by itself */
#define STAGE_BATCH    1000 /* instances per HSET */
#define CTL_RESULT_MAX 600

/* Reads FILE (or - for standard input) and parses it; NULL after printing why. */
static struct cfg_topo *topo_read(struct ctl *ctl, const char *path)
{
    struct mu_err err = { 0 };
    struct cfg_topo *t;
    size_t len = 0;
    char *text =
        mu_file_read(strcmp(path, "-") == 0 ? "/dev/stdin" : path, CFG_TOPO_FILE_MAX, &len, &err);

    if (!text) {
        (void)ctl_fail(ctl, "%s", err.msg);
        return NULL;
    }
    t = cfg_topo_parse(text, len, &err);
    free(text);
    if (!t)
        (void)ctl_fail(ctl, "%s: %s; nothing changed", path, err.msg);
    return t;
}

/* Stages every instance of t under a new token; 0, or -1 after printing why. */
static int topo_stage(
    struct ctl *ctl, struct queue *q, const struct cfg_topo *t, char *token, size_t token_size)
{
    struct mu_err err = { 0 };
    struct queue_kv kv[STAGE_BATCH];
    char *json[STAGE_BATCH];
    char hash[128];
    int n = cfg_topo_count(t);
    int rc = -1;

    if (queue_topology_token(q, token, token_size, &err) != 0) {
        (void)ctl_fail(ctl, "%s", err.msg);
        return -1;
    }
    queue_topology_staging(token, hash, sizeof(hash));
    for (int first = 0; first < n; first += STAGE_BATCH) {
        int m = n - first < STAGE_BATCH ? n - first : STAGE_BATCH;
        int made = 0;
        for (; made < m; made++) {
            const struct cfg_topo_instance *in = cfg_topo_get(t, first + made);
            json[made] = cfg_topo_instance_format(in, &err);
            if (!json[made])
                break;
            kv[made] = (struct queue_kv){ in->instance_id, json[made] };
        }
        rc = made == m ? queue_status_write(q, hash, kv, m, &err) : -1;
        for (int i = 0; i < made; i++)
            free(json[i]);
        if (rc != 0)
            break;
    }
    if (rc == 0)
        rc = queue_hash_expire(q, hash, STAGE_TTL_S, &err);
    if (rc != 0) {
        queue_topology_forget(q, token);
        (void)ctl_fail(ctl, "cannot stage the import: %s", err.msg);
    }
    return rc;
}

/* Waits for musterd's answer to token; 0 with result filled, or -1 after printing why. */
static int topo_wait(
    struct ctl *ctl, struct queue *q, const char *token, int64_t timeout_s, char *result)
{
    struct mu_err err = { 0 };
    int64_t waited_ms = 0;

    for (;;) {
        if (queue_topology_result(q, token, result, CTL_RESULT_MAX, &err) != 0) {
            (void)ctl_fail(ctl, "%s", err.msg);
            return -1;
        }
        if (result[0])
            return 0;
        if (waited_ms >= timeout_s * 1000 + 1000) { /* a second past the deadline */
            (void)ctl_fail(ctl,
                           "no answer from musterd within %llds (is it stuck, or on another "
                           "Redis?); the import expired and is never applied",
                           (long long)timeout_s);
            return -1;
        }
        ctl_sleep_ms(POLL_MS);
        waited_ms += POLL_MS;
    }
}

int ctl_cmd_topology(struct ctl *ctl, const struct ctl_args *args)
{
    struct cfg_topo *t = NULL;
    struct queue *q;
    char token[32];
    char id[QUEUE_JOB_ID_MAX];
    struct queue_control_req c = { "topology", NULL, -1, 0, false, 0 };
    enum queue_post posted = QUEUE_POST_NO_LEADER;
    char result[CTL_RESULT_MAX];
    int64_t timeout_s = 10;
    int rc = CTL_EXIT_FAIL;

    if (strcmp(args->argv[0], "import") != 0)
        return ctl_usage(ctl, "unknown subcommand '%s'; expected 'import FILE'", args->argv[0]);
    if (args->argc != 2)
        return ctl_usage(ctl, "missing FILE (the output of 'aws ec2 describe-instance-topology', "
                              "or - for standard input)");
    if (ctl_args_int(ctl, args, "timeout", 1, 3600, &timeout_s) != 0)
        return CTL_EXIT_USAGE;
    t = topo_read(ctl, args->argv[1]);
    if (!t)
        return CTL_EXIT_FAIL;
    if (cfg_topo_next_token(t)[0])
        (void)fprintf(stderr,
                      "musterctl: topology: %s has a NextToken: it may be one page of several; "
                      "instances on other pages keep the labels they have\n",
                      args->argv[1]);
    q = ctl_queue(ctl);
    if (!q || topo_stage(ctl, q, t, token, sizeof(token)) != 0)
        goto out;
    c.arg = token;
    c.timeout_ms = (int)timeout_s * 1000;
    if (ctl_post(ctl, &c, &posted, id, sizeof(id)) != 0 || posted != QUEUE_POST_SENT) {
        queue_topology_forget(q, token);
        if (posted != QUEUE_POST_SENT)
            rc = ctl_no_leader(ctl, "nothing was imported");
        goto out;
    }
    if (topo_wait(ctl, q, token, timeout_s, result) != 0)
        goto out;
    queue_topology_forget(q, token);
    rc = ctl_answer_print(ctl, token, cfg_topo_count(t), result);
out:
    cfg_topo_free(t);
    return rc;
}
