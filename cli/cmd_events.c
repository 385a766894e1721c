/* SPDX-License-Identifier: MIT */
/*
 * musterctl events: the job state changes musterd appends to the events stream, oldest first.
 * -f follows with XREAD BLOCK in rounds shorter than the connection's 2 s timeout, from the
 * newest id seen when the listing was taken, so nothing between listing and following is lost.
 * Following cannot know column widths in advance, so it prints fixed-width lines, and with
 * -o json one compact JSON object per line (JSON Lines) instead of one array.
 * A lost connection (a Redis restart) does not end -f: it reconnects with backoff, saying so on
 * stderr, and resumes after the last entry read, so no event is printed twice or skipped.  Only
 * an error Redis answers on a live connection (NOPERM, WRONGTYPE) ends it.
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

#define CTL_EVENTS_DEFAULT  20
#define CTL_FOLLOW_BLOCK_MS 1000
#define CTL_RETRY_FIRST_MS  100  /* first pause after a lost connection, */
#define CTL_RETRY_MAX_MS    5000 /* doubling up to this */

static const char *const headers[] = { "TIME", "JOB", "STATE", "ATTEMPT", "REASON" };

/* Fills the five cells of one event; bufs must hold 5 x 64 bytes. */
static void event_cells(const cJSON *ev, const char *cells[5], char bufs[5][64])
{
    int64_t at = ctl_json_int(ev, QUEUE_E_AT, 0);

    if (at > 0)
        mu_time_format_iso((uint64_t)at, bufs[0], sizeof(bufs[0]));
    else
        mu_strlcpy(bufs[0], "-", sizeof(bufs[0]));
    cells[0] = bufs[0];
    cells[1] = ctl_json_text(ev, QUEUE_E_JOB, bufs[1], sizeof(bufs[1]));
    cells[2] = ctl_json_text(ev, QUEUE_E_STATE, bufs[2], sizeof(bufs[2]));
    cells[3] = ctl_json_text(ev, QUEUE_E_ATTEMPT, bufs[3], sizeof(bufs[3]));
    cells[4] = ctl_json_text(ev, QUEUE_E_REASON, bufs[4], sizeof(bufs[4]));
}

/* Prints events one line each (follow mode): fixed widths, or compact JSON. */
static int print_lines(const struct ctl *ctl, const cJSON *events)
{
    const cJSON *ev;

    cJSON_ArrayForEach(ev, events)
    {
        if (ctl->output == CTL_OUT_JSON) {
            char *text = cJSON_PrintUnformatted(ev);
            if (!text)
                return ctl_fail(ctl, "out of memory formatting JSON");
            puts(text);
            cJSON_free(text);
        } else {
            const char *cells[5];
            char bufs[5][64];
            const char *color;
            event_cells(ev, cells, bufs);
            color = ctl->color ? ctl_state_color(cells[2]) : NULL;
            printf("%-24s  %-20s  %s%-10s%s  %-7s  ", cells[0], cells[1], color ? color : "",
                   cells[2], color ? "\033[0m" : "", cells[3]);
            ctl_print_clean(stdout, cells[4]);
            putchar('\n');
        }
    }
    return fflush(stdout) == 0 ? CTL_EXIT_OK : CTL_EXIT_FAIL;
}

/*
 * True when Redis answers PING, i.e. a failed read was an error Redis gave on a live connection
 * rather than a lost one.  The queue layer drops a broken connection, so this PING also makes
 * the reconnection attempt; a server still loading its data set answers LOADING, not live.
 */
static bool redis_alive(struct queue *q)
{
    struct mu_err err = { 0 };
    void *reply = queue_command(q, &err, "PING");

    queue_reply_free(reply);
    return reply != NULL;
}

static int follow(struct ctl *ctl, struct queue *q, const char *job, char *last_id, size_t size)
{
    struct mu_err err = { 0 };
    char lost[sizeof(err.msg)] = ""; /* why the connection went, until it is back */
    bool noted = false;              /* "reconnecting" was printed */
    int pause_ms = 0;
    int live_failures = 0; /* reads failed in a row while Redis answered PING */

    for (;;) {
        cJSON *events = NULL;
        int rc;

        /* last_id only moves past entries read, so a failed read resumes where it stopped. */
        if (queue_events_wait(q, job, CTL_FOLLOW_BLOCK_MS, last_id, size, &events, &err) != 0) {
            if (!lost[0])
                mu_strlcpy(lost, err.msg, sizeof(lost));
            if (redis_alive(q)) {
                /* Either the connection dropped and PING made a new one (a quick restart):
                 * read again; or Redis refuses the read itself, which a second try shows. */
                if (++live_failures >= 2)
                    return ctl_fail(ctl, "%s", err.msg);
                continue;
            }
            live_failures = 0;
            if (!noted) {
                (void)fprintf(stderr, "musterctl: events: %s; reconnecting\n", lost);
                noted = true;
            }
            pause_ms = pause_ms == 0 ? CTL_RETRY_FIRST_MS : pause_ms * 2;
            if (pause_ms > CTL_RETRY_MAX_MS)
                pause_ms = CTL_RETRY_MAX_MS;
            ctl_sleep_ms(pause_ms);
            continue;
        }
        if (lost[0]) {
            if (noted)
                (void)fprintf(stderr, "musterctl: events: reconnected; following after %s\n",
                              last_id);
            else
                (void)fprintf(stderr, "musterctl: events: %s; reconnected, following after %s\n",
                              lost, last_id);
            lost[0] = '\0';
            noted = false;
            pause_ms = 0;
        }
        live_failures = 0;
        rc = print_lines(ctl, events);
        cJSON_Delete(events);
        if (rc != CTL_EXIT_OK)
            return rc;
    }
}

int ctl_cmd_events(struct ctl *ctl, const struct ctl_args *args)
{
    struct mu_err err = { 0 };
    struct ctl_table *t = NULL;
    struct queue *q;
    cJSON *events = NULL;
    const cJSON *ev;
    const char *job = ctl_args_get(ctl, args, "job");
    bool follow_on = ctl_args_get(ctl, args, "follow") != NULL;
    char last_id[64];
    int64_t count = CTL_EVENTS_DEFAULT;
    int rc = CTL_EXIT_FAIL;

    if (ctl_args_int(ctl, args, "count", 0, 100000, &count) != 0)
        return CTL_EXIT_USAGE;
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_events_read(q, job, (size_t)count, &events, last_id, sizeof(last_id), &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (follow_on) {
        if (ctl->output == CTL_OUT_TABLE)
            printf("%-24s  %-20s  %-10s  %-7s  %s\n", headers[0], headers[1], headers[2],
                   headers[3], headers[4]);
        rc = print_lines(ctl, events);
        if (rc == CTL_EXIT_OK)
            rc = follow(ctl, q, job, last_id, sizeof(last_id));
        goto out;
    }
    if (ctl->output == CTL_OUT_JSON) {
        rc = ctl_json_print(ctl, events);
        goto out;
    }
    t = ctl_table_new(headers, MU_ARRAY_LEN(headers));
    if (!t) {
        ctl_fail(ctl, "out of memory");
        goto out;
    }
    ctl_table_set_state(t, 2);
    ctl_table_set_flex(t, 4);
    cJSON_ArrayForEach(ev, events)
    {
        const char *cells[5];
        char bufs[5][64];
        event_cells(ev, cells, bufs);
        if (ctl_table_add(t, cells) != 0) {
            ctl_fail(ctl, "out of memory");
            goto out;
        }
    }
    ctl_table_print(t, ctl, stdout);
    rc = CTL_EXIT_OK;
out:
    ctl_table_free(t);
    cJSON_Delete(events);
    return rc;
}
