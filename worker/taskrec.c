/* SPDX-License-Identifier: MIT */
/*
 * The files that let a task outlive its worker (docs/design.md §5, issue #5 "worker crash or
 * restart"): <run-dir>/tasks/<job>.<attempt>.<task>.json, the record the shim writes once the task
 * runs, and .exit, the task's true exit status (and whether the shim stopped it because the node's
 * lease ran out: "fenced"), written by the shim when the task ends.  Both are written to
 * "<path>.tmp" and renamed, so a reader sees a whole file or none; taskrec_read.c reads them back.
 * Nothing here needs a JSON library: muster-shim, which writes them, links this file and none.
 *
 * Also here: the spec a worker hands a shim on its stdin (NUL-separated "key=value" entries,
 * because the environment must not appear on the world-readable command line), and the check
 * that a live pid is really our shim (/proc/PID/cmdline) before a task is re-adopted.
 */
#include "worker/wrk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/mu_banned.h"

int wrk_task_path(const char *root,
                  const char *dir,
                  const char *job,
                  int attempt,
                  int task,
                  const char *suffix,
                  char *buf,
                  size_t size,
                  struct mu_err *err)
{
    if (mu_snprintf(buf, size, "%s/%s/%s.%d.%d%s", root, dir, job, attempt, task, suffix) != 0)
        return mu_errf(err, MU_E_TOOBIG, "path of %s/%s.%d.%d%s under '%s' is too long", dir, job,
                       attempt, task, suffix, root);
    return 0;
}

/* ---- JSON ---- */

char *wrk_taskrec_format(const struct wrk_taskrec *r, struct mu_err *err)
{
    struct mu_buf b;

    /* By hand rather than with cJSON, so that muster-shim links no JSON library. */
    mu_buf_init(&b, WRK_REC_MAX_BYTES);
    if (mu_buf_append(&b, "{\"job\":", 7, err) != 0
        || mu_buf_append_json_str(&b, r->ref.job, err) != 0
        || mu_buf_appendf(
               &b, err,
               ",\"task\":%d,\"attempt\":%d,\"pid\":%d,\"shim_pid\":%d,\"shim_start\":%" PRIu64
               ",\"started_ms\":%" PRIu64
               ",\"ckpt_signal\":%d,\"grace_s\":%d,\"uid\":%d,\"gpus\":[",
               r->ref.task, r->ref.attempt, r->ref.pid, r->shim_pid, r->shim_start, r->started_ms,
               r->ckpt_signal, r->grace_s, r->uid)
               != 0)
        goto fail;
    for (int i = 0; i < r->ngpus && i < PROTO_MAX_GPUS; i++) {
        if (mu_buf_appendf(&b, err, "%s%d", i ? "," : "", r->gpus[i]) != 0)
            goto fail;
    }
    if (mu_buf_append(&b, "]}", 2, err) != 0)
        goto fail;
    return mu_buf_take(&b);
fail:
    mu_buf_release(&b);
    return NULL;
}

int wrk_taskexit_format(const struct wrk_taskexit *x, char *buf, size_t size, struct mu_err *err)
{
    if (mu_snprintf(buf, size, "{\"exit_code\":%d,\"signal\":%d,\"ended_ms\":%" PRIu64 "%s%s}\n",
                    x->exit_code, x->signal, x->ended_ms, x->fenced ? ",\"fenced\":true" : "",
                    x->oom_killed ? ",\"oom_killed\":true" : "")
        != 0)
        return mu_errf(err, MU_E_TOOBIG, "exit record does not fit %zu bytes", size);
    return 0;
}

void wrk_taskexit_from_status(int status, struct wrk_taskexit *out)
{
    memset(out, 0, sizeof(*out));
    if (WIFEXITED(status))
        out->exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        out->signal = WTERMSIG(status);
}

void wrk_taskexit_from_siginfo(int code, int status, struct wrk_taskexit *out)
{
    memset(out, 0, sizeof(*out));
    if (code == CLD_EXITED)
        out->exit_code = status;
    else
        out->signal = status; /* CLD_KILLED or CLD_DUMPED: the status is the signal */
}

/* ---- files ---- */

int wrk_taskrec_remove(const char *run_dir, const struct proto_task_ref *ref, struct mu_err *err)
{
    static const char *const suffixes[] = { WRK_TASKREC_SUFFIX, WRK_TASKEXIT_SUFFIX,
                                            WRK_TASKREC_SUFFIX ".tmp", WRK_TASKEXIT_SUFFIX ".tmp",
                                            WRK_FENCED_SUFFIX };
    char path[PROTO_PATH_MAX + 32];
    int rc = 0;

    for (size_t i = 0; i < MU_ARRAY_LEN(suffixes); i++) {
        if (wrk_task_path(run_dir, "tasks", ref->job, ref->attempt, ref->task, suffixes[i], path,
                          sizeof(path), NULL)
            != 0)
            continue; /* it was never written under a name that long */
        if (unlink(path) != 0 && errno != ENOENT && rc == 0)
            rc = mu_errf(err, MU_E_IO, "cannot remove '%s': %s", path, strerror(errno));
    }
    return rc;
}

int wrk_file_write_atomic(const char *path, const char *data, size_t len, struct mu_err *err)
{
    char tmp[PROTO_PATH_MAX + 16];
    size_t done = 0;
    int fd;

    if (mu_snprintf(tmp, sizeof(tmp), "%s.tmp", path) != 0)
        return mu_errf(err, MU_E_TOOBIG, "path '%s' is too long", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return mu_errf(err, MU_E_IO, "cannot create '%s': %s", tmp, strerror(errno));
    while (done < len) {
        ssize_t n = write(fd, data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            (void)close(fd);
            (void)unlink(tmp);
            return mu_errf(err, MU_E_IO, "cannot write '%s': %s", tmp, strerror(e));
        }
        done += (size_t)n;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        (void)unlink(tmp);
        return mu_errf(err, MU_E_IO, "cannot write '%s': %s", path, strerror(e));
    }
    return 0;
}

/* ---- the shim's spec ---- */

static int put_entry(struct mu_buf *b, const char *key, const char *value, struct mu_err *err)
{
    if (mu_buf_append(b, key, strlen(key), err) != 0 || mu_buf_append(b, "=", 1, err) != 0
        || mu_buf_append(b, value, strlen(value), err) != 0 || mu_buf_append(b, "", 1, err) != 0)
        return -1;
    return 0;
}

static int put_int(struct mu_buf *b, const char *key, int64_t v, struct mu_err *err)
{
    char num[32];
    (void)mu_snprintf(num, sizeof(num), "%" PRId64, v);
    return put_entry(b, key, num, err);
}

/* The task's cgroups: cg_version, then each directory as "cg_dir=<controller>:<path>". */
static int cg_encode(const struct wrk_cg_task *cg, struct mu_buf *out, struct mu_err *err)
{
    char entry[PROTO_PATH_MAX + 16];

    if (cg->version == 0)
        return 0;
    if (put_int(out, "cg_version", cg->version, err) != 0
        || put_int(out, "cg_mem_mb", cg->mem_mb, err) != 0
        || put_int(out, "cg_cpus", cg->cpus, err) != 0)
        return -1;
    for (int c = 0; c < WRK_CG_NCTRL; c++) {
        if (!cg->dir[c][0])
            continue;
        (void)mu_snprintf(entry, sizeof(entry), "%d:%s", c, cg->dir[c]);
        if (put_entry(out, "cg_dir", entry, err) != 0)
            return -1;
    }
    for (int i = 0; i < cg->ndeny && i < WRK_CG_DENY_MINORS; i++) {
        if (put_int(out, "cg_deny", cg->deny[i], err) != 0)
            return -1;
    }
    return 0;
}

static int cg_int(
    const char *key, const char *value, int64_t lo, int64_t hi, int64_t *out, struct mu_err *err)
{
    if (mu_parse_i64(value, lo, hi, out, err) != 0) {
        mu_err_prefix(err, "shim spec: '%s': ", key);
        return -1;
    }
    return 0;
}

/* One cg_ entry of the spec (klen: the key's length). */
static int cg_entry(
    struct wrk_cg_task *cg, const char *key, size_t klen, const char *value, struct mu_err *err)
{
    int64_t v = 0;

#define KEY_IS(k) (klen == sizeof(k) - 1 && memcmp(key, k, klen) == 0)
    if (KEY_IS("cg_version")) {
        if (cg_int("cg_version", value, 1, 2, &v, err) != 0)
            return -1;
        cg->version = (int)v;
        return 0;
    }
    if (KEY_IS("cg_mem_mb"))
        return cg_int("cg_mem_mb", value, 0, INT64_C(1) << 40, &cg->mem_mb, err);
    if (KEY_IS("cg_cpus")) {
        if (cg_int("cg_cpus", value, 0, 1 << 20, &v, err) != 0)
            return -1;
        cg->cpus = (int)v;
        return 0;
    }
    if (KEY_IS("cg_deny")) {
        if (cg->ndeny >= WRK_CG_DENY_MINORS)
            return mu_errf(err, MU_E_PARSE, "shim spec: more than %d denied devices",
                           WRK_CG_DENY_MINORS);
        if (cg_int("cg_deny", value, 0, 1 << 20, &v, err) != 0)
            return -1;
        cg->deny[cg->ndeny++] = (int)v;
        return 0;
    }
    if (KEY_IS("cg_dir")) {
        const char *colon = strchr(value, ':');
        size_t size = sizeof(cg->dir[0]);
        if (!colon || colon - value != 1 || value[0] < '0' || value[0] >= '0' + WRK_CG_NCTRL
            || colon[1] != '/')
            return mu_errf(err, MU_E_PARSE, "shim spec: 'cg_dir': expected <controller>:<path>");
        if (mu_strlcpy(cg->dir[value[0] - '0'], colon + 1, size) >= size)
            return mu_errf(err, MU_E_PARSE, "shim spec: 'cg_dir': path too long");
        return 0;
    }
#undef KEY_IS
    return mu_errf(err, MU_E_PARSE, "shim spec: unknown key '%.*s'", (int)klen, key);
}

int wrk_shim_spec_encode(const struct wrk_shim_spec *s, struct mu_buf *out, struct mu_err *err)
{
    const struct wrk_taskrec *r = &s->rec;
    size_t before = out->len;

    if (s->argc <= 0 || !s->argv || !s->argv[0])
        return mu_errf(err, MU_E_INVAL, "empty command");
    if (put_entry(out, "job", r->ref.job, err) != 0 || put_int(out, "task", r->ref.task, err) != 0
        || put_int(out, "attempt", r->ref.attempt, err) != 0
        || put_int(out, "ckpt_signal", r->ckpt_signal, err) != 0
        || put_int(out, "grace_s", r->grace_s, err) != 0 || put_int(out, "uid", r->uid, err) != 0)
        goto fail;
    for (int i = 0; i < r->ngpus && i < PROTO_MAX_GPUS; i++) {
        if (put_int(out, "gpu", r->gpus[i], err) != 0)
            goto fail;
    }
    if (s->workdir && s->workdir[0] && put_entry(out, "workdir", s->workdir, err) != 0)
        goto fail;
    if (s->user && s->user[0]
        && (put_entry(out, "user", s->user, err) != 0 || put_int(out, "user_uid", s->uid, err) != 0
            || put_int(out, "user_gid", s->gid, err) != 0))
        goto fail;
    for (int i = 0; s->user && s->user[0] && i < s->ngroups; i++) {
        if (put_int(out, "group", (int64_t)s->groups[i], err) != 0)
            goto fail;
    }
    if (s->lease_path && s->lease_path[0] && put_entry(out, "lease", s->lease_path, err) != 0)
        goto fail;
    if (s->not_after_ms > (uint64_t)INT64_MAX) {
        mu_errf(err, MU_E_RANGE, "start deadline %" PRIu64 " out of range", s->not_after_ms);
        goto fail;
    }
    if (s->not_after_ms && put_int(out, "not_after_ms", (int64_t)s->not_after_ms, err) != 0)
        goto fail;
    if (cg_encode(&s->cg, out, err) != 0)
        goto fail;
    for (int i = 0; i < s->argc; i++) {
        if (!s->argv[i]) {
            mu_errf(err, MU_E_INVAL, "argv[%d] is missing", i);
            goto fail;
        }
        if (put_entry(out, "arg", s->argv[i], err) != 0)
            goto fail;
    }
    for (int i = 0; i < s->nenv; i++) {
        if (s->envp[i] && put_entry(out, "env", s->envp[i], err) != 0)
            goto fail;
    }
    return 0;
fail:
    out->len = before;
    if (out->data)
        out->data[before] = '\0';
    return -1;
}

/* Appends p to the NULL-terminated *v of *n entries (capacity *cap). */
static int vec_push(char ***v, int *n, int *cap, char *p, struct mu_err *err)
{
    char **vec = *v;

    if (!vec || *n + 2 > *cap) {
        int ncap = *cap ? *cap * 2 : 16;
        vec = realloc(vec, (size_t)ncap * sizeof(*vec));
        if (!vec)
            return mu_errf(err, MU_E_NOMEM, "out of memory for the shim's spec");
        *v = vec;
        *cap = ncap;
    }
    vec[(*n)++] = p;
    vec[*n] = NULL;
    return 0;
}

static int spec_int(
    const char *key, const char *value, int64_t lo, int64_t hi, int *out, struct mu_err *err)
{
    int64_t v;
    if (mu_parse_i64(value, lo, hi, &v, err) != 0) {
        mu_err_prefix(err, "shim spec: '%s': ", key);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Growth state of the two arrays while decoding. */
struct spec_caps {
    int args;
    int envs;
    bool have_job;
};

/* One "key=value" entry (the key is entry[0..klen-1]) into out. */
/* The task user's keys (user, user_uid, user_gid, group): 0 taken, -1 with err, 1 not one. */
static int ident_entry(struct wrk_shim_spec *out,
                       const char *entry,
                       size_t klen,
                       const char *value,
                       struct mu_err *err)
{
#define KEY_IS(k) (klen == sizeof(k) - 1 && memcmp(entry, k, klen) == 0)
    if (KEY_IS("user")) {
        out->user = value;
        return 0;
    }
    if (KEY_IS("user_uid"))
        return spec_int("user_uid", value, 0, INT_MAX, &out->uid, err);
    if (KEY_IS("user_gid"))
        return spec_int("user_gid", value, 0, INT_MAX, &out->gid, err);
    if (KEY_IS("group")) {
        int g;
        if (out->ngroups >= WRK_GROUPS_MAX)
            return mu_errf(err, MU_E_PARSE, "shim spec: more than %d groups", WRK_GROUPS_MAX);
        if (spec_int("group", value, 0, INT_MAX, &g, err) != 0)
            return -1;
        if (!out->groups && !(out->groups = malloc(WRK_GROUPS_MAX * sizeof(*out->groups))))
            return mu_errf(err, MU_E_NOMEM, "out of memory for the shim's spec");
        out->groups[out->ngroups++] = (gid_t)g;
        return 0;
    }
#undef KEY_IS
    return 1;
}

static int spec_entry(struct wrk_shim_spec *out,
                      struct spec_caps *caps,
                      const char *entry,
                      size_t klen,
                      const char *value,
                      struct mu_err *err)
{
    struct wrk_taskrec *r = &out->rec;
    int rc;

#define KEY_IS(k) (klen == sizeof(k) - 1 && memcmp(entry, k, klen) == 0)
    if (KEY_IS("arg"))
        return vec_push(&out->argv, &out->argc, &caps->args, (char *)value, err);
    if (KEY_IS("env"))
        return vec_push(&out->envp, &out->nenv, &caps->envs, (char *)value, err);
    if (KEY_IS("job")) {
        if (!mu_name_is_valid(value, PROTO_JOB_MAX - 1))
            return mu_errf(err, MU_E_PARSE, "shim spec: 'job': not a job id");
        mu_strlcpy(r->ref.job, value, sizeof(r->ref.job));
        caps->have_job = true;
        return 0;
    }
    if (KEY_IS("task"))
        return spec_int("task", value, 0, INT_MAX, &r->ref.task, err);
    if (KEY_IS("attempt"))
        return spec_int("attempt", value, 1, INT_MAX, &r->ref.attempt, err);
    if (KEY_IS("ckpt_signal"))
        return spec_int("ckpt_signal", value, 0, 255, &r->ckpt_signal, err);
    if (KEY_IS("grace_s"))
        return spec_int("grace_s", value, 0, INT_MAX, &r->grace_s, err);
    if (KEY_IS("uid"))
        return spec_int("uid", value, -1, INT_MAX, &r->uid, err);
    if (KEY_IS("gpu")) {
        if (r->ngpus >= PROTO_MAX_GPUS)
            return mu_errf(err, MU_E_PARSE, "shim spec: more than %d GPUs", PROTO_MAX_GPUS);
        return spec_int("gpu", value, 0, INT_MAX, &r->gpus[r->ngpus++], err);
    }
    if (KEY_IS("workdir")) {
        out->workdir = value;
        return 0;
    }
    if (KEY_IS("lease")) {
        out->lease_path = value;
        return 0;
    }
    if (KEY_IS("not_after_ms")) {
        int64_t v;
        if (mu_parse_i64(value, 0, INT64_MAX, &v, err) != 0) {
            mu_err_prefix(err, "shim spec: 'not_after_ms': ");
            return -1;
        }
        out->not_after_ms = (uint64_t)v;
        return 0;
    }
#undef KEY_IS
    if ((rc = ident_entry(out, entry, klen, value, err)) <= 0)
        return rc;
    if (klen > 3 && memcmp(entry, "cg_", 3) == 0)
        return cg_entry(&out->cg, entry, klen, value, err);
    return mu_errf(err, MU_E_PARSE, "shim spec: unknown key '%.*s'", (int)klen, entry);
}

int wrk_shim_spec_decode(const char *data,
                         size_t len,
                         struct wrk_shim_spec *out,
                         struct mu_err *err)
{
    struct spec_caps caps = { 0, 0, false };
    size_t off = 0;

    memset(out, 0, sizeof(*out));
    out->rec.uid = -1;
    out->rec.ref.attempt = 1;
    if (!data || len == 0 || data[len - 1] != '\0')
        return mu_errf(err, MU_E_PARSE, "shim spec: truncated (no final NUL)");
    while (off < len) {
        const char *entry = data + off;
        const char *eq = strchr(entry, '=');

        off += strlen(entry) + 1;
        if (!eq)
            return mu_errf(err, MU_E_PARSE, "shim spec: entry '%.40s' has no '='", entry);
        if (spec_entry(out, &caps, entry, (size_t)(eq - entry), eq + 1, err) != 0)
            return -1;
    }
    if (!caps.have_job)
        return mu_errf(err, MU_E_PARSE, "shim spec: no 'job'");
    if (out->argc == 0)
        return mu_errf(err, MU_E_PARSE, "shim spec: no 'arg' (empty command)");
    if (!out->envp) {
        /* No env= entry: an empty environment, still a NULL-terminated array. */
        if (vec_push(&out->envp, &out->nenv, &caps.envs, NULL, err) != 0)
            return -1;
        out->nenv = 0;
    }
    return 0;
}

void wrk_shim_spec_release(struct wrk_shim_spec *s)
{
    free(s->argv);
    free(s->envp);
    free(s->groups);
    s->argv = NULL;
    s->envp = NULL;
    s->groups = NULL;
    s->argc = 0;
    s->nenv = 0;
    s->ngroups = 0;
}

/* ---- is it our shim? ---- */

bool wrk_shim_cmdline_matches(const char *cmdline, size_t len, const char *base)
{
    const char *arg0 = cmdline;
    const char *slash;
    size_t len0;

    if (len == 0 || !memchr(cmdline, '\0', len))
        return false;
    len0 = strlen(arg0);
    slash = strrchr(arg0, '/');
    if (strcmp(slash ? slash + 1 : arg0, WRK_SHIM_NAME) != 0 || len0 + 1 >= len)
        return false;
    /* argv[1] is the record base, NUL-terminated, and the last argument. */
    return len - (len0 + 1) == strlen(base) + 1
           && memcmp(cmdline + len0 + 1, base, strlen(base) + 1) == 0;
}

int wrk_proc_stat_parse(const char *text, size_t len, char *state, uint64_t *start)
{
    const char *end = text + len;
    const char *p = NULL;
    int field = 2; /* the name's */

    for (const char *q = text; q < end; q++) {
        if (*q == ')')
            p = q;
    }
    if (!p || p + 2 >= end || p[1] != ' ')
        return -1;
    *state = p[2];
    for (p++; p < end && field < 22; p++) {
        if (*p == ' ')
            field++;
    }
    if (field != 22 || p >= end || *p < '0' || *p > '9')
        return -1;
    *start = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (*start > (UINT64_MAX - 9) / 10)
            return -1;
        *start = *start * 10 + (uint64_t)(*p - '0');
    }
    return p < end && *p != ' ' && *p != '\n' ? -1 : 0;
}

uint64_t wrk_proc_start(int pid)
{
    char path[64];
    char text[1024]; /* the line is a few hundred bytes; its name at most 64 */
    uint64_t start = 0;
    char state = '?';
    ssize_t n;
    int fd;

    if (pid < 0)
        return 0;
    if (pid == 0)
        mu_strlcpy(path, "/proc/self/stat", sizeof(path));
    else
        (void)mu_snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    do {
        n = read(fd, text, sizeof(text));
    } while (n < 0 && errno == EINTR);
    (void)close(fd);
    if (n <= 0 || wrk_proc_stat_parse(text, (size_t)n, &state, &start) != 0 || state == 'Z'
        || state == 'X')
        return 0;
    return start;
}

bool wrk_shim_is_running(int pid, uint64_t start, const char *base)
{
    char path[64];
    char *text = NULL;
    size_t len = 0;
    bool ours;

    if (pid <= 1)
        return false;
    if (start)
        return wrk_proc_start(pid) == start;
    (void)mu_snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
    if (mu_file_read_small(path, (size_t)PROTO_PATH_MAX * 2, &text, &len, NULL, NULL) != 1)
        return false; /* gone, or a zombie: /proc/PID/cmdline of a zombie is empty */
    ours = wrk_shim_cmdline_matches(text, len, base);
    free(text);
    return ours;
}
