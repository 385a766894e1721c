/* SPDX-License-Identifier: MIT */
/*
 * Checkpoint files (docs/design.md §3 "Checkpoints"): a task reports a checkpoint by writing its
 * path, one line, to $MUSTER_CHECKPOINT_FILE (a temp file, then rename).  This file reads such a
 * file safely; the agent decides when (inotify on <state-dir>/ckpt, and once more when the task is
 * reaped) and reports CHECKPOINT_DONE.
 *
 * The file is written by the task, so it is hostile input: it may be a FIFO, a symlink to
 * /dev/zero, empty, huge or binary.  common's guarded read (mu_file_read_small) opens it without
 * following links and without blocking and takes only a regular file of at most
 * WRK_CKPT_MAX_BYTES; its first line must be printable.
 */
#include "worker/wrk.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

int wrk_ckpt_parse(const char *data, size_t len, char *path, size_t size, struct mu_err *err)
{
    size_t start = 0;
    size_t end;

    if (len > WRK_CKPT_MAX_BYTES)
        return mu_errf(err, MU_E_TOOBIG, "checkpoint file of %zu bytes, more than %u", len,
                       WRK_CKPT_MAX_BYTES);
    if (memchr(data, '\0', len))
        return mu_errf(err, MU_E_PARSE, "checkpoint file holds a NUL byte: not text");
    end = 0;
    while (end < len && data[end] != '\n')
        end++;
    while (start < end && is_space(data[start]))
        start++;
    while (end > start && is_space(data[end - 1]))
        end--;
    if (end == start)
        return mu_errf(err, MU_E_PARSE, "checkpoint file: empty first line");
    for (size_t i = start; i < end; i++) {
        unsigned char c = (unsigned char)data[i];
        if (c < 0x20 || c == 0x7f)
            return mu_errf(err, MU_E_PARSE,
                           "checkpoint file: control byte 0x%02x at byte %zu of the path", c, i);
    }
    if (end - start >= size)
        return mu_errf(err, MU_E_TOOBIG, "checkpoint path of %zu bytes, more than %zu", end - start,
                       size - 1);
    memcpy(path, data + start, end - start);
    path[end - start] = '\0';
    return 0;
}

int wrk_ckpt_read(const char *file, char *path, size_t size, uint64_t *mtime_ms, struct mu_err *err)
{
    char *text = NULL;
    size_t len = 0;
    uint64_t mtime = 0;
    int r = mu_file_read_small(file, WRK_CKPT_MAX_BYTES, &text, &len, &mtime, err);

    if (r == 1 && wrk_ckpt_parse(text, len, path, size, err) != 0)
        r = -1;
    if (r == 1)
        *mtime_ms = mtime;
    free(text);
    return r;
}
