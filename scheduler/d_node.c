/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd (d_node.h): the worker registry (docs/design.md §2, §7): registration from
 * HELLO, heartbeats and their answers (which carry the worker's echo_ms back: its lease), nodes
 * judged lost, nodes whose worker said BYE (down), musterd's own cordon of a node that keeps
 * refusing tasks, the nodes of the last run after a restart, and musterctl node forget.  A node
 * keeps its cluster index for the life of the daemon: a forgotten one only loses its status entry,
 * so that it registers again as usual if it comes back.
 */

#include "scheduler/d_node.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

enum sched_node_state d_node_state(const struct d_node *node)
{
    if (node->down)
        return SCHED_NODE_DOWN;
    if (!node->online)
        return SCHED_NODE_LOST; /* judged lost: silent past the limit, its BYE never came */
    return node->terminating ? SCHED_NODE_TERMINATING : node->admin;
}

/* The core's copy of the node's state, from d_node_state: the only place musterd sets it. */
static void node_sync(struct musterd *d, const struct d_node *node)
{
    sched_cluster_node_set_state(d->cluster, node->idx, d_node_state(node));
    d->nodes_dirty = true;
}

void d_node_state_set(struct musterd *d, struct d_node *node, enum sched_node_state st)
{
    switch (st) {
    case SCHED_NODE_TERMINATING:
        node->terminating = true;
        break;
    case SCHED_NODE_DOWN:
        node->down = true;
        break;
    case SCHED_NODE_LOST:
        node->online = false;
        node->down = false; /* stopping, but its BYE never came: lost after all */
        break;
    case SCHED_NODE_READY:
    case SCHED_NODE_CORDONED:
    case SCHED_NODE_DRAINING:
        node->admin = st;
        break;
    }
    node_sync(d, node);
}

bool d_node_releasable(const struct musterd *d, const struct d_node *node, uint64_t now_ms)
{
    return node->online && !node->terminating && node->idle_since_ms
           && now_ms >= node->idle_since_ms
           && now_ms - node->idle_since_ms >= (uint64_t)d->cfg.consolidate_after_s * 1000u;
}

struct d_node *d_node_get(struct musterd *d, const char *name)
{
    int idx = sched_cluster_node_find(d->cluster, name);
    if (idx < 0 || !d->nodes[idx].online)
        return NULL;
    return &d->nodes[idx];
}

const char *d_node_name(const struct musterd *d, int idx)
{
    return d->nodes[idx].name;
}

int d_answer_every(const struct cfg *c)
{
    return c->node_lost_after_s >= 5 * c->heartbeat_s ? 2 : 1;
}

/*
 * Answers a HELLO or HEARTBEAT.  echo_ms is the worker's send time, carried back: it renews the
 * worker's lease until echo_ms + lease_s, which stays inside our own judgement of the node (we
 * heard it after echo_ms and wait node_lost_after_s plus a margin from the last we heard).
 * Answering one heartbeat in answer_every keeps that true: the lease runs from an older echo,
 * so it only ends sooner.
 */
static void reply_heartbeat(
    struct musterd *d, const char *identity, bool known, const char *refused, uint64_t echo_ms)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.ok = known;
    m.echo_ms = echo_ms;
    if (refused)
        mu_strlcpy(m.error, refused, sizeof(m.error));
    m.heartbeat_s = d->cfg.heartbeat_s;
    m.lease_s = d->cfg.node_lost_after_s; /* a worker cut off this long stops its tasks */
    m.answer_every = d_answer_every(&d->cfg);
    d_send(&d->out, identity, &m);
    proto_msg_release(&m);
}

/* Whether instance_topology maps level l (an import can give it). */
static bool level_is_imported(const struct cfg *c, int l)
{
    const struct cfg_instance_topology *it = &c->instance_topology;
    if (strcmp(it->availability_zone, c->levels[l]) == 0)
        return true;
    for (int i = 0; i < it->nlayers; i++) {
        if (strcmp(it->layers[i], c->levels[l]) == 0)
            return true;
    }
    return false;
}

/*
 * MIG (issue #17): a GPU in MIG mode is never placed itself, its slices are (each an entry with
 * a profile and the index of its GPU as parent).  Profiles are numbered by the cluster as they
 * are first seen.
 */
static int hello_units(struct musterd *d,
                       const struct proto_msg *m,
                       struct sched_node_spec *spec,
                       struct mu_err *err)
{
    for (int g = 0; g < m->ngpus; g++) {
        const struct proto_gpu *gpu = &m->gpus[g];
        int id;
        int parent = -1;
        if (gpu->mig && gpu->profile[0])
            return mu_errf(err, MU_E_PROTO, "GPU %d: both a GPU in MIG mode and a slice", g);
        if (gpu->mig) {
            spec->unit[g] = SCHED_UNIT_MIG_PARENT;
            continue;
        }
        if (!gpu->profile[0])
            continue;
        if (!mu_mig_profile_is_valid(gpu->profile))
            return mu_errf(err, MU_E_PROTO, "GPU %d: '%s' is not a MIG profile", g, gpu->profile);
        for (int p = 0; p < m->ngpus && parent < 0; p++) {
            if (m->gpus[p].mig && m->gpus[p].index == gpu->parent)
                parent = p;
        }
        if (parent < 0)
            return mu_errf(err, MU_E_PROTO, "MIG slice %d: its GPU %d is not in MIG mode", g,
                           gpu->parent);
        id = sched_cluster_profile_intern(d->cluster, gpu->profile, err);
        if (id < 0)
            return -1;
        spec->unit[g] = (uint8_t)id;
        spec->parent[g] = (uint8_t)parent;
    }
    return 0;
}

/* Builds the core's view of a worker from its HELLO; -1 with err when it cannot join. */
static int hello_spec(struct musterd *d,
                      const struct proto_msg *m,
                      struct sched_node_spec *spec,
                      struct mu_err *err)
{
    const struct cfg_pool *pool = cfg_pool_find(&d->cfg, m->pool);
    bool imported[CFG_MAX_LEVELS];

    memset(spec, 0, sizeof(*spec));
    if (!mu_name_is_valid(m->node, SCHED_NAME_MAX - 1))
        return mu_errf(err, MU_E_INVAL, "invalid node name '%s'", m->node);
    if (!pool)
        return mu_errf(err, MU_E_CONFIG, "unknown pool '%s'; hint: add it to the config's pools",
                       m->pool);
    if (m->ngpus > SCHED_MAX_GPUS_NODE)
        return mu_errf(err, MU_E_RANGE, "%d GPUs, at most %d supported", m->ngpus,
                       SCHED_MAX_GPUS_NODE);
    mu_strlcpy(spec->name, m->node, sizeof(spec->name));
    spec->pool = (int)(pool - d->cfg.pools);
    spec->ngpus = m->ngpus;
    spec->cpus = m->cpus;
    spec->memory_mb = m->memory_mb;
    for (int g = 0; g < m->ngpus; g++) {
        if (m->gpus[g].island < 0 || m->gpus[g].island >= SCHED_MAX_GPUS_NODE)
            return mu_errf(err, MU_E_RANGE, "GPU %d: island %d out of range", g, m->gpus[g].island);
        spec->island[g] = (uint8_t)m->gpus[g].island;
    }
    if (hello_units(d, m, spec, err) != 0)
        return -1;
    spec->nlabels = d->cfg.nlevels;
    /* The imported instance topology (d_topo.c) wins over the worker's flags for its levels. */
    (void)d_topo_node_labels(d, m->instance_id, spec->labels, imported);
    for (int l = 0; l < d->cfg.nlevels; l++) {
        bool found = imported[l];
        for (int i = 0; i < m->nlabels && !found; i++) {
            if (strcmp(m->labels[i].level, d->cfg.levels[l]) == 0) {
                mu_strlcpy(spec->labels[l], m->labels[i].value, sizeof(spec->labels[l]));
                found = true;
            }
        }
        if (!found)
            return mu_errf(err, MU_E_CONFIG,
                           "missing topology label '%s'; hint: start the worker with --label "
                           "%s=VALUE%s",
                           d->cfg.levels[l], d->cfg.levels[l],
                           level_is_imported(&d->cfg, l)
                               ? ", or import the instance topology of its --instance-id "
                                 "(musterctl topology import)"
                               : "");
    }
    return 0;
}

void d_node_admin_set(struct d_node *node, enum sched_node_state admin, int grace_s)
{
    node->admin = admin;
    node->drain_grace_s = grace_s;
    node->reason[0] = '\0'; /* the operator's word replaces musterd's */
    node->refusals = 0;
}

/* A node (back) online takes the state the operator asked for while it was away: a cordon or
 * drain musterd kept (<prefix>node:wanted).  Without one it keeps its own (ready when new). */
static void wanted_apply(struct musterd *d, struct d_node *node, const char *name)
{
    const struct d_wanted *w = d_wanted_get(d, name);

    if (!w || node->admin == w->admin)
        return;
    d_node_admin_set(node, w->admin, w->grace_s);
    mu_log(MU_LOG_INFO, "sched", "node=%s %s, as the operator asked while it was not registered",
           name, sched_node_state_name(w->admin));
}

/*
 * A worker whose whole GPUs do not match its pool's gpus_per_node (a wrong --gpus, or the wrong
 * --pool) is registered as it reports itself, but said loudly: placement counts its GPUs, while
 * autoscalers and the pending-demand gauges count the pool's.  Logged once per change.
 */
static void gpu_check(struct musterd *d, struct d_node *node, const struct proto_msg *m)
{
    const struct cfg_pool *pool = cfg_pool_find(&d->cfg, m->pool);
    char warning[sizeof(node->warning)] = "";
    int whole = 0;

    for (int g = 0; g < m->ngpus; g++)
        whole += m->gpus[g].profile[0] == '\0'; /* GPUs in MIG mode count, their slices not */
    if (pool && whole != pool->gpus_per_node)
        (void)mu_snprintf(warning, sizeof(warning),
                          "reports %d GPU(s), but pool %s has gpus_per_node %d", whole, pool->name,
                          pool->gpus_per_node);
    if (strcmp(warning, node->warning) == 0)
        return;
    mu_strlcpy(node->warning, warning, sizeof(node->warning));
    if (warning[0])
        mu_log(MU_LOG_WARN, "sched",
               "node=%s %s; registered as it reports itself; hint: check the worker's --gpus and "
               "--pool, or the pool's gpus_per_node",
               node->name, warning);
}

struct d_node *d_node_register(struct musterd *d, const char *identity, const struct proto_msg *m)
{
    struct sched_node_spec spec;
    struct mu_err err;
    struct d_node *node;
    int idx;

    if (strcmp(identity, m->node) != 0) {
        mu_log_limited(MU_LOG_WARN, "sched", "hello-identity", 10,
                       "HELLO from '%s' names node '%s'; refused", identity, m->node);
        return NULL;
    }
    idx = hello_spec(d, m, &spec, &err) == 0 ? sched_cluster_node_add(d->cluster, &spec, &err) : -1;
    if (idx < 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "hello-bad", 10, "node=%s cannot register: %s",
                       m->node, err.msg);
        reply_heartbeat(d, identity, false, err.msg, m->echo_ms); /* the worker logs why */
        return NULL;
    }
    if (idx >= d->cap_nodes) {
        int cap = d->cap_nodes ? d->cap_nodes * 2 : 16;
        struct d_node *p;
        while (cap <= idx)
            cap *= 2;
        p = realloc(d->nodes, (size_t)cap * sizeof(*p));
        if (!p) {
            mu_log(MU_LOG_ERROR, "sched", "node=%s out of memory registering", m->node);
            return NULL;
        }
        memset(p + d->cap_nodes, 0, (size_t)(cap - d->cap_nodes) * sizeof(*p));
        d->nodes = p;
        d->cap_nodes = cap;
    }
    if (idx >= d->nnodes) {
        d->nnodes = idx + 1;
        d->nodes[idx].admin = SCHED_NODE_READY;
        d->nodes[idx].drain_grace_s = -1;
    }
    node = &d->nodes[idx];
    if (!node->online)
        wanted_apply(d, node, m->node);
    mu_strlcpy(node->name, m->node, sizeof(node->name));
    mu_strlcpy(node->pool, m->pool, sizeof(node->pool));
    mu_strlcpy(node->addr, m->addr[0] ? m->addr : m->node, sizeof(node->addr));
    mu_strlcpy(node->instance_id, m->instance_id, sizeof(node->instance_id));
    mu_strlcpy(node->confinement, m->confinement, sizeof(node->confinement));
    node->idx = idx;
    if (!node->online)
        mu_log(MU_LOG_INFO, "sched", "node=%s registered: pool %s, %d GPU(s), %d task(s) running",
               node->name, node->pool, m->ngpus, m->ntasks);
    gpu_check(d, node, m);
    node->down = false; /* back after a BYE, or after musterctl node forget */
    node->forgotten = false;
    if (d->expected_nodes && mu_map_remove(d->expected_nodes, node->name)
        && mu_map_count(d->expected_nodes) == 0) {
        mu_log(MU_LOG_INFO, "sched", "every node of the last run is back");
        d->regrace_until_ms = 0;
    }
    node->online = true;
    node->unanswered = 0;
    node->seen_ms = mu_time_mono_ms();
    node->seen_wall_ms = mu_time_wall_ms();
    node_sync(d, node); /* online again: its state is what its flags say */
    reply_heartbeat(d, identity, true, NULL, m->echo_ms);
    d->dirty = true;
    return node;
}

void d_node_heartbeat(struct musterd *d, const char *identity, const struct proto_msg *m)
{
    struct d_node *node = d_node_get(d, identity);
    if (node) {
        int every = d_answer_every(&d->cfg);
        node->seen_ms = mu_time_mono_ms();
        node->seen_wall_ms = mu_time_wall_ms();
        /* Counted in the worker's own beats, whatever its clock and interval: never two
         * answers apart by more than answer_every of them. */
        if (every > 1 && m->answer_every == every && ++node->unanswered < every)
            return;
        node->unanswered = 0;
    }
    reply_heartbeat(d, identity, node != NULL, NULL, m->echo_ms);
}

void d_node_refused(struct musterd *d,
                    struct d_node *node,
                    const struct d_job *j,
                    const char *error)
{
    if (strcmp(node->refused_job, j->id) == 0 && node->refused_attempt == j->placed_attempt)
        return; /* one attempt's tasks count once */
    mu_strlcpy(node->refused_job, j->id, sizeof(node->refused_job));
    node->refused_attempt = j->placed_attempt;
    if (++node->refusals < D_REFUSALS_CORDON || node->admin != SCHED_NODE_READY)
        return;
    (void)mu_snprintf(node->reason, sizeof(node->reason),
                      "cordoned by musterd: it refused %d attempts in a row: %s", node->refusals,
                      error[0] ? error : "unknown error");
    d_node_state_set(d, node, SCHED_NODE_CORDONED);
    mu_log(MU_LOG_WARN, "sched", "node=%s %s; hint: fix it, then musterctl uncordon %s", node->name,
           node->reason, node->name);
}

void d_node_stopping(struct musterd *d, struct d_node *node)
{
    if (node->down)
        return;
    d_node_state_set(d, node, SCHED_NODE_DOWN);
    mu_log(MU_LOG_INFO, "sched", "node=%s stopping: its worker stops its tasks; no new work there",
           node->name);
}

void d_node_down(struct musterd *d, struct d_node *node)
{
    node->online = false; /* its last reports are read: it is gone */
    d_node_state_set(d, node, sched_react_node_lost(true).node_state);
    mu_log(MU_LOG_INFO, "sched", "node=%s down: its worker stopped cleanly (BYE)", node->name);
    d->dirty = true;
}

bool d_node_has_tasks(const struct musterd *d, const char *name)
{
    int idx = sched_cluster_node_find(d->cluster, name);
    struct d_job *j;

    for (int k = d->nlive; (j = d_live_prev_on(d, &k, d_live_probe(name))) != NULL;) {
        for (int t = 0; t < j->spec.tasks; t++) {
            if (j->tasks[t].gone)
                continue;
            if (idx >= 0 && j->slots[t].node == idx)
                return true;
            /* Adopting after a restart: a task whose node has not registered yet. */
            if (j->adopting && j->slots[t].node < 0 && j->adopt_nodes
                && strcmp(j->adopt_nodes[t], name) == 0)
                return true;
        }
    }
    return false;
}

/* Whether <prefix>nodes has an entry for name (a node of an earlier run); -1 on a Redis error. */
static int node_record_exists(struct musterd *d, const char *name, struct mu_err *err)
{
    cJSON *rec = NULL;

    if (!d->q)
        return 0;
    if (queue_node_read(d->q, name, &rec, err) != 0)
        return err->code == MU_E_PARSE ? 1 : -1; /* an unreadable entry is still an entry */
    cJSON_Delete(rec);
    return rec != NULL;
}

/* Why name must not be forgotten, into why; "" when it may.  -1 on a Redis error. */
static int forget_check(struct musterd *d, const char *name, char *why, size_t size)
{
    int idx = sched_cluster_node_find(d->cluster, name);
    const struct d_node *node = idx >= 0 && idx < d->nnodes ? &d->nodes[idx] : NULL;
    struct mu_err err;
    int exists;

    why[0] = '\0';
    if (!mu_name_is_valid(name, PROTO_NODE_MAX - 1)) {
        (void)mu_snprintf(why, size, "'%s' is not a node name", name);
    } else if (node && node->online) {
        (void)mu_snprintf(why, size,
                          "node '%s' is registered (%s); stop its worker first (the node goes "
                          "down), or wait until it is lost",
                          name, sched_node_state_name(d_node_state(node)));
    } else if (d_node_has_tasks(d, name)) {
        (void)mu_snprintf(why, size,
                          "node '%s' still has tasks of running gangs; wait until they are "
                          "requeued",
                          name);
    } else if (!node && d->regrace_until_ms && d->expected_nodes
               && mu_map_get(d->expected_nodes, name)) {
        (void)mu_snprintf(why, size,
                          "node '%s' ran before musterd restarted and may still come back; "
                          "try again once node_lost_after_s (%d s) has passed",
                          name, d->cfg.node_lost_after_s);
    } else if (!node || node->forgotten) {
        exists = node_record_exists(d, name, &err);
        if (exists < 0) {
            mu_log_limited(MU_LOG_ERROR, "sched", "redis-nodes", 5, "forget %s: %s", name, err.msg);
            d->redis_down = true;
            return -1;
        }
        if (!exists)
            (void)mu_snprintf(why, size, "node '%s' is not known", name);
    }
    return 0;
}

int d_node_forget(struct musterd *d, const char *entry_id, const char *name)
{
    int idx = sched_cluster_node_find(d->cluster, name);
    char why[PROTO_NODE_MAX + 300];
    char answer[sizeof(why) + 16];
    char key[QUEUE_JOB_ID_MAX + 16];
    struct queue_kv kv = { name, NULL }; /* NULL: HDEL */
    struct mu_err err;

    if (forget_check(d, name, why, sizeof(why)) != 0)
        return -1;
    /* The operator's kept cordon or drain of it goes with the record (first: a retry after a
     * failure here or below finds the record still there, and deletes again). */
    if ((!why[0] && d_wanted_get(d, name)
         && d->store.ops->status_write(d->store.ctx, QUEUE_K_NODE_WANTED, &kv, 1, &err) != 0)
        || (!why[0]
            && d->store.ops->status_write(d->store.ctx, QUEUE_K_NODES, &kv, 1, &err) != 0)) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-nodes", 5, "forget %s: %s", name, err.msg);
        d->redis_down = true;
        return -1;
    }
    if (!why[0] && d_wanted_get(d, name)) /* the map exists: this only removes from it */
        (void)d_wanted_set(d, name, SCHED_NODE_READY, -1, NULL);
    if (why[0]) {
        mu_log(MU_LOG_INFO, "sched", "forget %s refused: %s", name, why);
        (void)mu_snprintf(answer, sizeof(answer), "refused: %s", why);
    } else {
        if (idx >= 0 && idx < d->nnodes) {
            d->nodes[idx].forgotten = true;
            d->nodes[idx].status_sum = 0; /* written again should it register again */
        }
        if (d->expected_nodes && mu_map_remove(d->expected_nodes, name)
            && mu_map_count(d->expected_nodes) == 0)
            d->regrace_until_ms = 0;
        mu_log(MU_LOG_INFO, "sched", "node=%s forgotten: its record is removed", name);
        (void)mu_snprintf(answer, sizeof(answer), "ok: node %s forgotten", name);
    }
    (void)mu_snprintf(key, sizeof(key), "forget:%s", entry_id);
    if (d->store.ops->answer_push(d->store.ctx, key, answer, strlen(answer), &err) != 0) {
        /* Done all the same; musterctl's wait runs out and says the answer did not come. */
        mu_log_limited(MU_LOG_ERROR, "sched", "forget", 5, "forget %s: %s", name, err.msg);
        d->redis_down = true;
    }
    return 0;
}

uint64_t d_node_silence_limit_ms(const struct cfg *c)
{
    /* A worker cut off this long stops its own tasks (its lease); the margin makes sure it did
     * before the gang is started anywhere else. */
    uint64_t margin = (uint64_t)c->heartbeat_s * 2000u;
    return (uint64_t)c->node_lost_after_s * 1000u + (margin > 2000 ? margin : 2000);
}

int d_nodes_expire(struct musterd *d, uint64_t now_ms)
{
    uint64_t limit = d_node_silence_limit_ms(&d->cfg);
    uint64_t oldest = now_ms;
    /* A node's seen_ms only moves forward, and one comes online heard, so none is silent past
     * the limit before the oldest heard at the last scan could be: at 20,000 nodes the scan
     * every CHECK_INTERVAL_MS was 2 % of an idle musterd's CPU (issue #15). */
    if (now_ms - d->nodes_heard_floor_ms <= limit)
        return -1;
    /* Workers with a witness hold their leases while Redis shows no leader (worker/witness.c),
     * so a node's silence proves its tasks stopped only once the key has been ours for the whole
     * limit, and only while it surely still is (a frozen or cut-off leader judges nobody). */
    if (d->lease.leading
        && (now_ms >= d->lease.valid_until_ms || now_ms - d->lease.term_start_ms <= limit))
        return -1;
    for (int i = 0; i < d->nnodes; i++) {
        struct d_node *node = &d->nodes[i];
        if (!node->online)
            continue;
        if (node->seen_ms >= now_ms || now_ms - node->seen_ms <= limit) {
            if (node->seen_ms < oldest)
                oldest = node->seen_ms;
            continue;
        }
        d_node_state_set(d, node, sched_react_node_lost(false).node_state);
        mu_log(MU_LOG_WARN, "sched", "node=%s lost: no heartbeat for %d s", node->name,
               d->cfg.node_lost_after_s);
        (void)d_counters_incr(&d->metrics, &d->store, D_C_NODES_LOST, NULL);
        return i;
    }
    d->nodes_heard_floor_ms = oldest;
    return -1;
}

int d_wanted_set(struct musterd *d,
                 const char *name,
                 enum sched_node_state admin,
                 int grace_s,
                 struct mu_err *err)
{
    struct d_wanted *w;

    if (!d->wanted && (d->wanted = mu_map_new()) == NULL)
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    if (admin != SCHED_NODE_CORDONED && admin != SCHED_NODE_DRAINING) {
        free(mu_map_remove(d->wanted, name));
        return 0;
    }
    w = mu_map_get(d->wanted, name);
    if (!w) {
        w = malloc(sizeof(*w));
        if (!w || mu_map_put(d->wanted, name, w, err) != 0) {
            free(w);
            return mu_errf(err, MU_E_NOMEM, "out of memory");
        }
    }
    w->admin = admin;
    w->grace_s = grace_s;
    return 0;
}

const struct d_wanted *d_wanted_get(const struct musterd *d, const char *name)
{
    return d->wanted ? mu_map_get(d->wanted, name) : NULL;
}

/* One field of <prefix>node:wanted; a value that does not parse is logged and left out. */
static int wanted_load_one(
    void *ctx, const char *field, const char *value, size_t len, struct mu_err *err)
{
    struct musterd *d = ctx;
    struct mu_err perr;
    char state[16];
    int grace_s;

    (void)len;
    if (queue_wanted_parse(value, state, sizeof(state), &grace_s, &perr) != 0) {
        mu_log(MU_LOG_WARN, "sched", "node=%s %s; left out", field, perr.msg);
        return 0;
    }
    return d_wanted_set(d, field,
                        strcmp(state, "draining") == 0 ? SCHED_NODE_DRAINING : SCHED_NODE_CORDONED,
                        grace_s, err);
}

int d_nodes_recover(struct musterd *d, struct mu_err *err)
{
    cJSON *nodes = NULL;
    const cJSON *node;
    int kept = 0;

    if (d_topo_load(d, err) != 0 || queue_status_read(d->q, QUEUE_K_NODES, &nodes, err) != 0)
        return -1;
    if (queue_hash_each(d->q, QUEUE_K_NODE_WANTED, wanted_load_one, d, &kept, err) != 0) {
        cJSON_Delete(nodes);
        return -1;
    }
    if (kept > 0)
        mu_log(MU_LOG_INFO, "sched",
               "%d node(s) cordoned or drained by the operator: applied as each registers", kept);
    d->expected_nodes = mu_map_new();
    if (!d->expected_nodes) {
        cJSON_Delete(nodes);
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    }
    cJSON_ArrayForEach(node, nodes)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(node, "name");
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(node, "state");
        const cJSON *slices = cJSON_GetObjectItemCaseSensitive(node, "slices");
        const cJSON *profs = cJSON_IsObject(slices) ? slices : NULL;
        const cJSON *prof;
        /* The MIG profiles the last run's nodes had are profiles of this cluster: jobs may ask
         * for them before those nodes are back (d_intake.c's check). */
        cJSON_ArrayForEach(prof, profs)
        {
            struct mu_err perr;
            if (prof->string && mu_mig_profile_is_valid(prof->string)
                && sched_cluster_profile_intern(d->cluster, prof->string, &perr) < 0)
                mu_log(MU_LOG_WARN, "sched", "MIG profile %s not kept until its nodes return: %s",
                       prof->string, perr.msg);
        }
        /* Lost or down (its worker said BYE): not expected back. */
        if (!cJSON_IsString(name)
            || (cJSON_IsString(state)
                && (strcmp(state->valuestring, "lost") == 0
                    || strcmp(state->valuestring, "down") == 0)))
            continue;
        if (mu_map_put(d->expected_nodes, name->valuestring, d, err) != 0) {
            cJSON_Delete(nodes);
            return -1;
        }
    }
    cJSON_Delete(nodes);
    if (mu_map_count(d->expected_nodes) > 0) {
        d->regrace_until_ms = mu_time_mono_ms() + (uint64_t)d->cfg.node_lost_after_s * 1000u;
        mu_log(MU_LOG_INFO, "sched",
               "waiting up to %d s for the %zu node(s) of the last run before using fallback "
               "capacity",
               d->cfg.node_lost_after_s, mu_map_count(d->expected_nodes));
    }
    return 0;
}

bool d_nodes_regrace(struct musterd *d, uint64_t now_mono_ms)
{
    if (!d->regrace_until_ms)
        return false;
    if (now_mono_ms < d->regrace_until_ms)
        return true;
    mu_log(MU_LOG_INFO, "sched", "%zu node(s) of the last run did not come back in %d s",
           mu_map_count(d->expected_nodes), d->cfg.node_lost_after_s);
    d->regrace_until_ms = 0;
    return false;
}

void d_nodes_free(struct musterd *d)
{
    size_t pos = 0;
    void *w;

    d_topo_free(d);
    mu_map_free(d->expected_nodes);
    d->expected_nodes = NULL;
    while ((w = mu_map_next(d->wanted, &pos)) != NULL)
        free(w);
    mu_map_free(d->wanted);
    d->wanted = NULL;
    free(d->nodes);
    d->nodes = NULL;
    d->nnodes = 0;
    d->cap_nodes = 0;
}
