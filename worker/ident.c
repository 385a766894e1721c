/* SPDX-License-Identifier: MIT */
/*
 * Whom a task runs as (issue #5, docs/security.md).  A worker that is not root runs every task as
 * itself.  A root worker runs tasks as --run-as USER, or as the job's user (the BIND's typed
 * job_user field) when --allow-user lists it, and as root only with --allow-root; anything else
 * is refused with a BIND_ACK error that says which flag would allow it, the node's fault (another
 * node may allow it).  Elsewhere a spec's "user" is a label for people.  The shim switches ids
 * in the task's child right before exec (spawn.c); this file only decides.
 */
#include "worker/internal.h"

#include <errno.h>
#include <pwd.h>
#include <string.h>
#include <unistd.h>

#include "common/mu_banned.h"

/* Looks a user up; MU_E_NOTFOUND for an unknown one. */
static int ident_lookup(const char *name, struct wrk_ident *out, struct mu_err *err)
{
    struct passwd *pw;

    if (!mu_name_is_valid(name, sizeof(out->name) - 1))
        return mu_errf(err, MU_E_INVAL, "user '%s' is not a valid user name", name);
    errno = 0;
    pw = getpwnam(name);
    if (!pw) {
        if (errno != 0 && errno != ENOENT && errno != ESRCH)
            return mu_errf(err, MU_E_SYS, "cannot look up user '%s': %s", name, strerror(errno));
        return mu_errf(err, MU_E_NOTFOUND, "no such user '%s'", name);
    }
    mu_strlcpy(out->name, pw->pw_name, sizeof(out->name));
    mu_strlcpy(out->home, pw->pw_dir ? pw->pw_dir : "/", sizeof(out->home));
    out->uid = pw->pw_uid;
    out->gid = pw->pw_gid;
    return 0;
}

static bool user_allowed(const struct wrk_agent *a, const char *name)
{
    if (a->run_as.name[0] && strcmp(a->run_as.name, name) == 0)
        return true;
    for (int i = 0; i < a->nallow; i++) {
        if (strcmp(a->allow[i], name) == 0)
            return true;
    }
    return false;
}

/*
 * Who a BIND's task runs as: *out filled (name "" = the worker's own ids).  A worker that is
 * not root runs everything as itself.  The job's own user (the BIND's job_user) counts only on a
 * worker given --allow-user: elsewhere a spec's "user" is a label for people, and the task runs
 * as --run-as (or as root with --allow-root).  Refusals are BIND_ACK errors the job will show.
 */
int wrk_ident_for_bind(const struct wrk_agent *a,
                       const struct proto_msg *bind,
                       struct wrk_ident *out,
                       struct mu_err *err)
{
    const char *job_user = bind->job_user;

    memset(out, 0, sizeof(*out));
    if (!a->is_root)
        return 0;
    if (job_user && job_user[0] && a->nallow > 0) {
        if (!user_allowed(a, job_user))
            return mu_errf(err, MU_E_INVAL,
                           "job user '%s' is not allowed on node %s; hint: start muster-worker "
                           "with --allow-user %s",
                           job_user, a->node, job_user);
        if (ident_lookup(job_user, out, err) != 0)
            return -1;
        if (out->uid == 0 && !a->allow_root)
            return mu_errf(err, MU_E_INVAL,
                           "job user '%s' is root; node %s runs no task as root without "
                           "--allow-root",
                           job_user, a->node);
        return 0;
    }
    if (a->run_as.name[0]) {
        *out = a->run_as;
        return 0;
    }
    if (a->allow_root)
        return 0;
    return mu_errf(err, MU_E_INVAL,
                   "refusing to run a task as root on node %s; hint: start muster-worker with "
                   "--run-as USER (or --allow-root)",
                   a->node);
}

/* --run-as, --allow-user, --allow-root: root only. */
int wrk_ident_setup(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    a->is_root = geteuid() == 0;
    a->allow_root = cfg->allow_root;
    if (!a->is_root
        && ((cfg->run_as && cfg->run_as[0]) || cfg->nallow_users > 0 || cfg->allow_root))
        return mu_errf(err, MU_E_USAGE,
                       "--run-as, --allow-user and --allow-root need a worker running as root; "
                       "this one runs tasks as its own user (uid %d)",
                       (int)geteuid());
    if (cfg->nallow_users < 0 || cfg->nallow_users > WRK_MAX_ALLOW_USERS)
        return mu_errf(err, MU_E_RANGE, "--allow-user: at most %d users", WRK_MAX_ALLOW_USERS);
    for (int i = 0; i < cfg->nallow_users; i++) {
        const char *u = cfg->allow_users[i];
        if (!u || !mu_name_is_valid(u, sizeof(a->allow[0]) - 1))
            return mu_errf(err, MU_E_INVAL, "--allow-user '%s': not a valid user name", u ? u : "");
        mu_strlcpy(a->allow[a->nallow++], u, sizeof(a->allow[0]));
    }
    if (cfg->run_as && cfg->run_as[0]) {
        if (ident_lookup(cfg->run_as, &a->run_as, err) != 0) {
            mu_err_prefix(err, "--run-as: ");
            return -1;
        }
        if (a->run_as.uid == 0 && !a->allow_root)
            return mu_errf(err, MU_E_USAGE, "--run-as '%s' is root: add --allow-root to mean it",
                           cfg->run_as);
    }
    if (a->is_root && !a->run_as.name[0] && !a->allow_root)
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s running as root without --run-as or --allow-root: tasks are refused%s",
               a->node, a->nallow > 0 ? " unless --allow-user lists the job's user" : "");
    else if (a->is_root)
        mu_log(MU_LOG_INFO, WRK_MOD, "node=%s running as root: tasks run as %s%s%s", a->node,
               a->run_as.name[0] ? a->run_as.name : "root",
               a->nallow > 0 ? ", or the job's user when --allow-user lists it" : "",
               a->allow_root && a->run_as.name[0] ? " (root allowed)" : "");
    return 0;
}
