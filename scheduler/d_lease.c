/* SPDX-License-Identifier: MIT */
/*
 * The leader lease (issue #14, docs/deploy.md "High availability").  Several musterd may share
 * one Redis; the one holding <prefix>leader leads, the others stand by with their config loaded,
 * Redis connected and their ROUTER bound, answering nobody, so that workers with a list of
 * schedulers move on until they find the leader.  A standby tries to take the key every
 * STANDBY_TRY_MS, so it leads within leader_lease_s + STANDBY_TRY_MS of the leader's death.
 *
 * The leader renews every third of the TTL.  Redis's TTL is what the standbys go by; ours is
 * counted from when the last renewal that Redis took was sent, so it never outlives Redis's.
 * Once it may have run out (a stall, Redis unreachable) and a standby was seen at the last
 * renewal, nothing is sent to workers until a renewal says the key is still ours; a renewal that
 * finds another holder, or a write refused by the fence (queue_fence_set), makes this musterd step
 * down: d_run returns and musterd exits (systemd restarts it as a standby).  Exiting rather than
 * going back to standby in-process throws away every piece of in-memory state the new leader may
 * have changed under us.
 */
#include "scheduler/d_loop.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

#define STANDBY_TRY_MS 250 /* a standby tries to take the lease this often */
#define RETRY_MS       250 /* a renewal that failed (Redis) is tried again this soon */

/* Reads and drops what workers sent a standby: it answers nobody. */
static void standby_drain(struct musterd *d, bool *logged)
{
    for (int budget = 0; budget < 10000; budget++) {
        struct proto_msg m;
        struct mu_err err;
        char identity[PROTO_NODE_MAX] = "";
        int rc = proto_recv(d->router, identity, sizeof(identity), &m, &err);
        proto_msg_release(&m);
        if (rc == 0)
            return;
        if (!*logged) {
            mu_log(MU_LOG_INFO, "sched",
                   "node=%s standing by: worker messages are not answered until this musterd "
                   "leads",
                   identity[0] ? identity : "?");
            *logged = true;
        }
    }
}

/* One try at the lease: 1 taken, 0 held by another (*holder says whom; "" when free but left
 * to its last leader after a Redis failover), -1 Redis failed. */
static int try_take(
    struct musterd *d, bool take_free, char *holder, size_t holder_size, struct mu_err *err)
{
    uint64_t sent = mu_time_mono_ms();
    uint64_t epoch = 0;
    bool won = false;
    /* Having bound a TCP endpoint proves no live process on this host holds it, so a lease left
     * by "musterd@HOST ENDPOINT" (ours, killed) is taken at once; ipc:// binds prove nothing. */
    bool take_own = strncmp(d->cfg.bind, "tcp://", 6) == 0;

    if (queue_lease_acquire(d->q, d->lease.holder, (long)getpid(), d->lease.ttl_ms, take_own,
                            take_free, &epoch, holder, holder_size, &won, err)
        != 0)
        return -1;
    if (!won)
        return 0;
    mu_strlcpy(d->lease.token, holder, sizeof(d->lease.token));
    d->epoch = epoch;
    d->lease.leading = true;
    d->lease.lost = false;
    d->lease.valid_until_ms = sent + (uint64_t)d->lease.ttl_ms;
    d->lease.renew_at_ms = sent + (uint64_t)d->lease.ttl_ms / 3;
    d->lease.term_start_ms = mu_time_mono_ms();
    if (queue_fence_set(d->q, d->lease.token, epoch, d->lease.ttl_ms, err) != 0)
        return -1;
    return 1;
}

/* A worker's witness keeps its tasks through an outage only if it reads the key free before its
 * own lease runs out: the key outlives the last answer by up to leader_lease_s plus the beats
 * left unanswered, and a reading comes every proto_witness_interval_ms. */
static void lease_fit_say(const struct cfg *c)
{
    int need_ms = c->leader_lease_s * 1000 + d_answer_every(c) * c->heartbeat_s * 1000
                  + proto_witness_interval_ms(c->node_lost_after_s) + 1000;

    if (need_ms <= c->node_lost_after_s * 1000)
        return;
    mu_log(MU_LOG_WARN, "sched",
           "node_lost_after_s %d is too short for leader_lease_s %d and heartbeat_s %d: a "
           "worker's lease can run out before it sees that no scheduler leads, so an outage of "
           "the scheduler stops its tasks; make node_lost_after_s at least %d",
           c->node_lost_after_s, c->leader_lease_s, c->heartbeat_s, (need_ms + 999) / 1000 + 1);
}

int d_lease_wait(struct musterd *d, struct mu_err *err)
{
    char host[64] = "localhost";
    char current[QUEUE_LEASE_TOKEN_MAX] = "";
    bool said = false;
    bool drained_logged = false;
    uint64_t wait_since = mu_time_mono_ms();
    uint64_t changes = queue_server_changes(d->q);
    uint64_t changed_ms = 0; /* mono: when this standby last reached another Redis server */

    (void)gethostname(host, sizeof(host) - 1);
    (void)mu_snprintf(d->lease.holder, sizeof(d->lease.holder), "musterd@%s %s", host, d->cfg.bind);
    d->lease.ttl_ms = d->cfg.leader_lease_s * 1000;
    lease_fit_say(&d->cfg);
    while (!*d->stop) {
        zmq_pollitem_t item;
        /* After a failover the promoted replica may lack the key its leader still renews: that
         * leader gets one lease time to reconnect and set it back (and to write again what the
         * old primary lost, which only it knows) before this standby takes a free key. */
        bool take_free = !changed_ms || mu_time_mono_ms() - changed_ms >= (uint64_t)d->lease.ttl_ms;
        int rc = try_take(d, take_free, current, sizeof(current), err);

        if (queue_server_changes(d->q) != changes) {
            changes = queue_server_changes(d->q);
            changed_ms = mu_time_mono_ms();
            mu_log(MU_LOG_INFO, "sched",
                   "standing by: redis is another server now (a failover); a free lease is left "
                   "to its last leader for %d s",
                   d->cfg.leader_lease_s);
        }

        if (rc == 1) {
            mu_log(MU_LOG_INFO, "sched",
                   "leading: took %s" QUEUE_K_LEADER " as epoch %llu after %llu ms (lease %d s)",
                   d->cfg.key_prefix, (unsigned long long)d->epoch,
                   (unsigned long long)(mu_time_mono_ms() - wait_since), d->cfg.leader_lease_s);
            return 1;
        }
        if (rc < 0) {
            /* Redis away: a standby has nothing to lose by waiting for it. */
            mu_log_limited(MU_LOG_WARN, "sched", "standby-redis", 10,
                           "standing by: cannot reach redis (%s); retrying", err->msg);
        } else if (!said && current[0]) {
            mu_log(MU_LOG_INFO, "sched",
                   "standing by: '%s' leads; taking over when its lease (%d s) runs out", current,
                   d->cfg.leader_lease_s);
            said = true;
        }
        memset(&item, 0, sizeof(item));
        item.socket = d->router;
        item.events = ZMQ_POLLIN;
        if (zmq_poll(&item, 1, STANDBY_TRY_MS) < 0 && errno != EINTR)
            return mu_errf(err, MU_E_ZMQ, "zmq_poll: %s", zmq_strerror(errno));
        proto_zap_serve(d->zap);
        if (item.revents & ZMQ_POLLIN)
            standby_drain(d, &drained_logged);
    }
    return 0;
}

void d_lease_keep(struct musterd *d, uint64_t now, bool force)
{
    struct mu_err err;
    uint64_t sent;
    enum queue_lease_held held = QUEUE_LEASE_LOST;

    if (!d->lease.leading || d->lease.lost)
        return;
    /* Without a standby nobody can take over, so the workers are kept answered (their own
     * lease runs on our answers) through a Redis outage, as before there were standbys. */
    if (now >= d->lease.valid_until_ms && !d->out.halted && d->lease.standbys > 0) {
        d->out.halted = true;
        mu_log(MU_LOG_WARN, "sched",
               "the leader lease may have run out (no renewal for %d s) and %d standby musterd "
               "may take over: nothing is sent to the workers until redis confirms the lease",
               d->cfg.leader_lease_s, d->lease.standbys);
    }
    if (!force && (now < d->lease.renew_at_ms || d->redis_down))
        return;
    sent = mu_time_mono_ms();
    if (queue_lease_renew(d->q, d->lease.token, d->epoch, d->lease.holder, (long)getpid(),
                          d->lease.ttl_ms, &held, &d->lease.standbys, &err)
        != 0) {
        d->lease.renew_at_ms = sent + RETRY_MS;
        mu_log_limited(MU_LOG_WARN, "sched", "renew", 10, "cannot renew the leader lease: %s",
                       err.msg);
        return;
    }
    if (held == QUEUE_LEASE_LOST) {
        d->lease.lost = true;
        d->out.halted = true;
        return;
    }
    /* Free for a moment (found free now, or our own TTL ran out before this renewal was sent,
     * so a fenced write may have set it again meanwhile): a worker that read Redis then saw no
     * leader and held its lease (worker/witness.c), so a new term starts here, as at a takeover:
     * no node is judged lost before node_lost_after_s from now (d_nodes_expire). */
    if (held == QUEUE_LEASE_TAKEN_BACK || sent >= d->lease.valid_until_ms) {
        d->lease.term_start_ms = mu_time_mono_ms();
        mu_log(MU_LOG_WARN, "sched",
               "the leader lease (epoch %llu) %s: workers may have seen no leader, so no node "
               "is judged lost for %d s",
               (unsigned long long)d->epoch,
               held == QUEUE_LEASE_TAKEN_BACK ? "had expired in redis and is set again"
                                              : "ran out here before this renewal",
               d->cfg.node_lost_after_s);
    }
    d->lease.valid_until_ms = sent + (uint64_t)d->lease.ttl_ms;
    d->lease.renew_at_ms = sent + (uint64_t)d->lease.ttl_ms / 3;
    if (d->out.halted) {
        d->out.halted = false;
        mu_log(MU_LOG_INFO, "sched", "the leader lease is still ours (epoch %llu)",
               (unsigned long long)d->epoch);
    }
}

void d_lease_release(struct musterd *d)
{
    struct mu_err err;

    /* The archiver writes under the same token, and a fenced write finding the key free takes
     * it back: it stops before the key is handed over. */
    d_archive_stop(d);
    if (!d->lease.leading || d->lease.lost || d->store.fenced)
        return;
    if (queue_lease_release(d->q, d->lease.token, &err) != 0)
        mu_log(MU_LOG_WARN, "sched", "cannot hand the leader lease back: %s", err.msg);
    else
        mu_log(MU_LOG_INFO, "sched", "leader lease handed back: a standby takes over now");
    d->lease.leading = false;
}
