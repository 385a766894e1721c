/* SPDX-License-Identifier: MIT */
/*
 * The replay's event heap: what happens next, by (time, kind, sequence), so that at one instant
 * releases come before notices and equal events keep the order they were pushed in.  Its own file
 * because the job model (job.c) and the engine both push events, and the engine calls the job
 * model: a heap inside engine.c made the two call each other (scripts/calls.sh).
 */
#include "sim/internal.h"

#include <stdlib.h>

#include "common/mu_banned.h"

static bool ev_less(const struct sim_event *a, const struct sim_event *b)
{
    if (a->t != b->t)
        return a->t < b->t;
    if (a->kind != b->kind)
        return a->kind < b->kind;
    return a->seq < b->seq;
}

int sim_event_push(struct sim_engine *e, int64_t t, enum sim_ev_kind kind, int id, uint32_t gen)
{
    struct sim_event ev = { .t = t, .seq = e->seq++, .kind = (uint16_t)kind, .gen = gen, .id = id };
    int i;
    if (e->nheap == e->cap_heap) {
        int cap = e->cap_heap ? e->cap_heap * 2 : 1024;
        struct sim_event *h = realloc(e->heap, (size_t)cap * sizeof(*h));
        if (!h) {
            e->failed = true;
            return mu_errf(e->err, MU_E_NOMEM, "out of memory for events");
        }
        e->heap = h;
        e->cap_heap = cap;
    }
    i = e->nheap++;
    while (i > 0 && ev_less(&ev, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = ev;
    if (kind != SIM_EV_NOTICE)
        e->active_events++;
    return 0;
}

struct sim_event sim_event_pop(struct sim_engine *e)
{
    struct sim_event top = e->heap[0];
    struct sim_event last = e->heap[--e->nheap];
    int i = 0;
    for (;;) {
        int k = 2 * i + 1;
        if (k >= e->nheap)
            break;
        if (k + 1 < e->nheap && ev_less(&e->heap[k + 1], &e->heap[k]))
            k++;
        if (!ev_less(&e->heap[k], &last))
            break;
        e->heap[i] = e->heap[k];
        i = k;
    }
    if (e->nheap > 0)
        e->heap[i] = last;
    if (top.kind != SIM_EV_NOTICE)
        e->active_events--;
    return top;
}

void sim_wake_at(struct sim_engine *e, int64_t t_ms)
{
    (void)sim_event_push(e, t_ms, SIM_EV_WAKE, -1, 0);
}
