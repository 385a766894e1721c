/* SPDX-License-Identifier: MIT */
/*
 * Job state names (docs/design.md §3).  The names are what Redis stores in job:<id> "state" and
 * what musterctl prints, so they are part of the contract: upper case, never renamed.  Parsing is
 * case-insensitive because operators type them ("musterctl jobs --state running").  Which of
 * them are final is written here once (queue_state_is_final, queue_final_state_names).
 */
#include "queue/queue.h"

#include <stdio.h>
#include <strings.h>

#include "common/mu_banned.h"

static const char *const state_names[] = {
    [QUEUE_PENDING] = "PENDING",       [QUEUE_STARTING] = "STARTING",   [QUEUE_RUNNING] = "RUNNING",
    [QUEUE_PREEMPTING] = "PREEMPTING", [QUEUE_SUCCEEDED] = "SUCCEEDED", [QUEUE_FAILED] = "FAILED",
    [QUEUE_CANCELLED] = "CANCELLED",   [QUEUE_REJECTED] = "REJECTED",   [QUEUE_TIMEOUT] = "TIMEOUT",
};

const char *queue_state_name(enum queue_state s)
{
    if ((unsigned)s >= MU_ARRAY_LEN(state_names))
        return "UNKNOWN";
    return state_names[s];
}

int queue_state_parse(const char *text, enum queue_state *out)
{
    if (!text)
        return -1;
    for (size_t i = 0; i < MU_ARRAY_LEN(state_names); i++) {
        if (strcasecmp(text, state_names[i]) == 0) {
            *out = (enum queue_state)i;
            return 0;
        }
    }
    return -1;
}

/* The final states: the one rule (queue_state_is_final) and the list Python reads. */
static const bool state_final[MU_ARRAY_LEN(state_names)] = {
    [QUEUE_SUCCEEDED] = true, [QUEUE_FAILED] = true,  [QUEUE_CANCELLED] = true,
    [QUEUE_REJECTED] = true,  [QUEUE_TIMEOUT] = true,
};

bool queue_state_is_final(enum queue_state s)
{
    return (unsigned)s < MU_ARRAY_LEN(state_final) && state_final[s];
}

int queue_final_state_names(char *out, size_t size)
{
    size_t len = 0;

    if (size == 0)
        return -1;
    out[0] = '\0';
    for (size_t i = 0; i < MU_ARRAY_LEN(state_names); i++) {
        int n;
        if (!state_final[i])
            continue;
        n = snprintf(out + len, size - len, "%s%s", len ? " " : "", state_names[i]);
        if (n < 0 || (size_t)n >= size - len)
            return -1;
        len += (size_t)n;
    }
    return (int)len;
}
