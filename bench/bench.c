/* SPDX-License-Identifier: MIT */
/*
 * muster-bench: the measuring half of the end-to-end benchmarks (bench/e2e.sh starts the real
 * redis-server, musterd and workers).  Prints numbers; asserts nothing.
 *
 *   muster-bench latency --stamp PATH --dir DIR [--runs N] [--tasks T] [--gpus G]
 *       XADD a T x G gang whose tasks run muster-stamp, wait until every task wrote its start
 *       time and the job finished; latency = last task start - time of XADD.  p50/p99.
 *   muster-bench submit --jobs N --seed S
 *       XADD N gangs of 1-4 tasks x 8 GPUs running `sleep 0` (the drain workload).
 *   muster-bench drain-wait --jobs N --t0-ns NS
 *       wait until N jobs exist and none is active; print jobs/s and tasks/s since NS.
 *   muster-bench recover-fill --jobs N
 *       store N pending jobs directly in Redis, as musterd would have (for the restart benchmark).
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/mu.h"
#include "queue/queue.h"

#include "bench/args.h"
#include "bench/timing.h"

#include "common/mu_banned.h"

/* Options come after the subcommand (argv[1]). */
static const char *arg(int argc, char **argv, const char *name, const char *def)
{
    return bench_arg(argc, argv, 2, name, def);
}

static long num_arg(int argc, char **argv, const char *name, long def)
{
    return (long)bench_num_arg("muster-bench", argc, argv, 2, name, 0, INT64_MAX, def);
}

static char *job_state(struct queue *q, const char *id, char *buf, size_t size)
{
    redisReply *r =
        queue_command(q, NULL, "HGET " MU_KEY_PREFIX_DEFAULT QUEUE_K_JOB "%s " QUEUE_F_STATE, id);
    buf[0] = '\0';
    if (r && r->type == REDIS_REPLY_STRING)
        mu_strlcpy(buf, r->str, size);
    queue_reply_free(r);
    return buf;
}

/* The stamp muster-stamp wrote (one number and a newline); 0, or -1 while it is not there. */
static int read_stamp(const char *path, int64_t *out)
{
    FILE *f = fopen(path, "r");
    char line[32];
    bool got;
    if (!f)
        return -1;
    got = fgets(line, sizeof(line), f) != NULL;
    (void)fclose(f);
    if (!got)
        return -1;
    line[strcspn(line, "\n")] = '\0';
    return mu_parse_i64(line, 0, INT64_MAX, out, NULL);
}

static int latency(struct queue *q, int argc, char **argv)
{
    const char *stamp = arg(argc, argv, "--stamp", NULL);
    const char *dir = arg(argc, argv, "--dir", NULL);
    long runs = num_arg(argc, argv, "--runs", 100);
    long tasks = num_arg(argc, argv, "--tasks", 4);
    long gpus = num_arg(argc, argv, "--gpus", 8);
    int64_t *lat = calloc((size_t)runs + 1, sizeof(*lat));
    char spec[8192];

    if (!stamp || !dir || !lat || runs < 1) {
        (void)fputs("muster-bench latency --stamp PATH --dir DIR [--runs N]\n", stderr);
        free(lat);
        return 2;
    }
    (void)mu_snprintf(spec, sizeof(spec),
                      "{\"name\":\"bench-latency\",\"tasks\":%ld,\"gpus_per_task\":%ld,"
                      "\"command\":[\"%s\",\"%s\"]}",
                      tasks, gpus, stamp, dir);
    for (long i = 0; i < runs; i++) {
        char id[64];
        char st[32];
        struct mu_err err;
        int64_t t0 = wall_ns();
        int64_t last = 0;
        if (queue_submit(q, spec, id, sizeof(id), &err) != 0) {
            (void)fprintf(stderr, "muster-bench: %s\n", err.msg);
            free(lat);
            return 1;
        }
        for (long t = 0; t < tasks; t++) {
            char path[4200];
            int64_t v = 0;
            int64_t deadline = wall_ns() + 30LL * 1000000000LL;
            (void)mu_snprintf(path, sizeof(path), "%s/%s.%ld", dir, id, t);
            while (read_stamp(path, &v) != 0) {
                if (wall_ns() > deadline) {
                    (void)fprintf(stderr, "muster-bench: job %s task %ld never started\n", id, t);
                    free(lat);
                    return 1;
                }
                sleep_us(1000); /* the stamps carry the times; polling only finds them */
            }
            if (v > last)
                last = v;
        }
        lat[i] = last - t0;
        while (strcmp(job_state(q, id, st, sizeof(st)), "SUCCEEDED") != 0) {
            if (!strcmp(st, "FAILED") || !strcmp(st, "REJECTED")) {
                (void)fprintf(stderr, "muster-bench: job %s %s\n", id, st);
                free(lat);
                return 1;
            }
            sleep_us(2000);
        }
    }
    qsort(lat, (size_t)runs, sizeof(*lat), cmp_i64);
    long mid = runs / 2;
    long p99 = runs * 99 / 100;
    (void)printf("latency gang=%ldx%ld runs=%ld p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n", tasks, gpus,
                 runs, (double)lat[mid] / 1e6, (double)lat[p99] / 1e6, (double)lat[runs - 1] / 1e6);
    free(lat);
    return 0;
}

static int submit(struct queue *q, int argc, char **argv)
{
    long jobs = num_arg(argc, argv, "--jobs", 1000);
    long seed = num_arg(argc, argv, "--seed", 1);
    long tasks_total = 0;
    srand((unsigned)seed);
    for (long i = 0; i < jobs; i++) {
        char spec[256];
        char id[64];
        struct mu_err err;
        int tasks = 1 + rand() % 4; /* NOLINT(cert-msc30-c,cert-msc50-cpp): a benchmark mix */
        tasks_total += tasks;
        (void)mu_snprintf(spec, sizeof(spec),
                          "{\"name\":\"drain\",\"tasks\":%d,\"gpus_per_task\":8,"
                          "\"command\":[\"sleep\",\"0\"]}",
                          tasks);
        if (queue_submit(q, spec, id, sizeof(id), &err) != 0) {
            (void)fprintf(stderr, "muster-bench: %s\n", err.msg);
            return 1;
        }
    }
    (void)printf("%ld\n", tasks_total);
    return 0;
}

static long long int_reply(struct queue *q, const char *cmd)
{
    redisReply *r = queue_command(q, NULL, cmd);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    queue_reply_free(r);
    return v;
}

static int drain_wait(struct queue *q, int argc, char **argv)
{
    long jobs = num_arg(argc, argv, "--jobs", 1000);
    long tasks = num_arg(argc, argv, "--tasks", 0);
    int64_t t0 = num_arg(argc, argv, "--t0-ns", 0);
    int64_t deadline = wall_ns() + 300LL * 1000000000LL;
    double secs;

    while (int_reply(q, "ZCARD " MU_KEY_PREFIX_DEFAULT QUEUE_K_JOBS) < jobs
           || int_reply(q, "SCARD " MU_KEY_PREFIX_DEFAULT QUEUE_K_ACTIVE) != 0) {
        if (wall_ns() > deadline) {
            (void)fprintf(stderr, "muster-bench: drain did not finish in 300 s\n");
            return 1;
        }
        sleep_us(10000); /* adds at most 10 ms; polling faster steals the CPU being measured */
    }
    secs = (double)(wall_ns() - t0) / 1e9;
    (void)printf("drain jobs=%ld tasks=%ld seconds=%.3f jobs_per_s=%.0f tasks_per_s=%.0f\n", jobs,
                 tasks, secs, (double)jobs / secs, (double)tasks / secs);
    return 0;
}

static int recover_fill(struct queue *q, int argc, char **argv)
{
    long jobs = num_arg(argc, argv, "--jobs", 100000);
    const char *spec = "{\"name\":\"stored\",\"tasks\":64,\"gpus_per_task\":8,"
                       "\"command\":[\"sleep\",\"1\"]}";
    long done = 0;
    while (done < jobs) {
        long batch = jobs - done < 1000 ? jobs - done : 1000;
        struct mu_buf script;
        struct mu_err err;
        redisReply *r;
        /* One Lua call per batch keeps the fill fast without a pipelining API here. */
        mu_buf_init(&script, 0);
        if (mu_buf_appendf(
                &script, &err,
                "for i=%ld,%ld do local id=tostring(1700000000000+i)..'-0' "
                "redis.call('HSET','" MU_KEY_PREFIX_DEFAULT QUEUE_K_JOB "'..id,"
                "'" QUEUE_F_ID "',id,'" QUEUE_F_STATE "','PENDING','" QUEUE_F_ATTEMPT
                "','1','" QUEUE_F_SPEC "',ARGV[1],'" QUEUE_F_SUBMITTED_AT
                "',tostring(1700000000000+i)) "
                "redis.call('ZADD','" MU_KEY_PREFIX_DEFAULT QUEUE_K_JOBS "',1700000000000+i,id) "
                "redis.call('SADD','" MU_KEY_PREFIX_DEFAULT QUEUE_K_ACTIVE "',id) end return 1",
                done, done + batch - 1)
            != 0) {
            mu_buf_release(&script);
            return 1;
        }
        r = queue_command(q, &err, "EVAL %s 0 %s", script.data, spec);
        mu_buf_release(&script);
        if (!r) {
            (void)fprintf(stderr, "muster-bench: %s\n", err.msg);
            return 1;
        }
        queue_reply_free(r);
        done += batch;
    }
    (void)printf("%ld\n", done);
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = getenv("MUSTER_REDIS_URL");
    struct queue *q;
    struct mu_err err;
    int rc;

    if (argc < 2) {
        (void)fputs("usage: muster-bench latency|submit|drain-wait [options] (see bench/e2e.sh)\n",
                    stderr);
        return 2;
    }
    q = queue_new(url && url[0] ? url : MU_REDIS_URL_DEFAULT, MU_KEY_PREFIX_DEFAULT, &err);
    if (!q) {
        (void)fprintf(stderr, "muster-bench: %s\n", err.msg);
        return 1;
    }
    if (strcmp(argv[1], "latency") == 0)
        rc = latency(q, argc, argv);
    else if (strcmp(argv[1], "submit") == 0)
        rc = submit(q, argc, argv);
    else if (strcmp(argv[1], "drain-wait") == 0)
        rc = drain_wait(q, argc, argv);
    else if (strcmp(argv[1], "recover-fill") == 0)
        rc = recover_fill(q, argc, argv);
    else
        rc = 2;
    queue_free(q);
    return rc;
}
