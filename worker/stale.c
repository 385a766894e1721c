/* SPDX-License-Identifier: MIT */
/*
 * Telling a stale command from a fresh one (protocol/README.md "The lease and stale commands").
 * A worker frozen with SIGSTOP, or one whose connection held a backlog, may read a BIND long
 * after the scheduler gave its attempt up; starting it would run two attempts of one gang side by
 * side.  Two facts let the worker drop such a BIND without asking anyone:
 *
 * - The scheduler's clock has a lower bound: a message stamped sent_ms and received at local
 *   time r proves the scheduler's clock read at least sent_ms at r, so at least
 *   sent_ms + (now - r) now.  The best bound is the largest sent_ms - r seen; clocks of
 *   different machines (or of a restarted scheduler) are unrelated, so it starts over with each
 *   epoch.  A BIND whose expires_ms that bound has passed is stale for certain.
 * - A KILL of a task the worker does not know means the scheduler gave that task up; a BIND of
 *   it that arrives later (it sat in a socket, or was retried) must not start it.  The worker
 *   remembers the last WRK_TOMBS_MAX such tasks (a ring: a bound, not a guarantee forever).
 *
 * With the lease (lease.c), these decide whether a BIND may start at all, and the deadline past
 * which its shim must not exec it, so that no delay between the two (a worker frozen between
 * its check and the exec) can start a task late.
 */
#include "worker/wrk.h"

#include <inttypes.h>
#include <string.h>

#include "common/mu_banned.h"

/* A clock reading beyond this is garbage (2^61 ms is 73 million years); below it the sums here
 * cannot overflow. */
#define CLOCK_MAX_MS ((uint64_t)1 << 61)

static bool tomb_matches(const struct wrk_tomb *t, const struct proto_task_ref *ref)
{
    return t->task == ref->task && t->attempt == ref->attempt && strcmp(t->job, ref->job) == 0;
}

bool wrk_tombs_has(const struct wrk_tombs *t, const struct proto_task_ref *ref)
{
    for (int i = 0; i < t->n; i++) {
        if (tomb_matches(&t->e[i], ref))
            return true;
    }
    return false;
}

void wrk_tombs_add(struct wrk_tombs *t, const struct proto_task_ref *ref)
{
    struct wrk_tomb *e;

    if (wrk_tombs_has(t, ref))
        return;
    if (t->next < 0 || t->next >= WRK_TOMBS_MAX)
        t->next = 0;
    e = &t->e[t->next];
    mu_strlcpy(e->job, ref->job, sizeof(e->job));
    e->task = ref->task;
    e->attempt = ref->attempt;
    t->next = (t->next + 1) % WRK_TOMBS_MAX;
    if (t->n < WRK_TOMBS_MAX)
        t->n++;
}

void wrk_sched_clock_note(struct wrk_sched_clock *c,
                          uint64_t epoch,
                          uint64_t sent_ms,
                          uint64_t recv_ms)
{
    int64_t offset;

    if (c->epoch != epoch) {
        c->epoch = epoch;
        c->known = false;
        c->offset_ms = 0;
    }
    if (sent_ms == 0 || sent_ms > CLOCK_MAX_MS || recv_ms > CLOCK_MAX_MS)
        return;
    offset = (int64_t)sent_ms - (int64_t)recv_ms;
    if (!c->known || offset > c->offset_ms)
        c->offset_ms = offset;
    c->known = true;
}

bool wrk_sched_clock_bound(const struct wrk_sched_clock *c, uint64_t now_ms, uint64_t *sched_ms)
{
    int64_t v;

    if (!c->known || now_ms > CLOCK_MAX_MS)
        return false;
    v = (int64_t)now_ms + c->offset_ms;
    *sched_ms = v > 0 ? (uint64_t)v : 0;
    return true;
}

bool wrk_sched_clock_local(const struct wrk_sched_clock *c, uint64_t sched_ms, uint64_t *local_ms)
{
    int64_t v;

    if (!c->known || sched_ms > CLOCK_MAX_MS)
        return false;
    v = (int64_t)sched_ms - c->offset_ms;
    *local_ms = v > 0 ? (uint64_t)v : 1; /* 1: long past, and still "a deadline" (0 is none) */
    return true;
}

bool wrk_bind_is_stale(const struct wrk_tombs *t,
                       const struct wrk_sched_clock *c,
                       const struct wrk_lease *l,
                       const struct proto_msg *m,
                       uint64_t now_ms,
                       char *why,
                       size_t size)
{
    uint64_t sched_now = 0;
    uint64_t until = 0;

    if (wrk_tombs_has(t, &m->task)) {
        mu_strlcpy(why, "not started: a KILL for this task arrived first", size);
        return true;
    }
    if (m->expires_ms > 0 && wrk_sched_clock_bound(c, now_ms, &sched_now)
        && sched_now > m->expires_ms) {
        (void)mu_snprintf(why, size,
                          "stale BIND: the scheduler gave this attempt up %" PRIu64
                          " ms ago (expires_ms)",
                          sched_now - m->expires_ms);
        return true;
    }
    if (wrk_lease_holds(l, now_ms))
        return false;
    wrk_lease_read(l, NULL, &until);
    if (until == 0)
        mu_strlcpy(why, "not started: this node holds no lease yet (no answer from the scheduler)",
                   size);
    else
        (void)mu_snprintf(why, size,
                          "not started: this node's lease ran out %.1f s ago (no word from the "
                          "scheduler)",
                          (double)(now_ms - until) / 1000.0);
    return true;
}

uint64_t wrk_bind_deadline(const struct wrk_sched_clock *c,
                           const struct wrk_lease *l,
                           const struct proto_msg *m)
{
    int lease_s = 0;
    uint64_t deadline = 0;
    uint64_t expiry;

    wrk_lease_read(l, &lease_s, &deadline);
    if (lease_s <= 0)
        deadline = 0;
    if (m->expires_ms > 0 && wrk_sched_clock_local(c, m->expires_ms, &expiry)
        && (deadline == 0 || expiry < deadline))
        deadline = expiry;
    return deadline;
}
