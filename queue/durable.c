/* SPDX-License-Identifier: MIT */
/*
 * What an operator says is never dropped (issue #40).  A control entry is added only while a
 * musterd leads (<prefix>leader is held), checked in the same script that adds it, so a request
 * nobody can take is refused at once instead of waiting in the stream to be applied minutes
 * later; an entry whose asker waits for the answer carries timeout_ms, and musterd drops it once
 * Redis's clock is past the entry id's milliseconds plus that (both Redis time, never a host's).
 * cordon, drain and uncordon are kept in <prefix>node:wanted (field the node, value
 * {"state","grace_s"}), written in the same script: the node's wanted state outlives musterd and
 * the node's absence, and musterd applies it whenever the node registers.
 */
#include "queue/internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

/* KEYS leader, control[, node:wanted, nodes]; ARGV cmd, arg, grace_s, timeout_ms, wanted
 * value, mode ("" no node record, "set", "del": then all four keys), own ("1": control is the
 * writer's own stream, added to only when it exists).  Empty ARGV are fields left out.  A
 * command that records no node names two keys only, so that a user's ACL need not name the
 * node keys at all. */
static const char post_lua[] =
    "if ARGV[6] ~= '' then\n"
    "  if redis.call('HEXISTS', KEYS[4], ARGV[2]) == 0\n"
    "     and redis.call('HEXISTS', KEYS[3], ARGV[2]) == 0 then\n"
    "    return {'nonode'}\n"
    "  end\n"
    "  if ARGV[6] == 'set' then\n"
    "    redis.call('HSET', KEYS[3], ARGV[2], ARGV[5])\n"
    "  else\n"
    "    redis.call('HDEL', KEYS[3], ARGV[2])\n"
    "  end\n"
    "end\n"
    "if redis.call('EXISTS', KEYS[1]) == 0 then\n"
    "  if ARGV[6] ~= '' then return {'recorded'} end\n"
    "  return {'noleader'}\n"
    "end\n"
    "local f = {'cmd', ARGV[1]}\n"
    "if ARGV[2] ~= '' then f[#f + 1] = 'arg'; f[#f + 1] = ARGV[2] end\n"
    "if ARGV[3] ~= '' then f[#f + 1] = 'grace_s'; f[#f + 1] = ARGV[3] end\n"
    "if ARGV[4] ~= '' then f[#f + 1] = 'timeout_ms'; f[#f + 1] = ARGV[4] end\n"
    "if ARGV[7] == '1' then\n"
    "  local id = redis.call('XADD', KEYS[2], 'NOMKSTREAM', '*', unpack(f))\n"
    "  if not id then return {'nostream'} end\n"
    "  return {'posted', id}\n"
    "end\n"
    "return {'posted', redis.call('XADD', KEYS[2], '*', unpack(f))}\n";

const char *queue_wanted_state(const char *cmd)
{
    if (strcmp(cmd, "cordon") == 0)
        return "cordoned";
    if (strcmp(cmd, "drain") == 0)
        return "draining";
    return NULL;
}

int queue_wanted_format(const char *state, int grace_s, char *buf, size_t size)
{
    if (grace_s >= 0)
        return mu_snprintf(buf, size, "{\"state\":\"%s\",\"grace_s\":%d}", state, grace_s);
    return mu_snprintf(buf, size, "{\"state\":\"%s\"}", state);
}

int queue_wanted_parse(
    const char *value, char *state, size_t state_size, int *grace_s, struct mu_err *err)
{
    cJSON *o = cJSON_Parse(value);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "state");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "grace_s");
    int rc = -1;

    *grace_s = -1;
    if (!cJSON_IsString(st)
        || (strcmp(st->valuestring, "cordoned") != 0 && strcmp(st->valuestring, "draining") != 0)) {
        mu_errf(err, MU_E_PARSE, "node:wanted: expected {\"state\":\"cordoned\"|\"draining\"}");
        goto out;
    }
    if (g && (!cJSON_IsNumber(g) || g->valuedouble < 0 || g->valuedouble > 86400)) {
        mu_errf(err, MU_E_PARSE, "node:wanted: grace_s: expected 0..86400");
        goto out;
    }
    mu_strlcpy(state, st->valuestring, state_size);
    *grace_s = g ? (int)g->valuedouble : -1;
    rc = 0;
out:
    cJSON_Delete(o);
    return rc;
}

struct post_call {
    const struct queue_control_req *c;
    char grace[16];
    char timeout[24];
    char own_timeout[24];
    char wanted[64];
    const char *mode;
};

static void *eval_post(struct queue *q, const char *stream, bool own, void *arg, struct mu_err *err)
{
    const struct post_call *p = arg;
    const char *timeout = own && !p->timeout[0] ? p->own_timeout : p->timeout;

    if (p->mode[0])
        return queue_command(q, err,
                             "EVAL %s 4 %s" QUEUE_K_LEADER " %s %s" QUEUE_K_NODE_WANTED
                             " %s" QUEUE_K_NODES " %s %s %s %s %s %s %s",
                             post_lua, q->prefix, stream, q->prefix, q->prefix, p->c->cmd,
                             p->c->arg ? p->c->arg : "", p->grace, timeout, p->wanted, p->mode,
                             own ? "1" : "");
    return queue_command(q, err, "EVAL %s 2 %s" QUEUE_K_LEADER " %s %s %s %s %s %s %s %s", post_lua,
                         q->prefix, stream, p->c->cmd, p->c->arg ? p->c->arg : "", p->grace,
                         timeout, "", "", own ? "1" : "");
}

int queue_control_post(struct queue *q,
                       const struct queue_control_req *c,
                       enum queue_post *result,
                       bool *own,
                       char *id,
                       size_t id_size,
                       struct mu_err *err)
{
    struct post_call p = { .c = c, .mode = "" };
    bool mine = false;
    redisReply *r;
    int rc = -1;

    *result = QUEUE_POST_NO_LEADER;
    if (own)
        *own = false;
    if (id_size)
        id[0] = '\0';
    if (c->grace_s >= 0)
        (void)mu_snprintf(p.grace, sizeof(p.grace), "%d", c->grace_s);
    if (c->timeout_ms > 0)
        (void)mu_snprintf(p.timeout, sizeof(p.timeout), "%d", c->timeout_ms);
    if (c->own_timeout_ms > 0)
        (void)mu_snprintf(p.own_timeout, sizeof(p.own_timeout), "%d", c->own_timeout_ms);
    if (c->node_wanted) {
        const char *state = queue_wanted_state(c->cmd);
        p.mode = state ? "set" : "del";
        if (state && queue_wanted_format(state, c->grace_s, p.wanted, sizeof(p.wanted)) != 0)
            return mu_errf(err, MU_E_INVAL, "control %s: value does not fit", c->cmd);
    }
    r = queue_owned_write(q, QUEUE_STREAM_CONTROL, eval_post, &p, &mine, err);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1
        || r->element[0]->type != REDIS_REPLY_STRING) {
        mu_errf(err, MU_E_REDIS, "XADD %s" QUEUE_K_CONTROL ": unexpected reply", q->prefix);
        goto out;
    }
    if (strcmp(r->element[0]->str, "posted") == 0) {
        if (r->elements != 2 || r->element[1]->type != REDIS_REPLY_STRING) {
            mu_errf(err, MU_E_REDIS, "XADD %s" QUEUE_K_CONTROL ": unexpected reply", q->prefix);
            goto out;
        }
        mu_strlcpy(id, r->element[1]->str, id_size);
        *result = QUEUE_POST_SENT;
        if (own)
            *own = mine;
    } else if (strcmp(r->element[0]->str, "recorded") == 0) {
        *result = QUEUE_POST_RECORDED;
    } else if (strcmp(r->element[0]->str, "nonode") == 0) {
        *result = QUEUE_POST_NO_NODE;
    }
    rc = 0;
out:
    queue_reply_free(r);
    return rc;
}

int queue_time_ms(struct queue *q, uint64_t *now_ms, struct mu_err *err)
{
    redisReply *r = queue_command(q, err, "TIME");
    int64_t s;
    int64_t us;
    int rc = -1;

    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2
        && r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING
        && mu_parse_i64(r->element[0]->str, 0, INT64_C(1) << 40, &s, NULL) == 0
        && mu_parse_i64(r->element[1]->str, 0, 999999, &us, NULL) == 0) {
        *now_ms = (uint64_t)s * 1000u + (uint64_t)us / 1000u;
        rc = 0;
    } else {
        mu_errf(err, MU_E_REDIS, "TIME: unexpected reply");
    }
    queue_reply_free(r);
    return rc;
}

bool queue_control_expired(const char *entry_id, uint64_t timeout_ms, uint64_t now_ms)
{
    char ms[24];
    const char *dash = strchr(entry_id, '-');
    size_t len = dash ? (size_t)(dash - entry_id) : strlen(entry_id);
    int64_t at;

    if (timeout_ms == 0 || len == 0 || len >= sizeof(ms))
        return false;
    memcpy(ms, entry_id, len);
    ms[len] = '\0';
    if (mu_parse_i64(ms, 0, INT64_MAX, &at, NULL) != 0)
        return false;
    return now_ms > (uint64_t)at + timeout_ms;
}
