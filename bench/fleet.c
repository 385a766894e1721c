/* SPDX-License-Identifier: MIT */
/*
 * muster-bench-fleet: many simulated nodes in one process, each speaking the real worker protocol
 * to musterd over its own ZeroMQ DEALER (issue #15), so that 20,000 nodes fit on one small box:
 * HELLO with simulated GPUs and zone/rack labels, heartbeats at the interval musterd asks for
 * (saying back how many of them it answers one of, as muster-worker does),
 * a BIND answered at once with BIND_ACK and a task that "runs" without a process (as long as its
 * "sleep N" command says, else --run-s) and then reports EXITED 0; a KILL ends a running task
 * with the signal and forgets an ended one (musterd's acknowledgement), as muster-worker does;
 * until then the exit is repeated, 2 s then doubling up to 60 s, as muster-worker repeats it.
 * After a musterd restart a node's heartbeat is answered "unknown node", and its HELLO carries
 * the tasks it runs, so the new musterd adopts them.
 *
 * It measures nothing itself: bench/fleet.sh drives it and reads musterd's figures.  One status
 * line goes to stderr every 10 s.  Not a test: numbers are printed, never asserted.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "common/mu.h"
#include "protocol/proto.h"

#include "common/mu_banned.h"

#define FLEET_POOLS_MAX 16

#define FLEET_RESEND_FIRST_MS 2000u
#define FLEET_RESEND_MAX_MS   60000u

struct ftask {
    struct proto_task_ref ref;
    uint64_t end_ms;       /* monotonic; when it "exits" */
    uint64_t resend_at_ms; /* an unacknowledged exit goes out again then */
    uint64_t resend_gap_ms;
};

struct fnode {
    char name[PROTO_NODE_MAX];
    void *sock;
    int pool;
    uint64_t seq;
    uint64_t epoch;
    uint64_t next_beat_ms;
    bool known; /* musterd answered a heartbeat ok */
    int ntasks;
    int cap;
    struct ftask *tasks;
};

struct fleet {
    void *zctx;
    const char *endpoint;
    int npools;
    char pools[FLEET_POOLS_MAX][PROTO_NODE_MAX];
    int gpus;
    int rack_nodes;
    int zone_nodes;
    double run_s;
    int heartbeat_s;
    int answer_every; /* musterd answers one heartbeat in this many: said back, as a worker does */
    int nnodes;
    int index_base; /* the first node's index: names and labels go on from it */
    struct fnode *nodes;
    zmq_pollitem_t *items;
    uint64_t binds, exits, kills;
};

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void send_msg(struct fnode *n, struct proto_msg *m)
{
    struct mu_err err;
    m->seq = ++n->seq;
    m->epoch = n->epoch;
    mu_strlcpy(m->node, n->name, sizeof(m->node));
    if (proto_send(n->sock, NULL, m, &err) != 0)
        (void)fprintf(stderr, "muster-bench-fleet: %s: %s\n", n->name, err.msg);
}

static void send_hello(struct fleet *f, struct fnode *n, int idx)
{
    struct proto_msg m;
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct proto_task_ref refs[PROTO_MAX_TASKS];
    struct mu_err err;
    int nrefs = n->ntasks < PROTO_MAX_TASKS ? n->ntasks : PROTO_MAX_TASKS;

    proto_msg_init(&m, PROTO_HELLO);
    m.echo_ms = mu_time_mono_ms();
    mu_strlcpy(m.pool, f->pools[n->pool], sizeof(m.pool));
    mu_strlcpy(m.addr, "127.0.0.1", sizeof(m.addr));
    m.cpus = 96;
    m.memory_mb = 1024LL * 1024;
    memset(gpus, 0, sizeof(gpus));
    for (int g = 0; g < f->gpus; g++) {
        gpus[g].index = g;
        mu_strlcpy(gpus[g].model, "simulated", sizeof(gpus[g].model));
        gpus[g].memory_mb = 81559;
    }
    m.nlabels = 2;
    mu_strlcpy(m.labels[0].level, "zone", sizeof(m.labels[0].level));
    (void)mu_snprintf(m.labels[0].value, sizeof(m.labels[0].value), "z%d",
                      (f->index_base + idx) / f->zone_nodes);
    mu_strlcpy(m.labels[1].level, "rack", sizeof(m.labels[1].level));
    (void)mu_snprintf(m.labels[1].value, sizeof(m.labels[1].value), "r%d",
                      (f->index_base + idx) / f->rack_nodes);
    for (int i = 0; i < nrefs; i++)
        refs[i] = n->tasks[i].ref;
    if (proto_msg_set_gpus(&m, f->gpus, gpus, &err) != 0
        || proto_msg_set_tasks(&m, nrefs, refs, &err) != 0)
        (void)fprintf(stderr, "muster-bench-fleet: %s: HELLO: %s\n", n->name, err.msg);
    else
        send_msg(n, &m);
    proto_msg_release(&m);
}

static void send_status(struct fnode *n, const struct proto_task_ref *ref)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_TASK_STATUS);
    m.task = *ref;
    send_msg(n, &m);
    proto_msg_release(&m);
}

static struct ftask *task_find(struct fnode *n, const struct proto_task_ref *ref)
{
    for (int i = 0; i < n->ntasks; i++) {
        const struct proto_task_ref *r = &n->tasks[i].ref;
        if (r->task == ref->task && r->attempt == ref->attempt && strcmp(r->job, ref->job) == 0)
            return &n->tasks[i];
    }
    return NULL;
}

/* How long a task "runs": "sleep N" says N seconds; anything else --run-s. */
static uint64_t run_ms(const struct fleet *f, const struct proto_msg *m)
{
    double s = f->run_s;
    if (m->argc >= 2 && strcmp(m->argv[0], "sleep") == 0)
        (void)mu_parse_double(m->argv[1], 0, 1e9, &s, NULL);
    return (uint64_t)(s * 1000.0);
}

static void handle_bind(struct fleet *f, struct fnode *n, const struct proto_msg *m)
{
    struct proto_msg ack;
    struct ftask *t = task_find(n, &m->task);

    if (!t) {
        if (n->ntasks == n->cap) {
            int cap = n->cap ? n->cap * 2 : 4;
            struct ftask *p = realloc(n->tasks, (size_t)cap * sizeof(*p));
            if (!p)
                return; /* no answer: musterd's bind timeout gives the attempt up */
            n->tasks = p;
            n->cap = cap;
        }
        t = &n->tasks[n->ntasks++];
        memset(t, 0, sizeof(*t));
        t->ref = m->task;
        t->ref.state = PROTO_TASK_RUNNING;
        t->ref.pid = 100000 + (int)(f->binds % 1000000);
        t->end_ms = mu_time_mono_ms() + run_ms(f, m);
        f->binds++;
    }
    proto_msg_init(&ack, PROTO_BIND_ACK);
    ack.task = t->ref;
    ack.ok = true;
    send_msg(n, &ack);
    proto_msg_release(&ack);
}

/* t ended: report it, and again until musterd's KILL acknowledges it. */
static void task_exit(struct fnode *n, struct ftask *t, uint64_t now)
{
    t->ref.state = PROTO_TASK_EXITED;
    t->resend_gap_ms = FLEET_RESEND_FIRST_MS;
    t->resend_at_ms = now + FLEET_RESEND_FIRST_MS;
    send_status(n, &t->ref);
}

static void handle_kill(struct fleet *f, struct fnode *n, const struct proto_msg *m)
{
    struct ftask *t = task_find(n, &m->task);
    struct proto_task_ref ref = m->task;

    f->kills++;
    if (!t) {
        ref.state = PROTO_TASK_LOST;
        send_status(n, &ref);
        return;
    }
    if (t->ref.state != PROTO_TASK_RUNNING) { /* the acknowledgement of its exit */
        *t = n->tasks[--n->ntasks];
        return;
    }
    t->ref.signal = m->signal > 0 ? m->signal : SIGTERM;
    task_exit(n, t, mu_time_mono_ms());
}

static void handle(struct fleet *f, struct fnode *n, int idx, const struct proto_msg *m)
{
    if (m->epoch < n->epoch)
        return;
    n->epoch = m->epoch;
    switch (m->type) {
    case PROTO_HEARTBEAT:
        if (m->heartbeat_s > 0)
            f->heartbeat_s = m->heartbeat_s;
        f->answer_every = m->answer_every;
        n->known = m->ok;
        if (!m->ok && !m->error[0])
            send_hello(f, n, idx);
        break;
    case PROTO_BIND:
        handle_bind(f, n, m);
        break;
    case PROTO_KILL:
        handle_kill(f, n, m);
        break;
    default:
        break; /* CHECKPOINT, DRAIN, LOG_READ: nothing to do for a simulated task */
    }
}

/* Tasks whose time is up exit 0; exits not yet acknowledged go out again. */
static void tick_tasks(struct fleet *f, struct fnode *n, uint64_t now)
{
    for (int i = 0; i < n->ntasks; i++) {
        struct ftask *t = &n->tasks[i];
        if (t->ref.state == PROTO_TASK_RUNNING && now >= t->end_ms) {
            t->ref.exit_code = 0;
            task_exit(n, t, now);
            f->exits++;
        } else if (t->ref.state == PROTO_TASK_EXITED && now >= t->resend_at_ms) {
            send_status(n, &t->ref);
            t->resend_gap_ms = t->resend_gap_ms * 2 > FLEET_RESEND_MAX_MS ? FLEET_RESEND_MAX_MS
                                                                          : t->resend_gap_ms * 2;
            t->resend_at_ms = now + t->resend_gap_ms;
        }
    }
}

/* "p5-spot=16000,p5-od=4000" into the pools and the node table. */
static int nodes_parse(struct fleet *f, const char *spec, const char *prefix)
{
    const char *p = spec;
    int total = 0;

    while (p && *p) {
        const char *eq = strchr(p, '=');
        const char *comma = strchr(p, ',');
        int64_t count = 0;
        char num[24];
        size_t nlen;
        if (!eq || (comma && comma < eq) || f->npools == FLEET_POOLS_MAX
            || (size_t)(eq - p) >= sizeof(f->pools[0]))
            return -1;
        memcpy(f->pools[f->npools], p, (size_t)(eq - p));
        f->pools[f->npools][eq - p] = '\0';
        nlen = comma ? (size_t)(comma - eq - 1) : strlen(eq + 1);
        if (nlen == 0 || nlen >= sizeof(num))
            return -1;
        memcpy(num, eq + 1, nlen);
        num[nlen] = '\0';
        if (mu_parse_i64(num, 1, 100000, &count, NULL) != 0 || total + count > 100000)
            return -1;
        for (int i = 0; i < count; i++) {
            struct fnode *n = &f->nodes[total + i];
            (void)mu_snprintf(n->name, sizeof(n->name), "%s%05d", prefix,
                              f->index_base + total + i);
            n->pool = f->npools;
        }
        total += (int)count;
        f->npools++;
        p = comma ? comma + 1 : NULL;
    }
    f->nnodes = total;
    return total > 0 ? 0 : -1;
}

static void usage(void)
{
    (void)fprintf(stderr,
                  "usage: muster-bench-fleet --scheduler ENDPOINT --nodes POOL=N[,POOL=N...]\n"
                  "           [--gpus N] [--prefix NAME] [--rack-nodes N] [--zone-nodes N]\n"
                  "           [--run-s S] [--index-base N]\n"
                  "Simulates N nodes per pool, each a ZeroMQ DEALER speaking the worker protocol;\n"
                  "a task runs as long as its 'sleep S' command says, else --run-s (default 0).\n"
                  "Node names and zone/rack labels count from --index-base (default 0), so\n"
                  "several fleets can make one cluster.\n"
                  "Raise the open-file limit first (ulimit -n): one socket per node.\n");
}

/* The options into f; the --nodes spec and name prefix into *spec and *prefix.  0, or -1. */
static int args_parse(
    struct fleet *f, int argc, char **argv, const char **spec, const char **prefix)
{
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t num = 0;
        if (!v)
            return -1;
        if (strcmp(argv[i], "--scheduler") == 0)
            f->endpoint = v;
        else if (strcmp(argv[i], "--nodes") == 0)
            *spec = v;
        else if (strcmp(argv[i], "--prefix") == 0)
            *prefix = v;
        else if (strcmp(argv[i], "--run-s") == 0
                 && mu_parse_double(v, 0, 1e9, &f->run_s, NULL) == 0)
            ;
        else if (strcmp(argv[i], "--gpus") == 0
                 && mu_parse_i64(v, 1, PROTO_MAX_GPUS, &num, NULL) == 0)
            f->gpus = (int)num;
        else if (strcmp(argv[i], "--rack-nodes") == 0
                 && mu_parse_i64(v, 1, 1 << 20, &num, NULL) == 0)
            f->rack_nodes = (int)num;
        else if (strcmp(argv[i], "--index-base") == 0
                 && mu_parse_i64(v, 0, 1 << 20, &num, NULL) == 0)
            f->index_base = (int)num;
        else if (strcmp(argv[i], "--zone-nodes") == 0
                 && mu_parse_i64(v, 1, 1 << 20, &num, NULL) == 0)
            f->zone_nodes = (int)num;
        else
            return -1;
    }
    return f->endpoint && *spec ? 0 : -1;
}

/* One DEALER per node, connected; the first HELLOs spread over a second. */
static int nodes_connect(struct fleet *f)
{
    struct mu_err err;
    for (int i = 0; i < f->nnodes; i++) {
        struct fnode *n = &f->nodes[i];
        n->sock = proto_dealer_new(f->zctx, f->endpoint, n->name, &err);
        if (!n->sock) {
            (void)fprintf(stderr, "muster-bench-fleet: node %d (%s): %s\n", i, n->name, err.msg);
            return -1;
        }
        f->items[i].socket = n->sock;
        f->items[i].events = ZMQ_POLLIN;
        n->next_beat_ms = mu_time_mono_ms() + (uint64_t)(i % 1000);
    }
    return 0;
}

/* Node n's turn: what musterd sent, its tasks' ends, its heartbeat. */
static void node_turn(struct fleet *f, int i, uint64_t now)
{
    struct fnode *n = &f->nodes[i];
    struct proto_msg m;
    struct mu_err err;
    int got;

    while (f->items[i].revents & ZMQ_POLLIN
           && (got = proto_recv(n->sock, NULL, 0, &m, &err)) != 0) {
        if (got == 1)
            handle(f, n, i, &m);
        proto_msg_release(&m);
    }
    tick_tasks(f, n, now);
    if (now < n->next_beat_ms)
        return;
    if (!n->known && n->seq == 0) {
        send_hello(f, n, i);
    } else {
        struct proto_msg hb;
        proto_msg_init(&hb, PROTO_HEARTBEAT);
        hb.echo_ms = now;
        hb.answer_every = f->answer_every;
        send_msg(n, &hb);
        proto_msg_release(&hb);
    }
    n->next_beat_ms = now + (uint64_t)f->heartbeat_s * 1000u;
}

static void status_line(const struct fleet *f)
{
    int known = 0;
    int running = 0;
    for (int i = 0; i < f->nnodes; i++) {
        known += f->nodes[i].known;
        for (int t = 0; t < f->nodes[i].ntasks; t++)
            running += f->nodes[i].tasks[t].ref.state == PROTO_TASK_RUNNING;
    }
    (void)fprintf(stderr,
                  "muster-bench-fleet: known=%d/%d running=%d binds=%" PRIu64 " exits=%" PRIu64
                  " kills=%" PRIu64 " answer_every=%d\n",
                  known, f->nnodes, running, f->binds, f->exits, f->kills, f->answer_every);
}

int main(int argc, char **argv)
{
    struct fleet f = { .gpus = 8, .rack_nodes = 32, .zone_nodes = 1024, .heartbeat_s = 1 };
    const char *spec = NULL;
    const char *prefix = "f";
    uint64_t next_line_ms;
    int rc = 1;

    if (args_parse(&f, argc, argv, &spec, &prefix) != 0) {
        usage();
        return 2;
    }
    f.nodes = calloc(100000, sizeof(*f.nodes));
    if (!f.nodes || nodes_parse(&f, spec, prefix) != 0) {
        (void)fprintf(stderr, "muster-bench-fleet: --nodes: expected POOL=N[,POOL=N...], at most "
                              "100000 in all\n");
        free(f.nodes);
        return 2;
    }
    f.items = calloc((size_t)f.nnodes, sizeof(*f.items));
    f.zctx = zmq_ctx_new();
    if (!f.items || !f.zctx || zmq_ctx_set(f.zctx, ZMQ_MAX_SOCKETS, f.nnodes + 16) != 0)
        goto out;
    (void)signal(SIGINT, on_signal);
    (void)signal(SIGTERM, on_signal);
    if (nodes_connect(&f) != 0)
        goto out;
    (void)fprintf(stderr, "muster-bench-fleet: %d nodes in %d pools connecting to %s\n", f.nnodes,
                  f.npools, f.endpoint);
    next_line_ms = mu_time_mono_ms() + 10000;
    while (!stop_flag) {
        uint64_t now;
        if (zmq_poll(f.items, f.nnodes, 20) < 0 && zmq_errno() != EINTR)
            break;
        now = mu_time_mono_ms();
        for (int i = 0; i < f.nnodes; i++)
            node_turn(&f, i, now);
        if (now >= next_line_ms) {
            status_line(&f);
            next_line_ms = now + 10000;
        }
    }
    rc = 0;
out:
    for (int i = 0; i < f.nnodes; i++) {
        if (f.nodes[i].sock)
            zmq_close(f.nodes[i].sock);
        free(f.nodes[i].tasks);
    }
    if (f.zctx)
        zmq_ctx_term(f.zctx);
    free(f.items);
    free(f.nodes);
    return rc;
}
