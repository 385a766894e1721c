/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for access/ (issue #46): the merge rules of access.h on one cluster's worth of
 * users and groups, every decision with the rule its refusal names, and a bad-input table whose
 * messages must start with the key path to fix.  Documents are written with ' for " (q()).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "access/access.h"

#include "common/mu_banned.h"

/* s with every ' turned into ", in a buffer that lives until the next call. */
static const char *q(const char *s)
{
    static char buf[4096];
    size_t n = strlen(s);

    assert_true(n < sizeof(buf));
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(s[i] == '\'' ? '"' : s[i]);
    buf[n] = '\0';
    return buf;
}

static struct access *parse_ok(const char *json)
{
    struct mu_err err;
    struct access *a;

    mu_err_clear(&err);
    a = access_parse(json, strlen(json), &err);
    if (!a)
        fail_msg("refused: %s\n%s", err.msg, json);
    return a;
}

static void assert_prefix(const char *msg, const char *prefix)
{
    if (strncmp(msg, prefix, strlen(prefix)) != 0)
        fail_msg("message: \"%s\"\nexpected prefix: \"%s\"", msg, prefix);
}

/* The cluster of most tests. */
static const char cluster[] =
    "{'redis':'redis://127.0.0.1:6379','access':{'identity':'redis-acl',"
    "'operators':['ops','@admins'],"
    "'defaults':{'queues':['default'],'max_priority':10,'max_pending_jobs':100},"
    "'groups':{"
    "'vision':{'members':['alice','bob'],'queues':['research','default'],'max_priority':50,"
    "'max_running_gpus':16,'max_pending_jobs':0},"
    "'nlp':{'members':['alice','carol'],'queues':['nlp'],'max_priority':80,"
    "'non_preemptible':true,'max_running_gpus':8},"
    "'admins':{'members':['root1']}},"
    "'users':{'alice':{'max_running_gpus':4},"
    "'bob':{'max_priority':200,'queues':['*']},"
    "'pipeline':{'submit_for':['dave','@nlp'],'queues':['ci']},"
    "'svc':{'submit_for':['*']},"
    "'dave':{},"
    "'erin':{'non_preemptible':false,'max_pending_jobs':5}}}}";

static struct access *cluster_new(void)
{
    return parse_ok(q(cluster));
}

/* access_submit_check on one submission; out gets the user, err the refusal. */
static int submit(const struct access *a,
                  const char *owner,
                  const char *user,
                  const char *queue,
                  int64_t priority,
                  bool preemptible,
                  char *out,
                  struct mu_err *err)
{
    struct access_submit s = { owner, user, queue, priority, preemptible };

    mu_err_clear(err);
    memset(out, 'x', ACCESS_NAME_MAX);
    return access_submit_check(a, &s, out, ACCESS_NAME_MAX, err);
}

static void submit_ok(const struct access *a,
                      const char *owner,
                      const char *user,
                      const char *queue,
                      int64_t priority,
                      bool preemptible,
                      const char *want)
{
    char out[ACCESS_NAME_MAX];
    struct mu_err err;

    if (submit(a, owner, user, queue, priority, preemptible, out, &err) != 0)
        fail_msg("%s as '%s' to %s refused: %s", owner, user, queue, err.msg);
    assert_string_equal(out, want);
}

static void submit_refused(const struct access *a,
                           const char *owner,
                           const char *user,
                           const char *queue,
                           int64_t priority,
                           bool preemptible,
                           const char *msg)
{
    char out[ACCESS_NAME_MAX];
    struct mu_err err;

    if (submit(a, owner, user, queue, priority, preemptible, out, &err) != -1)
        fail_msg("%s as '%s' to %s allowed as %s", owner, user, queue, out);
    assert_int_equal(err.code, MU_E_STATE);
    assert_string_equal(err.msg, msg);
}

static void test_defaults(void **state)
{
    struct access *a = access_new_default();
    struct access *b = parse_ok(q("{'redis':'redis://h'}"));
    struct access *c = parse_ok(q("{'access':{}}"));
    struct access *d = parse_ok(q("{'access':{'identity':'single-user'}}"));
    struct access_caps caps;
    (void)state;

    assert_non_null(a);
    assert_int_equal(access_identity(a), ACCESS_SINGLE_USER);
    assert_string_equal(access_identity_name(ACCESS_SINGLE_USER), "single-user");
    assert_string_equal(access_identity_name(ACCESS_REDIS_ACL), "redis-acl");
    assert_int_equal(access_nusers(a), 0);
    assert_null(access_user(a, 0));
    assert_false(access_is_known(a, "alice"));
    assert_false(access_is_operator(a, "alice"));
    access_caps(a, "alice", &caps);
    assert_int_equal(caps.max_running_gpus, 0);
    assert_int_equal(caps.max_pending_jobs, 0);
    assert_string_equal(caps.running_rule, "");
    assert_true(access_equal(a, b));
    assert_true(access_equal(a, c));
    assert_true(access_equal(a, d));
    access_free(a);
    access_free(b);
    access_free(c);
    access_free(d);
    access_free(NULL);
}

static void test_single_user(void **state)
{
    struct access *a = access_new_default();
    struct mu_err err;
    (void)state;

    submit_ok(a, "", "bob", "prod", 1000000, false, "bob");
    submit_ok(a, "", "", "default", 0, true, "");
    submit_ok(a, "", NULL, "default", 0, true, "");
    assert_int_equal(access_control_check(a, "", "cancel", "bob", "1-0", &err), 0);
    assert_int_equal(access_control_check(a, "", "drain", NULL, NULL, &err), 0);
    access_free(a);
}

static void test_identity(void **state)
{
    struct access *a = cluster_new();
    (void)state;

    assert_int_equal(access_identity(a), ACCESS_REDIS_ACL);
    submit_ok(a, "alice", "", "research", 0, true, "alice");
    submit_ok(a, "alice", NULL, "research", 0, true, "alice");
    submit_ok(a, "alice", "alice", "research", 0, true, "alice");
    submit_refused(a, "alice", "bob", "research", 0, true,
                   "user 'bob' is not you (alice): identity comes from your Redis user "
                   "(access.identity)");
    submit_refused(a, "zed", "", "default", 0, true,
                   "user 'zed' is not known here: nobody may act as a user that is not in "
                   "access.users, a group's members or access.operators (access.users)");
    submit_refused(a, "", "", "default", 0, true,
                   "user '' is not known here: nobody may act as a user that is not in "
                   "access.users, a group's members or access.operators (access.users)");
    access_free(a);
}

static void test_submit_for(void **state)
{
    struct access *a = cluster_new();
    (void)state;

    /* By name, by @group (the user's own limits then apply), by "*". */
    submit_ok(a, "pipeline", "dave", "default", 10, true, "dave");
    submit_ok(a, "pipeline", "carol", "nlp", 80, false, "carol");
    submit_ok(a, "pipeline", "alice", "research", 0, true, "alice");
    submit_ok(a, "pipeline", "", "ci", 0, true, "pipeline");
    submit_refused(a, "pipeline", "carol", "ci", 0, true,
                   "queue 'ci' is not open to carol (access.groups.nlp.queues: nlp)");
    submit_refused(a, "pipeline", "bob", "default", 0, true,
                   "pipeline may not submit for bob (access.users.pipeline.submit_for: dave, "
                   "@nlp)");
    submit_ok(a, "svc", "bob", "anything", 200, true, "bob");
    submit_ok(a, "svc", "ops", "default", 0, true, "ops");
    submit_refused(a, "svc", "zed", "default", 0, true,
                   "user 'zed' is not known here: nobody may act as a user that is not in "
                   "access.users, a group's members or access.operators (access.users)");
    access_free(a);
}

static void test_queues(void **state)
{
    struct access *a = cluster_new();
    struct access *b = parse_ok(q("{'access':{'identity':'redis-acl','users':{'x':{}}}}"));
    (void)state;

    /* Own list, "*", union of groups, defaults, built-in. */
    submit_ok(a, "pipeline", "", "ci", 0, true, "pipeline");
    submit_ok(a, "bob", "", "anything", 0, true, "bob");
    submit_ok(a, "alice", "", "research", 0, true, "alice");
    submit_ok(a, "alice", "", "default", 0, true, "alice");
    submit_ok(a, "alice", "", "nlp", 0, true, "alice");
    submit_ok(a, "dave", "", "default", 0, true, "dave");
    submit_ok(b, "x", "", "whatever", 0, true, "x");
    submit_refused(a, "alice", "", "prod", 0, true,
                   "queue 'prod' is not open to alice (access.groups.nlp.queues: nlp; "
                   "access.groups.vision.queues: research, default)");
    submit_refused(a, "dave", "", "research", 0, true,
                   "queue 'research' is not open to dave (access.defaults.queues: default)");
    submit_refused(a, "pipeline", "", "default", 0, true,
                   "queue 'default' is not open to pipeline (access.users.pipeline.queues: ci)");
    /* A group's members alone do not open its queues to someone outside. */
    submit_refused(a, "carol", "", "research", 0, true,
                   "queue 'research' is not open to carol (access.groups.nlp.queues: nlp)");
    access_free(a);
    access_free(b);

    a = parse_ok(q("{'access':{'identity':'redis-acl','users':{'x':{'queues':[]}}}}"));
    submit_refused(a, "x", "", "default", 0, true,
                   "queue 'default' is not open to x (access.users.x.queues: none)");
    access_free(a);
}

static void test_priority(void **state)
{
    struct access *a = cluster_new();
    struct access *b = parse_ok(q("{'access':{'identity':'redis-acl','users':{'x':{}}}}"));
    (void)state;

    submit_ok(a, "bob", "", "q", 200, true, "bob");
    submit_refused(a, "bob", "", "q", 201, true,
                   "priority 201 is above bob's highest, 200 (access.users.bob.max_priority)");
    submit_ok(a, "alice", "", "nlp", 80, true, "alice"); /* the largest among her groups */
    submit_refused(a, "alice", "", "nlp", 81, true,
                   "priority 81 is above alice's highest, 80 (access.groups.nlp.max_priority)");
    submit_ok(a, "dave", "", "default", 10, true, "dave");
    submit_ok(a, "dave", "", "default", -5, true, "dave");
    submit_refused(a, "dave", "", "default", 11, true,
                   "priority 11 is above dave's highest, 10 (access.defaults.max_priority)");
    submit_ok(b, "x", "", "q", 0, true, "x");
    submit_refused(b, "x", "", "q", 1, true,
                   "priority 1 is above x's highest, 0 (access.defaults.max_priority unset: "
                   "built-in default)");
    access_free(a);
    access_free(b);
}

static void test_non_preemptible(void **state)
{
    struct access *a = cluster_new();
    (void)state;

    submit_ok(a, "alice", "", "nlp", 0, false, "alice"); /* from nlp */
    submit_ok(a, "carol", "", "nlp", 0, false, "carol");
    submit_refused(a, "bob", "", "q", 0, false,
                   "bob may not submit non-preemptible jobs (access.defaults.non_preemptible "
                   "unset: built-in default)");
    submit_refused(a, "erin", "", "default", 0, false,
                   "erin may not submit non-preemptible jobs (access.users.erin.non_preemptible)");
    access_free(a);

    a = parse_ok(q("{'access':{'identity':'redis-acl','defaults':{'non_preemptible':true},"
                   "'groups':{'g':{'members':['y'],'non_preemptible':false}},"
                   "'users':{'x':{}}}}"));
    submit_ok(a, "x", "", "q", 0, false, "x");
    submit_refused(a, "y", "", "q", 0, false,
                   "y may not submit non-preemptible jobs (access.groups.g.non_preemptible)");
    access_free(a);
}

static void assert_caps(const struct access *a,
                        const char *user,
                        int64_t running,
                        const char *running_rule,
                        int64_t pending,
                        const char *pending_rule)
{
    struct access_caps c;

    memset(&c, 0x5a, sizeof(c));
    access_caps(a, user, &c);
    assert_int_equal(c.max_running_gpus, running);
    assert_string_equal(c.running_rule, running_rule);
    assert_int_equal(c.max_pending_jobs, pending);
    assert_string_equal(c.pending_rule, pending_rule);
}

static void test_caps(void **state)
{
    struct access *a = cluster_new();
    (void)state;

    /* The user's own 4 beats the groups' 16 and 8; vision's 0 (no cap) beats the defaults. */
    assert_caps(a, "alice", 4, "access.users.alice.max_running_gpus", 0, "");
    assert_caps(a, "bob", 16, "access.groups.vision.max_running_gpus", 0, "");
    assert_caps(a, "carol", 8, "access.groups.nlp.max_running_gpus", 100,
                "access.defaults.max_pending_jobs");
    assert_caps(a, "dave", 0, "", 100, "access.defaults.max_pending_jobs");
    assert_caps(a, "erin", 0, "", 5, "access.users.erin.max_pending_jobs");
    assert_caps(a, "zed", 0, "", 0, "");
    access_free(a);

    /* Among groups: 0 wins, else the largest. */
    a = parse_ok(q("{'access':{'identity':'redis-acl','groups':{"
                   "'a':{'members':['x','y'],'max_running_gpus':8,'max_pending_jobs':3},"
                   "'b':{'members':['x'],'max_running_gpus':0,'max_pending_jobs':7},"
                   "'c':{'members':['y'],'max_running_gpus':12}}}}"));
    assert_caps(a, "x", 0, "", 7, "access.groups.b.max_pending_jobs");
    assert_caps(a, "y", 12, "access.groups.c.max_running_gpus", 3,
                "access.groups.a.max_pending_jobs");
    /* Groups and no "users" key (found by fuzz_access: a lookup in the absent user table). */
    assert_true(access_is_known(a, "x"));
    submit_ok(a, "x", "", "any", 0, true, "x");
    access_free(a);
}

static void control_refused(const struct access *a,
                            const char *who,
                            const char *cmd,
                            const char *job_user,
                            const char *job_id,
                            const char *msg)
{
    struct mu_err err;

    mu_err_clear(&err);
    assert_int_equal(access_control_check(a, who, cmd, job_user, job_id, &err), -1);
    assert_int_equal(err.code, MU_E_STATE);
    assert_string_equal(err.msg, msg);
}

static void test_control(void **state)
{
    static const char *const node_cmds[] = { "drain",  "cordon",   "uncordon",
                                             "reload", "topology", "forget" };
    struct access *a = cluster_new();
    struct mu_err err;
    (void)state;

    assert_true(access_is_operator(a, "ops"));
    assert_true(access_is_operator(a, "root1"));
    assert_false(access_is_operator(a, "alice"));
    assert_false(access_is_operator(a, "zed"));
    for (size_t i = 0; i < MU_ARRAY_LEN(node_cmds); i++) {
        assert_int_equal(access_control_check(a, "ops", node_cmds[i], NULL, NULL, &err), 0);
        assert_int_equal(access_control_check(a, "root1", node_cmds[i], NULL, NULL, &err), 0);
        assert_int_equal(access_control_check(a, "alice", node_cmds[i], NULL, NULL, &err), -1);
    }
    control_refused(a, "alice", "drain", NULL, NULL,
                    "alice may not drain: operators only (access.operators)");
    assert_int_equal(access_control_check(a, "ops", "cancel", "bob", "1-0", &err), 0);
    assert_int_equal(access_control_check(a, "root1", "hold", "bob", "1-0", &err), 0);
    assert_int_equal(access_control_check(a, "alice", "cancel", "alice", "1-0", &err), 0);
    assert_int_equal(access_control_check(a, "alice", "hold", "alice", "1-0", &err), 0);
    assert_int_equal(access_control_check(a, "alice", "release", "alice", NULL, &err), 0);
    assert_int_equal(access_control_check(a, "alice", "cancel", NULL, "9-0", &err), 0); /* none */
    control_refused(a, "alice", "cancel", "bob", "1700000000000-0",
                    "alice may not cancel bob's job 1700000000000-0: a job's owner or an "
                    "operator may (access.operators)");
    control_refused(a, "alice", "hold", "bob", NULL,
                    "alice may not hold bob's job: a job's owner or an operator may "
                    "(access.operators)");
    control_refused(a, "alice", "release", "", "2-0",
                    "alice may not release a job of no user 2-0: a job's owner or an operator "
                    "may (access.operators)");
    assert_int_equal(access_control_check(a, "alice", "why", "bob", "1-0", &err), 0);
    assert_int_equal(access_control_check(a, "dave", "why", NULL, NULL, &err), 0);
    control_refused(a, "zed", "why", "bob", "1-0",
                    "user 'zed' is not known here: nobody may act as a user that is not in "
                    "access.users, a group's members or access.operators (access.users)");
    control_refused(a, "zed", "cancel", "zed", "1-0",
                    "user 'zed' is not known here: nobody may act as a user that is not in "
                    "access.users, a group's members or access.operators (access.users)");
    access_free(a);
}

static void test_users(void **state)
{
    static const char *const want[] = { "alice", "bob",      "carol", "dave", "erin",
                                        "ops",   "pipeline", "root1", "svc" };
    struct access *a = cluster_new();
    (void)state;

    assert_int_equal(access_nusers(a), (int)MU_ARRAY_LEN(want));
    for (size_t i = 0; i < MU_ARRAY_LEN(want); i++) {
        assert_string_equal(access_user(a, (int)i), want[i]);
        assert_true(access_is_known(a, want[i]));
    }
    assert_null(access_user(a, -1));
    assert_null(access_user(a, (int)MU_ARRAY_LEN(want)));
    assert_false(access_is_known(a, "zed"));
    assert_false(access_is_known(a, ""));
    assert_false(access_is_known(a, NULL));
    assert_false(access_is_known(a, "admins")); /* a group, not a user */
    access_free(a);
}

static void test_equal(void **state)
{
    struct access *a = cluster_new();
    struct access *b = cluster_new();
    struct access *c =
        parse_ok(q("{'access':{'identity':'redis-acl','users':{'b':{'queues':['x']},'a':{}},"
                   "'groups':{'g2':{'members':['b']},'g1':{'members':['a']}}}}"));
    struct access *d =
        parse_ok(q("{'access':{'groups':{'g1':{'members':['a']},'g2':{'members':['b']}},"
                   "'users':{'a':{},'b':{'queues':['x']}},'identity':'redis-acl'}}"));
    struct access *e =
        parse_ok(q("{'access':{'identity':'redis-acl','users':{'b':{'queues':['y']},'a':{}},"
                   "'groups':{'g2':{'members':['b']},'g1':{'members':['a']}}}}"));
    struct access *f = access_new_default();
    (void)state;

    assert_true(access_equal(a, a));
    assert_true(access_equal(a, b));
    assert_true(access_equal(c, d)); /* key order is free */
    assert_false(access_equal(c, e));
    assert_false(access_equal(a, c));
    assert_false(access_equal(a, f));
    assert_false(access_equal(f, a));
    access_free(a);
    access_free(b);
    access_free(c);
    access_free(d);
    access_free(e);
    access_free(f);
}

static const struct {
    const char *json; /* ' for " */
    const char *prefix;
} bad[] = {
    { "", "expected a JSON object, got an empty document" },
    { "{'access':{},}", "not valid JSON near line 1" },
    { "{'access':[]}", "access: expected an object such as" },
    { "{'access':{},'access':{}}", "access: duplicate key" },
    { "{'access':{'identty':'redis-acl'}}",
      "access.identty: unknown key; did you mean 'identity'?" },
    { "{'access':{'identity':'redis-acl','users':{'alice':{'queus':[]}}}}",
      "access.users.alice.queus: unknown key; did you mean 'queues'?" },
    { "{'access':{'identity':'redis-acl','defaults':{'submit_for':[]}}}",
      "access.defaults.submit_for: unknown key" },
    { "{'access':{'identity':'redis-acl','groups':{'g':{'members':[],'submit_for':[]}}}}",
      "access.groups.g.submit_for: unknown key" },
    { "{'access':{'identity':'redis-acl','users':{'u':{'members':[]}}}}",
      "access.users.u.members: unknown key" },
    { "{'access':{'identity':5}}",
      "access.identity: expected \"single-user\" or \"redis-acl\", got 5" },
    { "{'access':{'identity':'acl'}}",
      "access.identity: expected \"single-user\" or \"redis-acl\", got 'acl'" },
    { "{'access':{'identity':'redis-acl','identity':'redis-acl'}}",
      "access.identity: duplicate key" },
    { "{'access':{'users':{'alice':{}}}}",
      "access.users: needs identity \"redis-acl\": in single-user mode nobody is proven" },
    { "{'access':{'identity':'single-user','groups':{'g':{'members':['a']}}}}",
      "access.groups: needs identity \"redis-acl\": in single-user mode nobody is proven" },
    { "{'access':{'defaults':{},'identity':'single-user'}}",
      "access.defaults: needs identity \"redis-acl\": in single-user mode nobody is proven" },
    { "{'access':{'operators':['ops']}}",
      "access.operators: needs identity \"redis-acl\": in single-user mode nobody is proven" },
    { "{'access':{'identity':'redis-acl','groups':{'vision':{'members':['a','b c']}}}}",
      "access.groups.vision.members[1]: expected a user name of 1..63 characters "
      "[A-Za-z0-9._-], got 'b c'" },
    { "{'access':{'identity':'redis-acl','groups':{'vision':{'members':['a:b']}}}}",
      "access.groups.vision.members[0]: expected a user name of 1..63 characters" },
    { "{'access':{'identity':'redis-acl','groups':{'vision':{'members':['']}}}}",
      "access.groups.vision.members[0]: expected a user name of 1..63 characters" },
    { "{'access':{'identity':'redis-acl','operators':["
      "'a123456789a123456789a123456789a123456789a123456789a123456789abcd']}}",
      "access.operators[0]: expected a user name of 1..63 characters [A-Za-z0-9._-], or "
      "\"@group\", got 'a123456789" },
    { "{'access':{'identity':'redis-acl','users':{'al!ce':{}}}}",
      "access.users: expected user names of 1..63 characters [A-Za-z0-9._-] as keys, got "
      "'al!ce'" },
    { "{'access':{'identity':'redis-acl','groups':{'v v':{'members':[]}}}}",
      "access.groups: expected group names of 1..63 characters [A-Za-z0-9._-] as keys, got "
      "'v v'" },
    { "{'access':{'identity':'redis-acl','groups':{'vision':{'members':['a','b','a']}}}}",
      "access.groups.vision.members[2]: duplicate 'a'" },
    { "{'access':{'identity':'redis-acl','operators':['x','y','y','x']}}",
      "access.operators[2]: duplicate 'y'" },
    { "{'access':{'identity':'redis-acl','defaults':{'queues':['a','b','a']}}}",
      "access.defaults.queues[2]: duplicate 'a'" },
    { "{'access':{'identity':'redis-acl','operators':['@nope']}}",
      "access.operators[0]: unknown group 'nope'" },
    { "{'access':{'identity':'redis-acl','users':{'p':{'submit_for':['a','@nope']}}}}",
      "access.users.p.submit_for[1]: unknown group 'nope'" },
    { "{'access':{'identity':'redis-acl','groups':{'a':{'members':['x']},"
      "'b':{'members':['x','@a']}}}}",
      "access.groups.b.members[1]: a group's members are users, not groups ('@a')" },
    { "{'access':{'identity':'redis-acl','groups':{'a':{'members':['@a']}}}}",
      "access.groups.a.members[0]: group 'a' cannot name itself" },
    { "{'access':{'identity':'redis-acl','groups':{'a':{'queues':['q']}}}}",
      "access.groups.a: missing required key 'members'" },
    { "{'access':{'identity':'redis-acl','groups':{'a':{'members':'x'}}}}",
      "access.groups.a.members: expected an array of user names, got 'x'" },
    { "{'access':{'identity':'redis-acl','groups':[]}}",
      "access.groups: expected an object of groups by name, got an empty array" },
    { "{'access':{'identity':'redis-acl','users':{'u':[]}}}",
      "access.users.u: expected an object, got an empty array" },
    { "{'access':{'identity':'redis-acl','users':{'u':{},'u':{}}}}",
      "access.users.u: duplicate key" },
    { "{'access':{'identity':'redis-acl','users':{'u':{'queues':[],'queues':[]}}}}",
      "access.users.u.queues: duplicate key" },
    { "{'access':{'identity':'redis-acl','defaults':{'queues':'x'}}}",
      "access.defaults.queues: expected an array of queue names, or [\"*\"], got 'x'" },
    { "{'access':{'identity':'redis-acl','defaults':{'queues':['a','*']}}}",
      "access.defaults.queues[1]: \"*\" stands for every queue and must be alone" },
    { "{'access':{'identity':'redis-acl','defaults':{'queues':[1]}}}",
      "access.defaults.queues[0]: expected a queue name of 1..63 characters" },
    { "{'access':{'identity':'redis-acl','users':{'p':{'submit_for':['*','a']}}}}",
      "access.users.p.submit_for[0]: \"*\" stands for every user and must be alone" },
    { "{'access':{'identity':'redis-acl','defaults':{'max_priority':1000001}}}",
      "access.defaults.max_priority: expected an integer -1000000..1000000, got 1000001" },
    { "{'access':{'identity':'redis-acl','defaults':{'max_priority':-1000001}}}",
      "access.defaults.max_priority: expected an integer -1000000..1000000, got -1000001" },
    { "{'access':{'identity':'redis-acl','users':{'u':{'max_priority':1.5}}}}",
      "access.users.u.max_priority: expected an integer -1000000..1000000, got 1.5" },
    { "{'access':{'identity':'redis-acl','users':{'u':{'non_preemptible':1}}}}",
      "access.users.u.non_preemptible: expected true or false, got 1" },
    { "{'access':{'identity':'redis-acl','users':{'u':{'max_running_gpus':-1}}}}",
      "access.users.u.max_running_gpus: expected an integer 0..1048576, got -1" },
    { "{'access':{'identity':'redis-acl','users':{'u':{'max_pending_jobs':'5'}}}}",
      "access.users.u.max_pending_jobs: expected an integer 0..100000000, got '5'" },
};

static void test_bad_table(void **state)
{
    struct mu_err err;
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(bad); i++) {
        const char *json = q(bad[i].json);
        struct access *a;
        mu_err_clear(&err);
        a = access_parse(json, strlen(json), &err);
        if (a) {
            access_free(a);
            fail_msg("case %zu accepted: %s", i, json);
        }
        assert_int_equal(err.code, MU_E_CONFIG);
        assert_prefix(err.msg, bad[i].prefix);
    }
}

/* More than ACCESS_USERS_MAX known users, counted across users, members and operators. */
static void test_too_many_users(void **state)
{
    size_t size = (size_t)20 * (ACCESS_USERS_MAX + 10);
    char *json = malloc(size);
    size_t len = 0;
    struct access *a;
    struct mu_err err;
    (void)state;

    assert_non_null(json);
    len += (size_t)snprintf(json, size, "{\"access\":{\"identity\":\"redis-acl\",\"users\":{");
    for (int i = 0; i < ACCESS_USERS_MAX / 2; i++)
        len += (size_t)snprintf(json + len, size - len, "%s\"u%d\":{}", i ? "," : "", i);
    len += (size_t)snprintf(json + len, size - len, "},\"groups\":{\"g\":{\"members\":[\"u0\"");
    for (int i = ACCESS_USERS_MAX / 2; i < ACCESS_USERS_MAX; i++)
        len += (size_t)snprintf(json + len, size - len, ",\"u%d\"", i);
    (void)snprintf(json + len, size - len, "]}},\"operators\":[\"one-more\"]}}");
    len = strlen(json);

    a = access_parse(json, len, &err);
    assert_null(a);
    assert_int_equal(err.code, MU_E_CONFIG);
    assert_string_equal(err.msg, "access: expected at most 10000 known users (users, group "
                                 "members and operators), got 10001");
    /* Exactly ACCESS_USERS_MAX is fine. */
    (void)snprintf(strstr(json, "\"one-more\""), 12, "\"u0\"]}}");
    len = strlen(json);
    a = access_parse(json, len, &err);
    if (!a)
        fail_msg("refused: %s", err.msg);
    assert_int_equal(access_nusers(a), ACCESS_USERS_MAX);
    assert_true(access_is_known(a, "u9999"));
    assert_true(access_is_operator(a, "u0"));
    access_free(a);
    free(json);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),        cmocka_unit_test(test_single_user),
        cmocka_unit_test(test_identity),        cmocka_unit_test(test_submit_for),
        cmocka_unit_test(test_queues),          cmocka_unit_test(test_priority),
        cmocka_unit_test(test_non_preemptible), cmocka_unit_test(test_caps),
        cmocka_unit_test(test_control),         cmocka_unit_test(test_users),
        cmocka_unit_test(test_equal),           cmocka_unit_test(test_bad_table),
        cmocka_unit_test(test_too_many_users),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
