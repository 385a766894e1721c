/* SPDX-License-Identifier: MIT */
/*
 * The worker's loop (docs/design.md §7): one DEALER to the scheduler, one self-pipe for signals,
 * one table of tasks, all driven from a single zmq_poll; the objects it drives live in the files
 * behind worker/internal.h (tasks, exits, checkpoints, identity, commands, messages, lease).
 *
 * Invariants and why:
 * - Signals (SIGCHLD, SIGTERM, SIGINT) only write a byte to a non-blocking pipe; libzmq's
 *   threads may take them, and the pipe wakes zmq_poll whichever thread did.  Shims are reaped on
 *   every turn, which is cheap and immune to a wake-up byte lost to a full pipe.
 * - Each turn handles, in order: signals, inotify, reaping, the scheduler's messages (at most
 *   RECV_PER_TURN, so that timers get a look in), the spot watcher, then the timers (heartbeats,
 *   re-registration after 3 silent beats (answer_every + 2: the scheduler may answer only one
 *   in answer_every), grace-period SIGKILLs, exit repeats, the lease), and
 *   last the eviction of old exits, so that no loop above sees table entries move.
 * - Spot notices (docs/design.md §5): imds.c's sockets share the zmq_poll; its notices become
 *   SPOT_NOTICE / REBALANCE, and the latest of each is repeated after every HELLO (send.c).
 * - Tasks outlive the worker (issue #5): wrk_agent_free leaves running tasks to their shims,
 *   which stop them by themselves once the lease runs out; wrk_agent_shutdown stops them.
 */
#include "worker/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/mu_banned.h"

#define RECV_PER_TURN   256 /* messages handled per turn before timers get a look in */
#define CLOSE_LINGER_MS 500 /* bounded flush of the last TASK_STATUS messages at exit */
#define IMDS_MAX_FDS    8
#define STOP_WAIT_MS    2000 /* after the shutdown's SIGKILL, the wait for exit files */

/* ---- signals through a self-pipe ---- */

static int sig_pipe[2] = { -1, -1 };
static const int handled_signals[] = { SIGCHLD, SIGTERM, SIGINT };
static struct sigaction saved_actions[MU_ARRAY_LEN(handled_signals)];

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char byte = (unsigned char)sig;
    ssize_t n = write(sig_pipe[1], &byte, 1);
    (void)n; /* a full pipe already holds a wake-up */
    errno = saved;
}

static void signals_restore(void)
{
    for (size_t i = 0; i < MU_ARRAY_LEN(handled_signals); i++)
        (void)sigaction(handled_signals[i], &saved_actions[i], NULL);
    for (int i = 0; i < 2; i++) {
        if (sig_pipe[i] >= 0)
            (void)close(sig_pipe[i]);
        sig_pipe[i] = -1;
    }
}

static int signals_install(struct mu_err *err)
{
    struct sigaction sa;

    if (sig_pipe[0] >= 0)
        return mu_errf(err, MU_E_STATE, "a worker agent already runs in this process");
    if (pipe(sig_pipe) != 0)
        return mu_errf(err, MU_E_SYS, "cannot create the signal pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(sig_pipe[i], F_GETFL);
        if (fl < 0 || fcntl(sig_pipe[i], F_SETFL, fl | O_NONBLOCK) != 0
            || fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC) != 0) {
            int e = errno;
            signals_restore();
            return mu_errf(err, MU_E_SYS, "cannot set up the signal pipe: %s", strerror(e));
        }
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    (void)sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < MU_ARRAY_LEN(handled_signals); i++)
        (void)sigaction(handled_signals[i], &sa, &saved_actions[i]);
    return 0;
}

/* Drains the self-pipe; returns true when SIGTERM or SIGINT arrived. */
static bool drain_signals(void)
{
    unsigned char buf[64];
    bool stop = false;
    ssize_t n;
    while ((n = read(sig_pipe[0], buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n; i++)
            stop = stop || buf[i] == SIGTERM || buf[i] == SIGINT;
    }
    return stop;
}

/* ---- the scheduler's messages ---- */

/* Any message shows the link works (re-registration); only an answer renews the lease. */
static void heard_from_scheduler(struct wrk_agent *a)
{
    a->last_rx_ms = mu_time_mono_ms();
    if (a->quiet) {
        mu_log(MU_LOG_INFO, WRK_MOD, "node=%s scheduler back", a->node);
        a->quiet = false;
    }
}

static void receive_all(struct wrk_agent *a)
{
    for (int i = 0; i < RECV_PER_TURN; i++) {
        struct proto_msg m;
        struct mu_err err;
        int r;

        mu_err_clear(&err);
        r = proto_recv(a->sock, NULL, 0, &m, &err);
        if (r == 1) {
            heard_from_scheduler(a);
            wrk_handle_message(a, &m, a->last_rx_ms);
        } else if (r < 0) {
            if (err.code == MU_E_PROTO)
                heard_from_scheduler(a);
            mu_log_limited(MU_LOG_WARN, WRK_MOD, "wrk-malformed", 10,
                           "node=%s dropping a message from the scheduler: %s", a->node, err.msg);
        }
        proto_msg_release(&m);
        if (r == 0 || (r < 0 && err.code != MU_E_PROTO))
            return;
    }
}

/* ---- the schedulers ---- */

/* Endpoint i of the comma-separated list into out; -1 when there is no such one. */
static int endpoint_at(const char *list, int i, char *out, size_t size)
{
    const char *p = list;
    for (; i > 0 && p; i--) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (!p || !*p)
        return -1;
    size_t n = strcspn(p, ",");
    if (n == 0 || n >= size)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

/* A DEALER to endpoint i of the list; NULL with err. */
static void *dealer_to(struct wrk_agent *a, int i, struct mu_err *err)
{
    char ep[sizeof(a->sched_now)];
    void *sock;
    if (endpoint_at(a->scheduler, i, ep, sizeof(ep)) != 0) {
        mu_errf(err, MU_E_INVAL, "--scheduler: no endpoint %d in '%s'", i + 1, a->scheduler);
        return NULL;
    }
    sock = proto_dealer_new_curve(a->zctx, ep, a->node, a->curve_on ? &a->curve : NULL,
                                  a->curve_on ? a->curve_server : NULL, err);
    if (sock) {
        mu_strlcpy(a->sched_now, ep, sizeof(a->sched_now));
        a->sched_at = i;
    }
    return sock;
}

/*
 * Several schedulers (one leads, the others stand by and answer nobody): a silent one is left
 * for the next in the list, one at a time.  One DEALER connected to all of them would deal our
 * messages round-robin between the leader and a standby or a frozen ex-leader, so the socket is
 * closed (what it still held is resent: HELLO carries the tasks, exits are resent until
 * answered) and a new one connects to the next endpoint.
 */
static void next_scheduler(struct wrk_agent *a, uint64_t now)
{
    struct mu_err err;
    int linger = 0;
    void *sock = dealer_to(a, (a->sched_at + 1) % a->nsched, &err);

    a->rotated_ms = now;
    if (!sock) {
        mu_log_limited(MU_LOG_WARN, WRK_MOD, "wrk-next-sched", 10,
                       "node=%s cannot move on to the next scheduler: %s", a->node, err.msg);
        return;
    }
    (void)zmq_setsockopt(a->sock, ZMQ_LINGER, &linger, sizeof(linger));
    (void)zmq_close(a->sock);
    a->sock = sock;
    mu_log(MU_LOG_INFO, WRK_MOD, "node=%s trying scheduler %d of %d: %s", a->node, a->sched_at + 1,
           a->nsched, a->sched_now);
}

/* The list of schedulers and the CURVE keys each socket to one of them needs; then a socket to
 * the first. */
static int schedulers_setup(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    a->nsched = 1;
    for (const char *p = a->scheduler; (p = strchr(p, ',')) != NULL; p++)
        a->nsched++;
    if (cfg->curve) {
        a->curve = *cfg->curve;
        a->curve_on = true;
        if (!cfg->curve_server
            || mu_strlcpy(a->curve_server, cfg->curve_server, sizeof(a->curve_server))
                   >= sizeof(a->curve_server))
            return mu_errf(err, MU_E_INVAL, "--curve-server-key: expected %d Z85 characters",
                           PROTO_CURVE_KEY_LEN);
    }
    a->sock = dealer_to(a, 0, err);
    return a->sock ? 0 : -1;
}

/* ---- timers ---- */

static uint64_t beat_ms(const struct wrk_agent *a)
{
    return (uint64_t)(a->heartbeat_s > 0 ? a->heartbeat_s : 1) * 1000u;
}

static void run_timers(struct wrk_agent *a, uint64_t now)
{
    wrk_exits_resend(a, now);
    if (a->ino_fd < 0 && now - a->ckpt_poll_ms >= WRK_CKPT_POLL_MS) {
        a->ckpt_poll_ms = now;
        wrk_ckpt_check_running(a);
    }
    if (a->nrunning > 0 && now - a->exit_poll_ms >= WRK_EXIT_POLL_MS)
        wrk_exits_scan(a);
    wrk_agent_lease_witness(a, now);
    wrk_agent_lease_watch(a, now);
    for (int i = 0; i < a->ntasks; i++) {
        struct wrk_task *t = &a->tasks[i];
        if (t->rec.ref.state == PROTO_TASK_RUNNING && t->kill_at_ms && now >= t->kill_at_ms) {
            t->kill_at_ms = 0;
            if (kill(-(pid_t)t->rec.ref.pid, SIGKILL) == 0)
                wrk_task_log(MU_LOG_INFO, &t->rec.ref,
                             "grace period over: sent SIGKILL to its group");
        }
    }
    if (now - a->last_beat_ms < beat_ms(a))
        return;
    if (now - a->last_rx_ms >= (uint64_t)(a->answer_every + 2) * beat_ms(a)) {
        a->answer_every = 1; /* until whichever scheduler answers says otherwise */
        if (!a->quiet) {
            mu_log(MU_LOG_WARN, WRK_MOD,
                   "node=%s scheduler unreachable: nothing from %s for %" PRIu64
                   " ms; registering again",
                   a->node, a->sched_now, now - a->last_rx_ms);
            a->quiet = true;
        }
        if (a->nsched > 1 && now - a->rotated_ms >= 3 * beat_ms(a))
            next_scheduler(a, now);
        wrk_send_hello(a);
    } else {
        wrk_send_heartbeat(a);
    }
}

static int next_wait_ms(const struct wrk_agent *a, uint64_t now, int max_wait_ms)
{
    uint64_t next = a->last_beat_ms + beat_ms(a);
    uint64_t lease_end;

    if (a->ino_fd < 0 && a->nrunning > 0 && a->ckpt_poll_ms + WRK_CKPT_POLL_MS < next)
        next = a->ckpt_poll_ms + WRK_CKPT_POLL_MS;
    if (a->nrunning > 0 && a->exit_poll_ms + WRK_EXIT_POLL_MS < next)
        next = a->exit_poll_ms + WRK_EXIT_POLL_MS;
    lease_end = wrk_agent_lease_deadline(a, now);
    if (lease_end && lease_end < next)
        next = lease_end; /* to say SELF-FENCING when it runs out */
    for (int i = 0; i < a->ntasks; i++) {
        const struct wrk_task *t = &a->tasks[i];
        if (t->rec.ref.state == PROTO_TASK_RUNNING && t->kill_at_ms && t->kill_at_ms < next)
            next = t->kill_at_ms;
    }
    if (next <= now)
        return 0;
    if (next - now < (uint64_t)max_wait_ms)
        return (int)(next - now);
    return max_wait_ms;
}

/* ---- start-up ---- */

static int copy_field(char *dst, size_t size, const char *src, const char *what, struct mu_err *err)
{
    if (!src || !src[0])
        return mu_errf(err, MU_E_INVAL, "%s is required", what);
    if (mu_strlcpy(dst, src, size) >= size)
        return mu_errf(err, MU_E_TOOBIG, "%s '%s' is longer than %zu bytes", what, src, size - 1);
    return 0;
}

/* ---- the spot watcher ---- */

/* Takes the instance id from the metadata service when --instance-id gave none (an imported EC2
 * instance topology labels the node by it, issue #16). */
static void apply_instance_id(struct wrk_agent *a, const char *id)
{
    if (!id[0])
        return;
    if (a->instance_id[0]) {
        if (strcmp(a->instance_id, id) != 0)
            mu_log(MU_LOG_WARN, WRK_MOD,
                   "node=%s keeping --instance-id %s; the metadata service says '%s'", a->node,
                   a->instance_id, id);
        return;
    }
    if (!mu_name_is_valid(id, sizeof(a->instance_id) - 1)) {
        mu_log(MU_LOG_WARN, WRK_MOD, "node=%s cannot use instance id '%s'", a->node, id);
        return;
    }
    mu_strlcpy(a->instance_id, id, sizeof(a->instance_id));
    if (a->hello_sent)
        wrk_send_hello(a); /* so that musterd applies the imported topology now */
}

/* Takes the zone for the "zone" label when no --label gave one; logs type and lifecycle. */
static void apply_identity(struct wrk_agent *a)
{
    const struct wrk_imds_identity *id = wrk_imds_identity_get(a->imds);
    struct proto_label *zone = NULL;

    if (!id || a->identity_applied)
        return;
    a->identity_applied = true;
    mu_log(MU_LOG_INFO, WRK_MOD,
           "node=%s imds: instance '%s', type '%s', zone '%s', lifecycle '%s'", a->node,
           id->instance_id, id->instance_type, id->zone, id->lifecycle);
    apply_instance_id(a, id->instance_id);
    if (!id->zone[0])
        return;
    for (int i = 0; i < a->nlabels; i++) {
        if (strcmp(a->labels[i].level, "zone") == 0)
            zone = &a->labels[i];
    }
    if (zone) {
        if (strcmp(zone->value, id->zone) != 0)
            mu_log(MU_LOG_WARN, WRK_MOD,
                   "node=%s keeping --label zone=%s; the metadata service says "
                   "'%s'",
                   a->node, zone->value, id->zone);
        return;
    }
    if (!mu_name_is_valid(id->zone, sizeof(zone->value) - 1) || a->nlabels >= PROTO_MAX_LABELS) {
        mu_log(MU_LOG_WARN, WRK_MOD, "node=%s cannot use zone '%s' as a label", a->node, id->zone);
        return;
    }
    zone = &a->labels[a->nlabels++];
    mu_strlcpy(zone->level, "zone", sizeof(zone->level));
    mu_strlcpy(zone->value, id->zone, sizeof(zone->value));
    if (a->hello_sent)
        wrk_send_hello(a); /* the scheduler may have refused the node for want of the zone */
}

static void imds_events(struct wrk_agent *a)
{
    struct wrk_imds_event ev;
    char when[32];

    while (wrk_imds_event_next(a->imds, &ev)) {
        switch (ev.type) {
        case WRK_IMDS_SPOT:
            mu_time_format_iso(ev.time_ms, when, sizeof(when));
            mu_log(MU_LOG_WARN, WRK_MOD,
                   "node=%s spot interruption notice: %s at %s (in %" PRId64 " ms)", a->node,
                   ev.action, when, (int64_t)ev.time_ms - (int64_t)mu_time_wall_ms());
            a->spot = ev;
            a->have_spot = true;
            wrk_send_notice(a, PROTO_SPOT_NOTICE, &ev);
            break;
        case WRK_IMDS_REBALANCE:
            mu_time_format_iso(ev.time_ms, when, sizeof(when));
            mu_log(MU_LOG_WARN, WRK_MOD, "node=%s rebalance recommendation noticed at %s", a->node,
                   when);
            a->rebalance = ev;
            a->have_rebalance = true;
            wrk_send_notice(a, PROTO_REBALANCE, &ev);
            break;
        case WRK_IMDS_IDENTITY:
            apply_identity(a);
            break;
        }
    }
}

static int imds_start(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    struct wrk_imds_config ic;

    memset(&ic, 0, sizeof(ic));
    ic.url = cfg->imds;
    ic.interval_s = cfg->imds_interval_s > 0 ? cfg->imds_interval_s : WRK_IMDS_INTERVAL_S;
    ic.token_ttl_s = cfg->imds_token_ttl_s;
    ic.want_identity = true;
    a->imds = wrk_imds_new(&ic, err);
    if (!a->imds)
        return -1;
    /* Wait a little so that the first HELLO carries the zone; a silent service is not fatal. */
    if (wrk_imds_wait_identity(a->imds, WRK_IMDS_IDENTITY_WAIT_MS) == 0)
        apply_identity(a);
    else
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s imds: no instance identity from %s yet; registering without it and "
               "retrying every %d s",
               a->node, cfg->imds, ic.interval_s);
    mu_log(MU_LOG_INFO, WRK_MOD, "node=%s watching %s for spot notices every %d s", a->node,
           cfg->imds, ic.interval_s);
    return 0;
}

static int agent_inventory(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    struct mu_err topo_err;

    if (cfg->sim_gpus > PROTO_MAX_GPUS)
        return mu_errf(err, MU_E_RANGE, "--gpus %d: at most %d", cfg->sim_gpus, PROTO_MAX_GPUS);
    if (cfg->sim_gpus >= 0) {
        a->simulated = true;
        a->ngpus = cfg->sim_gpus;
        a->nislands = 0;
        for (int i = 0; i < a->ngpus; i++) {
            /* main.c checked the list; a caller filling sim_island by hand gets a message. */
            if (cfg->sim_island[i] < 0 || cfg->sim_island[i] >= a->ngpus)
                return mu_errf(err, MU_E_RANGE, "simulated GPU %d: island %d out of 0..%d", i,
                               cfg->sim_island[i], a->ngpus - 1);
            if (cfg->sim_island[i] >= a->nislands)
                a->nislands = cfg->sim_island[i] + 1;
        }
        wrk_gpus_simulate(a->gpus, a->ngpus, cfg->sim_island);
        if (cfg->sim_mig
            && wrk_gpus_simulate_mig(cfg->sim_mig, a->gpus, a->ngpus, PROTO_MAX_GPUS, &a->ngpus,
                                     err)
                   != 0) {
            mu_err_prefix(err, "--mig '%s': ", cfg->sim_mig);
            return -1;
        }
        return 0;
    }
    a->simulated = false;
    if (wrk_gpus_discover(cfg->nvidia_smi, a->gpus, PROTO_MAX_GPUS, &a->ngpus, err) != 0)
        return -1;
    /* Without the matrix the GPUs are still usable: one island is what the scheduler assumed
     * before islands existed, and the worst it costs is a task spread over PCIe. */
    mu_err_clear(&topo_err);
    if (wrk_topo_discover(cfg->nvidia_smi, a->gpus, a->ngpus, &a->nislands, &topo_err) != 0) {
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s cannot read NVLink islands: %s; counting all %d GPUs as one island",
               a->node, topo_err.msg, a->ngpus);
        for (int i = 0; i < a->ngpus; i++)
            a->gpus[i].island = 0;
        a->nislands = 1;
    }
    /* MIG slices (issue #17): a GPU in MIG mode offers only its slices.  Without the list every
     * GPU stays whole, as before MIG was known. */
    {
        int ngpus = a->ngpus;
        int n = ngpus;
        mu_err_clear(&topo_err);
        if (wrk_mig_discover(cfg->nvidia_smi, a->gpus, ngpus, PROTO_MAX_GPUS, &n, &topo_err) != 0) {
            mu_log(MU_LOG_WARN, WRK_MOD,
                   "node=%s cannot read MIG devices: %s; offering all %d GPUs whole", a->node,
                   topo_err.msg, ngpus);
            for (int i = 0; i < ngpus; i++)
                a->gpus[i].mig = false;
            n = ngpus;
        }
        a->ngpus = n;
    }
    return 0;
}

/* cfg->shim, else $MUSTER_SHIM, else muster-shim in the running program's directory. */
static int shim_resolve(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    const char *env = getenv("MUSTER_SHIM");
    char exe[PROTO_PATH_MAX];
    char *slash;
    ssize_t n;

    if (cfg->shim && cfg->shim[0]) {
        if (mu_strlcpy(a->shim, cfg->shim, sizeof(a->shim)) >= sizeof(a->shim))
            return mu_errf(err, MU_E_TOOBIG, "shim path '%s' is too long", cfg->shim);
    } else if (env && env[0]) {
        if (mu_strlcpy(a->shim, env, sizeof(a->shim)) >= sizeof(a->shim))
            return mu_errf(err, MU_E_TOOBIG, "MUSTER_SHIM '%s' is too long", env);
    } else {
        n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
            return mu_errf(err, MU_E_SYS, "cannot read /proc/self/exe: %s", strerror(errno));
        exe[n] = '\0';
        slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        if (mu_snprintf(a->shim, sizeof(a->shim), "%s/" WRK_SHIM_NAME, slash ? exe : ".") != 0)
            return mu_errf(err, MU_E_TOOBIG, "shim path under '%s' is too long", exe);
    }
    if (access(a->shim, X_OK) != 0)
        return mu_errf(err, MU_E_NOTFOUND,
                       "cannot run the task supervisor '%s': %s; hint: install " WRK_SHIM_NAME
                       " beside muster-worker, or set MUSTER_SHIM",
                       a->shim, strerror(errno));
    return 0;
}

/* The state directory with logs/ and ckpt/, the run directory with tasks/. */
static int state_dirs_create(struct wrk_agent *a, struct mu_err *err)
{
    char dir[PROTO_PATH_MAX + 8];

    if (wrk_mkdir_p(a->state_dir, err) != 0)
        return -1;
    (void)mu_snprintf(dir, sizeof(dir), "%s/logs", a->state_dir);
    if (wrk_mkdir_p(dir, err) != 0)
        return -1;
    (void)mu_snprintf(dir, sizeof(dir), "%s/ckpt", a->state_dir);
    if (wrk_mkdir_p(dir, err) != 0)
        return -1;
    /* Tasks running as other users write their checkpoint files here: like /tmp (sticky);
     * wrk_ckpt_check trusts only a regular file, not a link, owned by the task's user. */
    if ((a->run_as.name[0] || a->nallow > 0) && chmod(dir, 01777) != 0)
        mu_log(MU_LOG_WARN, WRK_MOD, "node=%s cannot open '%s' to task users: %s", a->node, dir,
               strerror(errno));
    (void)mu_snprintf(dir, sizeof(dir), "%s/tasks", a->run_dir);
    return wrk_mkdir_p(dir, err);
}

/* ---- public ---- */

/* The flags' values that the agent keeps as they are. */
static int agent_fields(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    if (copy_field(a->scheduler, sizeof(a->scheduler), cfg->scheduler, "--scheduler", err) != 0
        || copy_field(a->node, sizeof(a->node), cfg->node, "--node", err) != 0
        || copy_field(a->pool, sizeof(a->pool), cfg->pool, "--pool", err) != 0
        || copy_field(a->state_dir, sizeof(a->state_dir), cfg->state_dir, "--state-dir", err) != 0
        || copy_field(a->run_dir, sizeof(a->run_dir),
                      cfg->run_dir && cfg->run_dir[0] ? cfg->run_dir : cfg->state_dir, "--run-dir",
                      err)
               != 0
        || copy_field(a->addr, sizeof(a->addr), cfg->addr, "--addr", err) != 0)
        return -1;
    if (cfg->instance_id && cfg->instance_id[0]
        && copy_field(a->instance_id, sizeof(a->instance_id), cfg->instance_id, "--instance-id",
                      err)
               != 0)
        return -1;
    if (cfg->nlabels < 0 || cfg->nlabels > PROTO_MAX_LABELS) {
        mu_errf(err, MU_E_RANGE, "at most %d labels", PROTO_MAX_LABELS);
        return -1;
    }
    a->cpus = cfg->cpus;
    a->memory_mb = cfg->memory_mb;
    a->nlabels = cfg->nlabels;
    memcpy(a->labels, cfg->labels, sizeof(a->labels));
    a->heartbeat_s = cfg->heartbeat_s > 0 ? cfg->heartbeat_s : 1;
    a->answer_every = 1;
    a->ckpt_wd = a->tasks_wd = -1;
    a->shim_server.fd = -1;
    a->shim_server.pid = -1;
    return 0;
}

struct wrk_agent *wrk_agent_new(const struct wrk_config *cfg, struct mu_err *err)
{
    struct wrk_agent *a = calloc(1, sizeof(*a));
    bool signals = false;

    if (!a) {
        mu_errf(err, MU_E_NOMEM, "out of memory for the agent");
        return NULL;
    }
    a->ino_fd = -1;
    if (agent_fields(a, cfg, err) != 0)
        goto fail;

    if (wrk_ident_setup(a, cfg, err) != 0 || shim_resolve(a, cfg, err) != 0)
        goto fail;
    if (agent_inventory(a, cfg, err) != 0)
        goto fail;
    if (state_dirs_create(a, err) != 0 || wrk_agent_lease_setup(a, err) != 0)
        goto fail;
    wrk_agent_cgroup_setup(a, cfg);
    if (signals_install(err) != 0)
        goto fail;
    signals = true;
    a->zctx = zmq_ctx_new();
    if (!a->zctx) {
        mu_errf(err, MU_E_ZMQ, "cannot create a ZeroMQ context: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (schedulers_setup(a, cfg, err) != 0)
        goto fail;
    wrk_watch_start(a);
    if (cfg->imds && cfg->imds[0] && imds_start(a, cfg, err) != 0)
        goto fail;
    if (wrk_agent_witness_start(a, cfg, err) != 0)
        goto fail;
    a->loading = true;
    wrk_tasks_adopt(a);
    a->loading = false;
    a->last_rx_ms = mu_time_mono_ms();
    a->exit_poll_ms = a->last_rx_ms;
    mu_log(MU_LOG_INFO, WRK_MOD,
           "node=%s pool=%s gpus=%d (%s) islands=%d cpus=%d memory_mb=%" PRId64
           " scheduler=%s state_dir=%s run_dir=%s",
           a->node, a->pool, a->ngpus, a->simulated ? "simulated" : "nvidia-smi", a->nislands,
           a->cpus, a->memory_mb, a->scheduler, a->state_dir, a->run_dir);
    a->rotated_ms = a->last_rx_ms;
    return a;
fail:
    wrk_witness_free(a->witness);
    wrk_lease_free(a->lease);
    wrk_imds_free(a->imds);
    if (a->ino_fd >= 0)
        (void)close(a->ino_fd);
    if (a->sock) {
        int linger = 0;
        (void)zmq_setsockopt(a->sock, ZMQ_LINGER, &linger, sizeof(linger));
        (void)zmq_close(a->sock);
    }
    if (a->zctx)
        (void)zmq_ctx_term(a->zctx);
    if (signals)
        signals_restore();
    memset(&a->curve, 0, sizeof(a->curve));
    free(a);
    return NULL;
}

int wrk_agent_poll(struct wrk_agent *a, int max_wait_ms, struct mu_err *err)
{
    zmq_pollitem_t items[3 + IMDS_MAX_FDS];
    struct pollfd ifds[IMDS_MAX_FDS];
    int nitems = 2;
    int ino_at = -1;
    int imds_at = 0;
    int nifds = 0;
    int wait_ms;
    uint64_t now;
    int r;

    if (a->stop)
        return 0;
    if (!a->hello_sent)
        wrk_send_hello(a);
    memset(items, 0, sizeof(items));
    items[0].socket = a->sock;
    items[0].events = ZMQ_POLLIN;
    items[1].fd = sig_pipe[0];
    items[1].events = ZMQ_POLLIN;
    if (a->ino_fd >= 0) {
        ino_at = nitems;
        items[nitems].fd = a->ino_fd;
        items[nitems++].events = ZMQ_POLLIN;
    }
    now = mu_time_mono_ms();
    wait_ms = next_wait_ms(a, now, max_wait_ms < 0 ? 0 : max_wait_ms);
    if (a->imds) {
        nifds = wrk_imds_fds(a->imds, ifds, IMDS_MAX_FDS);
        imds_at = nitems;
        for (int i = 0; i < nifds; i++) {
            items[nitems].fd = ifds[i].fd;
            items[nitems++].events = (short)(((ifds[i].events & POLLIN) ? ZMQ_POLLIN : 0)
                                             | ((ifds[i].events & POLLOUT) ? ZMQ_POLLOUT : 0));
        }
        wait_ms = wrk_imds_timeout_ms(a->imds, now, wait_ms);
    }
    r = zmq_poll(items, nitems, wait_ms);
    if (r < 0 && zmq_errno() != EINTR)
        return mu_errf(err, MU_E_ZMQ, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    if (drain_signals())
        a->stop = true;
    if (r > 0 && ino_at >= 0 && (items[ino_at].revents & ZMQ_POLLIN))
        wrk_watch_events(a);
    /* Reap on every turn: cheap, and immune to a wake-up byte lost to a full pipe. */
    wrk_exits_reap(a);
    if (r > 0 && (items[0].revents & ZMQ_POLLIN))
        receive_all(a);
    if (a->imds) {
        for (int i = 0; i < nifds; i++) {
            short rev = 0;
            if (r > 0)
                rev = items[imds_at + i].revents;
            ifds[i].revents =
                (short)(((rev & ZMQ_POLLIN) ? POLLIN : 0) | ((rev & ZMQ_POLLOUT) ? POLLOUT : 0)
                        | ((rev & ZMQ_POLLERR) ? POLLERR : 0));
        }
        wrk_imds_service(a->imds, ifds, nifds);
        imds_events(a);
    }
    now = mu_time_mono_ms();
    if (!a->stop)
        run_timers(a, now);
    wrk_tasks_evict(a); /* here, so that no loop above saw entries move */
    return a->stop ? 0 : 1;
}

int wrk_agent_run(struct wrk_agent *a, struct mu_err *err)
{
    int r;
    while ((r = wrk_agent_poll(a, 1000, err)) > 0) {
    }
    if (r < 0)
        return -1;
    mu_log(MU_LOG_INFO, WRK_MOD, "node=%s stopping: %d task(s) running", a->node, a->nrunning);
    wrk_agent_shutdown(a);
    return 0;
}

void wrk_agent_stop(struct wrk_agent *a)
{
    a->stop = true;
}

void wrk_agent_shutdown(struct wrk_agent *a)
{
    uint64_t deadline = mu_time_mono_ms() + WRK_SHUTDOWN_GRACE_MS;

    a->stopping = true;
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].rec.ref.state == PROTO_TASK_RUNNING) {
            wrk_task_log(MU_LOG_INFO, &a->tasks[i].rec.ref,
                         "worker stopping: sent SIGTERM to its group");
            (void)kill(-(pid_t)a->tasks[i].rec.ref.pid, SIGTERM);
        }
    }
    while (a->nrunning > 0) {
        uint64_t now = mu_time_mono_ms();
        struct pollfd pfd = { sig_pipe[0], POLLIN, 0 };
        if (now >= deadline)
            break;
        (void)poll(&pfd, 1, (int)(deadline - now < 100 ? deadline - now : 100));
        (void)drain_signals();
        wrk_exits_reap(a);
        wrk_exits_scan(a);
    }
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].rec.ref.state == PROTO_TASK_RUNNING) {
            wrk_task_log(MU_LOG_WARN, &a->tasks[i].rec.ref,
                         "still running after 5 s: sent SIGKILL");
            (void)kill(-(pid_t)a->tasks[i].rec.ref.pid, SIGKILL);
        }
    }
    /* The shims record the SIGKILLs within moments; a record still missing after that stays
     * for the next worker to read. */
    deadline = mu_time_mono_ms() + STOP_WAIT_MS;
    while (a->nrunning > 0 && mu_time_mono_ms() < deadline) {
        struct pollfd pfd = { sig_pipe[0], POLLIN, 0 };
        (void)poll(&pfd, 1, 20);
        (void)drain_signals();
        wrk_exits_reap(a);
        wrk_exits_scan(a);
    }
    /* After the exits, on the same socket: the scheduler reads them first, and marks the node
     * down at once instead of waiting node_lost_after_s (protocol/README.md, "A clean stop"). */
    wrk_send_bye(a);
    wrk_tasks_evict(a);
}

int wrk_agent_task_count(const struct wrk_agent *a)
{
    return a->ntasks;
}

void wrk_agent_free(struct wrk_agent *a)
{
    if (!a)
        return;
    if (a->sock) {
        int linger = CLOSE_LINGER_MS;
        (void)zmq_setsockopt(a->sock, ZMQ_LINGER, &linger, sizeof(linger));
        (void)zmq_close(a->sock);
    }
    if (a->zctx)
        (void)zmq_ctx_term(a->zctx);
    signals_restore();
    wrk_witness_free(a->witness);
    wrk_imds_free(a->imds);
    if (a->ino_fd >= 0)
        (void)close(a->ino_fd);
    for (int i = 0; i < a->ntasks; i++) {
        free(a->tasks[i].ckpt_last);
        free(a->tasks[i].ckpt_missing);
    }
    free(a->tasks);
    wrk_lease_free(a->lease); /* the record stays: the shims keep honouring it */
    wrk_agent_shim_server_stop(a);
    free(a);
}
