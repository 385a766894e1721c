/* SPDX-License-Identifier: MIT */
/*
 * muster-sim: replays a job trace on a modelled cluster under several policies and prints the
 * comparison (docs/simulator.md, docs/man/muster-sim.1); `muster-sim gen` writes a synthetic
 * trace.  Results go to stdout, what the trace reader skipped and any note to stderr; exit 0 ok,
 * 1 runtime failure (a file, a check), 2 usage error (docs/style.md §1.9).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/sim.h"

#include "common/mu_banned.h"

static const char usage_run[] =
    "usage: muster-sim --config FILE --nodes POOL=N[,POOL=N...] --trace FILE [options]\n"
    "       muster-sim gen [--jobs N] [--seed N] [--jobs-per-hour R] [--gpus-per-node G]\n"
    "                      [--max-nodes K] [--queues Q1,Q2]\n"
    "Replays a job trace (muster's CSV schema, a Philly-style job list or an Alibaba GPU pod\n"
    "list, told apart by their columns) on a modelled cluster, once per policy, through the\n"
    "same placement, pass, preemption and fair-share code as musterd, and prints the\n"
    "comparison.\n"
    "  --config FILE            the musterd config (pools, prices, levels, queues, limits)\n"
    "  --nodes POOL=N,...       nodes per pool; labels spread over the configured levels\n"
    "  --trace FILE             the CSV trace\n"
    "  --policies LIST          of fifo, backfill, node-drain, muster (default: all four)\n"
    "  --spot-rate R|POOL=R,... spot interruptions per node-hour (default 0)\n"
    "  --spot-trace FILE        spot nodes up per pool and tick (CSV t_s,pool,nodes), instead\n"
    "                           of --spot-rate\n"
    "  --notice-s S             spot notice (default 120)\n"
    "  --ckpt-write-s S         checkpoint write on a signal (default 60)\n"
    "  --restart-s S            start-up cost of a restarted attempt (default 120)\n"
    "  --replace-s S            an interrupted spot node comes back after (default 600)\n"
    "  --ckpt-interval-s S      periodic checkpoints of rows without checkpoint_interval_s\n"
    "                           (default 0: such jobs never checkpoint)\n"
    "  --seed N                 spot interruptions (default 1)\n"
    "  --pass-interval-s N      at most one pass every N virtual seconds (default 0: a pass\n"
    "                           whenever something changed, as musterd)\n"
    "  --json                   one JSON document instead of the table\n"
    "  --jobs-out FILE          every job's start, end and outcome per policy, as CSV\n"
    "  --check                  verify after every event that no GPU is committed twice\n"
    "  --plot-dir DIR           write JCT CDF, utilisation and queue plots (needs gnuplot)\n"
    "  -h, --help               this help\n"
    "exit status: 0 ok, 1 runtime failure (file, trace, check), 2 usage error\n";

static const char usage_gen[] =
    "usage: muster-sim gen [--jobs N] [--seed N] [--jobs-per-hour R] [--gpus-per-node G]\n"
    "                      [--max-nodes K] [--queues Q1,Q2]\n"
    "Writes a synthetic trace in muster's schema to stdout: log-normal run times (median\n"
    "874 s, heavy tail), bursty arrivals, gangs of 1 GPU to K nodes x G GPUs; seeded.\n"
    "  --jobs N            jobs (default 1000)\n"
    "  --seed N            (default 1)\n"
    "  --jobs-per-hour R   mean arrival rate (default 60)\n"
    "  --gpus-per-node G   (default 8)\n"
    "  --max-nodes K       largest gang in nodes, 1..64 (default 64)\n"
    "  --queues LIST       queue names to spread jobs over (default: default)\n"
    "  -h, --help          this help\n";

static int usage_error(const char *usage, const char *what, const char *arg)
{
    (void)fprintf(stderr, "muster-sim: %s%s\n%s", what, arg, usage);
    return 2;
}

static int parse_int(const char *name, const char *v, int64_t max, int *out)
{
    int64_t x;
    struct mu_err err;
    if (mu_parse_i64(v, 0, max, &x, &err) != 0) {
        (void)fprintf(stderr, "muster-sim: %s: %s\n", name, err.msg);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int cmd_gen(int argc, char **argv)
{
    static const struct option opts[] = {
        { "jobs", required_argument, NULL, 'j' },
        { "seed", required_argument, NULL, 's' },
        { "jobs-per-hour", required_argument, NULL, 'r' },
        { "gpus-per-node", required_argument, NULL, 'g' },
        { "max-nodes", required_argument, NULL, 'k' },
        { "queues", required_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct sim_gen_opts o;
    struct mu_buf out;
    struct mu_err err;
    int c, v;
    int rc = 1;

    sim_gen_defaults(&o);
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            if (parse_int("--jobs", optarg, SIM_TRACE_MAX_ROWS, &o.jobs) != 0)
                return 2;
            break;
        case 's':
            if (parse_int("--seed", optarg, 2147483647, &v) != 0)
                return 2;
            o.seed = (uint64_t)v;
            break;
        case 'r':
            if (mu_parse_double(optarg, 0.001, 1e7, &o.jobs_per_hour, &err) != 0)
                return usage_error(usage_gen, "--jobs-per-hour: ", err.msg);
            break;
        case 'g':
            if (parse_int("--gpus-per-node", optarg, SCHED_MAX_GPUS_NODE, &o.gpus_per_node) != 0)
                return 2;
            break;
        case 'k':
            if (parse_int("--max-nodes", optarg, 64, &o.max_nodes) != 0)
                return 2;
            break;
        case 'q':
            o.queues = optarg;
            break;
        case 'h':
            (void)fputs(usage_gen, stdout);
            return 0;
        default:
            (void)fputs(usage_gen, stderr);
            return 2;
        }
    }
    if (optind < argc)
        return usage_error(usage_gen, "gen: unexpected argument: ", argv[optind]);
    mu_buf_init(&out, (size_t)1 << 30);
    if (sim_gen(&o, &out, &err) != 0) {
        (void)fprintf(stderr, "muster-sim: %s\n", err.msg);
        rc = err.code == MU_E_USAGE ? 2 : 1;
    } else if (out.len > 0 && fwrite(out.data, 1, out.len, stdout) != out.len) {
        (void)fprintf(stderr, "muster-sim: cannot write the trace\n");
    } else {
        rc = 0;
    }
    mu_buf_release(&out);
    return rc;
}

struct run_args {
    const char *config, *nodes, *trace, *policies, *spot_rate, *spot_trace, *plot_dir, *jobs_out;
    int ckpt_interval_s;
    bool json;
};

static const char *opt_name(const struct option *opts, int c)
{
    for (; opts->name; opts++)
        if (opts->val == c)
            return opts->name;
    return "option";
}

/* The replay's options into s and a; 0, 1 (help printed) or 2 (usage error printed). */
static int run_options(int argc, char **argv, struct sim_setup *s, struct run_args *a)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "nodes", required_argument, NULL, 'n' },
        { "trace", required_argument, NULL, 't' },
        { "policies", required_argument, NULL, 'p' },
        { "spot-rate", required_argument, NULL, 'r' },
        { "spot-trace", required_argument, NULL, 'T' },
        { "notice-s", required_argument, NULL, 'N' },
        { "ckpt-write-s", required_argument, NULL, 'W' },
        { "restart-s", required_argument, NULL, 'R' },
        { "replace-s", required_argument, NULL, 'P' },
        { "ckpt-interval-s", required_argument, NULL, 'I' },
        { "seed", required_argument, NULL, 's' },
        { "pass-interval-s", required_argument, NULL, 'i' },
        { "jobs-out", required_argument, NULL, 'J' },
        { "json", no_argument, NULL, 'j' },
        { "check", no_argument, NULL, 'C' },
        { "plot-dir", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c, v;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int *field = NULL;
        switch (c) {
        case 'c':
            a->config = optarg;
            break;
        case 'n':
            a->nodes = optarg;
            break;
        case 't':
            a->trace = optarg;
            break;
        case 'p':
            a->policies = optarg;
            break;
        case 'r':
            a->spot_rate = optarg;
            break;
        case 'T':
            a->spot_trace = optarg;
            break;
        case 'o':
            a->plot_dir = optarg;
            break;
        case 'J':
            a->jobs_out = optarg;
            break;
        case 'j':
            a->json = true;
            break;
        case 'C':
            s->check = true;
            break;
        case 'N':
            field = &s->notice_s;
            break;
        case 'W':
            field = &s->ckpt_write_s;
            break;
        case 'R':
            field = &s->restart_s;
            break;
        case 'P':
            field = &s->replace_s;
            break;
        case 'I':
            field = &a->ckpt_interval_s;
            break;
        case 'i':
            field = &s->pass_interval_s;
            break;
        case 's':
            if (parse_int("--seed", optarg, 2147483647, &v) != 0)
                return 2;
            s->seed = (uint64_t)v;
            break;
        case 'h':
            (void)fputs(usage_run, stdout);
            return 1;
        default:
            (void)fputs(usage_run, stderr);
            return 2;
        }
        if (field && parse_int(opt_name(opts, c), optarg, 31536000, field) != 0)
            return 2;
    }
    if (optind < argc)
        return usage_error(usage_run, "unexpected argument: ", argv[optind]);
    if (!a->config || !a->nodes || !a->trace)
        return usage_error(usage_run, "--config, --nodes and --trace are required", "");
    if (a->spot_rate && a->spot_trace)
        return usage_error(usage_run, "--spot-rate and --spot-trace: one or the other", "");
    return 0;
}

/* The progress bar on stderr when it is a terminal: the policy and the share of jobs ended. */
struct progress {
    const char *policy;
    int shown; /* percent last drawn */
};

static void progress_draw(void *arg, double done)
{
    struct progress *p = arg;
    int pct = (int)(done * 100);
    if (pct == p->shown)
        return;
    p->shown = pct;
    (void)fprintf(stderr, "\r%-10s [%-40.*s] %3d%%", p->policy, pct * 40 / 100,
                  "########################################", pct);
}

/* Runs each policy of the set; results into r (as many as returned), -1 on failure. */
static int run_all(struct sim_setup *s,
                   const struct sim_trace *t,
                   unsigned set,
                   struct sim_result **r,
                   struct mu_err *err)
{
    struct progress bar;
    int n = 0;
    bool tty = isatty(STDERR_FILENO) == 1;
    for (int p = 0; p < SIM_NPOLICIES; p++) {
        if (!(set & (1u << p)))
            continue;
        bar = (struct progress){ .policy = sim_policy_name((enum sim_policy)p), .shown = -1 };
        s->progress_fn = tty ? progress_draw : NULL;
        s->progress_arg = &bar;
        r[n] = sim_run(s, t, (enum sim_policy)p, err);
        if (tty && bar.shown >= 0)
            (void)fprintf(stderr, "\r%60s\r", "");
        if (!r[n]) {
            mu_err_prefix(err, "%s: ", sim_policy_name((enum sim_policy)p));
            return -1;
        }
        n++;
    }
    return n;
}

/* --jobs-out: the per-job CSV into path; 0 or -1 with err. */
static int write_jobs(const char *path,
                      const struct sim_trace *t,
                      struct sim_result *const *r,
                      int n,
                      struct mu_err *err)
{
    struct mu_buf b;
    FILE *f = NULL;
    int rc = -1;

    mu_buf_init(&b, (size_t)1 << 30);
    if (sim_report_jobs(t, r, n, &b, err) != 0)
        goto out;
    f = fopen(path, "w");
    if (!f || (b.len > 0 && fwrite(b.data, 1, b.len, f) != b.len)) {
        mu_errf(err, MU_E_IO, "cannot write '%s'", path);
        goto out;
    }
    rc = 0;
out:
    if (f && fclose(f) != 0 && rc == 0)
        rc = mu_errf(err, MU_E_IO, "cannot write '%s'", path);
    mu_buf_release(&b);
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    static struct sim_setup s; /* large: not on the stack */
    struct run_args a = { .policies = "fifo,backfill,node-drain,muster" };
    struct sim_trace_opts to;
    struct sim_trace *t = NULL;
    struct sim_avail_trace *avail = NULL;
    struct sim_result *r[SIM_NPOLICIES] = { NULL };
    struct mu_buf out;
    struct mu_err err;
    unsigned set;
    int n = 0, rc;

    sim_setup_defaults(&s);
    rc = run_options(argc, argv, &s, &a);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    mu_buf_init(&out, 0);
    rc = 1;
    if (cfg_load_file(&s.cfg, a.config, &err) != 0 || sim_setup_parse_nodes(&s, a.nodes, &err) != 0
        || (a.spot_rate && sim_setup_parse_spot_rate(&s, a.spot_rate, &err) != 0)
        || sim_policy_parse_list(a.policies, &set, &err) != 0) {
        (void)fprintf(stderr, "muster-sim: %s\n", err.msg);
        rc = err.code == MU_E_USAGE ? 2 : 1;
        goto out;
    }
    to = (struct sim_trace_opts){ .cfg = &s.cfg,
                                  .gpus_per_node = sim_setup_gpus_per_node(&s),
                                  .default_ckpt_interval_s = a.ckpt_interval_s };
    if (!(t = sim_trace_load(a.trace, &to, &err)) || sim_report_skips(t, &out, &err) != 0) {
        (void)fprintf(stderr, "muster-sim: %s\n", err.msg);
        goto out;
    }
    (void)fputs(out.data ? out.data : "", stderr);
    out.len = 0;
    if (a.spot_trace && !(s.avail = avail = sim_avail_load(a.spot_trace, &s.cfg, &err))) {
        (void)fprintf(stderr, "muster-sim: %s\n", err.msg);
        goto out;
    }
    n = run_all(&s, t, set, r, &err);
    if (n < 0
        || (a.json ? sim_report_json(t, r, n, &out, &err) : sim_report_table(r, n, &out, &err))
               != 0) {
        (void)fprintf(stderr, "muster-sim: %s\n", err.msg);
        goto out;
    }
    (void)fwrite(out.data, 1, out.len, stdout);
    if (a.jobs_out && write_jobs(a.jobs_out, t, r, n, &err) != 0) {
        (void)fprintf(stderr, "muster-sim: %s\n", err.msg);
        goto out;
    }
    if (a.plot_dir) {
        char note[600];
        if (sim_plot(a.plot_dir, r, n, note, sizeof(note), &err) != 0) {
            (void)fprintf(stderr, "muster-sim: %s\n", err.msg);
            goto out;
        }
        (void)fprintf(stderr, "muster-sim: %s\n", note);
    }
    rc = 0;
out:
    for (int i = 0; i < SIM_NPOLICIES; i++)
        sim_result_free(r[i]);
    sim_avail_free(avail);
    sim_trace_free(t);
    mu_buf_release(&out);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "gen") == 0)
        return cmd_gen(argc - 1, argv + 1);
    return cmd_run(argc, argv);
}
