/* SPDX-License-Identifier: MIT */
/*
 * muster-bench-floor: what this machine cannot do faster than, whatever the scheduler (issue #15).
 * Times move from machine to machine (process creation on a VM can be 10x a bare host's), so
 * muster's figures are judged against this floor measured on the same box, in the same run.
 * bench/e2e.sh floor runs it, then muster's latency and drain benchmarks, and prints the ratios;
 * the composition of each floor is written out in docs/benchmarks.md.  Prints numbers; asserts
 * nothing.
 *
 *   muster-bench-floor --stamp PATH --dir DIR [--drain-cmd CMD] [--runs N]
 *
 * Measures, against the redis-server of MUSTER_REDIS_URL: a round trip (PING); the wake-up of a
 * blocked XREADGROUP (another process) by an XADD; a ZeroMQ DEALER -> ROUTER -> DEALER round trip
 * over TCP loopback (the ROUTER in another process); and the start of the task command: fork +
 * exec until its first instruction (PATH, the program the latency benchmark runs), one at a
 * time, from 1 process told through a pipe (a node) and from 4 at once (4 nodes); and whole
 * fork/exec/exit/reap cycles of CMD (the drain's task) from one process and from one per core.
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/mu.h"

#include "bench/args.h"
#include "bench/timing.h"

#include "common/mu_banned.h"

#define SPAWNERS_MAX 256

/* The median of v[0..n) in microseconds (sorts v). */
static double p50_us(int64_t *v, int n)
{
    int mid = n / 2;
    qsort(v, (size_t)n, sizeof(*v), cmp_i64);
    return (double)v[mid] / 1e3;
}

static double p99_us(const int64_t *sorted, int n)
{
    int at = n * 99 / 100;
    return (double)sorted[at] / 1e3;
}

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
    return bench_arg(argc, argv, 1, name, def);
}

static redisContext *redis_open(void)
{
    const char *url = getenv("MUSTER_REDIS_URL");
    struct mu_redis_url u;
    struct mu_err err;
    redisContext *c;

    /* The one URL parser; but the floor is measured on a plain connection to the benchmark's
     * own server, so neither Sentinels nor credentials. */
    if (mu_redis_url_parse(url && url[0] ? url : MU_REDIS_URL_DEFAULT, &u, &err) != 0) {
        (void)fprintf(stderr, "muster-bench-floor: MUSTER_REDIS_URL: %s\n", err.msg);
        return NULL;
    }
    if (u.nsentinels > 0 || u.user[0] || u.password[0] || u.db != 0) {
        (void)fprintf(stderr, "muster-bench-floor: MUSTER_REDIS_URL: expected redis://HOST[:PORT] "
                              "(no Sentinels, credentials or database)\n");
        return NULL;
    }
    c = redisConnect(u.host, u.port);
    if (!c || c->err) {
        (void)fprintf(stderr, "muster-bench-floor: redis %s:%d: %s\n", u.host, u.port,
                      c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    return c;
}

static int redis_ok(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, cmd);
    int rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (r)
        freeReplyObject(r);
    return rc;
}

/* A Redis round trip: PING, n times. */
static int redis_rtt(int n, double *p50)
{
    redisContext *c = redis_open();
    int64_t *v = calloc((size_t)n, sizeof(*v));
    int rc = -1;
    if (!c || !v)
        goto out;
    for (int i = -n / 10; i < n; i++) { /* a tenth to warm up */
        int64_t t0 = mono_ns();
        if (redis_ok(c, "PING") != 0)
            goto out;
        if (i >= 0)
            v[i] = mono_ns() - t0;
    }
    *p50 = p50_us(v, n);
    (void)printf("floor redis_rtt_us p50=%.1f p99=%.1f (PING, loopback)\n", *p50, p99_us(v, n));
    rc = 0;
out:
    free(v);
    if (c)
        redisFree(c);
    return rc;
}

/* The reader: blocks in XREADGROUP; after each entry, writes the monotonic time it woke. */
static void wake_reader(int out_fd, int n)
{
    redisContext *c = redis_open();
    for (int i = 0; c && i < n; i++) {
        redisReply *r = redisCommand(c, "XREADGROUP GROUP g c BLOCK 0 STREAMS floor:wake >");
        int64_t t = mono_ns();
        if (!r)
            break;
        freeReplyObject(r);
        if (write(out_fd, &t, sizeof(t)) != (ssize_t)sizeof(t))
            break;
    }
    if (c)
        redisFree(c);
}

/* XADD -> the blocked XREADGROUP of another process returns, n times. */
static int xread_wake(int n, double *p50)
{
    redisContext *c = redis_open();
    int64_t *v = calloc((size_t)n, sizeof(*v));
    int fds[2] = { -1, -1 };
    pid_t pid = -1;
    int rc = -1;

    if (!c || !v || pipe(fds) != 0)
        goto out;
    (void)redis_ok(c, "DEL floor:wake");
    if (redis_ok(c, "XGROUP CREATE floor:wake g $ MKSTREAM") != 0)
        goto out;
    pid = fork();
    if (pid == 0) {
        (void)close(fds[0]);
        wake_reader(fds[1], n);
        _exit(0);
    }
    if (pid < 0)
        goto out;
    (void)close(fds[1]);
    fds[1] = -1;
    for (int i = 0; i < n; i++) {
        int64_t t0;
        int64_t t1 = 0;
        sleep_us(2000); /* the reader is blocked again by then (on a busy box, most times) */
        t0 = mono_ns();
        if (redis_ok(c, "XADD floor:wake MAXLEN ~ 1000 * k v") != 0
            || read(fds[0], &t1, sizeof(t1)) != (ssize_t)sizeof(t1))
            goto out;
        v[i] = t1 - t0;
    }
    *p50 = p50_us(v, n);
    (void)printf("floor xreadgroup_wake_us p50=%.1f p99=%.1f (XADD sent -> blocked reader "
                 "returns, another process)\n",
                 *p50, p99_us(v, n));
    rc = 0;
out:
    if (pid > 0) {
        (void)kill(pid, SIGKILL);
        (void)waitpid(pid, NULL, 0);
    }
    if (c) {
        (void)redis_ok(c, "DEL floor:wake");
        redisFree(c);
    }
    if (fds[0] >= 0)
        (void)close(fds[0]);
    if (fds[1] >= 0)
        (void)close(fds[1]);
    free(v);
    return rc;
}

/* The ROUTER: binds an ephemeral loopback port, tells it on out_fd, echoes n + warm-up frames. */
static void zmq_echo(int out_fd, int n)
{
    void *ctx = zmq_ctx_new();
    void *router = ctx ? zmq_socket(ctx, ZMQ_ROUTER) : NULL;
    char endpoint[256] = "";
    size_t len = sizeof(endpoint);

    if (router && zmq_bind(router, "tcp://127.0.0.1:*") == 0
        && zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &len) == 0
        && write(out_fd, endpoint, sizeof(endpoint)) == (ssize_t)sizeof(endpoint)) {
        for (int i = 0; i < n; i++) {
            char id[256];
            char body[64];
            int idn = zmq_recv(router, id, sizeof(id), 0);
            int bn = idn > 0 ? zmq_recv(router, body, sizeof(body), 0) : -1;
            if (bn < 0 || zmq_send(router, id, (size_t)idn, ZMQ_SNDMORE) < 0
                || zmq_send(router, body, (size_t)bn, 0) < 0)
                break;
        }
    }
    if (router)
        (void)zmq_close(router);
    if (ctx)
        (void)zmq_ctx_term(ctx);
}

/* DEALER -> ROUTER (another process) -> back to the DEALER over TCP loopback, n times. */
static int zmq_rtt(int n, double *p50)
{
    int warm = n / 10;
    int64_t *v = calloc((size_t)n, sizeof(*v));
    int fds[2] = { -1, -1 };
    char endpoint[256];
    void *ctx = NULL;
    void *dealer = NULL;
    pid_t pid = -1;
    int rc = -1;

    if (!v || pipe(fds) != 0)
        goto out;
    pid = fork();
    if (pid == 0) {
        (void)close(fds[0]);
        zmq_echo(fds[1], n + warm);
        _exit(0);
    }
    if (pid < 0 || read(fds[0], endpoint, sizeof(endpoint)) != (ssize_t)sizeof(endpoint))
        goto out;
    ctx = zmq_ctx_new();
    dealer = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    if (!dealer || zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "n1", 2) != 0
        || zmq_connect(dealer, endpoint) != 0)
        goto out;
    for (int i = -warm; i < n; i++) {
        char buf[64];
        int64_t t0 = mono_ns();
        if (zmq_send(dealer, "bind-sized-payload", 18, 0) < 0
            || zmq_recv(dealer, buf, sizeof(buf), 0) < 0)
            goto out;
        if (i >= 0)
            v[i] = mono_ns() - t0;
    }
    *p50 = p50_us(v, n);
    (void)printf("floor zmq_rtt_us p50=%.1f p99=%.1f (DEALER -> ROUTER -> DEALER, TCP loopback, "
                 "another process)\n",
                 *p50, p99_us(v, n));
    rc = 0;
out:
    if (dealer)
        (void)zmq_close(dealer);
    if (ctx)
        (void)zmq_ctx_term(ctx);
    if (pid > 0) {
        (void)kill(pid, SIGKILL);
        (void)waitpid(pid, NULL, 0);
    }
    if (fds[0] >= 0)
        (void)close(fds[0]);
    if (fds[1] >= 0)
        (void)close(fds[1]);
    free(v);
    return rc;
}

/* fork + exec of argv with MUSTER_JOB_ID=job and RANK=rank (what muster-stamp names its file
 * by); waits for it.  0 when it exited 0. */
static int spawn_wait(char **argv, const char *job, int rank)
{
    int status = 0;
    pid_t pid = fork();
    if (pid == 0) {
        char r[16];
        (void)mu_snprintf(r, sizeof(r), "%d", rank);
        if (setenv("MUSTER_JOB_ID", job, 1) != 0 || setenv("RANK", r, 1) != 0)
            _exit(127);
        (void)execvp(argv[0], argv);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The wall-clock stamp muster-stamp wrote in dir for job/rank; -1 when missing. */
static int64_t stamp_read(const char *dir, const char *job, int rank)
{
    char path[4200];
    char line[32] = "";
    int64_t v = -1;
    FILE *f;
    (void)mu_snprintf(path, sizeof(path), "%s/%s.%d", dir, job, rank);
    f = fopen(path, "r");
    if (!f)
        return -1;
    if (fgets(line, sizeof(line), f))
        line[strcspn(line, "\n")] = '\0';
    (void)fclose(f);
    (void)unlink(path);
    if (mu_parse_i64(line, 0, INT64_MAX, &v, NULL) != 0)
        return -1;
    return v;
}

/* fork + exec of the stamp program until its first instruction, one at a time. */
static int spawn_seq(const char *stamp, const char *dir, int n, double *p50)
{
    char *argv[] = { (char *)stamp, (char *)dir, NULL };
    int64_t *v = calloc((size_t)n, sizeof(*v));
    if (!v)
        return -1;
    for (int i = 0; i < n; i++) {
        int64_t t0 = wall_ns();
        int64_t t1;
        if (spawn_wait(argv, "seq", i) != 0 || (t1 = stamp_read(dir, "seq", i)) < 0) {
            (void)fprintf(stderr, "muster-bench-floor: %s did not run\n", stamp);
            free(v);
            return -1;
        }
        v[i] = t1 - t0;
    }
    *p50 = p50_us(v, n);
    (void)printf("floor spawn_start_us p50=%.1f p99=%.1f (fork+exec of %s to its first "
                 "instruction, one at a time)\n",
                 *p50, p99_us(v, n), stamp);
    free(v);
    return 0;
}

/* k processes ("nodes"), each waiting on its own pipe; a byte makes it spawn argv once with
 * RANK = its index, and it answers a byte when the task exited. */
struct spawners {
    int k;
    pid_t pid[SPAWNERS_MAX];
    int go[SPAWNERS_MAX];
    int done[SPAWNERS_MAX];
};

static void spawner_loop(int go, int done, char **argv, const char *job, int rank)
{
    char b;
    while (read(go, &b, 1) == 1) {
        char ok = spawn_wait(argv, job, rank) == 0 ? 'y' : 'n';
        if (write(done, &ok, 1) != 1)
            break;
    }
}

static void spawners_stop(struct spawners *s)
{
    for (int i = 0; i < s->k; i++) {
        (void)close(s->go[i]); /* the spawner reads EOF and leaves */
        (void)close(s->done[i]);
        (void)waitpid(s->pid[i], NULL, 0);
    }
    s->k = 0;
}

static int spawners_start(struct spawners *s, int k, char **argv, const char *job)
{
    s->k = 0;
    (void)fflush(stdout); /* a child must not print what the parent buffered */
    for (int i = 0; i < k && i < SPAWNERS_MAX; i++) {
        int go[2];
        int done[2];
        if (pipe(go) != 0)
            break;
        if (pipe(done) != 0) {
            (void)close(go[0]);
            (void)close(go[1]);
            break;
        }
        s->pid[i] = fork();
        if (s->pid[i] == 0) {
            for (int j = 0; j < i; j++) { /* the earlier spawners see EOF only from us */
                (void)close(s->go[j]);
                (void)close(s->done[j]);
            }
            (void)close(go[1]);
            (void)close(done[0]);
            spawner_loop(go[0], done[1], argv, job, i);
            _exit(0);
        }
        (void)close(go[0]);
        (void)close(done[1]);
        s->go[i] = go[1];
        s->done[i] = done[0];
        s->k = i + 1;
        if (s->pid[i] < 0) {
            spawners_stop(s);
            return -1;
        }
    }
    if (s->k == k)
        return 0;
    spawners_stop(s);
    return -1;
}

/* One round: every spawner starts its task at once; 0 when all of them ran. */
static int spawners_round(struct spawners *s)
{
    int ok = 0;
    for (int i = 0; i < s->k; i++) {
        if (write(s->go[i], "g", 1) != 1)
            ok = -1;
    }
    for (int i = 0; i < s->k; i++) {
        char b = 'n';
        if (read(s->done[i], &b, 1) != 1 || b != 'y')
            ok = -1;
    }
    return ok;
}

/* k nodes start one task each at the same moment: the last task's first instruction. */
static int spawn_k(const char *stamp, const char *dir, int k, int n, double *p50)
{
    char *argv[] = { (char *)stamp, (char *)dir, NULL };
    struct spawners s;
    int64_t *v = calloc((size_t)n, sizeof(*v));
    int rc = -1;

    if (!v || spawners_start(&s, k, argv, "k") != 0) {
        free(v);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int64_t t0 = wall_ns();
        int64_t last = 0;
        if (spawners_round(&s) != 0)
            goto out;
        for (int r = 0; r < k; r++) {
            int64_t t = stamp_read(dir, "k", r);
            if (t < 0)
                goto out;
            last = t > last ? t : last;
        }
        v[i] = last - t0;
    }
    *p50 = p50_us(v, n);
    (void)printf("floor spawn%d_start_us p50=%.1f p99=%.1f (%d process(es) told through a pipe "
                 "fork+exec %s at once; the last one's first instruction)\n",
                 k, *p50, p99_us(v, n), k, stamp);
    rc = 0;
out:
    spawners_stop(&s);
    free(v);
    return rc;
}

/* Whole task cycles (fork, exec, exit, reap) of cmd from k processes running free, rounds
 * cycles each (every request is queued at once: no process waits for another). */
static int spawn_throughput(char **cmd, int k, int rounds, double *per_s)
{
    struct spawners s;
    int64_t t0;
    double secs;
    int ok = 0;

    if (rounds > 10000 || spawners_start(&s, k, cmd, "cycle") != 0)
        return -1;
    t0 = mono_ns();
    for (int i = 0; i < k; i++) {
        for (int r = 0; r < rounds && ok == 0; r++)
            ok = write(s.go[i], "g", 1) == 1 ? 0 : -1;
    }
    for (int i = 0; i < k; i++) {
        for (int r = 0; r < rounds && ok == 0; r++) {
            char b = 'n';
            ok = read(s.done[i], &b, 1) == 1 && b == 'y' ? 0 : -1;
        }
    }
    secs = (double)(mono_ns() - t0) / 1e9;
    spawners_stop(&s);
    if (ok != 0) {
        (void)fprintf(stderr, "muster-bench-floor: '%s' did not run\n", cmd[0]);
        return -1;
    }
    *per_s = (double)k * rounds / secs;
    (void)printf("floor spawn_cycles_per_s=%.0f (fork+exec+exit+reap of '%s', %d process(es) "
                 "at once)\n",
                 *per_s, cmd[0], k);
    return 0;
}

/* Splits a command line at spaces into argv (at most 15 words; no quoting: a benchmark knob). */
static int split_cmd(char *line, char **argv, int max)
{
    int n = 0;
    for (char *p = line; *p && n < max - 1;) {
        while (*p == ' ')
            *p++ = '\0';
        if (!*p)
            break;
        argv[n++] = p;
        while (*p && *p != ' ')
            p++;
    }
    argv[n] = NULL;
    return n;
}

int main(int argc, char **argv)
{
    const char *stamp = arg(argc, argv, "--stamp", NULL);
    const char *dir = arg(argc, argv, "--dir", NULL);
    char drain_line[512];
    char *drain_cmd[16];
    int64_t runs = 200;
    double rtt = 0;
    double wake = 0;
    double zrtt = 0;
    double seq = 0;
    double one = 0;
    double four = 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double cycles1 = 0;
    double cycles = 0;

    if (!stamp || !dir
        || (arg(argc, argv, "--runs", NULL)
            && mu_parse_i64(arg(argc, argv, "--runs", NULL), 10, 100000, &runs, NULL) != 0)) {
        (void)fputs("usage: muster-bench-floor --stamp PATH --dir DIR [--drain-cmd CMD] "
                    "[--runs N]\n(see docs/benchmarks.md; bench/e2e.sh floor runs it)\n",
                    stderr);
        return 2;
    }
    (void)setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as soon as it is measured */
    mu_strlcpy(drain_line, arg(argc, argv, "--drain-cmd", "sleep 0"), sizeof(drain_line));
    if (split_cmd(drain_line, drain_cmd, (int)MU_ARRAY_LEN(drain_cmd)) == 0)
        return 2;
    if (redis_rtt((int)runs * 10, &rtt) != 0 || xread_wake((int)runs, &wake) != 0
        || zmq_rtt((int)runs * 10, &zrtt) != 0 || spawn_seq(stamp, dir, (int)runs, &seq) != 0
        || spawn_k(stamp, dir, 1, (int)runs, &one) != 0
        || spawn_k(stamp, dir, 4, (int)runs, &four) != 0
        || spawn_throughput(drain_cmd, 1, (int)runs, &cycles1) != 0
        || (cores > 1
            && spawn_throughput(drain_cmd, cores < SPAWNERS_MAX ? (int)cores : SPAWNERS_MAX,
                                (int)runs, &cycles)
                   != 0))
        return 1;
    /* The start path's floor: the submission read (the wake), one write-ahead round trip before
     * any worker is told, one message to each node (half a round trip) and 4 task starts. */
    (void)printf("floor latency_ms=%.3f (= wake %.3f + redis_rtt %.3f + zmq_rtt/2 %.3f + "
                 "spawn4 %.3f)\n",
                 (wake + rtt + zrtt / 2 + four) / 1e3, wake / 1e3, rtt / 1e3, zrtt / 2e3,
                 four / 1e3);
    /* The drain's floor: the best this box does at creating and reaping processes, from one
     * process or from one per core (on some VMs concurrent process creation is slower). */
    (void)printf("floor drain_cycles_per_s=%.0f (the better of the two)\n",
                 cycles > cycles1 ? cycles : cycles1);
    return 0;
}
