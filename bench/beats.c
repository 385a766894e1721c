/* SPDX-License-Identifier: MIT */
/*
 * muster-bench-beats: the floor of musterd's idle CPU at fleet scale (issue #15).  Idle, musterd
 * does little but take each node's heartbeat from its own TCP connection and answer one in
 * answer_every; on a 2-core VM the kernel's part of that moves by 2x from one machine to the
 * next.  This measures the least any server pays for the same traffic on this box: one process,
 * one epoll loop, a recv per heartbeat and a send per answer, the messages as large as the
 * protocol's encoded HEARTBEATs, no ZeroMQ, no decoding.  bench/fleet.sh prints musterd's idle
 * CPU against it.  Prints numbers; asserts nothing.
 *
 *   muster-bench-beats --nodes N --heartbeat-s H --answer-every K [--seconds S]
 *                      [--per-process P] [--nice NICE]
 *
 * The nodes run as processes of at most P connections each (file descriptors), at nice NICE,
 * their heartbeats spread evenly over each interval; after every node has beaten once the
 * server's CPU (user + system, getrusage) is taken over S seconds.  One line on stdout:
 *
 *   beats nodes=N heartbeat_s=H answer_every=K heartbeats_per_s=.. answers_per_s=..
 *         server_cpu_pct=..
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/mu.h"
#include "protocol/proto.h"

#include "bench/args.h"
#include "bench/timing.h"

#include "common/mu_banned.h"

#define EVENTS_MAX 256
#define PROCS_MAX  64
#define WARMUP_S   3

struct opts {
    int nodes;
    int heartbeat_s;
    int answer_every;
    int seconds;
    int per_process;
    int nice;
};

/* Encoded sizes of a worker's HEARTBEAT and of the scheduler's answer, as musterd's peers send
 * them (the ZMTP frame header adds 2 bytes each). */
static int encoded_size(const struct proto_msg *m)
{
    struct mu_buf b;
    struct mu_err err;
    int n;
    mu_buf_init(&b, 0);
    n = proto_msg_encode(m, &b, &err) == 0 ? (int)b.len + 2 : -1;
    mu_buf_release(&b);
    return n;
}

static int sizes(int answer_every, int *beat, int *answer)
{
    struct proto_msg m;
    uint64_t now = (uint64_t)(mono_ns() / 1000000);

    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.seq = 123456;
    m.epoch = 3;
    mu_strlcpy(m.node, "p5-spot-00001", sizeof(m.node));
    m.echo_ms = now;
    m.answer_every = answer_every;
    *beat = encoded_size(&m);
    proto_msg_release(&m);
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.seq = 123456;
    m.epoch = 3;
    m.sent_ms = now;
    m.ok = true;
    m.echo_ms = now;
    m.heartbeat_s = 5;
    m.lease_s = 60;
    m.answer_every = answer_every;
    *answer = encoded_size(&m);
    proto_msg_release(&m);
    return *beat > 0 && *answer > 0 ? 0 : -1;
}

static int listen_any(int *port)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4096) != 0
        || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("muster-bench-beats: listen");
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static void epoll_add(int ep, int fd)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    (void)epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static double cpu_s(void)
{
    struct rusage ru;
    (void)getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6
           + (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* n nodes' connections: each sends a heartbeat at its turn in every interval and reads what
 * comes back.  Runs until killed. */
static void nodes_run(int port, int n, const struct opts *o, int beat_size)
{
    struct sockaddr_in a;
    struct epoll_event ev[EVENTS_MAX];
    char buf[4096];
    int *fd = calloc((size_t)n, sizeof(*fd));
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int64_t interval = (int64_t)o->heartbeat_s * 1000000000;
    int64_t t0;
    int64_t beats = 0;
    int one = 1;

    if (!fd || ep < 0 || setpriority(PRIO_PROCESS, 0, o->nice) != 0)
        _exit(1);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    memset(buf, 'h', sizeof(buf));
    for (int i = 0; i < n; i++) {
        fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd[i] < 0 || connect(fd[i], (struct sockaddr *)&a, sizeof(a)) != 0) {
            perror("muster-bench-beats: connect");
            _exit(1);
        }
        (void)setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* as libzmq */
        epoll_add(ep, fd[i]);
    }
    t0 = mono_ns();
    for (;;) {
        /* Node i beats at t0 + (i / n + k) intervals. */
        int64_t due = t0 + (beats / n) * interval + (beats % n) * interval / n;
        int64_t now = mono_ns();
        int wait = now >= due ? 0 : (int)((due - now) / 1000000) + 1;
        int got = epoll_wait(ep, ev, EVENTS_MAX, wait);

        for (int e = 0; e < got; e++)
            (void)recv(ev[e].data.fd, buf, sizeof(buf), MSG_DONTWAIT);
        for (now = mono_ns(); due <= now; beats++) {
            (void)send(fd[beats % n], buf, (size_t)beat_size, MSG_NOSIGNAL);
            due = t0 + ((beats + 1) / n) * interval + ((beats + 1) % n) * interval / n;
        }
    }
}

/* Accepts o->nodes connections, then answers as musterd would; prints the line. */
static int server_run(int lfd, const struct opts *o, int beat_size, int answer_size)
{
    struct epoll_event ev[EVENTS_MAX];
    char buf[4096];
    char answer[4096];
    unsigned *count = calloc((size_t)o->nodes + 4096, sizeof(*count));
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int accepted = 0;
    int64_t beats = 0;
    int64_t answers = 0;
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    int64_t beats0 = 0;
    int64_t answers0 = 0;
    double cpu0 = 0;
    int rc = -1;

    if (!count || ep < 0)
        goto out;
    memset(answer, 'a', sizeof(answer));
    epoll_add(ep, lfd);
    for (;;) {
        int got = epoll_wait(ep, ev, EVENTS_MAX, 1000);
        int64_t now = mono_ns();

        for (int e = 0; e < got; e++) {
            int fd = ev[e].data.fd;
            ssize_t r;
            if (fd == lfd) {
                int c = accept(lfd, NULL, NULL);
                if (c < 0 && (errno == EMFILE || errno == ENFILE)) {
                    (void)fprintf(stderr,
                                  "muster-bench-beats: accept after %d of %d "
                                  "connections: %s (hint: ulimit -n)\n",
                                  accepted, o->nodes, strerror(errno));
                    goto out;
                }
                if (c >= 0 && c < o->nodes + 4096) {
                    epoll_add(ep, c);
                    accepted++;
                }
                continue;
            }
            r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (r <= 0)
                continue;
            for (ssize_t m = r / beat_size; m > 0; m--) {
                beats++;
                if (++count[fd] % (unsigned)o->answer_every == 0) {
                    (void)send(fd, answer, (size_t)answer_size, MSG_NOSIGNAL);
                    answers++;
                }
            }
        }
        /* A node process that could not connect exits: then not all connections ever come.
         * (Not looked at in the measured window, where it would be a system call more.) */
        if (!start_ns && waitpid(-1, NULL, WNOHANG) > 0) {
            (void)fprintf(stderr,
                          "muster-bench-beats: a node process ended before the window "
                          "(%d of %d connections came)\n",
                          accepted, o->nodes);
            goto out;
        }
        if (!start_ns && accepted == o->nodes
            && beats >= (int64_t)o->nodes * (WARMUP_S + 1) / o->heartbeat_s) {
            start_ns = now;
            end_ns = now + (int64_t)o->seconds * 1000000000;
            cpu0 = cpu_s();
            beats0 = beats;
            answers0 = answers;
        }
        if (start_ns && now >= end_ns)
            break;
    }
    {
        double s = (double)(end_ns - start_ns) / 1e9;
        printf("beats nodes=%d heartbeat_s=%d answer_every=%d heartbeats_per_s=%.0f "
               "answers_per_s=%.0f server_cpu_pct=%.1f\n",
               o->nodes, o->heartbeat_s, o->answer_every, (double)(beats - beats0) / s,
               (double)(answers - answers0) / s, 100 * (cpu_s() - cpu0) / s);
    }
    rc = 0;
out:
    free(count);
    if (ep >= 0)
        (void)close(ep);
    return rc;
}

static int opt_int(int argc, char **argv, const char *name, int min, int max, int def)
{
    return (int)bench_num_arg("muster-bench-beats", argc, argv, 1, name, min, max, def);
}

int main(int argc, char **argv)
{
    struct opts o;
    pid_t pid[PROCS_MAX];
    int nprocs = 0;
    int beat_size;
    int answer_size;
    int port;
    int lfd;
    int rc;

    o.nodes = opt_int(argc, argv, "--nodes", 1, 1000000, 1000);
    o.heartbeat_s = opt_int(argc, argv, "--heartbeat-s", 1, 60, 5);
    o.answer_every = opt_int(argc, argv, "--answer-every", 1, 1000, 1);
    o.seconds = opt_int(argc, argv, "--seconds", 1, 86400, 20);
    o.per_process = opt_int(argc, argv, "--per-process", 1, 1000000, 6000);
    o.nice = opt_int(argc, argv, "--nice", 0, 19, 19);
    if ((o.nodes + o.per_process - 1) / o.per_process > PROCS_MAX) {
        (void)fprintf(stderr,
                      "muster-bench-beats: at most %d node processes: --per-process %d "
                      "is too few for --nodes %d\n",
                      PROCS_MAX, o.per_process, o.nodes);
        return 2;
    }
    if (sizes(o.answer_every, &beat_size, &answer_size) != 0 || (lfd = listen_any(&port)) < 0)
        return 1;
    for (int base = 0; base < o.nodes; base += o.per_process) {
        int n = o.nodes - base < o.per_process ? o.nodes - base : o.per_process;
        pid[nprocs] = fork();
        if (pid[nprocs] == 0) {
            (void)close(lfd);
            nodes_run(port, n, &o, beat_size);
        }
        if (pid[nprocs] < 0) {
            perror("muster-bench-beats: fork");
            break;
        }
        nprocs++;
    }
    rc = nprocs * o.per_process >= o.nodes ? server_run(lfd, &o, beat_size, answer_size) : -1;
    for (int i = 0; i < nprocs; i++) {
        (void)kill(pid[i], SIGKILL);
        (void)waitpid(pid[i], NULL, 0);
    }
    return rc == 0 ? 0 : 1;
}
