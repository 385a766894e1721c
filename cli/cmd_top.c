/* SPDX-License-Identifier: MIT */
/*
 * musterctl top: a live view of queues, pools and running gangs, refreshed every second.
 *
 * Plain ANSI escapes, no curses: the alternate screen (CSI ?1049h) and a hidden cursor while it
 * runs, each frame drawn into memory first and written in one go after "home + clear" so it
 * does not flicker.  stdin goes non-canonical without echo so that a single 'q' quits; ISIG
 * stays on, so Ctrl-C raises SIGINT, whose handler only sets a flag that ends the loop.  Every
 * way out (q, Ctrl-C, SIGTERM, SIGHUP, a write error) passes through one restore path that
 * puts back the termios settings, the cursor and the main screen.  Without a terminal on stdout
 * frames are printed one after another (like `top -b`); --once prints one frame and exits, and
 * -o json prints one frame as a JSON object.  A Redis failure while live is shown in the frame
 * and retried on the next tick rather than ending the view.
 */
#include "cli/internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "common/mu_banned.h"

#define CTL_TOP_MIN_ROWS 3 /* running gangs always get at least this many rows */

static volatile sig_atomic_t top_stop;

static void top_on_signal(int sig)
{
    if (sig != SIGWINCH)
        top_stop = 1;
}

/* What one frame shows, read from Redis.  The active jobs that hold GPUs (STARTING, RUNNING,
 * PREEMPTING) are whole objects for -o json and table rows otherwise: a queue of 100,000
 * pending jobs is read every second, and rows cost a fraction of objects. */
struct top_data {
    cJSON *queues;
    cJSON *pools;
    cJSON *running_json;
    struct queue_job_rows running;
    size_t pending; /* active jobs that wait */
};

static void top_data_release(struct top_data *d)
{
    cJSON_Delete(d->queues);
    cJSON_Delete(d->pools);
    cJSON_Delete(d->running_json);
    queue_job_rows_release(&d->running);
    *d = (struct top_data){ 0 };
}

/* Keeps the gangs holding GPUs; counts the rest (pending). */
static void keep_running_json(struct top_data *d)
{
    cJSON *next;

    for (cJSON *job = d->running_json ? d->running_json->child : NULL; job; job = next) {
        char b[32];
        next = job->next;
        if (strcmp(ctl_json_text(job, QUEUE_F_STATE, b, sizeof(b)), "PENDING") == 0) {
            d->pending++;
            cJSON_Delete(cJSON_DetachItemViaPointer(d->running_json, job));
        }
    }
}

static void keep_running_rows(struct top_data *d)
{
    size_t kept = 0;

    for (size_t i = 0; i < d->running.n; i++) {
        if (ctl_job_row_is_pending(d->running.rows[i])) {
            d->pending++;
            free(d->running.rows[i]);
        } else {
            d->running.rows[kept++] = d->running.rows[i];
        }
    }
    d->running.n = kept;
}

static int top_data_read(struct queue *q, struct top_data *d, bool json, struct mu_err *err)
{
    struct queue_jobs_filter f = { 0 };

    *d = (struct top_data){ 0 };
    if (queue_status_read(q, QUEUE_K_QUEUES, &d->queues, err) != 0
        || queue_status_read(q, QUEUE_K_POOLS, &d->pools, err) != 0
        || (json ? queue_jobs_read(q, &f, &d->running_json, err)
                 : ctl_job_rows_read(q, &f, &d->running, err))
               != 0) {
        top_data_release(d);
        return -1;
    }
    if (json)
        keep_running_json(d);
    else
        keep_running_rows(d);
    return 0;
}

/* Terminal rows, 0 when unknown. */
static size_t term_rows(void)
{
    struct winsize ws;

    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0)
        return ws.ws_row;
    return 0;
}

static size_t term_cols(size_t def)
{
    struct winsize ws;

    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return def;
}

/* Writes one frame to out; rows = terminal height (0 = no limit on running gangs). */
static int top_frame(
    struct ctl *ctl, const struct top_data *d, const char *error, size_t rows, FILE *out)
{
    uint64_t now = mu_time_wall_ms();
    struct ctl_table *t = NULL;
    char when[40];
    size_t used;
    size_t max_rows = 0;
    size_t n;

    mu_time_format_iso(now, when, sizeof(when));
    (void)fprintf(out, "%smuster top%s  redis %s:%d  %s%s\n", ctl->color ? "\033[1m" : "",
                  ctl->color ? "\033[0m" : "", ctl->where.host, ctl->where.port, when,
                  rows ? "  (q to quit)" : "");
    if (error) {
        (void)fprintf(out, "%serror: %s%s (retrying)\n", ctl->color ? "\033[31m" : "", error,
                      ctl->color ? "\033[0m" : "");
        return 0;
    }
    (void)fprintf(out, "\nQUEUES\n");
    t = ctl_queues_table(d->queues, now);
    if (!t)
        return -1;
    ctl_table_print(t, ctl, out);
    ctl_table_free(t);
    (void)fprintf(out, "\nPOOLS\n");
    t = ctl_pools_table(d->pools, now);
    if (!t)
        return -1;
    ctl_table_print(t, ctl, out);
    ctl_table_free(t);
    n = d->running.n;
    (void)fprintf(out, "\nRUNNING GANGS %zu   PENDING JOBS %zu\n", n, d->pending);
    /* Lines so far: 1 title + 2x(blank, heading, header, rows) + blank, heading, header. */
    used = 1 + 3 + (size_t)cJSON_GetArraySize(d->queues) + 3 + (size_t)cJSON_GetArraySize(d->pools)
           + 3;
    if (rows) {
        max_rows = rows > used + CTL_TOP_MIN_ROWS ? rows - used - 1 : CTL_TOP_MIN_ROWS;
        if (n > max_rows && max_rows > 1)
            max_rows--; /* room for the "… more" line */
    }
    t = ctl_jobs_table(&d->running, now, max_rows);
    if (!t)
        return -1;
    ctl_table_print(t, ctl, out);
    ctl_table_free(t);
    if (max_rows && n > max_rows)
        (void)fprintf(out, "… %zu more\n", n - max_rows);
    return 0;
}

static int top_json(struct ctl *ctl, struct top_data *d)
{
    cJSON *doc = cJSON_CreateObject();
    int rc;

    if (!doc || !cJSON_AddNumberToObject(doc, "at", (double)mu_time_wall_ms())
        || !cJSON_AddItemToObject(doc, "queues", d->queues)) {
        cJSON_Delete(doc);
        return ctl_fail(ctl, "out of memory");
    }
    d->queues = NULL;
    if (!cJSON_AddItemToObject(doc, "pools", d->pools)) {
        cJSON_Delete(doc);
        return ctl_fail(ctl, "out of memory");
    }
    d->pools = NULL;
    if (!cJSON_AddItemToObject(doc, "running", d->running_json)) {
        cJSON_Delete(doc);
        return ctl_fail(ctl, "out of memory");
    }
    d->running_json = NULL;
    if (!cJSON_AddNumberToObject(doc, "pending_jobs", (double)d->pending)) {
        cJSON_Delete(doc);
        return ctl_fail(ctl, "out of memory");
    }
    rc = ctl_json_print(ctl, doc);
    cJSON_Delete(doc);
    return rc;
}

/* The terminal state to put back. */
struct top_term {
    bool tty_in;
    bool tty_out;
    struct termios saved;
    struct sigaction old[4];
};

static const int top_signals[4] = { SIGINT, SIGTERM, SIGHUP, SIGWINCH };

static void top_term_enter(struct top_term *tt)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = top_on_signal; /* no SA_RESTART: poll() returns EINTR at once */
    (void)sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < MU_ARRAY_LEN(top_signals); i++)
        (void)sigaction(top_signals[i], &sa, &tt->old[i]);
    tt->tty_in = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &tt->saved) == 0;
    if (tt->tty_in) {
        struct termios raw = tt->saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        (void)tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    tt->tty_out = isatty(STDOUT_FILENO);
    if (tt->tty_out) {
        (void)fputs("\033[?1049h\033[?25l", stdout);
        (void)fflush(stdout);
    }
}

static void top_term_leave(struct top_term *tt)
{
    if (tt->tty_out) {
        (void)fputs("\033[?25h\033[?1049l", stdout);
        (void)fflush(stdout);
    }
    if (tt->tty_in)
        (void)tcsetattr(STDIN_FILENO, TCSANOW, &tt->saved);
    for (size_t i = 0; i < MU_ARRAY_LEN(top_signals); i++)
        (void)sigaction(top_signals[i], &tt->old[i], NULL);
}

/* Waits up to ms for a key; true when the user asked to quit. */
static bool top_wait_key(const struct top_term *tt, int ms)
{
    struct pollfd pfd = { STDIN_FILENO, POLLIN, 0 };
    char c;

    if (!tt->tty_in) {
        ctl_sleep_ms(ms);
        return false;
    }
    if (poll(&pfd, 1, ms) <= 0)
        return false;
    while (read(STDIN_FILENO, &c, 1) == 1) {
        if (c == 'q' || c == 'Q')
            return true;
    }
    return false;
}

static int top_live(struct ctl *ctl, struct queue *q, int interval_ms)
{
    struct top_term tt = { 0 };
    int rc = CTL_EXIT_OK;

    top_stop = 0;
    top_term_enter(&tt);
    while (!top_stop) {
        struct mu_err err = { 0 };
        struct top_data d;
        char *frame = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&frame, &len);
        bool ok;

        if (!mem) {
            rc = CTL_EXIT_FAIL;
            break;
        }
        ctl->width = term_cols(ctl->width);
        ok = top_data_read(q, &d, false, &err) == 0;
        if (top_frame(ctl, &d, ok ? NULL : err.msg, tt.tty_out ? term_rows() : 0, mem) != 0)
            rc = CTL_EXIT_FAIL;
        top_data_release(&d);
        (void)fclose(mem);
        if (rc == CTL_EXIT_OK) {
            if (tt.tty_out)
                (void)fputs("\033[H\033[2J", stdout);
            else
                (void)fputc('\n', stdout);
            (void)fwrite(frame, 1, len, stdout);
            if (fflush(stdout) != 0)
                rc = CTL_EXIT_FAIL;
        }
        free(frame);
        if (rc != CTL_EXIT_OK || top_wait_key(&tt, interval_ms))
            break;
    }
    top_term_leave(&tt);
    if (rc != CTL_EXIT_OK)
        return ctl_fail(ctl, "cannot draw the view: %s", strerror(errno));
    return CTL_EXIT_OK;
}

int ctl_cmd_top(struct ctl *ctl, const struct ctl_args *args)
{
    struct mu_err err = { 0 };
    struct queue *q;
    struct top_data d;
    int64_t interval = 1;
    int rc;

    if (ctl_args_int(ctl, args, "interval", 1, 3600, &interval) != 0)
        return CTL_EXIT_USAGE;
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    if (ctl->output == CTL_OUT_TABLE && !ctl_args_get(ctl, args, "once"))
        return top_live(ctl, q, (int)interval * 1000);
    if (top_data_read(q, &d, ctl->output == CTL_OUT_JSON, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (ctl->output == CTL_OUT_JSON)
        rc = top_json(ctl, &d);
    else
        rc =
            top_frame(ctl, &d, NULL, 0, stdout) == 0 ? CTL_EXIT_OK : ctl_fail(ctl, "out of memory");
    top_data_release(&d);
    return rc;
}
