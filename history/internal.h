/* SPDX-License-Identifier: MIT */
/*
 * The history module's cross-file helpers (db.c, query.c).  Never included outside history/.
 */
#ifndef MUSTER_HISTORY_INTERNAL_H
#define MUSTER_HISTORY_INTERNAL_H

#include <sqlite3.h>

#include "history/hist.h"

/* The columns in table order: db.c's INSERT and query.c's SELECT both list them so. */
#define HIST_COLS                                                                              \
    "id, attempt, array_job, array_index, name, user, queue, pools, nodes, tasks, "            \
    "gpus_per_task, gpus, submitted_ms, started_ms, ended_ms, waited_ms, state, exit_code, "   \
    "reason, gpu_seconds, lost_gpu_seconds, checkpoints, preemptions, price, failures, spec, " \
    "archived_ms"
#define HIST_NCOLS 27

/* The connection of h (borrowed, valid while h is). */
sqlite3 *hist_db(struct hist *h);
/* "history 'PATH': what: sqlite's message"; returns -1. */
int hist_fail(struct hist *h, struct mu_err *err, const char *what);

#endif
