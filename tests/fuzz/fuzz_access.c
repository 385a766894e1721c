/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for access_parse (issue #46): any bytes give the rules or NULL with a message,
 * never a crash or a leak.  Rules that parse are then asked every kind of decision, for every
 * known user and a few fixed strangers, so that a half-resolved user table would show up under
 * the sanitizers; and a rule set must equal itself.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "access/access.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const strangers[] = { "", "alice", "bob", "ops", "pipeline", "zzz" };
static const char *const cmds[] = { "cancel", "why", "drain", "reload", "bogus" };

static void decide_as(const struct access *a, const char *who, const char *other)
{
    struct access_submit s = { who, other, "default", 50, false };
    struct access_caps caps;
    char user[ACCESS_NAME_MAX];
    struct mu_err err;

    for (int p = 0; p < 2; p++) {
        s.preemptible = p != 0;
        s.user = p ? other : "";
        mu_err_clear(&err);
        if (access_submit_check(a, &s, user, sizeof(user), &err) == 0) {
            if (access_identity(a) == ACCESS_REDIS_ACL && !access_is_known(a, user))
                abort();
        } else if (err.msg[0] == '\0' || err.code != MU_E_STATE) {
            abort();
        }
    }
    access_caps(a, who, &caps);
    if (caps.max_running_gpus < 0 || caps.max_pending_jobs < 0
        || (caps.max_running_gpus > 0) != (caps.running_rule[0] != '\0')
        || (caps.max_pending_jobs > 0) != (caps.pending_rule[0] != '\0'))
        abort();
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        mu_err_clear(&err);
        if (access_control_check(a, who, cmds[i], other, "1-0", &err) != 0
            && (err.msg[0] == '\0' || access_is_operator(a, who)))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mu_err err;
    struct access *a;
    int n;

    mu_err_clear(&err);
    a = access_parse((const char *)data, size, &err);
    if (!a) {
        if (err.msg[0] == '\0')
            abort();
        return 0;
    }
    if (!access_equal(a, a))
        abort();
    n = access_nusers(a);
    if (n < 0 || n > ACCESS_USERS_MAX || access_user(a, n) != NULL)
        abort();
    for (int i = 0; i < n; i++) {
        const char *u = access_user(a, i);
        if (!access_is_known(a, u) || (i > 0 && strcmp(access_user(a, i - 1), u) >= 0))
            abort();
        if (i < 16)
            decide_as(a, u, access_user(a, (i + 1) % n));
    }
    for (size_t i = 0; i < sizeof(strangers) / sizeof(strangers[0]); i++)
        decide_as(a, strangers[i], strangers[(i + 1) % (sizeof(strangers) / sizeof(strangers[0]))]);
    access_free(a);
    return 0;
}
