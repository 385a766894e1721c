/* SPDX-License-Identifier: MIT */
/*
 * Why a job waits, as data (issue #18): what musterctl why shows, computed on demand, never in a
 * pass.  Nothing here decides anything new: every answer comes from the code the pass runs, so
 * the explanation cannot drift from the scheduler's behaviour.
 *
 *  - per topology level, sched_place_in with the request required in one domain of that level,
 *    on the cluster as it is and on the idle view (the pass's "could it ever fit"): the largest
 *    free domain against the largest that exists tells "busy" from "not until nodes join";
 *  - the estimated start is the pass's own reservation search (sched_reserve_search in pass.c),
 *    which also names the running gang whose end makes the room;
 *  - backfill beside another job's reservation is the pass's rule: it fits beside the held
 *    slots, or it ends before the reservation starts.
 *
 * Cost on 4,096 nodes: 2 x (levels + 1) placements plus one reservation search (bench/placement.c
 * --why times it against a pass).
 */
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

/* The most tasks of r one domain of level takes: fits (every task) or fail.best. */
static int level_tasks(
    struct sched_cluster *c, const struct sched_request *r, int level, int64_t now_s, bool *fits)
{
    struct sched_request one = *r;
    struct sched_fail fail;

    one.required_level = level;
    one.preferred_level = -1;
    one.avoid = NULL;
    one.navoid = 0;
    *fits = sched_place_in(c, &one, now_s, NULL, &fail) == 1;
    if (*fits)
        return r->tasks;
    return fail.best < r->tasks ? fail.best : r->tasks;
}

static void explain_levels(struct sched_cluster *c,
                           const struct sched_request *r,
                           int64_t now_s,
                           struct sched_explain *out)
{
    out->nlevels = c->nlevels + 1;
    for (int l = 0; l <= c->nlevels; l++) {
        struct sched_explain_level *e = &out->levels[l];
        e->free_tasks = level_tasks(c, r, l, now_s, &e->fits_now);
        c->idle_view = true;
        e->max_tasks = level_tasks(c, r, l, INT64_MAX, &e->fits_idle);
        c->idle_view = false;
    }
}

static bool reservation_valid(const struct sched_cluster *c, const struct sched_reservation *res)
{
    if (!res->req || !res->slots || res->req->tasks < 1)
        return false;
    for (int i = 0; i < res->req->tasks; i++) {
        if (res->slots[i].node < 0 || res->slots[i].node >= c->nnodes)
            return false;
    }
    return true;
}

/* r fits now: whether it may start beside res, the pass's rule (held slots, or done by then). */
static enum sched_backfill backfill(struct sched_cluster *c,
                                    const struct sched_request *r,
                                    int64_t run_s,
                                    const struct sched_reservation *res,
                                    int64_t now_s,
                                    struct sched_slot *slots)
{
    struct sched_fail fail;
    bool beside;

    if (sched_done_by(run_s, now_s, res->start_s))
        return SCHED_BACKFILL_FITS;
    sched_holds_set(c, res->req, res->slots);
    c->holds_on = true;
    beside = sched_place_in(c, r, now_s, slots, &fail) == 1;
    c->holds_on = false;
    sched_holds_clear(c);
    return beside ? SCHED_BACKFILL_FITS : SCHED_BACKFILL_DELAYS;
}

int sched_explain(struct sched_cluster *c,
                  const struct sched_request *r,
                  int64_t run_s,
                  const struct sched_running *running,
                  int nrunning,
                  const struct sched_reservation *res,
                  int64_t now_s,
                  struct sched_explain *out,
                  struct mu_err *err)
{
    struct sched_slot *slots = NULL;
    struct sched_fail fail;
    const char *bad;
    uint64_t generation;
    int rc = -1;

    if (!c || !r || !out || nrunning < 0 || (nrunning > 0 && !running))
        return mu_errf(err, MU_E_INVAL, "explain: bad arguments");
    memset(out, 0, sizeof(*out));
    out->freed_by = -1;
    bad = sched_request_invalid(c, r);
    if (bad)
        return mu_errf(err, MU_E_INVAL, "explain: %s", bad);
    if (res && !reservation_valid(c, res))
        return mu_errf(err, MU_E_INVAL, "explain: the reservation names no node");
    slots = calloc((size_t)r->tasks, sizeof(*slots));
    if (!slots)
        return mu_errf(err, MU_E_NOMEM, "explain: out of memory");
    generation = c->generation; /* the search releases and commits back: nothing was freed */
    sched_topo_refresh(c);
    explain_levels(c, r, now_s, out);
    out->fits_now = sched_place_in(c, r, now_s, slots, &fail) == 1;
    if (out->fits_now && res) {
        out->backfill = backfill(c, r, run_s, res, now_s, slots);
        if (out->backfill == SCHED_BACKFILL_DELAYS)
            out->est_start_s = res->start_s;
    } else if (!out->fits_now) {
        int found = sched_reserve_search(c, r, running, nrunning, now_s, slots, &out->est_start_s,
                                         &out->freed_by, err);
        if (found < 0)
            goto out;
        if (found == 0) {
            out->est_start_s = 0;
            out->freed_by = -1;
        }
    }
    rc = 0;
out:
    c->generation = generation;
    free(slots);
    return rc;
}
