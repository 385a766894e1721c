/* SPDX-License-Identifier: MIT */
/*
 * musterctl keygen [--out PREFIX]: makes a ZeroMQ CURVE key pair for musterd or a worker
 * (protocol/README.md "CURVE", docs/security.md).  With --out the secret key goes to PREFIX.key
 * (mode 0600, never overwritten) and the public key to PREFIX.pub, in the formats that
 * musterd --curve-secret-key / muster-worker --curve-key and --curve-server-key read; the public
 * key is printed so that it can go straight into musterd's --curve-allow file.  Without --out
 * both keys go to stdout, the secret one on a line that says so.  Needs no Redis.
 */
#include "cli/internal.h"

#include <string.h>

#include "protocol/proto.h"

#include "common/mu_banned.h"

ctl_handler_fn ctl_cmd_keygen;

/* Prints {"public_key": ..., ["secret_key": ...,] ["secret_file"/"public_file": ...]}. */
static int print_json(const struct ctl *ctl,
                      const struct proto_curve *keys,
                      const char *secret_path,
                      const char *public_path)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddStringToObject(o, "public_key", keys->public_key);
    int rc;

    if (ok && secret_path) {
        ok = cJSON_AddStringToObject(o, "secret_file", secret_path)
             && cJSON_AddStringToObject(o, "public_file", public_path);
    } else if (ok) {
        ok = cJSON_AddStringToObject(o, "secret_key", keys->secret_key) != NULL;
    }
    rc = ok ? ctl_json_print(ctl, o) : ctl_fail(ctl, "out of memory");
    cJSON_Delete(o);
    return rc;
}

int ctl_cmd_keygen(struct ctl *ctl, const struct ctl_args *args)
{
    const char *prefix = ctl_args_get(ctl, args, "out");
    struct proto_curve keys;
    struct mu_err err;
    char secret_path[PROTO_PATH_MAX];
    char public_path[PROTO_PATH_MAX];
    int rc;

    if (prefix && !prefix[0])
        return ctl_usage(ctl, "--out: expected a file prefix, e.g. /etc/muster/musterd");
    if (prefix
        && (mu_snprintf(secret_path, sizeof(secret_path), "%s.key", prefix) != 0
            || mu_snprintf(public_path, sizeof(public_path), "%s.pub", prefix) != 0))
        return ctl_usage(ctl, "--out: prefix longer than %d characters", PROTO_PATH_MAX - 5);
    if (proto_curve_keypair(&keys, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (prefix && proto_curve_save(&keys, secret_path, public_path, &err) != 0) {
        rc = ctl_fail(ctl, "%s", err.msg);
        goto out;
    }
    if (ctl->output == CTL_OUT_JSON) {
        rc = print_json(ctl, &keys, prefix ? secret_path : NULL, prefix ? public_path : NULL);
        goto out;
    }
    if (prefix) {
        (void)printf("%s\n", keys.public_key);
        (void)fprintf(stderr,
                      "musterctl: keygen: wrote %s (secret, mode 0600) and %s (public); the "
                      "public key is above\n",
                      secret_path, public_path);
    } else {
        (void)printf("public-key: %s\n", keys.public_key);
        (void)printf("secret-key: %s\n", keys.secret_key);
        (void)printf("# the secret-key line is SECRET: keep it in a file of mode 0600, never in "
                     "an allow-list\n");
    }
    rc = CTL_EXIT_OK;
out:
    memset(&keys, 0, sizeof(keys));
    return rc;
}
