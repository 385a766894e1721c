/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd (d_job.h): d->live, the jobs that hold GPUs (placed, or adopting after a
 * restart), so that what looks for running gangs need not walk 100,000 pending jobs.  Each live
 * job also has a signature of the nodes its tasks are on (one bit of 256 per node name), kept
 * beside the list: a HELLO asks which live jobs have tasks on its node, and after a restart
 * 20,000 HELLOs each walking 2,500 gangs' records (a cache miss each) took the main thread 15 s
 * (issue #15).  The signatures are 32 bytes a job, read in a row; only the jobs whose bit is set
 * are looked at.
 */

#include "scheduler/d_job.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

int d_job_live_reserve(struct musterd *d)
{
    int need = d->nlive + d->live_promised + 1;
    int cap = d->cap_live ? d->cap_live * 2 : 256;
    struct d_job **p;
    struct d_live_sig *sig;

    if (need <= d->cap_live)
        return 0;
    if (cap < need)
        cap = need;
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
    p = realloc(d->live, (size_t)cap * sizeof(*p));
    if (!p)
        return -1;
    d->live = p;
    sig = realloc(d->live_sig, (size_t)cap * sizeof(*sig));
    if (!sig)
        return -1;
    d->live_sig = sig;
    d->cap_live = cap;
    return 0;
}

struct d_live_probe d_live_probe(const char *node_name)
{
    uint64_t h = mu_hash(node_name, strlen(node_name));
    return (struct d_live_probe){ .word = (int)(h % D_LIVE_SIG_WORDS),
                                  .bit = UINT64_C(1) << ((h / D_LIVE_SIG_WORDS) % 64) };
}

/* The nodes j's tasks are on: the stored placement's names while adopting, else its slots'. */
static struct d_live_sig live_sig(const struct musterd *d, const struct d_job *j)
{
    struct d_live_sig sig;

    memset(&sig, 0, sizeof(sig));
    for (int t = 0; t < j->spec.tasks; t++) {
        const char *name = NULL;
        struct d_live_probe p;
        if (j->adopting && j->adopt_nodes)
            name = j->adopt_nodes[t];
        else if (j->slots && j->slots[t].node >= 0 && j->slots[t].node < d->nnodes)
            name = d->nodes[j->slots[t].node].name;
        if (!name)
            continue;
        p = d_live_probe(name);
        sig.w[p.word] |= p.bit;
    }
    return sig;
}

void d_job_live_update(struct musterd *d, struct d_job *j)
{
    bool live = j->placed || j->adopting;
    if (live && !j->live_at) {
        if (MU_NEVER(d->nlive == d->cap_live)) /* the caller reserved room first */
            return;
        d->live_sig[d->nlive] = live_sig(d, j);
        d->live[d->nlive++] = j;
        j->live_at = d->nlive;
    } else if (!live && j->live_at) {
        struct d_job *last = d->live[--d->nlive];
        d->live[j->live_at - 1] = last;
        d->live_sig[j->live_at - 1] = d->live_sig[d->nlive];
        last->live_at = j->live_at;
        j->live_at = 0;
    }
}

struct d_job *d_live_prev_on(const struct musterd *d, int *k, struct d_live_probe p)
{
    while ((*k)-- > 0) {
        if (*k < d->nlive && (d->live_sig[*k].w[p.word] & p.bit) != 0)
            return d->live[*k];
    }
    return NULL;
}
