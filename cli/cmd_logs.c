/* SPDX-License-Identifier: MIT */
/*
 * musterctl logs ID: one task's stdout (or stderr) as the worker wrote it to
 * <state-dir>/logs/<job>.<attempt>.<task>.out|.err.
 *
 * The logs stay on the worker that ran the task; reading them through the worker needs a
 * protocol message that does not exist yet (issue #6).  Until then musterctl reads them where
 * the workers' state dirs are reachable from this machine: --state-root DIR (or
 * MUSTER_STATE_ROOT) holds one directory per node, DIR/<node>, which is that node's state dir
 * (a shared mount, or every worker of a one-machine cluster started with
 * --state-dir DIR/<node>).  The node comes from the job's placement; for an attempt whose
 * placement is gone (a retried gang) every DIR/<node>/logs is searched.  -f polls the file and
 * stops once the job has ended and the file has been read to its end.
 */
#include "cli/internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/mu_banned.h"

#define CTL_LOGS_POLL_MS  250
#define CTL_LOGS_JSON_MAX (64u << 20) /* -o json holds the whole log in memory */

/* The node of task `task` in the job's placement, into node; false when not placed. */
static bool placement_node(const cJSON *job, int64_t task, char *node, size_t size)
{
    const cJSON *placement = cJSON_GetObjectItemCaseSensitive(job, "placement");
    const cJSON *t;

    cJSON_ArrayForEach(t, placement)
    {
        char b[64];
        if (ctl_json_int(t, "task", -1) == task) {
            mu_strlcpy(node, ctl_json_text(t, "node", b, sizeof(b)), size);
            return node[0] != '\0';
        }
    }
    return false;
}

/* Searches root/<any node>/logs/<file>; fills path and node when found. */
static bool search_nodes(
    const char *root, const char *file, char *path, size_t size, char *node, size_t node_size)
{
    DIR *d = opendir(root);
    const struct dirent *e;
    bool found = false;

    if (!d)
        return false;
    while (!found && (e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        if (mu_snprintf(path, size, "%s/%s/logs/%s", root, e->d_name, file) != 0)
            continue;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            mu_strlcpy(node, e->d_name, node_size);
            found = true;
        }
    }
    (void)closedir(d);
    return found;
}

/* Copies the file from *offset to its current end to stdout; advances *offset.  0 or -1. */
static int copy_from(const char *path, long *offset)
{
    FILE *f = fopen(path, "rb");
    char buf[8192];
    size_t n;

    if (!f)
        return -1;
    if (fseek(f, *offset, SEEK_SET) != 0) {
        (void)fclose(f);
        return -1;
    }
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        (void)fwrite(buf, 1, n, stdout);
        *offset += (long)n;
    }
    (void)fclose(f);
    return fflush(stdout) == 0 ? 0 : -1;
}

/* Follows path until job id has ended and its file is read to the end. */
static int follow(struct ctl *ctl, struct queue *q, const char *id, const char *path, long offset)
{
    for (;;) {
        struct mu_err err = { 0 };
        cJSON *job = NULL;
        char b[32];
        bool done;

        if (copy_from(path, &offset) != 0 && errno != ENOENT)
            return ctl_fail(ctl, "%s: %s", path, strerror(errno));
        if (queue_job_read(q, id, &job, &err) != 0)
            return ctl_fail(ctl, "job '%s': %s", id, err.msg);
        done = !job || ctl_state_is_final(ctl_json_text(job, "state", b, sizeof(b)));
        cJSON_Delete(job);
        if (done) /* one last read: the task may have written its last lines just before */
            return copy_from(path, &offset) == 0 || errno == ENOENT ? CTL_EXIT_OK : CTL_EXIT_FAIL;
        ctl_sleep_ms(CTL_LOGS_POLL_MS);
    }
}

/* -o json: {"job", "task", "attempt", "node", "path", "stream", "text"}. */
static int logs_json(struct ctl *ctl,
                     const char *id,
                     int64_t task,
                     int64_t attempt,
                     const char *node,
                     const char *path,
                     const char *ext)
{
    struct mu_err err = { 0 };
    size_t len = 0;
    char *text = mu_file_read(path, CTL_LOGS_JSON_MAX, &len, &err);
    cJSON *doc = NULL;
    int rc;

    if (!text)
        return ctl_fail(ctl, "%s", err.msg);
    doc = cJSON_CreateObject();
    if (!doc || !cJSON_AddStringToObject(doc, "job", id)
        || !cJSON_AddNumberToObject(doc, "task", (double)task)
        || !cJSON_AddNumberToObject(doc, "attempt", (double)attempt)
        || !cJSON_AddStringToObject(doc, "node", node)
        || !cJSON_AddStringToObject(doc, "path", path)
        || !cJSON_AddStringToObject(doc, "stream", strcmp(ext, "err") == 0 ? "stderr" : "stdout")
        || !cJSON_AddStringToObject(doc, "text", text))
        rc = ctl_fail(ctl, "out of memory");
    else
        rc = ctl_json_print(ctl, doc);
    cJSON_Delete(doc);
    free(text);
    return rc;
}

/* What `logs` is asked for, and where the file was found. */
struct logs_req {
    const char *id;
    const char *root; /* NULL or "" = no reachable state dirs */
    const char *ext;  /* "out" or "err" */
    bool follow;
    int64_t task;
    int64_t attempt; /* 0 = the job's current one, until logs_locate sets it */
    char node[128];
    char path[4096];
};

/* Explains why there is nothing to read without a state root. */
static void no_root(struct ctl *ctl, const struct logs_req *r, const cJSON *job, const char *file)
{
    char b[32];

    if (r->node[0])
        ctl_fail(ctl,
                 "the log of job %s task %lld is on node %s as <state-dir>/logs/%s; musterctl "
                 "cannot read it through the worker yet: give --state-root DIR (or set "
                 "MUSTER_STATE_ROOT) where DIR/%s is that node's state dir",
                 r->id, (long long)r->task, r->node, file, r->node);
    else
        ctl_fail(ctl,
                 "job %s (%s) has no placement for attempt %lld; give --state-root DIR (or set "
                 "MUSTER_STATE_ROOT) to search DIR/*/logs for %s",
                 r->id, ctl_json_text(job, "state", b, sizeof(b)), (long long)r->attempt, file);
}

/* Finds the log file of r in the job's placement or under the state root; 0 or -1 (printed). */
static int logs_locate(struct ctl *ctl, struct queue *q, const cJSON *job, struct logs_req *r)
{
    struct mu_err err = { 0 };
    int64_t current = ctl_json_int(job, "attempt", 1);
    cJSON *status = NULL;
    char file[256];
    char b[32];
    struct stat st;
    int saved;

    if (r->task >= ctl_json_int(job, "tasks", 1)) {
        ctl_fail(ctl, "job '%s' has %lld task(s); --task %lld does not exist", r->id,
                 (long long)ctl_json_int(job, "tasks", 1), (long long)r->task);
        return -1;
    }
    if (r->attempt == 0)
        r->attempt = current;
    (void)snprintf(file, sizeof(file), "%s.%lld.%lld.%s", r->id, (long long)r->attempt,
                   (long long)r->task, r->ext);
    if (r->attempt == current)
        (void)placement_node(job, r->task, r->node, sizeof(r->node));
    if (!r->root || !r->root[0]) {
        no_root(ctl, r, job, file);
        return -1;
    }
    if (r->node[0]) {
        (void)snprintf(r->path, sizeof(r->path), "%s/%s/logs/%s", r->root, r->node, file);
    } else if (!search_nodes(r->root, file, r->path, sizeof(r->path), r->node, sizeof(r->node))) {
        const char *state = ctl_json_text(job, "state", b, sizeof(b));
        if (strcmp(state, "PENDING") == 0 && r->attempt == current)
            ctl_fail(ctl, "job %s is PENDING: attempt %lld has not started, so it has no log yet",
                     r->id, (long long)r->attempt);
        else
            ctl_fail(ctl, "no %s under %s/*/logs (job %s is %s)", file, r->root, r->id, state);
        return -1;
    }
    if (stat(r->path, &st) == 0)
        return 0;
    saved = errno;
    if (r->follow && saved == ENOENT)
        return 0; /* placed, not started yet: follow waits for it */
    if (queue_node_read(q, r->node, &status, &err) == 0 && status)
        mu_strlcpy(b, ctl_json_text(status, "state", file, sizeof(file)), sizeof(b));
    else
        b[0] = '\0';
    ctl_fail(ctl, "%s: %s; is %s/%s node %s's state dir%s%s%s?", r->path, strerror(saved), r->root,
             r->node, r->node, b[0] ? " (node state " : "", b, b[0] ? ")" : "");
    cJSON_Delete(status);
    return -1;
}

int ctl_cmd_logs(struct ctl *ctl, const struct ctl_args *args)
{
    struct logs_req r = { 0 };
    struct mu_err err = { 0 };
    struct queue *q;
    cJSON *job = NULL;
    long offset = 0;
    int rc = CTL_EXIT_FAIL;

    r.id = args->argv[0];
    r.root = ctl_args_get(ctl, args, "state-root");
    r.ext = ctl_args_get(ctl, args, "stderr") ? "err" : "out";
    r.follow = ctl_args_get(ctl, args, "follow") != NULL;
    if (ctl->output == CTL_OUT_JSON && r.follow)
        return ctl_usage(ctl, "-f prints the log as it grows; it cannot be combined with -o json");
    if (ctl_args_int(ctl, args, "task", 0, QUEUE_MAX_TASKS - 1, &r.task) != 0
        || ctl_args_int(ctl, args, "attempt", 1, 1000000, &r.attempt) != 0)
        return CTL_EXIT_USAGE;
    if (!r.root || !r.root[0])
        r.root = getenv("MUSTER_STATE_ROOT");
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_job_read(q, r.id, &job, &err) != 0)
        return ctl_fail(ctl, "job '%s': %s", r.id, err.msg);
    if (!job)
        return ctl_fail(ctl, "job '%s' not found (or not taken in by musterd yet)", r.id);
    if (logs_locate(ctl, q, job, &r) != 0)
        goto out;
    if (r.follow)
        rc = follow(ctl, q, r.id, r.path, offset);
    else if (ctl->output == CTL_OUT_JSON)
        rc = logs_json(ctl, r.id, r.task, r.attempt, r.node, r.path, r.ext);
    else if (copy_from(r.path, &offset) != 0)
        rc = ctl_fail(ctl, "%s: %s", r.path, strerror(errno));
    else
        rc = CTL_EXIT_OK;
out:
    cJSON_Delete(job);
    return rc;
}
