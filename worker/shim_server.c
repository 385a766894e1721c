/* SPDX-License-Identifier: MIT */
/*
 * The shim server's life (issue #15): "muster-shim --serve" (shim.c) is the worker's child,
 * reached through a SOCK_SEQPACKET socket; it forks each task's shim, which spares each start the
 * exec of one (launch.c asks it).  Started at the first task and again after it ended; its end
 * is not the tasks' (each shim is in its own session), and while there is none the shim is
 * executed as before.  The server leaves when its socket closes: at the worker's end, or its death.
 * wrk_shim_exec executes a shim: the server itself, or a task's shim when there is no server
 * (launch.c).
 */
#include "worker/internal.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/mu_banned.h"

#define SHIM_SERVER_RETRY_MS 1000 /* a server that failed to start is tried again after this */

int wrk_shim_exec(
    const char *shim_path, char *arg, const int fds[4], pid_t *pid, struct mu_err *err)
{
    static char path_env[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    char *shim_envp[] = { path_env, NULL };
    char *shim_argv[] = { (char *)shim_path, arg, NULL };
    struct wrk_spawn s;

    memset(&s, 0, sizeof(s));
    s.argv = shim_argv;
    s.envp = shim_envp; /* nothing of the task's environment: no LD_PRELOAD for a root shim */
    s.fd_stdin = fds[0];
    s.fd_stdout = fds[1];
    s.fd_stderr = fds[2];
    s.fd_extra = fds[3];
    /* The shim is the node's: whatever stops it from starting (its exec included) is too. */
    return wrk_spawn_start(&s, pid, NULL, err);
}

int wrk_shim_server_start(struct wrk_shim_server *srv, const char *shim_path, struct mu_err *err)
{
    static char serve_arg[] = "--serve";
    int sv[2];
    int fds[4];

    srv->fd = -1;
    srv->pid = -1;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return mu_errf(err, MU_E_SYS, "cannot create the shim server's socket: %s",
                       strerror(errno));
    fds[0] = -1;            /* /dev/null */
    fds[1] = -1;            /* /dev/null */
    fds[2] = STDERR_FILENO; /* its rare complaints: the worker's log */
    fds[3] = sv[1];
    if (wrk_shim_exec(shim_path, serve_arg, fds, &srv->pid, err) != 0) {
        (void)close(sv[0]);
        (void)close(sv[1]);
        return -1;
    }
    (void)close(sv[1]);
    srv->fd = sv[0];
    return 0;
}

void wrk_shim_server_close(struct wrk_shim_server *srv)
{
    if (srv && srv->fd >= 0) {
        (void)close(srv->fd);
        srv->fd = -1;
    }
}

/*
 * The shim server, started at the first task and again after it ended (a start that failed is
 * tried again a second later); NULL while there is none: each shim is then executed.
 */
struct wrk_shim_server *wrk_agent_shim_server(struct wrk_agent *a)
{
    struct wrk_shim_server *srv = &a->shim_server;
    uint64_t now = mu_time_mono_ms();
    struct mu_err err;

    if (srv->fd >= 0)
        return srv;
    if (srv->pid > 0 || now < a->shim_server_retry_ms)
        return NULL; /* the last one is not reaped yet, or failed just now */
    mu_err_clear(&err);
    if (wrk_shim_server_start(srv, a->shim, &err) != 0) {
        a->shim_server_retry_ms = now + SHIM_SERVER_RETRY_MS;
        mu_log_limited(MU_LOG_WARN, WRK_MOD, "shim-server", 10,
                       "node=%s cannot start '%s --serve': %s; each task's shim is executed",
                       a->node, a->shim, err.msg);
        return NULL;
    }
    mu_log(MU_LOG_DEBUG, WRK_MOD, "node=%s shim server started, pid=%d", a->node, (int)srv->pid);
    return srv;
}

void wrk_agent_shim_server_reaped(struct wrk_agent *a, int status)
{
    struct wrk_taskexit x;

    wrk_taskexit_from_status(status, &x);
    /* Its end is not the tasks': each supervisor is in its own session. */
    if (a->shim_server.fd >= 0 || x.signal || x.exit_code)
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s shim server (pid %d) ended (%s %d); running tasks go on, the next task "
               "starts another",
               a->node, (int)a->shim_server.pid, x.signal ? "signal" : "exit code",
               x.signal ? x.signal : x.exit_code);
    wrk_shim_server_close(&a->shim_server);
    a->shim_server.pid = -1;
}

void wrk_agent_shim_server_stop(struct wrk_agent *a)
{
    pid_t pid = a->shim_server.pid;

    wrk_shim_server_close(&a->shim_server);
    for (int i = 0; pid > 0 && i < 100; i++) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            break;
        (void)poll(NULL, 0, 10);
    }
    a->shim_server.pid = -1;
}
