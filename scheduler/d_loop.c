/* SPDX-License-Identifier: MIT */
/*
 * musterd's event loop: one thread polls the workers' ROUTER socket and the Redis intake socket,
 * applies what arrives, and runs a scheduling pass when something changed.  Periodic work
 * (lost nodes, bind deadlines, node status) runs at most every 200 ms.  Nothing here blocks for
 * long: Redis writes are single pipelined round trips on loopback or a LAN.  Each turn first
 * keeps the leader lease (d_lease.c): a musterd that lost it returns before acting on anything.
 *
 * A large fleet's heartbeats are taken in batches (d_router_rest_ms): woken for each one, the
 * loop and ZeroMQ's I/O thread spent most of an idle musterd's CPU waking each other (issue #15).
 */
#include "scheduler/d_loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

#define CHECK_INTERVAL_MS 200
#define CLAIM_INTERVAL_MS 5000
#define CLAIM_IDLE_MS     30000 /* an entry read this long ago and not acknowledged is orphaned */

#define DEFER_MAX 100000 /* worker messages held during a Redis outage */

/* From this many expected heartbeats a second on, heartbeats are taken in batches of
 * ROUTER_REST_MS (5,000 nodes at heartbeat_s 5, 1,000 at heartbeat_s 1). */
#define ROUTER_BATCH_BEATS_PER_S 1000
#define ROUTER_REST_MS           10

/* Holds m (taking its heap arrays) until Redis is back; false when the hold is full. */
static bool defer(struct musterd *d, const char *identity, struct proto_msg *m)
{
    struct d_deferred *slot;
    if (d->ndeferred == d->cap_deferred) {
        int cap = d->cap_deferred ? d->cap_deferred * 2 : 64;
        struct d_deferred *p;
        if (cap > DEFER_MAX)
            return false;
        p = realloc(d->deferred, (size_t)cap * sizeof(*p));
        if (!p)
            return false;
        d->deferred = p;
        d->cap_deferred = cap;
    }
    slot = &d->deferred[d->ndeferred++];
    mu_strlcpy(slot->node, identity, sizeof(slot->node));
    slot->msg = *m;
    proto_msg_init(m, m->type); /* the copy owns the arrays now */
    return true;
}

static void handle_message(struct musterd *d, const char *identity, struct proto_msg *m);

/* Redis is back and every job is written: apply what was held, in arrival order. */
static void replay_deferred(struct musterd *d)
{
    int n = d->ndeferred;
    if (n)
        mu_log(MU_LOG_INFO, "sched", "applying %d worker message(s) held during the outage", n);
    for (int i = 0; i < n && !d->redis_down; i++) {
        handle_message(d, d->deferred[i].node, &d->deferred[i].msg);
        proto_msg_release(&d->deferred[i].msg);
        d->deferred[i].msg.type = PROTO_HEARTBEAT; /* released; nothing to free twice */
        if (d->redis_down) {
            /* Down again: keep the rest, in order. */
            memmove(d->deferred, d->deferred + i + 1, (size_t)(n - i - 1) * sizeof(*d->deferred));
            d->ndeferred = n - i - 1;
            return;
        }
    }
    d->ndeferred = 0;
}

void d_deferred_free(struct musterd *d)
{
    for (int i = 0; i < d->ndeferred; i++)
        proto_msg_release(&d->deferred[i].msg);
    free(d->deferred);
    d->deferred = NULL;
    d->ndeferred = 0;
}

static void handle_message(struct musterd *d, const char *identity, struct proto_msg *m)
{
    struct d_node *node;

    switch (m->type) {
    case PROTO_HELLO:
        d_hello(d, identity, m);
        return;
    case PROTO_HEARTBEAT:
        d_node_heartbeat(d, identity, m);
        return;
    default:
        break;
    }
    node = d_node_get(d, identity);
    if (!node && m->type == PROTO_BYE) {
        mu_log(MU_LOG_DEBUG, "sched", "node=%s BYE from a node that is not registered", identity);
        return; /* nothing of ours runs there; an answer would only ask it for HELLO */
    }
    if (!node) {
        /* Not registered (e.g. we restarted): answering makes it send HELLO, which carries its
         * tasks again; what this message said is not lost, but say that it was dropped. */
        mu_log_limited(MU_LOG_INFO, "sched", "unregistered", 10,
                       "node=%s %s from a node that is not registered: dropped, asking for HELLO",
                       identity, proto_type_name(m->type));
        d_node_heartbeat(d, identity, m);
        return;
    }
    node->seen_ms = mu_time_mono_ms();
    if (m->type == PROTO_LOG_DATA) {
        /* Changes no job: answered now, or lost with Redis (musterctl asks again). */
        if (!d->redis_down)
            d_logs_data(d, node, m);
        return;
    }
    if (d->redis_down) {
        /* What it reports changes jobs, and a change we cannot write must not happen yet. */
        if (!defer(d, identity, m))
            mu_log_limited(MU_LOG_ERROR, "sched", "defer-full", 10,
                           "node=%s %s dropped: too many messages held during the outage", identity,
                           proto_type_name(m->type));
        return;
    }
    switch (m->type) {
    case PROTO_BIND_ACK:
        d_bind_ack(d, node, m);
        break;
    case PROTO_TASK_STATUS:
        d_task_status(d, node, &m->task);
        break;
    case PROTO_CHECKPOINT_DONE:
        d_checkpoint_done(d, node, m);
        break;
    case PROTO_SPOT_NOTICE:
        d_spot_notice(d, node, m);
        break;
    case PROTO_REBALANCE:
        d_rebalance(d, node, m);
        break;
    case PROTO_BYE:
        d_bye(d, node, m);
        break;
    default:
        mu_log_limited(MU_LOG_WARN, "sched", "unexpected-type", 10,
                       "node=%s unexpected %s message ignored", node->name,
                       proto_type_name(m->type));
    }
}

/* Reads what the workers sent, up to a budget; true when it was nothing but heartbeats. */
static bool drain_router(struct musterd *d)
{
    bool beats_only = true;
    for (int budget = 0; budget < 10000; budget++) {
        struct proto_msg m;
        struct mu_err err;
        char identity[PROTO_NODE_MAX] = "";
        int rc = proto_recv(d->router, identity, sizeof(identity), &m, &err);
        if (rc == 0) {
            proto_msg_release(&m);
            return beats_only;
        }
        if (rc < 0)
            mu_log_limited(MU_LOG_WARN, "sched", "bad-frame", 10, "node=%s bad message dropped: %s",
                           identity[0] ? identity : "?", err.msg);
        else
            handle_message(d, identity, &m);
        beats_only = beats_only && rc > 0 && m.type == PROTO_HEARTBEAT;
        proto_msg_release(&m);
    }
    return beats_only;
}

/* Whether the nodes known could send ROUTER_BATCH_BEATS_PER_S heartbeats a second. */
static bool fleet_is_large(const struct musterd *d)
{
    return (int64_t)d->nnodes >= (int64_t)ROUTER_BATCH_BEATS_PER_S * d->cfg.heartbeat_s;
}

int d_router_rest_ms(const struct musterd *d, bool beats_only)
{
    return beats_only && !d->dirty && !d->redis_down && fleet_is_large(d) ? ROUTER_REST_MS : 0;
}

/* Says when heartbeats start (or stop) being taken in batches. */
static void note_batching(const struct musterd *d, bool *batching)
{
    if (fleet_is_large(d) == *batching)
        return;
    *batching = !*batching;
    if (*batching)
        mu_log(MU_LOG_INFO, "sched",
               "%d nodes at heartbeat_s %d: worker messages are now read in batches, every %d ms "
               "while nothing but heartbeats comes",
               d->nnodes, d->cfg.heartbeat_s, ROUTER_REST_MS);
    else
        mu_log(MU_LOG_INFO, "sched",
               "%d nodes at heartbeat_s %d: worker messages are now read as each arrives",
               d->nnodes, d->cfg.heartbeat_s);
}

static void apply_entries(struct musterd *d, struct queue_entry *entries, int n)
{
    d_access_batch_begin(d);
    /* Submissions first: a cancel read in the same batch may name one of them. */
    for (int i = 0; i < n; i++) {
        if (entries[i].stream == QUEUE_STREAM_SUBMIT)
            d_intake_submit(d, &entries[i]);
    }
    for (int i = 0; i < n; i++) {
        if (entries[i].stream == QUEUE_STREAM_CONTROL)
            d_control(d, &entries[i]);
        else if (entries[i].stream == QUEUE_STREAM_LOGS)
            d_logs_request(d, &entries[i]);
    }
    queue_entries_free(entries, n);
}

static void drain_intake(struct musterd *d)
{
    struct queue_entry *entries = NULL;
    struct mu_err err;
    int n = 0;

    if (queue_intake_read(d->qi, &entries, &n, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "intake", 5, "%s; retrying", err.msg);
        d->redis_down = true;
        return;
    }
    apply_entries(d, entries, n);
}

/* Entries a dead or deposed scheduler read and never acknowledged, idle at least min_idle_ms. */
static void claim_stale(struct musterd *d, int min_idle_ms)
{
    struct queue_entry *entries = NULL;
    struct mu_err err;
    int n = 0;

    if (queue_intake_claim(d->q, d->qi, d->consumer, min_idle_ms, &entries, &n, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "claim", 5, "%s", err.msg);
        d->redis_down = true;
        return;
    }
    if (n)
        mu_log(MU_LOG_INFO, "sched", "claimed %d entr%s left unacknowledged by another scheduler",
               n, n == 1 ? "y" : "ies");
    apply_entries(d, entries, n);
}

/* While Redis is down: try to reconnect; once back, write what changed and apply what waited. */
static void redis_recover(struct musterd *d, uint64_t now)
{
    struct mu_err err;
    if (now < d->next_redis_try_ms)
        return;
    if (queue_reconnect(d->q, &err) != 0) {
        /* At most a third of the lease between tries: after a Redis failover the standbys
         * leave a free lease to this leader for one lease time (d_lease_wait). */
        uint64_t cap_ms = (uint64_t)d->lease.ttl_ms / 3;
        if (cap_ms < 100 || cap_ms > 5000)
            cap_ms = 5000;
        d->redis_backoff_ms = d->redis_backoff_ms ? d->redis_backoff_ms * 2 : 100;
        if (d->redis_backoff_ms > cap_ms)
            d->redis_backoff_ms = cap_ms;
        d->next_redis_try_ms = now + d->redis_backoff_ms;
        mu_log_limited(MU_LOG_WARN, "sched", "redis-down", 10,
                       "redis unreachable (%s); running tasks continue, retrying", err.msg);
        return;
    }
    d->redis_down = false;
    /* Still the leader?  Nothing is written or sent before that is known.  On a promoted
     * replica that missed the lease, the renewal sets it back (no later epoch was taken). */
    d_lease_keep(d, now, true);
    if (d->lease.lost)
        return;
    if (queue_server_changes(d->q) != d->server_changes) {
        uint64_t changes = queue_server_changes(d->q);
        mu_log(MU_LOG_WARN, "sched",
               "redis: now on another server than the one written to before (a failover or a "
               "restart): what it acknowledged last may be lost, so every job held and every "
               "job ended in the last %d s is written again",
               D_RETIRED_KEEP_MS / 1000);
        if (d_jobs_resync_all(d) != 0) {
            d->redis_down = true;
            return;
        }
        d->server_changes = changes;
        d->nodes_dirty = true;
    }
    if (d_jobs_resync(d) != 0) {
        d->redis_down = true;
        return;
    }
    mu_log(MU_LOG_INFO, "sched", "redis connection restored");
    d_outage_recheck(d);
    d->redis_backoff_ms = 0;
    /* Nodes could not be judged while we were blind: give every online one a fresh lease. */
    for (int i = 0; i < d->nnodes; i++)
        d->nodes[i].seen_ms = now;
    replay_deferred(d);
    d_status_rewrite(d);
    d->dirty = true;
}

static void periodic(struct musterd *d, uint64_t now)
{
    if (!d->redis_down && queue_server_changes(d->q) != d->server_changes) {
        /* A command reconnected on its own to another server: recover as after an outage. */
        d->redis_down = true;
        d->next_redis_try_ms = now;
    }
    if (d->redis_down) {
        redis_recover(d, now);
        if (d->redis_down)
            return; /* no decisions that could not be written */
    }
    if (now < d->next_check_ms)
        return;
    d->next_check_ms = now + CHECK_INTERVAL_MS;
    for (int lost; (lost = d_nodes_expire(d, now)) >= 0;)
        d_node_lost_tasks(d, lost);
    d_jobs_check_timeouts(d, now);
    d_stops_check(d, now);
    d_limits_check(d, mu_time_wall_ms());
    d_logs_check(d, now);
    d_adopt_check(d, now);
    d_wake_check(d, now);
    if (d->reload && *d->reload) {
        *d->reload = 0;
        d_config_reload(d, "SIGHUP");
    }
    d_jobs_flush_reasons(d);
    d_jobs_retired_expire(d, now);
    if (now >= d->next_claim_ms) {
        d->next_claim_ms = now + CLAIM_INTERVAL_MS;
        claim_stale(d, CLAIM_IDLE_MS);
    }
    if (d->nodes_dirty || now >= d->next_nodes_write_ms) {
        d_status_write(d);
        d->next_nodes_write_ms = now + (uint64_t)d->cfg.heartbeat_s * 1000u;
    }
}

/* A musterd whose lease another took, or whose write Redis refused, steps down (d_lease.c). */
static bool lease_gone(const struct musterd *d)
{
    return d->lease.lost || d->store.fenced;
}

static int step_down(const struct musterd *d, struct mu_err *err)
{
    mu_log(MU_LOG_ERROR, "sched",
           "stepping down: another musterd took the leader lease (this one led as epoch %llu); "
           "exiting, nothing more is written or sent",
           (unsigned long long)d->epoch);
    return mu_errf(err, MU_E_FENCED,
                   "lost the leader lease (epoch %llu) to another musterd; hint: let systemd "
                   "restart this one (musterd.service's Restart=on-failure), it comes back as a "
                   "standby",
                   (unsigned long long)d->epoch);
}

int d_run(struct musterd *d, struct mu_err *err)
{
    uint64_t router_rest_until = 0; /* mono: the ROUTER is left unpolled until then */
    bool batching = false;          /* note_batching's last word */

    mu_log(MU_LOG_INFO, "sched", "musterd running: epoch %llu, workers on %s",
           (unsigned long long)d->epoch, d->cfg.bind);
    /* Before our first read nothing pending is ours, and no other musterd can store an entry
     * (its writes are fenced), so what earlier leaders left is taken now, not after
     * CLAIM_IDLE_MS: a takeover goes on with the submissions the old leader had in hand. */
    claim_stale(d, 0);
    if (lease_gone(d))
        return step_down(d, err);
    drain_intake(d); /* sends the first blocking read */
    while (!*d->stop) {
        zmq_pollitem_t items[4];
        int nitems = 0;
        int router_item = -1;
        int intake_item = -1;
        int metrics_item = -1;
        int fd = queue_intake_fd(d->qi);
        int mfd = d_metrics_fd(d);
        int timeout = d->dirty && !d->redis_down ? 0 : CHECK_INTERVAL_MS;
        uint64_t now = mu_time_mono_ms();

        memset(items, 0, sizeof(items));
        if (now >= router_rest_until || d->dirty) {
            router_item = nitems++;
            items[router_item].socket = d->router;
            items[router_item].events = ZMQ_POLLIN;
        } else if (router_rest_until - now < (uint64_t)timeout) {
            timeout = (int)(router_rest_until - now);
        }
        if (fd >= 0) {
            intake_item = nitems++;
            items[intake_item].fd = fd;
            items[intake_item].events = ZMQ_POLLIN;
        }
        if (mfd >= 0) {
            metrics_item = nitems++;
            items[metrics_item].fd = mfd;
            items[metrics_item].events = ZMQ_POLLIN;
        }
        nitems = proto_zap_poll_add(d->zap, items, nitems); /* CURVE allow-list, if on */
        if (zmq_poll(items, nitems, timeout) < 0) {
            if (errno == EINTR)
                continue;
            return mu_errf(err, MU_E_ZMQ, "zmq_poll: %s", zmq_strerror(errno));
        }
        proto_zap_serve(d->zap);
        /* A leader that was frozen past its lease learns it here, before it acts on anything. */
        d_lease_keep(d, mu_time_mono_ms(), false);
        if (lease_gone(d))
            return step_down(d, err);
        if (router_item >= 0 && (items[router_item].revents & ZMQ_POLLIN)) {
            int rest_ms = d_router_rest_ms(d, drain_router(d));
            router_rest_until = rest_ms ? mu_time_mono_ms() + (uint64_t)rest_ms : 0;
            note_batching(d, &batching);
        }
        /* A lost intake connection is retried on the outage's backoff, not every turn. */
        if ((intake_item < 0 && !d->redis_down)
            || (intake_item >= 0 && (items[intake_item].revents & ZMQ_POLLIN)))
            drain_intake(d);
        if (metrics_item >= 0 && (items[metrics_item].revents & ZMQ_POLLIN))
            d_metrics_run(d);
        now = mu_time_mono_ms();
        periodic(d, now);
        if (d->dirty && !d->redis_down && !lease_gone(d))
            d_schedule(d);
        if (lease_gone(d))
            return step_down(d, err);
    }
    mu_log(MU_LOG_INFO, "sched", "musterd stopping");
    d_lease_release(d);
    return 0;
}
