/* SPDX-License-Identifier: MIT */
/*
 * The agent's side of the lease (docs/design.md §5, protocol/README.md "The lease and stale
 * commands"); lease.c is the record itself, shared with muster-shim.  Every HELLO and HEARTBEAT
 * carries echo_ms, our monotonic clock; the scheduler's answer carries it back with lease_s (its
 * node_lost_after_s), and the lease then holds until echo_ms + lease_s, since the scheduler
 * cannot judge us lost before.  Only such an answer renews it: one that sat in the socket while
 * we were frozen renews nothing, and never shortens a newer one.  The lease lives in
 * <run-dir>/lease, which each shim maps: once it runs out the shims stop their tasks by
 * themselves (checkpoint signal, grace, SIGTERM, SIGKILL) and record the exits as fenced, so the
 * scheduler requeues rather than counts a failure; a dead worker's tasks stop too.  A restarted
 * worker keeps the lease it finds until the first answer sets it.  Here: that setup, the
 * renewal, and saying SELF-FENCING once when the lease runs out with tasks running.
 */
#include "worker/internal.h"

#include <inttypes.h>
#include <unistd.h>

#include "common/mu_banned.h"

/* <run>/lease: the lease a previous run left holds (its shims honour it) until renewed. */
int wrk_agent_lease_setup(struct wrk_agent *a, struct mu_err *err)
{
    char old[PROTO_PATH_MAX + 16];
    uint64_t now = mu_time_mono_ms();
    uint64_t until;
    int lease_s;

    if (mu_snprintf(a->lease_path, sizeof(a->lease_path), "%s/lease", a->run_dir) != 0)
        return mu_errf(err, MU_E_TOOBIG, "run directory '%s' is too long", a->run_dir);
    a->lease = wrk_lease_new(a->lease_path, true, err);
    if (!a->lease) {
        mu_err_prefix(err, "cannot keep the lease: ");
        return -1;
    }
    wrk_lease_read(a->lease, &lease_s, &until);
    if (lease_s > 0)
        mu_log(MU_LOG_INFO, WRK_MOD, "node=%s lease %d s from the last run: %s %" PRIu64 " ms",
               a->node, lease_s, until > now ? "held for" : "ran out",
               until > now ? until - now : now - until);
    /* The text file older versions kept lease_s in; the record replaces it. */
    (void)mu_snprintf(old, sizeof(old), "%s/lease_s", a->state_dir);
    (void)unlink(old);
    return 0;
}

/* A HEARTBEAT: the lease it carries, renewed when it answers one of ours (lease.c). */
void wrk_agent_lease_renew(struct wrk_agent *a, const struct proto_msg *m, uint64_t now)
{
    int before_s;
    int lease_s;
    uint64_t until;

    wrk_lease_read(a->lease, &before_s, NULL);
    if (!wrk_lease_renew(a->lease, m->lease_s, m->echo_ms, m->ok, now))
        return;
    a->witness_said = 0;
    wrk_lease_read(a->lease, &lease_s, &until);
    if (lease_s != before_s)
        mu_log(MU_LOG_INFO, WRK_MOD,
               "node=%s lease %d s: tasks stop after that long without an answer from the "
               "scheduler (was %d s)",
               a->node, lease_s, before_s);
    if (a->lease_out && until > now) {
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s lease renewed: the scheduler answers again; the tasks the supervisors "
               "stopped are reported as they end",
               a->node);
        a->lease_out = false;
    }
}

int wrk_agent_witness_start(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    const char *prefix =
        cfg->redis_prefix && cfg->redis_prefix[0] ? cfg->redis_prefix : MU_KEY_PREFIX_DEFAULT;

    if (!cfg->redis || !cfg->redis[0]) {
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s no --redis: nothing shows this node whether a scheduler leads, so its "
               "tasks stop whenever none answers for the lease (node_lost_after_s), a scheduler "
               "restart that long included; see muster-worker(8), \"Work outlives the "
               "scheduler\"",
               a->node);
        return 0;
    }
    a->witness = wrk_witness_new(cfg->redis, prefix, err);
    if (!a->witness) {
        mu_err_prefix(err, "--redis: ");
        return -1;
    }
    mu_log(MU_LOG_INFO, WRK_MOD,
           "node=%s the lease's witness reads %sleader in redis: tasks keep running while no "
           "scheduler leads",
           a->node, prefix);
    return 0;
}

/* Says once per change what the witness found while the scheduler is silent. */
static void witness_say(
    struct wrk_agent *a, enum wrk_witness_seen seen, uint64_t epoch, const char *why, uint64_t now)
{
    uint64_t until;

    if (a->witness_said == (int)seen)
        return;
    a->witness_said = (int)seen;
    wrk_lease_read(a->lease, NULL, &until);
    if (seen == WRK_WITNESS_NO_LEADER)
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s no scheduler leads (redis: the leader key is free): the lease is held, so "
               "the %d task(s) here keep running until one leads",
               a->node, a->nrunning);
    else if (seen == WRK_WITNESS_LEADER)
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s the scheduler of epoch %" PRIu64 " leads (redis) but has not answered "
               "for %" PRIu64 " ms: the tasks here stop when the lease runs out in %" PRIu64
               " ms unless it answers",
               a->node, epoch, now - a->last_rx_ms, until > now ? until - now : 0);
    else if (seen == WRK_WITNESS_UNREACHABLE)
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s neither the scheduler nor redis answers (%s): nothing shows that no "
               "scheduler leads, so the tasks here stop when the lease runs out in %" PRIu64 " ms",
               a->node, why, until > now ? until - now : 0);
}

/* The witness reads while the scheduler has been silent for half the lease with tasks running;
 * a reading that found no leader holds the lease as an answer would (witness.c says why). */
void wrk_agent_lease_witness(struct wrk_agent *a, uint64_t now)
{
    char why[256];
    int lease_s;
    uint64_t until;
    uint64_t seq;
    uint64_t free_sent;
    uint64_t epoch;
    enum wrk_witness_seen seen;
    bool want;

    if (!a->witness)
        return;
    wrk_lease_read(a->lease, &lease_s, &until);
    want =
        lease_s > 0 && a->nrunning > 0 && (until <= now || until - now < (uint64_t)lease_s * 500u);
    wrk_witness_poll(a->witness, want ? proto_witness_interval_ms(lease_s) : 0);
    if (wrk_witness_readings(a->witness) == a->witness_seq)
        return;
    seen = wrk_witness_get(a->witness, &seq, &free_sent, &epoch, why, sizeof(why));
    a->witness_seq = seq;
    if (seen == WRK_WITNESS_NO_LEADER && wrk_lease_renew(a->lease, 0, free_sent, true, now)
        && a->lease_out) {
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s lease held again: no scheduler leads; the tasks the supervisors "
               "stopped are reported as they end",
               a->node);
        a->lease_out = false;
    }
    if (want)
        witness_say(a, seen, epoch, why, now);
}

/* The lease ran out with tasks running: the shims are stopping them now.  Said once. */
void wrk_agent_lease_watch(struct wrk_agent *a, uint64_t now)
{
    int lease_s;
    uint64_t until;
    int n = a->nrunning;

    if (a->lease_out || wrk_lease_holds(a->lease, now))
        return;
    /* A shim may have stopped its task before this turn: those count as well. */
    for (int i = 0; i < a->ntasks; i++)
        n += a->tasks[i].rec.ref.state == PROTO_TASK_EXITED && a->tasks[i].rec.ref.fenced;
    if (n == 0)
        return;
    a->lease_out = true;
    wrk_lease_read(a->lease, &lease_s, &until);
    mu_log(MU_LOG_ERROR, WRK_MOD,
           "node=%s SELF-FENCING: the lease (%d s) ran out %" PRIu64
           " ms ago without an answer from the scheduler %s; the supervisors stop the %d "
           "task(s) here (checkpoint signal, grace, SIGTERM, SIGKILL) so that no requeued "
           "attempt runs beside them",
           a->node, lease_s, until ? now - until : 0, a->sched_now, n);
}

uint64_t wrk_agent_lease_deadline(const struct wrk_agent *a, uint64_t now)
{
    uint64_t until = 0;

    if (a->lease_out || a->nrunning == 0 || !wrk_lease_holds(a->lease, now))
        return 0;
    wrk_lease_read(a->lease, NULL, &until);
    return until;
}
