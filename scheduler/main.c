/* SPDX-License-Identifier: MIT */
/*
 * musterd: the scheduler daemon (docs/design.md §8).  Parses flags, loads and checks the config
 * (refusing to start on any error), connects to Redis and binds the workers' socket, stands by
 * until it holds the leader lease (d_lease.c; at once when no other musterd leads), reads the state
 * and hands over to the loop in d_loop.c.  Flags beat MUSTER_* environment variables, which beat
 * the config file.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/mu_opt.h"
#include "scheduler/d_loop.h"
#include "scheduler/d_state.h"

#include "common/mu_banned.h"

static volatile sig_atomic_t stop_flag;

static volatile sig_atomic_t reload_flag;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload_flag = 1;
    else
        stop_flag = 1;
}

enum { OPT_LOG_LEVEL = 256, OPT_CHECK, OPT_VERSION, OPT_CURVE_SECRET, OPT_CURVE_ALLOW };

/* Every flag, once: getopt_long and --help are read off this table (common/mu_opt.h), and
 * tests/docs/check-options.sh holds docs/man/musterd.8 and README to --help. */
static const struct mu_opt options[] = {
    { "config", 'c', "FILE",
      "cluster config (JSON, see config/examples/dev.json); required\n"
      "(env MUSTER_CONFIG)",
      NULL },
    { "redis", 'r', "URL",
      "redis://[user:pass@]host:port[/db], or through Sentinel\n"
      "redis+sentinel://[user:pass@]host[:port][,...]/master[/db]\n"
      "(env MUSTER_REDIS_URL; default: the config's \"redis\", which\n"
      "takes the same URLs, else " MU_REDIS_URL_DEFAULT ")",
      NULL },
    { "bind", 'b', "ENDPOINT",
      "ZeroMQ endpoint workers connect to, e.g. tcp://0.0.0.0:7070\n"
      "(env MUSTER_BIND; default: the config's \"bind\")",
      NULL },
    { "metrics", 'm', "ADDR:PORT",
      "serve Prometheus text at http://ADDR:PORT/metrics (env\n"
      "MUSTER_METRICS; default: the config's \"metrics\", \"\" = off)",
      NULL },
    { "curve-secret-key", OPT_CURVE_SECRET, "FILE",
      "turn on CURVE: the scheduler's secret key file (mode 0600,\n"
      "from 'musterctl keygen'; env MUSTER_CURVE_SECRET_KEY)",
      NULL },
    { "curve-allow", OPT_CURVE_ALLOW, "FILE",
      "with CURVE: worker public keys allowed in, one 'KEY' or\n"
      "'NODE KEY' per line, # comments (env MUSTER_CURVE_ALLOW)",
      NULL },
    { "log-level", OPT_LOG_LEVEL, "LEVEL", "log threshold (default info)", NULL },
    { "check-config", OPT_CHECK, NULL, "load and check the config, print the result, and exit",
      NULL },
    { "help", 'h', NULL, "this help", NULL },
    { "version", OPT_VERSION, NULL, "print the version", NULL },
};

static void usage(FILE *f)
{
    (void)fputs(
        "usage: musterd --config FILE [--redis URL] [--bind ENDPOINT] [--metrics ADDR:PORT]\n"
        "               [--curve-secret-key FILE --curve-allow FILE]\n"
        "               [--log-level debug|info|warn|error] [--check-config]\n"
        "\n"
        "The muster scheduler: takes gang jobs from the Redis stream <prefix>submit, places each\n"
        "all-or-nothing on the registered workers' GPUs, and drives the workers over ZeroMQ.\n"
        "\n"
        "options:\n",
        f);
    mu_opt_help(f, options, MU_ARRAY_LEN(options), 24);
    (void)fputs(
        "\n"
        "Several musterd may share one Redis (high availability): the one holding the leader\n"
        "lease (<prefix>leader, TTL leader_lease_s) leads; the others stand by, bound but "
        "answering\n"
        "no worker, and one takes over within leader_lease_s + 1 s of the leader's death.  Every\n"
        "write is checked against the lease in Redis: a musterd that lost it exits with status 1\n"
        "(restart it: it comes back as a standby).\n"
        "\n"
        "SIGHUP (or 'musterctl reload') reads the config file again: the queues (weights, "
        "quotas,\n"
        "cohorts, limits) take effect at once; a file that does not load, or changes anything "
        "but\n"
        "the queues, is refused and the running config stays.  Running work is never stopped.\n"
        "\n"
        "exit status: 0 clean stop, 1 runtime failure (config, redis, bind, leader lease lost),\n"
        "2 usage error\n",
        f);
}

struct options {
    const char *config;
    const char *redis;
    const char *bind;
    const char *metrics;
    const char *curve_secret; /* --curve-secret-key */
    const char *curve_allow;  /* --curve-allow */
    bool check_only;
};

static int parse_args(int argc, char **argv, struct options *o)
{
    struct option longopts[MU_ARRAY_LEN(options) + 1];
    char shortopts[2 * MU_ARRAY_LEN(options) + 1];
    int c;
    enum mu_log_level level;

    if (mu_opt_getopt(options, MU_ARRAY_LEN(options), "", longopts, shortopts, sizeof(shortopts))
        != 0)
        return 2;
    o->config = getenv("MUSTER_CONFIG");
    o->redis = getenv("MUSTER_REDIS_URL");
    o->bind = getenv("MUSTER_BIND");
    o->metrics = getenv("MUSTER_METRICS");
    o->curve_secret = getenv("MUSTER_CURVE_SECRET_KEY");
    o->curve_allow = getenv("MUSTER_CURVE_ALLOW");
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            o->config = optarg;
            break;
        case 'r':
            o->redis = optarg;
            break;
        case 'b':
            o->bind = optarg;
            break;
        case 'm':
            o->metrics = optarg;
            break;
        case OPT_LOG_LEVEL:
            if (mu_log_level_parse(optarg, &level) != 0) {
                (void)fprintf(stderr,
                              "musterd: --log-level: expected debug, info, warn or "
                              "error, got '%s'\n",
                              optarg);
                return 2;
            }
            mu_log_set_level(level);
            break;
        case OPT_CHECK:
            o->check_only = true;
            break;
        case OPT_CURVE_SECRET:
            o->curve_secret = optarg;
            break;
        case OPT_CURVE_ALLOW:
            o->curve_allow = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case OPT_VERSION:
            (void)puts("musterd 0.1.0");
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        (void)fprintf(stderr, "musterd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if ((o->curve_secret && *o->curve_secret) != (o->curve_allow && *o->curve_allow)) {
        (void)fputs("musterd: CURVE needs both --curve-secret-key FILE and --curve-allow FILE\n",
                    stderr);
        usage(stderr);
        return 2;
    }
    if (!o->config || !*o->config) {
        (void)fputs("musterd: --config FILE is required\n", stderr);
        usage(stderr);
        return 2;
    }
    return -1;
}

/*
 * The workers' ROUTER, with CURVE when asked for: the ZAP handler (the allow-list) is bound in
 * the same context before the ROUTER, since libzmq lets every key in while no handler exists.
 */
static int open_router(struct musterd *d, const struct options *o, struct mu_err *err)
{
    struct proto_curve keys;

    if (!o->curve_secret || !*o->curve_secret) {
        d->router = proto_router_new(d->zctx, d->cfg.bind, err);
        return d->router ? 0 : -1;
    }
    if (proto_curve_load_secret(o->curve_secret, &keys, err) != 0) {
        mu_err_prefix(err, "--curve-secret-key: ");
        return -1;
    }
    d->zap = proto_zap_new(d->zctx, o->curve_allow, err);
    if (d->zap)
        d->router = proto_router_new_curve(d->zctx, d->cfg.bind, &keys, err);
    memset(keys.secret_key, 0, sizeof(keys.secret_key)); /* libzmq keeps its own copy */
    if (!d->router)
        return -1;
    mu_log(MU_LOG_INFO, "sched", "CURVE on: public key %s, %d worker key(s) allowed from %s",
           keys.public_key, proto_zap_count(d->zap), o->curve_allow);
    return 0;
}

/* --check-config: the config and its access rules load; what is in force, printed.  0 or 1. */
static int check_config(struct musterd *d, const struct options *o)
{
    struct mu_err err;
    struct access *a;

    if (cfg_load_file(&d->cfg, o->config, &err) != 0 || !(a = d_access_load(o->config, &err))) {
        (void)fprintf(stderr, "musterd: %s\n", err.msg);
        return 1;
    }
    (void)printf("%s: ok (%d pool(s), %d queue(s), %d topology level(s); identity %s, %d known "
                 "user(s))\n",
                 o->config, d->cfg.npools, d->cfg.nqueues, d->cfg.nlevels,
                 access_identity_name(access_identity(a)), access_nusers(a));
    access_free(a);
    if (!d->cfg.history_sqlite[0])
        (void)printf("history: off; finished jobs stay in redis for ever\n");
    else if (d->cfg.keep_finished_s == 0)
        (void)printf("history: %s; finished jobs stay in redis too (keep_finished_s 0)\n",
                     d->cfg.history_sqlite);
    else
        (void)printf("history: %s; finished jobs leave redis %d s after they ended\n",
                     d->cfg.history_sqlite, d->cfg.keep_finished_s);
    return 0;
}

static int setup(struct musterd *d, const struct options *o, struct mu_err *err)
{
    char host[64] = "localhost";
    struct access *access;

    if (cfg_load_file(&d->cfg, o->config, err) != 0)
        return -1;
    if (o->redis
        && mu_strlcpy(d->cfg.redis, o->redis, sizeof(d->cfg.redis)) >= sizeof(d->cfg.redis))
        return mu_errf(err, MU_E_INVAL, "--redis: URL too long");
    if (o->bind && mu_strlcpy(d->cfg.bind, o->bind, sizeof(d->cfg.bind)) >= sizeof(d->cfg.bind))
        return mu_errf(err, MU_E_INVAL, "--bind: endpoint too long");
    if (o->metrics
        && mu_strlcpy(d->cfg.metrics, o->metrics, sizeof(d->cfg.metrics)) >= sizeof(d->cfg.metrics))
        return mu_errf(err, MU_E_INVAL, "--metrics: address too long");
    if (d_state_init(d, err) != 0)
        return -1;
    d->q = queue_new(d->cfg.redis, d->cfg.key_prefix, err);
    if (!d->q) {
        mu_err_prefix(err, "cannot reach redis: ");
        return -1;
    }
    d_store_redis(&d->store, d->q);
    (void)gethostname(host, sizeof(host) - 1);
    (void)mu_snprintf(d->consumer, sizeof(d->consumer), "musterd@%s", host);
    d->qi = queue_intake_new(d->cfg.redis, d->cfg.key_prefix, d->consumer, err);
    if (!d->qi)
        return -1;
    access = d_access_load(o->config, err);
    if (!access || d_access_set(d, access, err) != 0)
        return -1;
    mu_log(MU_LOG_INFO, "sched", "identity: %s%s", access_identity_name(access_identity(d->access)),
           d_access_proven(d) ? ""
                              : " (the spec's user is a label; tasks run as each worker's user)");
    d->zctx = zmq_ctx_new();
    if (!d->zctx)
        return mu_errf(err, MU_E_ZMQ, "zmq_ctx_new: %s", zmq_strerror(errno));
    return open_router(d, o, err);
}

/* What only the leader does, once it took the lease: its epoch goes on every message, and the
 * state is read now, as the previous leader left it (a takeover is a restart, docs/design.md §6).
 */
static int lead(struct musterd *d, struct mu_err *err)
{
    d_sender_router(&d->out, d->router, d->epoch);
    d->out.fenced = &d->store.fenced;
    if (d_counters_load(&d->metrics, d->q, err) != 0)
        return -1;
    if (d->cfg.metrics[0] && d_metrics_start(d, d->cfg.metrics, err) != 0)
        return -1;
    if (d_jobs_recover(d, err) != 0)
        return -1;
    return d_archive_start(d, err);
}

/*
 * Frees whatever setup got to, in reverse order: d starts zeroed and every step here is NULL-safe
 * (the job maps included, see mu_map_next), so this is correct after a failure at any step of
 * setup as well as after d_run.  The sockets close before zmq_ctx_term, which would otherwise
 * wait for them for ever.
 */
static void teardown(struct musterd *d)
{
    d_archive_stop(d);
    d_metrics_stop(d);
    if (d->router)
        (void)zmq_close(d->router);
    proto_zap_free(d->zap);
    if (d->zctx)
        (void)zmq_ctx_term(d->zctx);
    d_state_release(d);
    queue_intake_free(d->qi);
    queue_free(d->q);
}

int main(int argc, char **argv)
{
    struct options o = { 0 };
    struct musterd d;
    struct mu_err err = { 0, "" };
    struct sigaction sa;
    int rc = parse_args(argc, argv, &o);

    if (rc >= 0)
        return rc;
    memset(&d, 0, sizeof(d));
    cfg_init_defaults(&d.cfg);
    d.stop = &stop_flag;
    d.reload = &reload_flag;
    d.config_path = o.config;
    d.reason_budget = D_REASONS_PER_TICK;
    if (o.check_only)
        return check_config(&d, &o);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    (void)sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGHUP, &sa, NULL);
    (void)signal(SIGPIPE, SIG_IGN);

    rc = 1;
    if (setup(&d, &o, &err) != 0) {
        (void)fprintf(stderr, "musterd: %s\n", err.msg);
        goto out;
    }
    rc = d_lease_wait(&d, &err);
    if (rc <= 0) {
        if (rc < 0)
            (void)fprintf(stderr, "musterd: %s\n", err.msg);
        else
            mu_log(MU_LOG_INFO, "sched", "musterd stopping (it was standing by)");
        rc = rc < 0 ? 1 : 0;
        goto out;
    }
    rc = 1;
    /* From here on, a connection that reaches another Redis server writes everything again. */
    d.server_changes = queue_server_changes(d.q);
    if (lead(&d, &err) != 0) {
        (void)fprintf(stderr, "musterd: %s\n", err.msg);
        goto out;
    }
    if (d_run(&d, &err) != 0) {
        (void)fprintf(stderr, "musterd: %s\n", err.msg);
        goto out;
    }
    rc = 0;
out:
    /* A leader that cannot go on (metrics address in use, Redis gone during the state read)
     * hands the lease back, so that a standby or its own restart leads at once. */
    d_lease_release(&d);
    teardown(&d);
    return rc;
}
