/* SPDX-License-Identifier: MIT */
/*
 * muster-worker: the node agent (docs/design.md §8).  This file is only the command line: flags,
 * the MUSTER_* environment fallbacks (flag > environment > default, docs/style.md §1.9) and exit
 * codes (0 ok, 1 runtime failure, 2 usage error); the work is in agent.c and the files behind
 * worker/internal.h, reached through worker/wrk.h.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/mu.h"
#include "common/mu_opt.h"
#include "queue/queue.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

#ifndef MUSTER_VERSION
#define MUSTER_VERSION "unknown"
#endif

#define PROG "muster-worker"

enum opt_id {
    OPT_SCHEDULER = 256,
    OPT_NODE,
    OPT_POOL,
    OPT_GPUS,
    OPT_GPU_ISLANDS,
    OPT_MIG,
    OPT_LABEL,
    OPT_STATE_DIR,
    OPT_RUN_DIR,
    OPT_ADDR,
    OPT_CPUS,
    OPT_MEMORY,
    OPT_IMDS,
    OPT_IMDS_INTERVAL,
    OPT_INSTANCE_ID,
    OPT_LOG_LEVEL,
    OPT_REDIS,
    OPT_PREFIX,
    OPT_CURVE_SERVER_KEY,
    OPT_CURVE_KEY,
    OPT_RUN_AS,
    OPT_ALLOW_USER,
    OPT_ALLOW_ROOT,
    OPT_CGROUP_ROOT,
    OPT_HELP,
    OPT_VERSION,
};

/* Every flag, once: getopt_long and --help are read off this table (common/mu_opt.h), and
 * tests/docs/check-options.sh holds docs/man/muster-worker.8 and README to --help. */
static const struct mu_opt options[] = {
    { "scheduler", OPT_SCHEDULER, "URL",
      "the scheduler's ROUTER, e.g. tcp://10.0.0.1:7070  [MUSTER_SCHEDULER];\n"
      "with a standby, every scheduler, comma-separated (at most 8): the\n"
      "worker talks to one at a time and, after 3 heartbeats without an\n"
      "answer (4 where the scheduler answers one in two), tries the\n"
      "next, until it reaches the one that leads",
      "Required (flag, or the environment variable shown):\n" },
    { "node", OPT_NODE, "NAME",
      "this node's name, [A-Za-z0-9._:-], at most 63 chars  [MUSTER_NODE]", NULL },
    { "pool", OPT_POOL, "POOL",
      "the pool this node belongs to (as in the scheduler config)\n"
      "[MUSTER_POOL]",
      NULL },
    { "gpus", OPT_GPUS, "N", "simulate N GPUs (0..64) instead of asking nvidia-smi",
      "\nOptions:\n" },
    { "gpu-islands", OPT_GPU_ISLANDS, "LIST",
      "NVLink island sizes of the simulated GPUs, adding up to N, e.g.\n"
      "4,4 (default: one island of N)  [MUSTER_GPU_ISLANDS]",
      NULL },
    { "mig", OPT_MIG, "LIST",
      "MIG slices of the simulated GPUs, one entry per GPU from GPU 0:\n"
      "'-' whole, else COUNTxPROFILE joined by '+', e.g.\n"
      "7x1g.10gb,2x3g.40gb+1x1g.10gb,- (later GPUs stay whole)",
      NULL },
    { "label", OPT_LABEL, "LEVEL=VALUE",
      "topology label, e.g. --label zone=us-east-1a (repeatable, one per\n"
      "level, at most 8); give one for every level in the scheduler's\n"
      "topology_levels, or registration fails",
      NULL },
    { "state-dir", OPT_STATE_DIR, "DIR",
      "task logs and checkpoint files  [MUSTER_STATE_DIR]\n"
      "(default /var/lib/muster/worker/NODE; created with its parents)",
      NULL },
    { "run-dir", OPT_RUN_DIR, "DIR",
      "the task records and the node's lease, which matter only while\n"
      "the node's processes live: put it on tmpfs (/run), where a task\n"
      "start creates no disk inode  [MUSTER_RUN_DIR]  (default: the\n"
      "state directory; created with its parents)",
      NULL },
    { "addr", OPT_ADDR, "HOST",
      "address other nodes reach this one at, used as MASTER_ADDR\n"
      "(default: this machine's hostname)",
      NULL },
    { "cpus", OPT_CPUS, "N", "CPUs to offer (default: online processors)", NULL },
    { "memory-mb", OPT_MEMORY, "N", "memory to offer in MiB (default: physical memory)", NULL },
    { "instance-id", OPT_INSTANCE_ID, "ID",
      "this node's EC2 instance id, e.g. i-0123456789abcdef0: an instance\n"
      "topology imported with 'musterctl topology import' then sets\n"
      "this node's labels for the levels it maps (default: from --imds,\n"
      "else none)  [MUSTER_INSTANCE_ID]",
      NULL },
    { "imds", OPT_IMDS, "URL",
      "watch the EC2 instance metadata service (IMDSv2) at URL, e.g.\n"
      "http://169.254.169.254, for spot interruption notices and\n"
      "rebalance recommendations; also takes the zone label, instance\n"
      "id, instance type and lifecycle from it  [MUSTER_IMDS]",
      NULL },
    { "imds-interval-s", OPT_IMDS_INTERVAL, "S",
      "seconds between two polls of the metadata service, 1..300\n"
      "(default 5)  [MUSTER_IMDS_INTERVAL_S]",
      NULL },
    { "redis", OPT_REDIS, "URL",
      "the Redis musterd uses, redis://[USER:PASS@]HOST[:PORT][/DB] or\n"
      "redis+sentinel://...: read while the scheduler is silent, to learn\n"
      "whether any leads; while none does (its leader key is free) the\n"
      "lease is held and tasks keep running however long.  A read-only\n"
      "user is enough (ROLE, GET on the leader key)  [MUSTER_REDIS_URL];\n"
      "without it, tasks stop whenever no scheduler answers for the lease",
      NULL },
    { "prefix", OPT_PREFIX, "P", "that Redis's key prefix (default muster:)  [MUSTER_KEY_PREFIX]",
      NULL },
    { "curve-server-key", OPT_CURVE_SERVER_KEY, "KEY|FILE",
      "the scheduler's CURVE public key (40 Z85 characters, or a\n"
      "file such as sched.pub); turns on CURVE  [MUSTER_CURVE_SERVER_KEY]",
      NULL },
    { "curve-key", OPT_CURVE_KEY, "FILE",
      "this worker's CURVE secret key file (mode 0600, from 'musterctl\n"
      "keygen'); needed with --curve-server-key  [MUSTER_CURVE_KEY]",
      NULL },
    { "run-as", OPT_RUN_AS, "USER",
      "(root only) run tasks as USER: its uid, gid and groups, with\n"
      "HOME, USER and LOGNAME set  [MUSTER_RUN_AS]",
      NULL },
    { "allow-user", OPT_ALLOW_USER, "NAME",
      "(root only, repeatable) run a job as its own user NAME when the\n"
      "scheduler names it (the job spec's \"user\"); other job users\n"
      "are refused",
      NULL },
    { "allow-root", OPT_ALLOW_ROOT, NULL,
      "(root only) allow tasks to run as root; without it a root worker\n"
      "refuses them unless --run-as says whom  [MUSTER_ALLOW_ROOT=1]",
      NULL },
    { "cgroup-root", OPT_CGROUP_ROOT, "NAME",
      "(root) each task gets cgroups NAME/NODE/JOB.ATTEMPT.TASK (v2, else\n"
      "v1): every process of it is killed when it stops, and its\n"
      "cpus_per_task, memory_mb_per_task and GPU devices are enforced\n"
      "(default muster; '' turns cgroups off)  [MUSTER_CGROUP_ROOT]",
      NULL },
    { "log-level", OPT_LOG_LEVEL, "LEVEL", "debug, info, warn or error (default info)", NULL },
    { "help", OPT_HELP, NULL, "show this help and exit", NULL },
    { "version", OPT_VERSION, NULL, "show the version and exit", NULL },
};

static void usage(FILE *f)
{
    (void)fputs(
        "usage: muster-worker --scheduler tcp://HOST:PORT --node NAME --pool POOL [OPTIONS]\n"
        "\n"
        "The muster node agent: registers this node's GPUs with the scheduler (musterd) and "
        "starts,\n"
        "signals and reports the tasks the scheduler binds to it.\n"
        "\n",
        f);
    mu_opt_help(f, options, MU_ARRAY_LEN(options), 22);
    (void)fputs(
        "\n"
        "Without --gpus the worker runs 'nvidia-smi --query-gpu=...' for the GPUs and\n"
        "'nvidia-smi topo -m' for their NVLink islands (GPUs joined by NV# links, directly or\n"
        "through other GPUs, form one island).  When the matrix cannot be read, a warning says "
        "why\n"
        "and all GPUs count as one island.  Then 'nvidia-smi -L' lists the MIG slices: a GPU in\n"
        "MIG mode is offered only as its slices; when the list cannot be read, a warning says why\n"
        "and every GPU is offered whole.\n"
        "\n"
        "Tasks log to DIR/logs/JOB.ATTEMPT.TASK.out and .err.  A task reports a checkpoint by\n"
        "writing its path, one line, to $MUSTER_CHECKPOINT_FILE (DIR/ckpt/JOB.ATTEMPT.TASK; write "
        "a\n"
        "temp file, then rename); the worker tells the scheduler within a second.  With --imds, a\n"
        "spot notice or rebalance recommendation is sent to the scheduler within one interval; an\n"
        "unreachable metadata service is logged and retried, never fatal.\n"
        "\n"
        "Each task runs under muster-shim (found beside this program, or at $MUSTER_SHIM), which\n"
        "outlives the worker and records the task in RUN/tasks/ (RUN: --run-dir); a worker\n"
        "restarted on the same --run-dir re-adopts running tasks and reports the exits it missed.\n"
        "The node holds a lease (node_lost_after_s past the scheduler's last answer, or with\n"
        "--redis past the last reading that found no scheduler leading; kept in RUN/lease);\n"
        "when it runs out, each muster-shim stops its task by itself, even with the\n"
        "worker dead: checkpoint signal, SIGTERM after the grace, SIGKILL 5 s later.  A BIND is\n"
        "refused (node_fault) while the lease is out, once its expires_ms has passed, or after a\n"
        "KILL of the same task.\n"
        "\n"
        "Tasks run in cgroups of their own where the worker is root and the node has them\n"
        "(--cgroup-root); otherwise a warning at start says what is missing, and a task is its\n"
        "process group only: a process that leaves it (setsid) outlives the task.\n"
        "\n"
        "On SIGTERM or SIGINT the worker stops its tasks (SIGTERM, then SIGKILL after 5 s) and\n"
        "exits 0.\n"
        "\n"
        "Exit status: 0 ok, 1 runtime failure, 2 usage error.\n",
        f);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_verror(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

static int usage_verror(const char *fmt, va_list ap)
{
    (void)fprintf(stderr, PROG ": usage: ");
    (void)vfprintf(stderr, fmt, ap);
    (void)fprintf(stderr, "\ntry '" PROG " --help'\n");
    return 2;
}

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = usage_verror(fmt, ap);
    va_end(ap);
    return rc;
}

/* --scheduler: 1..WRK_SCHED_MAX endpoints separated by commas, each tcp:// or ipc://. */
static int scheduler_list_check(const char *list)
{
    int n = 0;
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        if (len <= 6 || (strncmp(p, "tcp://", 6) != 0 && strncmp(p, "ipc://", 6) != 0)
            || ++n > WRK_SCHED_MAX)
            return -1;
        p += len;
        if (!*p)
            return 0;
    }
}

struct cli {
    struct wrk_config cfg;
    char state_dir[PROTO_PATH_MAX];
    char addr[128];
    const char *gpu_islands;     /* --gpu-islands, borrowed from argv or the environment */
    const char *allow_users[64]; /* --allow-user, borrowed from argv */
    enum mu_log_level level;
    const char *curve_server_arg; /* --curve-server-key, borrowed */
    const char *curve_key_arg;    /* --curve-key, borrowed */
    struct proto_curve curve;
    char curve_server[PROTO_CURVE_KEY_LEN + 1];
};

static int parse_label(struct cli *c, const char *arg)
{
    const char *eq = strchr(arg, '=');
    struct proto_label *l;

    if (c->cfg.nlabels >= PROTO_MAX_LABELS)
        return usage_error("--label: at most %d labels", PROTO_MAX_LABELS);
    if (!eq || eq == arg)
        return usage_error("--label '%s': expected LEVEL=VALUE, e.g. zone=us-east-1a", arg);
    l = &c->cfg.labels[c->cfg.nlabels];
    if ((size_t)(eq - arg) >= sizeof(l->level))
        return usage_error("--label '%s': level longer than %zu characters", arg,
                           sizeof(l->level) - 1);
    memcpy(l->level, arg, (size_t)(eq - arg));
    l->level[eq - arg] = '\0';
    if (!mu_name_is_valid(l->level, sizeof(l->level) - 1))
        return usage_error("--label '%s': level must be [A-Za-z0-9._:-]", arg);
    if (!mu_name_is_valid(eq + 1, sizeof(l->value) - 1))
        return usage_error("--label '%s': value must be 1..%zu characters of [A-Za-z0-9._:-]", arg,
                           sizeof(l->value) - 1);
    mu_strlcpy(l->value, eq + 1, sizeof(l->value));
    for (int i = 0; i < c->cfg.nlabels; i++) {
        if (strcmp(c->cfg.labels[i].level, l->level) == 0)
            return usage_error("--label: level '%s' given twice", l->level);
    }
    c->cfg.nlabels++;
    return 0;
}

static int parse_num(const char *flag, const char *arg, int64_t min, int64_t max, int64_t *out)
{
    struct mu_err err;
    if (mu_parse_i64(arg, min, max, out, &err) != 0)
        return usage_error("%s '%s': expected a whole number in %" PRId64 "..%" PRId64, flag, arg,
                           min, max);
    return 0;
}

/* Where an option whose value is kept as given goes; NULL for the others. */
static const char **text_option(struct cli *c, int opt)
{
    switch (opt) {
    case OPT_SCHEDULER:
        return &c->cfg.scheduler;
    case OPT_NODE:
        return &c->cfg.node;
    case OPT_POOL:
        return &c->cfg.pool;
    case OPT_GPU_ISLANDS:
        return &c->gpu_islands;
    case OPT_MIG:
        return &c->cfg.sim_mig;
    case OPT_STATE_DIR:
        return &c->cfg.state_dir;
    case OPT_RUN_DIR:
        return &c->cfg.run_dir;
    case OPT_ADDR:
        return &c->cfg.addr;
    case OPT_INSTANCE_ID:
        return &c->cfg.instance_id;
    case OPT_IMDS:
        return &c->cfg.imds;
    case OPT_REDIS:
        return &c->cfg.redis;
    case OPT_PREFIX:
        return &c->cfg.redis_prefix;
    case OPT_CURVE_SERVER_KEY:
        return &c->curve_server_arg;
    case OPT_CURVE_KEY:
        return &c->curve_key_arg;
    case OPT_RUN_AS:
        return &c->cfg.run_as;
    case OPT_CGROUP_ROOT:
        return &c->cfg.cgroup_root;
    default:
        return NULL;
    }
}

/* Parses argv into c; returns -1 to go on, else the exit code (0 for --help/--version). */
static int parse_args(int argc, char **argv, struct cli *c)
{
    int64_t v;
    int opt;

    opterr = 0;
    struct option long_opts[MU_ARRAY_LEN(options) + 1];
    char short_opts[2];

    if (mu_opt_getopt(options, MU_ARRAY_LEN(options), ":", long_opts, short_opts,
                      sizeof(short_opts))
        != 0)
        return 2;
    while ((opt = getopt_long(argc, argv, short_opts, long_opts, NULL)) != -1) {
        const char **slot = text_option(c, opt);
        if (slot) {
            *slot = optarg;
            continue;
        }
        switch (opt) {
        case OPT_GPUS:
            if (parse_num("--gpus", optarg, 0, PROTO_MAX_GPUS, &v) != 0)
                return 2;
            c->cfg.sim_gpus = (int)v;
            break;
        case OPT_LABEL:
            if (parse_label(c, optarg) != 0)
                return 2;
            break;
        case OPT_CPUS:
            if (parse_num("--cpus", optarg, 1, 1 << 20, &v) != 0)
                return 2;
            c->cfg.cpus = (int)v;
            break;
        case OPT_MEMORY:
            if (parse_num("--memory-mb", optarg, 1, INT64_C(1) << 40, &v) != 0)
                return 2;
            c->cfg.memory_mb = v;
            break;
        case OPT_IMDS_INTERVAL:
            if (parse_num("--imds-interval-s", optarg, 1, 300, &v) != 0)
                return 2;
            c->cfg.imds_interval_s = (int)v;
            break;
        case OPT_LOG_LEVEL:
            if (mu_log_level_parse(optarg, &c->level) != 0)
                return usage_error("--log-level '%s': expected debug, info, warn or error", optarg);
            break;
        case OPT_ALLOW_USER:
            if (c->cfg.nallow_users >= (int)MU_ARRAY_LEN(c->allow_users))
                return usage_error("--allow-user: at most %zu users", MU_ARRAY_LEN(c->allow_users));
            c->allow_users[c->cfg.nallow_users++] = optarg;
            c->cfg.allow_users = c->allow_users;
            break;
        case OPT_ALLOW_ROOT:
            c->cfg.allow_root = true;
            break;
        case OPT_HELP:
            usage(stdout);
            return 0;
        case OPT_VERSION:
            (void)printf(PROG " %s\n", MUSTER_VERSION);
            return 0;
        case ':':
            return usage_error("%s needs a value", argv[optind - 1]);
        default:
            if (optopt >= OPT_SCHEDULER)
                return usage_error("'%s' takes no value", argv[optind - 1]);
            if (optopt)
                return usage_error("unknown option '-%c'", optopt);
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    return -1;
}

/* --gpu-islands or MUSTER_GPU_ISLANDS into cfg.sim_island; returns -1 to go on, else 2. */
static int complete_islands(struct cli *c)
{
    const char *what = "--gpu-islands";
    struct mu_err err;

    if (!c->gpu_islands) {
        const char *env = getenv("MUSTER_GPU_ISLANDS");
        if (!env || !env[0])
            return -1; /* one island: sim_island stays zeroed */
        c->gpu_islands = env;
        what = "MUSTER_GPU_ISLANDS";
    }
    if (c->cfg.sim_gpus < 0)
        return usage_error("%s needs --gpus N; discovered GPUs get their islands from "
                           "'nvidia-smi topo -m'",
                           what);
    if (wrk_gpu_islands_parse(c->gpu_islands, c->cfg.sim_gpus, c->cfg.sim_island, &err) != 0)
        return usage_error("%s '%s': %s\nhint: one size per island, adding up to --gpus %d, "
                           "e.g. 4,4 for 8",
                           what, c->gpu_islands, err.msg, c->cfg.sim_gpus);
    return -1;
}

/* --mig: needs --gpus, checked here so that a bad list is a usage error; -1 to go on, else 2. */
static int complete_mig(struct cli *c)
{
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct mu_err err;
    int n;

    if (!c->cfg.sim_mig)
        return -1;
    if (c->cfg.sim_gpus < 0)
        return usage_error("--mig needs --gpus N; discovered GPUs get their MIG slices from "
                           "'nvidia-smi -L'");
    wrk_gpus_simulate(gpus, c->cfg.sim_gpus, NULL);
    if (wrk_gpus_simulate_mig(c->cfg.sim_mig, gpus, c->cfg.sim_gpus, PROTO_MAX_GPUS, &n, &err) != 0)
        return usage_error("--mig '%s': %s\nhint: one entry per GPU, e.g. 7x1g.10gb,- for --gpus 2",
                           c->cfg.sim_mig, err.msg);
    return -1;
}

/* --redis and --prefix or their variables; returns -1 to go on, else 2. */
static int complete_redis(struct wrk_config *cfg)
{
    struct mu_redis_url url;
    struct mu_err err;

    if (!cfg->redis)
        cfg->redis = getenv("MUSTER_REDIS_URL");
    if (!cfg->redis_prefix)
        cfg->redis_prefix = getenv("MUSTER_KEY_PREFIX");
    if (cfg->redis_prefix && cfg->redis_prefix[0] && (!cfg->redis || !cfg->redis[0]))
        return usage_error("--prefix needs --redis URL");
    if (cfg->redis && cfg->redis[0] && mu_redis_url_parse(cfg->redis, &url, &err) != 0)
        return usage_error("--redis: %s", err.msg);
    return -1;
}

/* --imds and --imds-interval-s or their variables; returns -1 to go on, else 2. */
static int complete_imds(struct cli *c)
{
    struct wrk_config *cfg = &c->cfg;

    if (!cfg->imds)
        cfg->imds = getenv("MUSTER_IMDS");
    if (cfg->imds_interval_s == 0) {
        const char *env = getenv("MUSTER_IMDS_INTERVAL_S");
        int64_t v;
        if (env && env[0]) {
            if (parse_num("MUSTER_IMDS_INTERVAL_S", env, 1, 300, &v) != 0)
                return 2;
            cfg->imds_interval_s = (int)v;
        }
    }
    if (cfg->imds && cfg->imds[0] && (strncmp(cfg->imds, "http://", 7) != 0 || !cfg->imds[7]))
        return usage_error("--imds '%s': expected http://HOST[:PORT], e.g. http://169.254.169.254",
                           cfg->imds);
    if (cfg->imds_interval_s && (!cfg->imds || !cfg->imds[0]))
        return usage_error("--imds-interval-s needs --imds URL");
    return -1;
}

/* What this machine is, where the flags do not say: address, instance id, CPUs, memory; returns
 * -1 to go on, else 2. */
static int complete_machine(struct cli *c)
{
    struct wrk_config *cfg = &c->cfg;
    long n;

    if (!cfg->addr) {
        if (gethostname(c->addr, sizeof(c->addr) - 1) != 0 || !c->addr[0])
            mu_strlcpy(c->addr, "localhost", sizeof(c->addr));
        c->addr[sizeof(c->addr) - 1] = '\0';
        cfg->addr = c->addr;
    }
    if (!cfg->addr[0] || strlen(cfg->addr) >= sizeof(c->addr))
        return usage_error("--addr '%s': expected a host name or address", cfg->addr);
    if (!cfg->instance_id)
        cfg->instance_id = getenv("MUSTER_INSTANCE_ID");
    if (cfg->instance_id && cfg->instance_id[0]
        && !mu_name_is_valid(cfg->instance_id, PROTO_NODE_MAX - 1))
        return usage_error("--instance-id '%s': expected an EC2 instance id such as "
                           "i-0123456789abcdef0 (1..%d characters of [A-Za-z0-9._:-])",
                           cfg->instance_id, PROTO_NODE_MAX - 1);
    if (cfg->cpus <= 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->cpus = n > 0 ? (int)n : 1;
    }
    if (cfg->memory_mb <= 0) {
        long pages = sysconf(_SC_PHYS_PAGES);
        long page_size = sysconf(_SC_PAGESIZE);
        cfg->memory_mb = pages > 0 && page_size > 0
                             ? (int64_t)pages * (int64_t)page_size / (INT64_C(1) << 20)
                             : 0;
    }
    return -1;
}

/* Environment fallbacks, required flags and defaults; returns -1 to go on, else 2. */
static int complete_config(struct cli *c)
{
    struct wrk_config *cfg = &c->cfg;

    if (!cfg->scheduler)
        cfg->scheduler = getenv("MUSTER_SCHEDULER");
    if (!cfg->node)
        cfg->node = getenv("MUSTER_NODE");
    if (!cfg->pool)
        cfg->pool = getenv("MUSTER_POOL");
    if (!cfg->state_dir)
        cfg->state_dir = getenv("MUSTER_STATE_DIR");
    if (!cfg->run_dir)
        cfg->run_dir = getenv("MUSTER_RUN_DIR");
    if (complete_imds(c) >= 0)
        return 2;
    if (complete_redis(cfg) >= 0)
        return 2;
    if (!c->curve_server_arg)
        c->curve_server_arg = getenv("MUSTER_CURVE_SERVER_KEY");
    if (!c->curve_key_arg)
        c->curve_key_arg = getenv("MUSTER_CURVE_KEY");
    if ((c->curve_server_arg && c->curve_server_arg[0])
        != (c->curve_key_arg && c->curve_key_arg[0]))
        return usage_error("CURVE needs both --curve-server-key KEY|FILE and --curve-key FILE");

    if (!cfg->scheduler || !cfg->scheduler[0])
        return usage_error("--scheduler tcp://HOST:PORT is required (or MUSTER_SCHEDULER)");
    if (scheduler_list_check(cfg->scheduler) != 0)
        return usage_error("--scheduler '%s': expected tcp://HOST:PORT, or up to %d of them "
                           "separated by commas (each scheduler of a high-availability pair)",
                           cfg->scheduler, WRK_SCHED_MAX);
    if (!cfg->node || !cfg->node[0])
        return usage_error("--node NAME is required (or MUSTER_NODE)");
    if (!mu_name_is_valid(cfg->node, PROTO_NODE_MAX - 1))
        return usage_error("--node '%s': expected 1..%d characters of [A-Za-z0-9._:-]", cfg->node,
                           PROTO_NODE_MAX - 1);
    if (!cfg->pool || !cfg->pool[0])
        return usage_error("--pool POOL is required (or MUSTER_POOL)");
    if (!mu_name_is_valid(cfg->pool, PROTO_NODE_MAX - 1))
        return usage_error("--pool '%s': expected 1..%d characters of [A-Za-z0-9._:-]", cfg->pool,
                           PROTO_NODE_MAX - 1);

    if (!cfg->state_dir || !cfg->state_dir[0]) {
        (void)mu_snprintf(c->state_dir, sizeof(c->state_dir), "/var/lib/muster/worker/%s",
                          cfg->node);
        cfg->state_dir = c->state_dir;
    }
    if (complete_islands(c) >= 0 || complete_mig(c) >= 0)
        return 2;
    return complete_machine(c);
}

/* Loads the CURVE keys when asked for; 0 or -1 with err. */
static int load_curve(struct cli *c, struct mu_err *err)
{
    if (!c->curve_key_arg || !c->curve_key_arg[0])
        return 0;
    if (proto_curve_load_secret(c->curve_key_arg, &c->curve, err) != 0)
        return -1;
    if (proto_curve_load_public(c->curve_server_arg, c->curve_server, sizeof(c->curve_server), err)
        != 0) {
        mu_err_prefix(err, "--curve-server-key: ");
        return -1;
    }
    c->cfg.curve = &c->curve;
    c->cfg.curve_server = c->curve_server;
    mu_log(MU_LOG_INFO, "wrk", "node=%s CURVE on: public key %s, scheduler key %s", c->cfg.node,
           c->curve.public_key, c->curve_server);
    return 0;
}

/* --run-as, --allow-user, --allow-root and their variables; returns -1 to go on, else 2. */
static int complete_identity(struct cli *c)
{
    struct wrk_config *cfg = &c->cfg;
    const char *env;

    if (!cfg->run_as) {
        env = getenv("MUSTER_RUN_AS");
        if (env && env[0])
            cfg->run_as = env;
    }
    env = getenv("MUSTER_ALLOW_ROOT");
    if (!cfg->allow_root && env && strcmp(env, "1") == 0)
        cfg->allow_root = geteuid() == 0; /* a harmless default for a non-root worker */
    if (geteuid() != 0) {
        if (cfg->run_as && cfg->run_as[0])
            return usage_error("--run-as needs a worker running as root; this one runs tasks as "
                               "its own user");
        if (cfg->nallow_users > 0)
            return usage_error("--allow-user needs a worker running as root");
        if (cfg->allow_root)
            return usage_error("--allow-root needs a worker running as root");
    }
    for (int i = 0; i < cfg->nallow_users; i++) {
        if (!mu_name_is_valid(cfg->allow_users[i], 63))
            return usage_error("--allow-user '%s': expected a user name", cfg->allow_users[i]);
    }
    if (!cfg->cgroup_root)
        cfg->cgroup_root = getenv("MUSTER_CGROUP_ROOT");
    if (cfg->cgroup_root && cfg->cgroup_root[0] && !mu_name_is_valid(cfg->cgroup_root, 63))
        return usage_error("--cgroup-root '%s': expected a name ([A-Za-z0-9._:-], at most 63 "
                           "characters)",
                           cfg->cgroup_root);
    return -1;
}

int main(int argc, char **argv)
{
    struct cli c;
    struct mu_err err;
    struct wrk_agent *agent;
    int rc;

    memset(&c, 0, sizeof(c));
    c.cfg.sim_gpus = -1;
    c.cfg.heartbeat_s = 1;
    c.level = MU_LOG_INFO;
    rc = parse_args(argc, argv, &c);
    if (rc >= 0)
        return rc;
    rc = complete_config(&c);
    if (rc >= 0)
        return rc;
    rc = complete_identity(&c);
    if (rc >= 0)
        return rc;
    mu_log_set_level(c.level);

    mu_err_clear(&err);
    if (load_curve(&c, &err) != 0) {
        (void)fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }
    agent = wrk_agent_new(&c.cfg, &err);
    memset(c.curve.secret_key, 0, sizeof(c.curve.secret_key)); /* libzmq keeps its own copy */
    if (!agent) {
        (void)fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }
    rc = wrk_agent_run(agent, &err);
    wrk_agent_free(agent);
    if (rc != 0) {
        (void)fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }
    return 0;
}
