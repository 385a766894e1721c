/* SPDX-License-Identifier: MIT */
/*
 * musterctl: the operator CLI (docs/design.md §8, docs/style.md §1.9).
 *
 * One table, ctl_commands, names every command with its handler, summary, usage, description
 * and options; parsing, --help, `help COMMAND` and the man page all follow it, so a command
 * cannot exist without its help.  Global options may come before the command or among its
 * arguments (`musterctl jobs -o json` works).  Settings resolve as flag > MUSTER_* environment >
 * --config file > default.  Exit codes: 0 ok, 1 runtime failure, 2 usage error; results go to
 * stdout, errors to stderr.
 */
#include "cli/internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "config/cfg.h"

#include "common/mu_banned.h"

#ifndef MUSTER_VERSION
#define MUSTER_VERSION "unknown"
#endif

static const struct ctl_opt opts_submit[] = {
    { "tasks", 'n', "N", "tasks in the gang (default 1); all start together or none does" },
    { "gpus-per-task", 0, "N", "GPUs per task (default 1)" },
    { "queue", 'q', "Q", "queue (default \"default\")" },
    { "priority", 0, "N", "higher runs first (default 0)" },
    { "name", 'J', "NAME", "job name shown by 'jobs'" },
    { "cpus-per-task", 0, "N", "CPUs per task" },
    { "memory-mb-per-task", 0, "N", "memory per task in MiB" },
    { "gpu-type", 0, "T", "only pools with this gpu_type, e.g. H100" },
    { "gpu-slice", 0, "PROFILE",
      "MIG slices of this profile, e.g. 3g.40gb (--gpus-per-task counts them)" },
    { "capacity", 0, "LIST", "capacity types in order, e.g. spot,on-demand" },
    { "env", 'e', "K=V", "extra environment for the tasks (repeatable)" },
    { "workdir", 0, "DIR", "absolute directory the tasks start in" },
    { "time-limit", 't', "S", "stop the job after S seconds" },
    { "max-retries", 0, "N", "gang reruns after a task failure (default 3)" },
    { "checkpoint-signal", 0, "SIG", "signal asking the tasks to checkpoint, e.g. SIGUSR1" },
    { "checkpoint-grace", 0, "S", "seconds the gang gets to checkpoint (default 60)" },
    { "not-preemptible", 0, NULL, "never preempt this job" },
    { "topology-required", 0, "L", "all tasks inside one domain of level L" },
    { "topology-preferred", 0, "L", "prefer one domain of level L" },
    { "topology-relax-after", 0, "S",
      "widen the required level by one after S s pending, again every S s" },
    { "idempotency-key", 'k', "K",
      "a second submit with key K within 7 days returns the first job's id" },
    { "user", 'u', "U", "who the job is for (default: the URL's Redis user, else $USER)" },
    { "after", 0, "ID[:WHEN]",
      "start only after job ID succeeds (WHEN ok), fails (notok), ends (any) or starts or is "
      "cancelled first (started); key=KEY names a job by idempotency key (repeatable: all "
      "needed); A?B: any one of them (Slurm's '?')" },
    { "singleton", 0, NULL, "run only when no other job of this name and user is active" },
    { "array", 'a', "SPEC",
      "a job array, one gang per index, as Slurm's --array: 0-99, 1,3,5-7, 0-999:10; %N runs at "
      "most N at once (%0: no limit)" },
    { "wait", 'w', NULL, "follow the job until it ends; exit 0 if it succeeded, else 1" },
    { "dry-run", 0, NULL, "print the spec the flags build and submit nothing" },
    { NULL, 0, NULL, NULL },
};

static const struct ctl_opt opts_jobs[] = {
    { "all", 'a', NULL, "include finished jobs (SUCCEEDED, FAILED, CANCELLED, REJECTED, TIMEOUT)" },
    { "queue", 'q', "Q", "only jobs of queue Q" },
    { "state", 's', "S", "only jobs in state S (PENDING, RUNNING, ...); implies --all" },
    { "user", 'u', "U", "only jobs submitted by user U" },
    { "limit", 'n', "N", "show at most the N newest matching jobs" },
    { "sort", 0, "FIELD",
      "id, priority, age, state or queue; -FIELD reverses (default: "
      "submit time)" },
    { NULL, 0, NULL, NULL },
};

static const struct ctl_opt opts_events[] = {
    { "job", 'j', "ID", "only events of job ID" },
    { "count", 'n', "N", "show the last N events (default 20)" },
    { "follow", 'f', NULL, "keep printing new events until interrupted" },
    { NULL, 0, NULL, NULL },
};

static const struct ctl_opt opts_drain[] = {
    { "grace", 'g', "S", "give each gang at most S seconds to checkpoint (default: its grace_s)" },
    { "wait", 'w', NULL, "wait until the node runs no job (progress on stderr)" },
    { "timeout", 0, "S", "with --wait: give up (exit 1) after S seconds" },
    { NULL, 0, NULL, NULL },
};

/* reload, topology and node: the commands that wait for musterd's answer (ctl_answer_print). */
static const struct ctl_opt opts_answer[] = {
    { "timeout", 0, "S", "wait at most S seconds for musterd's answer (default 10)" },
    { NULL, 0, NULL, NULL },
};

static const struct ctl_opt opts_queues[] = {
    { "users", 'u', NULL, "list each queue's users: running GPUs, usage and share of the queue" },
    { NULL, 0, NULL, NULL },
};

static const struct ctl_opt opts_top[] = {
    { "once", '1', NULL, "print one frame without clearing the screen, then exit" },
    { "interval", 'i', "S", "seconds between refreshes (default 1)" },
    { NULL, 0, NULL, NULL },
};

static const struct ctl_opt opts_logs[] = {
    { "task", 't', "N", "the task whose log to show (default 0)" },
    { "attempt", 'A', "N", "the attempt (default the job's current one)" },
    { "stderr", 'E', NULL, "show the task's standard error instead of its standard output" },
    { "follow", 'f', NULL, "keep printing what the task writes until its attempt ends" },
    { NULL, 0, NULL, NULL },
};

static const struct ctl_opt opts_history[] = {
    { "history", 0, "FILE", "the history file (default $MUSTER_HISTORY, or the config's history)" },
    { "user", 'u', "USER", "only USER's jobs" },
    { "queue", 'q', "QUEUE", "only jobs of QUEUE" },
    { "state", 's', "STATE", "only jobs that ended STATE (SUCCEEDED, FAILED, CANCELLED, ...)" },
    { "since", 'S', "WHEN", "only jobs that ended at or after WHEN (7d, 12h, YYYY-MM-DD, ms)" },
    { "until", 'U', "WHEN", "only jobs that ended before WHEN" },
    { "name", 'J', "NAME", "only jobs named NAME (NAME* for a prefix)" },
    { "id", 'j', "ID", "only job ID (an array: the array and its elements)" },
    { "array", 'a', "ID", "only the elements of array ID" },
    { "limit", 'n', "N", "at most the N jobs that ended last" },
    { NULL, 0, NULL, NULL },
};

ctl_handler_fn ctl_cmd_keygen; /* cmd_keygen.c */

static const struct ctl_opt opts_keygen[] = {
    { "out", 0, "PREFIX", "write PREFIX.key (secret, mode 0600) and PREFIX.pub (public)" },
    { NULL, 0, NULL, NULL },
};

static const struct ctl_opt opts_completion[] = {
    { "list", 0, "WHAT", "print job ids (jobs) or node names (nodes), one per line" },
    { NULL, 0, NULL, NULL },
};

static const struct ctl_cmd ctl_commands[] = {
    { "submit", ctl_cmd_submit, "submit a job (spec file or flags)",
      "FILE|- | [OPTIONS] -- COMMAND [ARG...]",
      "Submits a job and prints its id.  With FILE (or - for standard input) the JSON job spec "
      "(README, \"The job spec\") is checked to be a JSON object of at most 1 MiB and appended "
      "unchanged.  "
      "Otherwise the options build the spec and the words after -- are the command's argv, e.g. "
      "'musterctl submit --tasks 4 --gpus-per-task 8 --queue research -- python train.py'.  "
      "A spec with an idempotency key is submitted atomically: when the key is already taken, "
      "the first job's id is printed and no new job is made.  musterd validates the spec in "
      "full: a bad one becomes a REJECTED job with an error.  With --wait, state changes go to "
      "standard error and the exit status is the job's outcome: 0 SUCCEEDED, 1 FAILED, "
      "CANCELLED, REJECTED or TIMEOUT.",
      opts_submit, 0, -1, CTL_ARG_FILE },
    { "jobs", ctl_cmd_jobs, "list jobs",
      "[--all] [--queue Q] [--state S] [--user U] [--limit N] [--sort FIELD]",
      "Lists jobs, oldest submission first unless --sort says otherwise (priority sorts the "
      "highest first, age the oldest first, state in lifecycle order).  Without --all or "
      "--state only jobs that are not finished are shown (PENDING, STARTING, RUNNING, "
      "PREEMPTING).  REASON says why a job is pending, or what went wrong for a failed or "
      "rejected one.  A finished job leaves Redis keep_finished_s after it ended when musterd "
      "keeps a job history: 'musterctl history' lists it then.",
      opts_jobs, 0, 0, CTL_ARG_NONE },
    { "show", ctl_cmd_show, "show one job in full", "ID",
      "Prints every field of job ID: times in ISO 8601 UTC, the placement task by task, "
      "attempts and failures, the last checkpoint and the GPU time lost to preemption.  A job "
      "that musterd has not taken in yet shows as SUBMITTED.  A pending job also shows why it "
      "waits, as 'musterctl why' does (\"why\" in -o json), if musterd answers within 3 s.",
      NULL, 1, 1, CTL_ARG_JOB },
    { "cancel", ctl_cmd_cancel, "cancel jobs", "ID...",
      "Asks musterd to cancel each job.  A job that has already finished is left alone.  Exits 1 "
      "if any job was not found (the others are still cancelled), or at once, sending nothing, "
      "when no musterd leads.",
      NULL, 1, -1, CTL_ARG_JOB },
    { "history", ctl_cmd_history, "list finished jobs from the job history (sacct)",
      "[--user U] [--queue Q] [--state S] [--since WHEN] [--until WHEN] [--name N] [--id ID] "
      "[--array ID] [-n N] [--history FILE]",
      "Reads the job history, the SQLite file musterd's archiver writes (config \"history\": "
      "{\"sqlite\": PATH}): one row per finished job, newest end first, also after the job "
      "left Redis (keep_finished_s).  The file comes from --history, MUSTER_HISTORY, or the "
      "config given with --config; it is opened read-only and needs neither Redis nor musterd.  "
      "-o json prints every column; -o csv prints one line per job with a header line.",
      opts_history, 0, 0, CTL_ARG_NONE },
    { "logs", ctl_cmd_logs, "print a task's log", "ID [--task N] [--attempt N] [--stderr] [-f]",
      "Prints the standard output (or with --stderr the standard error) of one task of job ID, "
      "from any machine that reaches Redis.  Task logs stay on the worker that ran the task, in "
      "<state-dir>/logs/JOB.ATTEMPT.TASK.out and .err; musterctl asks musterd for them 64 KiB at "
      "a time (the logreq stream), musterd relays each request to that node's worker, and each "
      "chunk is printed as it comes, so a log of any size is never held whole.  The node comes "
      "from the job's placement; for an earlier attempt every registered node is asked.  With "
      "-f it keeps asking from where it stopped until the attempt has ended and the whole file "
      "has been read.  Exits 1 when the node is not connected (its worker is gone), when the "
      "file does not exist, or when musterd does not answer.  The Redis user needs XADD on "
      "<prefix>logreq and BLPOP on <prefix>logreply:* (docs/security.md).",
      opts_logs, 1, 1, CTL_ARG_JOB },
    { "queues", ctl_cmd_queues, "list queues", "[--users]",
      "Lists the configured queues with their weight, pending and running jobs and GPUs, how "
      "long the oldest pending job has waited, and fair share: USAGE_GPU_H is the queue's "
      "GPU-hours, each halved every fair_share_half_life_s (default 7 days); SHARE is its part "
      "of all queues' usage and TARGET its part of the weights.  The pass takes pending jobs "
      "from the queue whose (usage + what its running jobs will still use + what it was given "
      "in this pass) / weight is lowest; within a queue by priority, then from the user whose "
      "usage + running + given in this queue is lowest, then by age (docs/fair-share.md).  "
      "QUOTA is the GPUs used of the queue's nominal quota per capacity type ('-': no quota, "
      "not limited); BORROWED the GPUs of its gangs that started beyond it on idle quota of its "
      "cohort, which the lenders may reclaim; LENT the GPUs of its own idle quota that the "
      "cohort's borrowers use (docs/quotas.md).  --users lists each queue's users instead, with "
      "the GPUs they hold, their usage and their SHARE of the queue's usage; -o json has them "
      "as each queue's users member.  As musterd last published them.",
      opts_queues, 0, 0, CTL_ARG_NONE },
    { "pools", ctl_cmd_pools, "list pools", "",
      "Lists the configured pools: capacity type (spot or on-demand), instance type, GPU type, "
      "registered nodes, GPUs free/used, price per node-hour, GPU cap (max_gpus) and, after a "
      "spot interruption, how long the pool is still avoided (cool-down).",
      NULL, 0, 0, CTL_ARG_NONE },
    { "nodes", ctl_cmd_nodes, "list nodes", "",
      "Lists the nodes musterd knows: pool, capacity type, state, free/total GPUs, topology "
      "labels, time since the last heartbeat, how long no task has run there (IDLE) and whether "
      "an autoscaler may take it away (RELEASABLE: idle for the config's consolidate_after_s, "
      "default 10m, and no spot notice; it turns back the moment a job lands there), the jobs "
      "running there, and why musterd cordoned the node when it did (it refused tasks of three "
      "attempts in a row for its own reasons) or, failing that, what musterd found odd when the "
      "node registered (a GPU count that does not match its pool's gpus_per_node; -o json: "
      "\"warning\").  A cordon or drain kept for a node that musterd "
      "has not applied yet (the node or musterd is away) shows as that STATE, with the REASON "
      "'by the operator: applied when it registers'; -o json has it as each node's \"wanted\".  "
      "STATE is ready, cordoned, draining, terminating (spot notice), down (its worker stopped "
      "cleanly and said so) or lost (silent for node_lost_after_s); 'musterctl "
      "node forget' removes a down or lost node.",
      NULL, 0, 0, CTL_ARG_NONE },
    { "status", ctl_cmd_status, "show which musterd leads, since when, and the standbys", "",
      "Shows the musterd that holds the leader lease (its holder name, musterd@HOST ENDPOINT, "
      "and pid), its fencing epoch, when it took over, how much of its lease (leader_lease_s) "
      "is left, and the standbys that tried to take the lease in the last two lease periods "
      "(docs/deploy.md, high availability).  -o json prints the "
      "object {leading, holder, epoch, pid, since_ms, lease_ms_left, now_ms, standbys: "
      "[{holder, seen_ms}]}.",
      NULL, 0, 0, CTL_ARG_NONE },
    { "top", ctl_cmd_top, "live view of queues, pools and running gangs", "[--once]",
      "Shows queues, pools and the running gangs, refreshed every second, until q or Ctrl-C.  "
      "The terminal is restored on exit.  --once prints a single frame without clearing the "
      "screen (for scripts); -o json prints one frame as a JSON object with the members "
      "queues, pools and running.",
      opts_top, 0, 0, CTL_ARG_NONE },
    { "events", ctl_cmd_events, "show recent state changes", "[--job ID] [--count N] [-f]",
      "Prints the last N events, oldest first.  With -f, keeps printing new ones until "
      "interrupted; with -o json and -f each event is one line of JSON.",
      opts_events, 0, 0, CTL_ARG_NONE },
    { "drain", ctl_cmd_drain, "drain a node: checkpoint its gangs and move them elsewhere",
      "NODE [--grace S] [--wait [--timeout S]]",
      "Asks musterd to place no new work on NODE and to move its gangs elsewhere: each gets its "
      "checkpoint signal and its checkpoint grace (at most --grace seconds; a gang without a "
      "checkpoint block is stopped at once), then SIGTERM and SIGKILL, and is requeued without "
      "counting a failure, to resume from its newest checkpoint on other nodes.  With --wait, "
      "waits until the node runs no job.  'cordon' stops new work but leaves running jobs; "
      "'uncordon' makes the node ready again.  The drain is kept in <prefix>node:wanted and "
      "applied whenever the node registers, so one said while the node or musterd is away is "
      "not lost: with no musterd leading it is recorded and says so (--wait then exits 1).  A "
      "node that never registered is refused (exit 1).",
      opts_drain, 1, 1, CTL_ARG_NODE },
    { "reload", ctl_cmd_reload, "make musterd read its config again", "",
      "Asks musterd to read its config file again (as SIGHUP does) and prints its answer.  The "
      "queues (weights, quotas, cohorts, borrow and lend limits) take effect at once; a file "
      "that does not load is refused with the key path, and one that changes anything but the "
      "queues (pools, topology, timers) is refused too: the running config stays in force and "
      "this exits 1.  Running work is never stopped by a reload; a queue whose quota shrank "
      "below its use drains as its gangs end (docs/quotas.md).  With no musterd leading it "
      "fails at once and sends nothing; a request nobody answered within --timeout expires "
      "and is never applied later.",
      opts_answer, 0, 0, CTL_ARG_NONE },
    { "topology", ctl_cmd_topology, "label nodes from an EC2 instance topology",
      "import FILE|- [--timeout S]",
      "Labels nodes from the JSON that 'aws ec2 describe-instance-topology' prints (FILE, or - "
      "for standard input; docs/deploy.md).  Each instance's NetworkNodes, top layer first, "
      "set the topology levels that musterd's config maps in instance_topology.levels, and its "
      "AvailabilityZone the level instance_topology.availability_zone names; a node is the "
      "instance whose id its worker reports (--instance-id, or IMDS).  Registered nodes are "
      "relabelled at once and nodes that register later get their labels then; nodes not in "
      "the file keep theirs, and imports add up.  The file is taken whole or not at all: one "
      "that is not JSON, lacks InstanceId or NetworkNodes, names an instance twice, has an "
      "instance with fewer network nodes than the config maps, or meets a musterd without "
      "instance_topology is refused with the reason, nothing changes and this exits 1.  "
      "Prints musterd's answer: the nodes relabelled and the instances that match no "
      "registered node.",
      opts_answer, 1, 2, CTL_ARG_IMPORT },
    { "cordon", ctl_cmd_cordon, "cordon a node", "NODE",
      "Asks musterd to place no new work on NODE; running jobs stay.  The cordon is kept in "
      "<prefix>node:wanted and applied whenever the node registers: one said while the node is "
      "not registered, or while no musterd leads (then it is only recorded, and says so), is not "
      "lost, and survives a musterd restart; 'nodes' shows it.  A node that never registered is "
      "refused (exit 1).",
      NULL, 1, 1, CTL_ARG_NODE },
    { "uncordon", ctl_cmd_uncordon, "return a node to service", "NODE",
      "Asks musterd to make a cordoned or drained NODE ready again, and clears its kept state "
      "(<prefix>node:wanted).",
      NULL, 1, 1, CTL_ARG_NODE },
    { "node", ctl_cmd_node, "forget a node that is gone", "forget NODE [--timeout S]",
      "'node forget NODE' asks musterd to remove the record of a node that is gone: lost (silent "
      "for node_lost_after_s) or down (its worker stopped cleanly), or not back since musterd "
      "restarted.  The node leaves 'musterctl nodes' and the nodes hash, a cordon or drain kept "
      "for it (<prefix>node:wanted) is dropped, and a restarted musterd no longer waits for it; "
      "a worker that comes back later registers as usual.  musterd "
      "refuses, and this exits 1 with its reason, while the node is registered (ready, "
      "cordoned, draining or terminating) or a running gang still has a task there; a name "
      "with no record exits 1 without asking.  Waits for musterd's answer.",
      opts_answer, 2, 2, CTL_ARG_FORGET },
    { "why", ctl_cmd_why, "explain why a pending job waits", "ID",
      "Asks musterd why pending job ID waits, computed now by the scheduler's own core: the "
      "job's reason; its start as the pass's reservation search finds it, naming the running "
      "gang whose time limit (or a pool's cool-down end) makes the room; its open dependencies "
      "and the jobs ahead of it in the fair-share order; whether its queue's quota admits it (or "
      "the quota's reason); for each capacity type of the job, in its order, whether the gang "
      "fits there now or the core's reason (e.g. the largest free rack); per topology level, the "
      "largest free domain against the largest that exists (busy, or never fits until nodes "
      "join); each pool's limits for it (capacity type or gpu_type not allowed, cool-down left "
      "after a spot interruption, max_gpus cap against use); why a job that fits does not "
      "backfill beside another's reservation; and a preemption preview: the running gangs the "
      "planner would "
      "preempt for it now and the work each would lose, or why it would not (victims younger "
      "than min_runtime_s, none of lower priority, waiting is sooner: with the expected start).  "
      "The preview is a dry run: nothing is stopped and nothing changes.  The question goes on "
      "the control stream (cmd why), so the Redis user needs XADD on <prefix>control and BLPOP "
      "on <prefix>why:* (docs/security.md).  A job that has ended exits 1, and so does one "
      "asked while no musterd leads, at once.",
      NULL, 1, 1, CTL_ARG_JOB },
    { "hold", ctl_cmd_hold, "keep a job from starting until released", "ID",
      "Asks musterd not to start job ID until it is released.  A pending job stays pending (the "
      "jobs table says 'held'); a running job keeps running, but is not started again if it is "
      "requeued.  Holding a job array holds every element that has not started.  A job that "
      "has ended is not active: musterctl says so and exits 1.",
      NULL, 1, 1, CTL_ARG_JOB },
    { "release", ctl_cmd_release, "release a held job", "ID",
      "Asks musterd to consider held job ID for placement again.  A job that has ended is not "
      "active: musterctl says so and exits 1.",
      NULL, 1, 1, CTL_ARG_JOB },
    { "keygen", ctl_cmd_keygen, "make a CURVE key pair for musterd or a worker", "[--out PREFIX]",
      "Makes a ZeroMQ CURVE key pair (docs/security.md).  With --out, writes the secret key to "
      "PREFIX.key (mode 0600; an existing file is never overwritten) and the public key to "
      "PREFIX.pub, and prints the public key, ready for musterd's --curve-allow file.  Without "
      "--out, prints both keys on lines 'public-key: KEY' and 'secret-key: KEY'.  -o json prints "
      "{\"public_key\", \"secret_key\"} or, with --out, {\"public_key\", \"secret_file\", "
      "\"public_file\"}.  Needs no Redis.",
      opts_keygen, 0, 0, CTL_ARG_NONE },
    { "completion", ctl_cmd_completion, "print a shell completion script", "bash",
      "Prints a bash completion script for musterctl, generated from its command table: "
      "commands, their options, job ids and node names.  Load it with "
      "'source <(musterctl completion bash)', or install it as "
      "/usr/share/bash-completion/completions/musterctl.",
      opts_completion, 0, 1, CTL_ARG_SHELL },
    { "help", ctl_cmd_help, "show help", "[COMMAND]",
      "Prints the overview, or the help of COMMAND.", NULL, 0, 1, CTL_ARG_COMMAND },
};

static const size_t ctl_ncommands = MU_ARRAY_LEN(ctl_commands);

const struct ctl_cmd *ctl_cmd_find(const char *name)
{
    for (size_t i = 0; i < ctl_ncommands; i++) {
        if (strcmp(ctl_commands[i].name, name) == 0)
            return &ctl_commands[i];
    }
    return NULL;
}

/* Settings that global options set; each NULL until given. */
struct ctl_globals {
    const char *url;
    const char *prefix;
    const char *config;
    const char *output;
    bool help;
    bool version;
};

/* The global options, one table for their parsing (global_take) and their help (issue #41). */
static const struct global_opt {
    struct ctl_opt opt; /* a help of several lines joins them with '\n' */
    size_t field;       /* its value (const char *) or, for a flag, its switch (bool) */
} global_opts[] = {
    { { "redis", 0, "URL",
        "Redis server, redis://[user:pass@]host[:port][/db], or\n"
        "redis+sentinel://[user:pass@]host[:port][,...]/master[/db]\n"
        "(env MUSTER_REDIS_URL, default " MU_REDIS_URL_DEFAULT ")" },
      offsetof(struct ctl_globals, url) },
    { { "prefix", 0, "P", "key prefix (env MUSTER_KEY_PREFIX, default " MU_KEY_PREFIX_DEFAULT ")" },
      offsetof(struct ctl_globals, prefix) },
    { { "config", 0, "FILE", "take redis and key_prefix from a musterd config file" },
      offsetof(struct ctl_globals, config) },
    { { "output", 'o', "FMT", "table (default) or json" }, offsetof(struct ctl_globals, output) },
    { { "help", 'h', NULL, "show help and exit" }, offsetof(struct ctl_globals, help) },
    { { "version", 0, NULL, "show the version and exit" }, offsetof(struct ctl_globals, version) },
};

/* One option's row of help: "  -o, --output FMT" or "      --name ARG", then its help at
 * column 28 (on the next line when the flag reaches it), each further line of it indented so. */
static void opt_print(FILE *out, const struct ctl_opt *o)
{
    char left[64];
    const char *line = o->help;

    if (o->short_name)
        (void)snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_name, o->name,
                       o->arg ? " " : "", o->arg ? o->arg : "");
    else
        (void)snprintf(left, sizeof(left), "    --%s%s%s", o->name, o->arg ? " " : "",
                       o->arg ? o->arg : "");
    if (strlen(left) > 24)
        (void)fprintf(out, "  %s\n  %-24s  ", left, "");
    else
        (void)fprintf(out, "  %-24s  ", left);
    for (;;) {
        size_t len = strcspn(line, "\n");
        (void)fprintf(out, "%.*s\n", (int)len, line);
        if (!line[len])
            break;
        line += len + 1;
        (void)fprintf(out, "%28s", "");
    }
}

static void globals_print(FILE *out)
{
    (void)fprintf(out, "Global options (also accepted after COMMAND):\n");
    for (size_t k = 0; k < MU_ARRAY_LEN(global_opts); k++)
        opt_print(out, &global_opts[k].opt);
    (void)fprintf(
        out, "Environment: NO_COLOR (no colour), COLUMNS (table width when not on a terminal).\n");
}

/* Writes text word-wrapped to lines of at most width columns, each starting with indent. */
static void wrap_print(FILE *out, const char *text, size_t indent, size_t width)
{
    size_t col = 0;
    const char *p = text;

    while (*p) {
        size_t n = strcspn(p, " ");
        if (col > indent && col + 1 + n > width) {
            (void)fputc('\n', out);
            col = 0;
        }
        if (col == 0) {
            (void)fprintf(out, "%*s", (int)indent, "");
            col = indent;
        } else {
            (void)fputc(' ', out);
            col++;
        }
        (void)fwrite(p, 1, n, out);
        col += n;
        p += n;
        while (*p == ' ')
            p++;
    }
    (void)fputc('\n', out);
}

void ctl_help_print(FILE *out, const struct ctl_cmd *cmd)
{
    if (!cmd) {
        (void)fprintf(out,
                      "usage: musterctl [--redis URL] [--prefix P] [-o table|json] COMMAND [ARGS]\n"
                      "\nInspect and steer the muster GPU gang scheduler.\n\nCommands:\n");
        for (size_t i = 0; i < ctl_ncommands; i++)
            (void)fprintf(out, "  %-10s %s\n", ctl_commands[i].name, ctl_commands[i].summary);
        (void)fprintf(out, "\n");
        globals_print(out);
        (void)fprintf(out, "\nRun 'musterctl help COMMAND' for a command's options.\n"
                           "Exit status: 0 ok, 1 runtime failure, 2 usage error.\n");
        return;
    }
    (void)fprintf(out, "usage: musterctl %s%s%s\n\n", cmd->name, cmd->usage[0] ? " " : "",
                  cmd->usage);
    wrap_print(out, cmd->description, 0, 78);
    if (cmd->options) {
        (void)fprintf(out, "\nOptions:\n");
        for (const struct ctl_opt *o = cmd->options; o->name; o++)
            opt_print(out, o);
    }
    (void)fprintf(out, "\n");
    globals_print(out);
}

int ctl_cmd_help(struct ctl *ctl, const struct ctl_args *args)
{
    const struct ctl_cmd *cmd = NULL;

    if (args->argc == 1) {
        cmd = ctl_cmd_find(args->argv[0]);
        if (!cmd)
            return ctl_usage(ctl, "unknown command '%s'", args->argv[0]);
    }
    ctl_help_print(stdout, cmd);
    return CTL_EXIT_OK;
}

/*
 * If argv[*i] is a global option, consumes it (and its value) and returns 1; 0 if it is not one;
 * -1 after printing a usage error.
 */
static int global_take(struct ctl *ctl, struct ctl_globals *g, int argc, char **argv, int *i)
{
    const char *a = argv[*i];

    for (size_t k = 0; k < MU_ARRAY_LEN(global_opts); k++) {
        const struct ctl_opt *o = &global_opts[k].opt;
        char *field = (char *)g + global_opts[k].field;
        size_t n = strlen(o->name);
        const char *value = NULL;

        if (a[0] == '-' && a[1] == '-' && strncmp(a + 2, o->name, n) == 0) {
            if (a[2 + n] == '=' && o->arg)
                value = a + 3 + n;
            else if (a[2 + n] != '\0')
                continue;
        } else if (o->short_name && a[0] == '-' && a[1] == o->short_name) {
            if (a[2] != '\0') {
                if (!o->arg)
                    continue;
                value = a + 2;
            }
        } else {
            continue;
        }
        if (!o->arg) {
            *(bool *)(void *)field = true;
            return 1;
        }
        if (!value) {
            if (*i + 1 >= argc) {
                ctl_usage(ctl, "option '%s' needs a value", a);
                return -1;
            }
            value = argv[++*i];
        }
        *(const char **)(void *)field = value;
        return 1;
    }
    return 0;
}

/* Parses the command's own options and positionals (global options may be mixed in). */
static int args_parse(
    struct ctl *ctl, struct ctl_globals *g, int argc, char **argv, int first, struct ctl_args *out)
{
    const struct ctl_cmd *cmd = ctl->cmd;
    bool only_args = false;

    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        const struct ctl_opt *o = NULL;
        const char *value = NULL;
        int taken;
        size_t idx = 0;

        if (only_args || a[0] != '-' || a[1] == '\0') {
            out->argv[out->argc++] = argv[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_args = true;
            out->dashdash = out->argc;
            continue;
        }
        taken = global_take(ctl, g, argc, argv, &i);
        if (taken < 0)
            return -1;
        if (taken > 0)
            continue;
        for (const struct ctl_opt *c = cmd->options; c && c->name; c++, idx++) {
            size_t n = strlen(c->name);
            if (a[1] == '-' && strncmp(a + 2, c->name, n) == 0
                && (a[2 + n] == '\0' || a[2 + n] == '=')) {
                o = c;
                value = a[2 + n] == '=' ? a + 3 + n : NULL;
                break;
            }
            if (a[1] != '-' && c->short_name && a[1] == c->short_name) {
                o = c;
                value = a[2] ? a + 2 : NULL;
                break;
            }
        }
        if (!o) {
            ctl_usage(ctl, "unknown option '%s'", a);
            return -1;
        }
        if (!o->arg) {
            if (value) {
                ctl_usage(ctl, "option '--%s' takes no value", o->name);
                return -1;
            }
            out->value[idx] = "";
            out->occ[out->nocc++] = (struct ctl_occ){ idx, "" };
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) {
                ctl_usage(ctl, "option '--%s' needs a value", o->name);
                return -1;
            }
            value = argv[++i];
        }
        out->value[idx] = value;
        out->occ[out->nocc++] = (struct ctl_occ){ idx, value };
    }
    if (g->help || g->version)
        return 0;
    if (out->argc < cmd->min_args) {
        ctl_usage(ctl, "missing %s", cmd->usage);
        return -1;
    }
    if (cmd->max_args >= 0 && out->argc > cmd->max_args) {
        ctl_usage(ctl, "unexpected argument '%s'", out->argv[cmd->max_args]);
        return -1;
    }
    return 0;
}

static size_t terminal_width(void)
{
    struct winsize ws;
    const char *cols = getenv("COLUMNS");
    int64_t n;

    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    if (cols && mu_parse_i64(cols, 20, 100000, &n, NULL) == 0)
        return (size_t)n;
    return 0;
}

/* Resolves flag > environment > config file > default for the redis URL and the key prefix. */
static int settings_resolve(struct ctl *ctl, const struct ctl_globals *g, struct cfg **cfg_out)
{
    struct mu_err err = { 0 };
    const char *env_url = getenv("MUSTER_REDIS_URL");
    const char *env_prefix = getenv("MUSTER_KEY_PREFIX");

    ctl->url = g->url ? g->url : (env_url && env_url[0]) ? env_url : NULL;
    ctl->prefix = g->prefix ? g->prefix : (env_prefix && env_prefix[0]) ? env_prefix : NULL;
    ctl->config = g->config;
    if (g->config && (!ctl->url || !ctl->prefix)) {
        struct cfg *c = calloc(1, sizeof(*c));
        if (!c)
            return ctl_fail(ctl, "out of memory");
        *cfg_out = c;
        if (cfg_load_file(c, g->config, &err) != 0)
            return ctl_fail(ctl, "%s", err.msg);
        if (!ctl->url && c->redis[0])
            ctl->url = c->redis;
        if (!ctl->prefix && c->key_prefix[0])
            ctl->prefix = c->key_prefix;
    }
    if (!ctl->url)
        ctl->url = MU_REDIS_URL_DEFAULT;
    if (!ctl->prefix)
        ctl->prefix = MU_KEY_PREFIX_DEFAULT;
    if (mu_redis_url_parse(ctl->url, &ctl->where, &err) != 0)
        return ctl_usage(ctl, "%s", err.msg);
    if (!g->output || strcmp(g->output, "table") == 0)
        ctl->output = CTL_OUT_TABLE;
    else if (strcmp(g->output, "json") == 0)
        ctl->output = CTL_OUT_JSON;
    else if (strcmp(g->output, "csv") == 0 && ctl->cmd->handler == ctl_cmd_history)
        ctl->output = CTL_OUT_CSV;
    else
        return ctl_usage(ctl, "-o: expected 'table' or 'json'%s, got '%s'",
                         ctl->cmd->handler == ctl_cmd_history ? " or 'csv'" : "", g->output);
    return CTL_EXIT_OK;
}

int main(int argc, char **argv)
{
    struct ctl ctl = { .commands = ctl_commands, .ncommands = ctl_ncommands };
    struct ctl_globals g = { 0 };
    struct ctl_args args = { 0 };
    struct cfg *cfg = NULL;
    const char *no_color = getenv("NO_COLOR");
    int i = 1;
    int rc = CTL_EXIT_USAGE;

    for (; i < argc && argv[i][0] == '-'; i++) {
        int taken;
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        taken = global_take(&ctl, &g, argc, argv, &i);
        if (taken < 0)
            goto out;
        if (taken == 0) {
            ctl_usage(&ctl, "unknown option '%s'", argv[i]);
            goto out;
        }
    }
    if (g.version) {
        printf("musterctl %s\n", MUSTER_VERSION);
        rc = CTL_EXIT_OK;
        goto out;
    }
    if (i >= argc) {
        ctl_help_print(g.help ? stdout : stderr, NULL);
        rc = g.help ? CTL_EXIT_OK : CTL_EXIT_USAGE;
        goto out;
    }
    ctl.cmd = ctl_cmd_find(argv[i]);
    if (!ctl.cmd) {
        ctl_usage(&ctl, "unknown command '%s'; run 'musterctl --help' for the list", argv[i]);
        goto out;
    }
    args.argv = calloc((size_t)argc, sizeof(*args.argv));
    args.occ = calloc((size_t)argc, sizeof(*args.occ));
    args.dashdash = -1;
    if (!args.argv || !args.occ) {
        rc = ctl_fail(&ctl, "out of memory");
        goto out;
    }
    if (args_parse(&ctl, &g, argc, argv, i + 1, &args) != 0)
        goto out;
    if (g.help || g.version) {
        if (g.version)
            printf("musterctl %s\n", MUSTER_VERSION);
        else
            ctl_help_print(stdout, ctl.cmd);
        rc = CTL_EXIT_OK;
        goto out;
    }
    rc = settings_resolve(&ctl, &g, &cfg);
    if (rc != CTL_EXIT_OK)
        goto out;
    ctl.width = terminal_width();
    ctl.color = isatty(STDOUT_FILENO) && !(no_color && no_color[0]);
    rc = ctl.cmd->handler(&ctl, &args);
    if (fflush(stdout) != 0 && rc == CTL_EXIT_OK)
        rc = ctl_fail(&ctl, "cannot write the output");
out:
    queue_free(ctl.q);
    free(cfg);
    free(args.argv);
    free(args.occ);
    return rc;
}
