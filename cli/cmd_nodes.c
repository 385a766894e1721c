/* SPDX-License-Identifier: MIT */
/*
 * musterctl nodes: the node status that musterd refreshes in the nodes hash (docs/design.md §6),
 * one row per node sorted by name.  HEARTBEAT is the age of the last heartbeat, the number an
 * operator looks at first when a node misbehaves; IDLE is how long no task has run there and
 * RELEASABLE whether an autoscaler may take it away (idle for consolidate_after_s); REASON says why
 * musterd cordoned it (a node that refused tasks again and again), else what it found odd when the
 * node registered (the entry's "warning": GPUs that do not match the pool's gpus_per_node); STATE
 * is "down" for a node whose worker stopped cleanly, "lost" for one that fell silent; a cordon or
 * drain the operator said while the node or musterd was away (<prefix>node:wanted, issue #40)
 * shows as that state before musterd applies it, and -o json has it as each node's "wanted";
 * LABELS, JOBS and REASON are cut to fit the terminal.  When some node has MIG slices a SLICES
 * column follows GPUS: free/total slices by profile ("1g.10gb:5/7,3g.40gb:1/2").
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

/* Joins an object's members as "k=v,k=v" or an array's strings as "a,b" into b (cut at cap). */
static void join_items(const cJSON *v, struct mu_buf *b)
{
    const cJSON *it;
    bool first = true;
    char num[32];

    cJSON_ArrayForEach(it, v)
    {
        const char *text = cJSON_IsString(it) ? it->valuestring : "";
        if (cJSON_IsNumber(it)) {
            (void)snprintf(num, sizeof(num), "%.0f", it->valuedouble);
            text = num;
        }
        if (cJSON_IsObject(v)) {
            if (mu_buf_appendf(b, NULL, "%s%s=%s", first ? "" : ",", it->string, text) != 0)
                return;
        } else if (mu_buf_appendf(b, NULL, "%s%s", first ? "" : ",", text) != 0) {
            return;
        }
        first = false;
    }
}

/* "1g.10gb:5/7,3g.40gb:1/2": an object of MIG profiles -> {"free","total"}, "-" when empty. */
void ctl_slices_text(const cJSON *slices, char *buf, size_t size)
{
    const cJSON *it;
    size_t n = 0;

    mu_strlcpy(buf, "-", size);
    const cJSON *obj = cJSON_IsObject(slices) ? slices : NULL;

    cJSON_ArrayForEach(it, obj)
    {
        if (mu_snprintf(buf + n, size - n, "%s%s:%lld/%lld", n ? "," : "", it->string,
                        (long long)ctl_json_int(it, "free", 0),
                        (long long)ctl_json_int(it, "total", 0))
            != 0)
            return;
        n += strlen(buf + n);
    }
}

/* Whether some entry of list has MIG slices: then the tables get a SLICES column. */
bool ctl_any_slices(const cJSON *list)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(it, "slices")))
            return true;
    }
    return false;
}

/* One field of <prefix>node:wanted into the object ctx (name -> {"state", "grace_s"}); a value
 * that is not a JSON object is left out. */
static int wanted_one(
    void *ctx, const char *field, const char *value, size_t len, struct mu_err *err)
{
    cJSON *v = cJSON_ParseWithLength(value, len);

    if (!cJSON_IsObject(v)) {
        cJSON_Delete(v);
        return 0;
    }
    if (!cJSON_AddItemToObject(ctx, field, v)) {
        cJSON_Delete(v);
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    }
    return 0;
}

/* Adds to each node its kept wanted state as "wanted" (issue #40): a cordon or drain said while
 * the node or musterd was away shows before musterd applies it. */
static int wanted_merge(struct queue *q, cJSON *nodes, struct mu_err *err)
{
    cJSON *wanted = cJSON_CreateObject();
    cJSON *node;
    int rc = -1;

    if (!wanted)
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    if (queue_hash_each(q, QUEUE_K_NODE_WANTED, wanted_one, wanted, NULL, err) != 0)
        goto out;
    cJSON_ArrayForEach(node, nodes)
    {
        char b[64];
        const cJSON *w =
            cJSON_GetObjectItemCaseSensitive(wanted, ctl_json_text(node, "name", b, sizeof(b)));
        cJSON *copy = w ? cJSON_Duplicate(w, true) : NULL;
        if (w && (!copy || !cJSON_AddItemToObject(node, "wanted", copy))) {
            cJSON_Delete(copy);
            mu_errf(err, MU_E_NOMEM, "out of memory");
            goto out;
        }
    }
    rc = 0;
out:
    cJSON_Delete(wanted);
    return rc;
}

static int nodes_row(struct ctl_table *t, const cJSON *node, uint64_t now_ms, bool slices)
{
    struct mu_buf labels;
    struct mu_buf jobs;
    char b[5][64];
    char reason[320];
    char gpus[48];
    char heartbeat[16] = "-";
    char idle[16] = "-";
    int64_t hb = ctl_json_int(node, "heartbeat_at", 0);
    int64_t idle_since = ctl_json_int(node, "idle_since", 0);
    char slice_text[256];
    const char *cells[12];
    int rc;

    mu_buf_init(&labels, 4096);
    mu_buf_init(&jobs, 4096);
    join_items(cJSON_GetObjectItemCaseSensitive(node, "labels"), &labels);
    join_items(cJSON_GetObjectItemCaseSensitive(node, "jobs"), &jobs);
    (void)snprintf(gpus, sizeof(gpus), "%lld/%lld", (long long)ctl_json_int(node, "gpus_free", 0),
                   (long long)ctl_json_int(node, "gpus", 0));
    if (hb > 0)
        ctl_format_age(now_ms, (uint64_t)hb, heartbeat, sizeof(heartbeat));
    if (idle_since > 0)
        ctl_format_age(now_ms, (uint64_t)idle_since, idle, sizeof(idle));
    cells[0] = ctl_json_text(node, "name", b[0], sizeof(b[0]));
    cells[1] = ctl_json_text(node, "pool", b[1], sizeof(b[1]));
    cells[2] = ctl_json_text(node, "capacity", b[2], sizeof(b[2]));
    cells[3] = ctl_json_text(node, "state", b[3], sizeof(b[3]));
    cells[4] = gpus;
    cells[5] = labels.data ? labels.data : "";
    cells[6] = heartbeat;
    cells[7] = idle;
    cells[8] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(node, "releasable")) ? "yes" : "no";
    cells[9] = jobs.data ? jobs.data : "";
    cells[10] = ctl_json_text(node, "reason", reason, sizeof(reason));
    if (!cells[10][0]) /* what musterd found odd at registration (its GPUs against the pool's) */
        cells[10] = ctl_json_text(node, "warning", reason, sizeof(reason));
    if (!cells[10][0]
        && strcmp(ctl_json_text(node, "confinement", b[4], sizeof(b[4])), "pgroup") == 0)
        cells[10] = "no cgroups: tasks are confined by process group only (a daemon can escape)";
    {
        /* A kept cordon or drain musterd has not applied yet (the node or musterd is away): shown
         * as what it will be, with the state musterd last wrote.  A spot notice stays. */
        const char *want = ctl_json_text(cJSON_GetObjectItemCaseSensitive(node, "wanted"), "state",
                                         b[4], sizeof(b[4]));
        if (want[0] && strcmp(want, cells[3]) != 0 && strcmp(cells[3], "terminating") != 0) {
            (void)snprintf(reason, sizeof(reason),
                           "by the operator: applied when it registers (musterd last saw it %s)",
                           cells[3][0] ? cells[3] : "-");
            cells[3] = want;
            cells[10] = reason;
        }
    }
    if (slices) {
        /* SLICES after GPUS: free/total MIG slices by profile (issue #17) */
        memmove(&cells[6], &cells[5], 6 * sizeof(cells[0]));
        ctl_slices_text(cJSON_GetObjectItemCaseSensitive(node, "slices"), slice_text,
                        sizeof(slice_text));
        cells[5] = slice_text;
    }
    rc = ctl_table_add(t, cells);
    mu_buf_release(&labels);
    mu_buf_release(&jobs);
    return rc;
}

int ctl_cmd_nodes(struct ctl *ctl, const struct ctl_args *args)
{
    static const char *const headers[] = { "NAME",       "POOL",   "CAPACITY",  "STATE",
                                           "GPUS",       "LABELS", "HEARTBEAT", "IDLE",
                                           "RELEASABLE", "JOBS",   "REASON" };
    static const char *const headers_slices[] = { "NAME", "POOL",       "CAPACITY", "STATE",
                                                  "GPUS", "SLICES",     "LABELS",   "HEARTBEAT",
                                                  "IDLE", "RELEASABLE", "JOBS",     "REASON" };
    bool slices;
    struct mu_err err = { 0 };
    struct ctl_table *t = NULL;
    struct queue *q = ctl_queue(ctl);
    cJSON *nodes = NULL;
    const cJSON *node;
    uint64_t now_ms = mu_time_wall_ms();
    int rc = CTL_EXIT_FAIL;

    (void)args;
    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_nodes_read(q, &nodes, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (wanted_merge(q, nodes, &err) != 0) {
        ctl_fail(ctl, "%s", err.msg);
        goto out;
    }
    if (ctl->output == CTL_OUT_JSON) {
        rc = ctl_json_print(ctl, nodes);
        goto out;
    }
    slices = ctl_any_slices(nodes);
    t = slices ? ctl_table_new(headers_slices, MU_ARRAY_LEN(headers_slices))
               : ctl_table_new(headers, MU_ARRAY_LEN(headers));
    if (!t) {
        ctl_fail(ctl, "out of memory");
        goto out;
    }
    ctl_table_set_state(t, 3);
    ctl_table_set_flex(t, slices ? 6 : 5);
    ctl_table_set_flex(t, slices ? 10 : 9);
    ctl_table_set_flex(t, slices ? 11 : 10);
    cJSON_ArrayForEach(node, nodes)
    {
        if (nodes_row(t, node, now_ms, slices) != 0) {
            ctl_fail(ctl, "out of memory");
            goto out;
        }
    }
    ctl_table_print(t, ctl, stdout);
    rc = CTL_EXIT_OK;
out:
    ctl_table_free(t);
    cJSON_Delete(nodes);
    return rc;
}
