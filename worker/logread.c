/* SPDX-License-Identifier: MIT */
/*
 * LOG_READ (protocol/README.md, "Task logs"): one bounded chunk of a task's log for musterctl
 * logs, relayed by musterd, so that logs can be read from any machine that reaches Redis.
 *
 * The request names a log, never a file: the job id must look like a stream entry id (digits,
 * '-', digits), the stream is "out" or "err", and the path is built here from the state dir, so
 * a request can only reach this worker's own <state-dir>/logs/<job>.<attempt>.<task>.out|.err.
 * The file is opened with O_NOFOLLOW and must be a regular file; at most PROTO_LOG_CHUNK_MAX
 * bytes are read with pread at the request's offset, so nothing larger than one chunk is ever
 * held, however big the log.  Every request gets exactly one LOG_DATA, an error included.
 */
#include "worker/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mu_banned.h"

/* digits '-' digits, as musterd's job ids (stream entry ids) are. */
/* Digits, 1 to 20 of them, from *p; the count (0 when none or too many). */
static size_t digits(const char **p)
{
    size_t n = 0;
    while (**p >= '0' && **p <= '9' && n <= 20) {
        (*p)++;
        n++;
    }
    return n <= 20 ? n : 0;
}

/* A job id ("1732270000123-0") or an array element's ("1732270000123-0_7"): the path is built
 * from it, so nothing but digits, '-' and '_' where they belong. */
static bool job_id_ok(const char *id)
{
    const char *p = id;

    if (digits(&p) == 0 || *p++ != '-' || digits(&p) == 0)
        return false;
    if (*p == '_' && (p++, digits(&p) == 0))
        return false;
    return *p == '\0';
}

/* Checks what the request names; 0 or -1 with err (MU_E_INVAL). */
static int request_check(const struct proto_msg *req, struct mu_err *err)
{
    if (!job_id_ok(req->task.job))
        return mu_errf(err, MU_E_INVAL, "job id '%s' is not a job id", req->task.job);
    if (req->task.task < 0 || req->task.attempt < 1)
        return mu_errf(err, MU_E_INVAL, "task %d attempt %d: out of range", req->task.task,
                       req->task.attempt);
    if (strcmp(req->stream, "out") != 0 && strcmp(req->stream, "err") != 0)
        return mu_errf(err, MU_E_INVAL, "stream '%s': expected \"out\" or \"err\"", req->stream);
    return 0;
}

/* Reads the chunk into out (ok, data, size); -1 with err, and out->absent when no file. */
static int chunk_read(const char *path,
                      const struct proto_msg *req,
                      struct proto_msg *out,
                      struct mu_err *err)
{
    size_t want = req->max_bytes > 0 && (size_t)req->max_bytes < PROTO_LOG_CHUNK_MAX
                      ? (size_t)req->max_bytes
                      : PROTO_LOG_CHUNK_MAX;
    char *buf = NULL;
    struct stat st;
    ssize_t n = 0;
    int fd;
    int rc = -1;

    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        out->absent = errno == ENOENT;
        return mu_errf(err, MU_E_IO, "%s: %s", path, strerror(errno));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        (void)mu_errf(err, MU_E_IO, "%s: not a regular file", path);
        goto out;
    }
    out->size = (uint64_t)st.st_size;
    if (req->offset < out->size) {
        buf = malloc(want);
        if (!buf) {
            (void)mu_errf(err, MU_E_NOMEM, "out of memory for a log chunk");
            goto out;
        }
        do
            n = pread(fd, buf, want, (off_t)req->offset);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
            (void)mu_errf(err, MU_E_IO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
    }
    if (proto_msg_set_data(out, buf, (size_t)n, err) != 0)
        goto out;
    out->ok = true;
    rc = 0;
out:
    free(buf);
    (void)close(fd);
    return rc;
}

void wrk_log_read(const char *state_dir, const struct proto_msg *req, struct proto_msg *out)
{
    char path[PROTO_PATH_MAX];
    char suffix[8];
    struct mu_err err;

    proto_msg_init(out, PROTO_LOG_DATA);
    out->task.attempt = req->task.attempt;
    out->task.task = req->task.task;
    mu_strlcpy(out->task.job, req->task.job, sizeof(out->task.job));
    mu_strlcpy(out->req, req->req, sizeof(out->req));
    mu_strlcpy(out->stream, req->stream, sizeof(out->stream));
    out->offset = req->offset;
    mu_err_clear(&err);
    if (request_check(req, &err) == 0) {
        (void)mu_snprintf(suffix, sizeof(suffix), ".%s", req->stream);
        if (wrk_task_path(state_dir, "logs", req->task.job, req->task.attempt, req->task.task,
                          suffix, path, sizeof(path), &err)
            == 0) {
            mu_strlcpy(out->path, path, sizeof(out->path));
            if (chunk_read(path, req, out, &err) == 0)
                return;
        }
    }
    out->ok = false;
    mu_strlcpy(out->error, err.msg, sizeof(out->error));
}

void wrk_handle_log_read(struct wrk_agent *a, const struct proto_msg *m)
{
    struct proto_msg out;

    wrk_log_read(a->state_dir, m, &out);
    if (!out.ok)
        mu_log(MU_LOG_DEBUG, WRK_MOD, "node=%s job=%s task=%d attempt=%d log read: %s", a->node,
               m->task.job, m->task.task, m->task.attempt, out.error);
    wrk_send_log_data(a, &out);
    proto_msg_release(&out);
}
