/* SPDX-License-Identifier: MIT */
/*
 * musterctl submit: appends a job spec to the submit stream and prints the job id.
 *
 * Two forms.  `submit FILE|-` submits the exact bytes read (what the user wrote is what `show`
 * returns) after the cheap checks (size cap, one JSON object, no NUL byte), so that a typo fails
 * at once with the byte where parsing stopped.  `submit [OPTIONS] -- COMMAND...` builds the spec
 * with cJSON from flags named after the spec keys (sbatch-like quick jobs); --dry-run prints it.
 * Either way the text is first parsed by musterd's own parser (queue_submit_check, run again by
 * queue_submit): a spec musterd would reject for its content (a reversed --array range, an
 * unknown key, --singleton without --name) fails here with musterd's message, exit 1, and
 * nothing is written.  What needs the cluster config (queues, pools, topology levels, access
 * rules) is still musterd's to check: such a spec becomes a REJECTED job with an error
 * (docs/design.md §3).
 *
 * A spec with an idempotency key goes through queue_submit_idem, one Lua EVAL that either
 * returns the id the key already names or adds the job and claims the key, so two clients
 * retrying the same step cannot make two jobs.
 *
 * --wait reports each state change from the events stream on stderr (read from just before the
 * submission, so a job that runs in a blink still shows PENDING and RUNNING) and decides the
 * end from the job hash, the source of truth (the stream may be trimmed); the exit status is
 * the outcome.
 */
#include "cli/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define CTL_WAIT_POLL_MS    500 /* XREAD BLOCK per round; under the connection's 2 s timeout */
#define CTL_WAIT_MAX_ERRORS 20  /* consecutive Redis failures (10 s) before --wait gives up */
#define CTL_WAIT_NOTE_MS    10000

/* The options that build a spec (everything but --wait and --dry-run). */
static const char *const spec_opts[] = {
    "tasks",
    "gpus-per-task",
    "queue",
    "priority",
    "name",
    "cpus-per-task",
    "memory-mb-per-task",
    "gpu-type",
    "gpu-slice",
    "capacity",
    "env",
    "workdir",
    "time-limit",
    "max-retries",
    "checkpoint-signal",
    "checkpoint-grace",
    "not-preemptible",
    "topology-required",
    "topology-preferred",
    "topology-relax-after",
    "idempotency-key",
    "user",
    "after",
    "singleton",
    "array",
};

/* Describes where parsing stopped as "byte N (line L, column C)". */
static void where_format(const char *text, size_t offset, char *buf, size_t size)
{
    size_t line = 1;
    size_t col = 1;

    for (size_t i = 0; i < offset; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    (void)snprintf(buf, size, "byte %zu (line %zu, column %zu)", offset, line, col);
}

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsBool(v))
        return "a boolean";
    return "null";
}

/* Reads FILE or stdin and checks it is one JSON object; *text_out (free) and *spec_out (Delete)
 * on success.  CTL_EXIT_OK or CTL_EXIT_FAIL (printed). */
static int spec_read(struct ctl *ctl, const char *path, char **text_out, cJSON **spec_out)
{
    const char *label = strcmp(path, "-") == 0 ? "stdin" : path;
    struct mu_err err = { 0 };
    const char *end = NULL;
    char where[96];
    size_t len = 0;
    char *text;
    cJSON *spec;

    /* /dev/stdin reads a pipe, a terminal or a redirected file alike, through the same cap. */
    text = mu_file_read(strcmp(path, "-") == 0 ? "/dev/stdin" : path, QUEUE_SPEC_MAX_BYTES, &len,
                        &err);
    if (!text) {
        if (err.code == MU_E_TOOBIG)
            return ctl_fail(ctl, "%s: larger than %u bytes, the limit for a job spec", label,
                            QUEUE_SPEC_MAX_BYTES);
        return ctl_fail(ctl, "%s", err.msg);
    }
    if (strlen(text) != len) {
        where_format(text, strlen(text), where, sizeof(where));
        free(text);
        return ctl_fail(ctl, "%s: not valid JSON near %s: NUL byte", label, where);
    }
    spec = cJSON_ParseWithOpts(text, &end, 1);
    if (!spec) {
        size_t offset = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
        where_format(text, offset, where, sizeof(where));
        free(text);
        return ctl_fail(ctl, "%s: not valid JSON near %s", label, where);
    }
    if (!cJSON_IsObject(spec)) {
        int rc = ctl_fail(ctl, "%s: a job spec must be a JSON object, got %s", label,
                          json_type_name(spec));
        cJSON_Delete(spec);
        free(text);
        return rc;
    }
    *text_out = text;
    *spec_out = spec;
    return CTL_EXIT_OK;
}

/* Adds option `opt` as integer member `key` when given; 0, or -1 (usage error printed). */
static int add_int(struct ctl *ctl,
                   const struct ctl_args *args,
                   cJSON *obj,
                   const char *opt,
                   const char *key,
                   int64_t min,
                   int64_t max)
{
    int64_t v = 0;

    if (!ctl_args_get(ctl, args, opt))
        return 0;
    if (ctl_args_int(ctl, args, opt, min, max, &v) != 0)
        return -1;
    if (!cJSON_AddNumberToObject(obj, key, (double)v)) {
        ctl_fail(ctl, "out of memory");
        return -1;
    }
    return 0;
}

/* Adds option `opt` as string member `key` when given (or def when not and def != NULL). */
static int add_str(struct ctl *ctl,
                   const struct ctl_args *args,
                   cJSON *obj,
                   const char *opt,
                   const char *key,
                   const char *def)
{
    const char *v = ctl_args_get(ctl, args, opt);

    if (!v)
        v = def;
    if (!v)
        return 0;
    if (!cJSON_AddStringToObject(obj, key, v)) {
        ctl_fail(ctl, "out of memory");
        return -1;
    }
    return 0;
}

/* --capacity spot,on-demand -> ["spot","on-demand"]. */
static int add_capacity(struct ctl *ctl, const struct ctl_args *args, cJSON *spec)
{
    const char *text = ctl_args_get(ctl, args, "capacity");
    cJSON *arr;
    char item[32];

    if (!text)
        return 0;
    arr = cJSON_AddArrayToObject(spec, "capacity");
    if (!arr) {
        ctl_fail(ctl, "out of memory");
        return -1;
    }
    for (const char *p = text;;) {
        size_t n = strcspn(p, ",");
        cJSON *s;
        if (n == 0 || n >= sizeof(item)) {
            ctl_usage(ctl, "--capacity: expected a list of spot and on-demand, got '%s'", text);
            return -1;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        if (strcmp(item, "spot") != 0 && strcmp(item, "on-demand") != 0) {
            ctl_usage(ctl, "--capacity: expected spot or on-demand, got '%s'", item);
            return -1;
        }
        s = cJSON_CreateString(item);
        if (!s || !cJSON_AddItemToArray(arr, s)) {
            cJSON_Delete(s);
            ctl_fail(ctl, "out of memory");
            return -1;
        }
        p += n;
        if (*p == '\0')
            break;
        p++;
    }
    return 0;
}

/* Adds one value of a repeatable option to its object or array; -1 once it has told the user. */
typedef int (*add_value_fn)(struct ctl *ctl, cJSON *into, const char *value);

/*
 * Every value of the repeatable option opt, in order, through add_value into a new object
 * (as_array false) or array of the same name in spec.  Nothing is added when opt is absent.
 */
static int add_repeated(struct ctl *ctl,
                        const struct ctl_args *args,
                        cJSON *spec,
                        const char *opt,
                        bool as_array,
                        add_value_fn add_value)
{
    size_t n = ctl_args_all(ctl, args, opt, NULL, 0);
    const char **vals;
    cJSON *into;
    int rc = -1;

    if (n == 0)
        return 0;
    vals = calloc(n, sizeof(*vals));
    into = as_array ? cJSON_AddArrayToObject(spec, opt) : cJSON_AddObjectToObject(spec, opt);
    if (!vals || !into) {
        ctl_fail(ctl, "out of memory");
        goto out;
    }
    (void)ctl_args_all(ctl, args, opt, vals, n);
    for (size_t i = 0; i < n; i++) {
        if (add_value(ctl, into, vals[i]) != 0)
            goto out;
    }
    rc = 0;
out:
    free(vals);
    return rc;
}

/* One --env NAME=VALUE into env (--env K=V ... -> {"K":"V",...}; the last K wins). */
static int env_value(struct ctl *ctl, cJSON *env, const char *value)
{
    const char *eq = strchr(value, '=');
    char name[256];

    if (!eq || eq == value || (size_t)(eq - value) >= sizeof(name)) {
        ctl_usage(ctl, "--env: expected NAME=VALUE, got '%s'", value);
        return -1;
    }
    memcpy(name, value, (size_t)(eq - value));
    name[eq - value] = '\0';
    cJSON_DeleteItemFromObjectCaseSensitive(env, name); /* the last one wins */
    if (!cJSON_AddStringToObject(env, name, eq + 1)) {
        ctl_fail(ctl, "out of memory");
        return -1;
    }
    return 0;
}

/* --checkpoint-signal / --checkpoint-grace -> {"signal": SIG, "grace_s": S}. */
static int add_checkpoint(struct ctl *ctl, const struct ctl_args *args, cJSON *spec)
{
    const char *sig = ctl_args_get(ctl, args, "checkpoint-signal");
    cJSON *ck;

    if (!sig && !ctl_args_get(ctl, args, "checkpoint-grace"))
        return 0;
    if (sig && mu_signal_parse(sig) < 0) {
        ctl_usage(ctl, "--checkpoint-signal: unknown signal '%s' (e.g. SIGUSR1)", sig);
        return -1;
    }
    ck = cJSON_AddObjectToObject(spec, "checkpoint");
    if (!ck) {
        ctl_fail(ctl, "out of memory");
        return -1;
    }
    if (add_str(ctl, args, ck, "checkpoint-signal", "signal", NULL) != 0)
        return -1;
    return add_int(ctl, args, ck, "checkpoint-grace", "grace_s", 0, 3600);
}

/* One --after value into a condition: "ID", "ID:when", "key=KEY" or "key=KEY:when" (a ":when"
 * suffix counts only when it is one of the four words, so a key may hold colons). */
static cJSON *after_item(struct ctl *ctl, const char *text)
{
    const char *colon = strrchr(text, ':');
    enum queue_when w;
    const char *when = NULL;
    bool by_key = strncmp(text, "key=", 4) == 0;
    const char *ref = by_key ? text + 4 : text;
    size_t n = strlen(ref);
    char buf[QUEUE_KEY_MAX];
    cJSON *o;

    if (colon && queue_when_parse(colon + 1, &w) == 0) {
        when = queue_when_name(w);
        n = (size_t)(colon - ref);
    }
    if (n == 0 || n >= sizeof(buf) || (!when && colon && !by_key)) {
        ctl_usage(ctl, "--after: expected ID[:ok|notok|any|started] or key=KEY[:WHEN], got '%s'",
                  text);
        return NULL;
    }
    memcpy(buf, ref, n);
    buf[n] = '\0';
    if (!by_key && !queue_job_id_is_valid(buf)) {
        ctl_usage(ctl,
                  "--after: '%s' is not a job id (such as 1732270000123-0); use key=KEY for "
                  "an idempotency key",
                  buf);
        return NULL;
    }
    o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, by_key ? "key" : "job", buf)
        || (when && !cJSON_AddStringToObject(o, "when", when))) {
        cJSON_Delete(o);
        ctl_fail(ctl, "out of memory");
        return NULL;
    }
    return o;
}

/* One --after value appended to after (--after ... -> [{"job": ID, "when": W}, ...]): a
 * condition, or alternatives "COND?COND..." (Slurm's "?": any one is enough). */
static int after_value(struct ctl *ctl, cJSON *after, const char *value)
{
    const char *p = value;

    for (;;) {
        const char *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        char item[QUEUE_KEY_MAX + 16];
        cJSON *o;
        if (n >= sizeof(item)) {
            ctl_usage(ctl, "--after: '%.64s...' is too long", p);
            return -1;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        o = after_item(ctl, item);
        if (!o)
            return -1;
        if (!cJSON_AddItemToArray(after, o)) {
            cJSON_Delete(o);
            ctl_fail(ctl, "out of memory");
            return -1;
        }
        if (!q)
            return 0;
        p = q + 1;
    }
}

/* --after: every value a condition (all needed), or one value of "?" alternatives ("after_or":
 * any one), never both, as Slurm takes "," or "?" but not the two together. */
static int add_after(struct ctl *ctl, const struct ctl_args *args, cJSON *spec)
{
    size_t n = ctl_args_all(ctl, args, "after", NULL, 0);
    const char *vals[QUEUE_MAX_AFTER + 1];
    bool any_of = false;

    if (n > QUEUE_MAX_AFTER) {
        ctl_usage(ctl, "--after: %zu conditions, at most %d", n, QUEUE_MAX_AFTER);
        return -1;
    }
    (void)ctl_args_all(ctl, args, "after", vals, n);
    for (size_t i = 0; i < n; i++)
        any_of = any_of || strchr(vals[i], '?') != NULL;
    if (any_of && n > 1) {
        ctl_usage(ctl, "--after: alternatives (A?B) in one --after, not with another --after "
                       "(all of them), as Slurm's ',' and '?' do not mix");
        return -1;
    }
    if (add_repeated(ctl, args, spec, "after", true, after_value) != 0)
        return -1;
    if (any_of && !cJSON_AddTrueToObject(spec, "after_or")) {
        ctl_fail(ctl, "out of memory");
        return -1;
    }
    return 0;
}

static int add_topology(struct ctl *ctl, const struct ctl_args *args, cJSON *spec)
{
    cJSON *topo;

    if (!ctl_args_get(ctl, args, "topology-required")
        && !ctl_args_get(ctl, args, "topology-preferred")
        && !ctl_args_get(ctl, args, "topology-relax-after"))
        return 0;
    topo = cJSON_AddObjectToObject(spec, "topology");
    if (!topo) {
        ctl_fail(ctl, "out of memory");
        return -1;
    }
    if (add_str(ctl, args, topo, "topology-required", "required", NULL) != 0
        || add_int(ctl, args, topo, "topology-relax-after", "relax_after_s", 1, 604800) != 0)
        return -1;
    return add_str(ctl, args, topo, "topology-preferred", "preferred", NULL);
}

/* Builds the spec from the options and the command words; NULL after printing why. */
static cJSON *spec_build(struct ctl *ctl, const struct ctl_args *args)
{
    cJSON *spec = cJSON_CreateObject();
    cJSON *cmd = spec ? cJSON_AddArrayToObject(spec, "command") : NULL;
    /* Who the job is for when --user is not given: the Redis user of the URL (with proven
     * identity, the only one musterd accepts), else the login name, a label. */
    const char *user = ctl->where.user[0] && strcmp(ctl->where.user, "default") != 0
                           ? ctl->where.user
                           : getenv("USER");

    if (!cmd) {
        ctl_fail(ctl, "out of memory");
        goto fail;
    }
    for (int i = args->dashdash; i < args->argc; i++) {
        cJSON *w = cJSON_CreateString(args->argv[i]);
        if (!w || !cJSON_AddItemToArray(cmd, w)) {
            cJSON_Delete(w);
            ctl_fail(ctl, "out of memory");
            goto fail;
        }
    }
    if (add_str(ctl, args, spec, "name", "name", NULL) != 0
        || add_str(ctl, args, spec, "queue", "queue", NULL) != 0
        || add_int(ctl, args, spec, "priority", "priority", -1000000, 1000000) != 0
        || add_int(ctl, args, spec, "tasks", "tasks", 1, QUEUE_MAX_TASKS) != 0
        || add_int(ctl, args, spec, "gpus-per-task", "gpus_per_task", 0, QUEUE_MAX_GPUS_TASK) != 0
        || add_int(ctl, args, spec, "cpus-per-task", "cpus_per_task", 0, 1000000) != 0
        || add_int(ctl, args, spec, "memory-mb-per-task", "memory_mb_per_task", 0, INT64_C(1) << 40)
               != 0
        || add_str(ctl, args, spec, "gpu-type", "gpu_type", NULL) != 0
        || add_str(ctl, args, spec, "gpu-slice", "gpu_slice", NULL) != 0
        || add_capacity(ctl, args, spec) != 0 || add_topology(ctl, args, spec) != 0
        || add_repeated(ctl, args, spec, "env", false, env_value) != 0
        || add_str(ctl, args, spec, "workdir", "workdir", NULL) != 0
        || add_checkpoint(ctl, args, spec) != 0
        || add_int(ctl, args, spec, "time-limit", "time_limit_s", 1, INT64_C(1) << 40) != 0
        || add_int(ctl, args, spec, "max-retries", "max_retries", 0, 100) != 0
        || add_str(ctl, args, spec, "idempotency-key", "idempotency_key", NULL) != 0
        || add_str(ctl, args, spec, "user", "user", user && user[0] ? user : NULL) != 0
        || add_after(ctl, args, spec) != 0 || add_str(ctl, args, spec, "array", "array", NULL) != 0)
        goto fail;
    if (ctl_args_get(ctl, args, "singleton") && !cJSON_AddTrueToObject(spec, "singleton")) {
        ctl_fail(ctl, "out of memory");
        goto fail;
    }
    if (ctl_args_get(ctl, args, "not-preemptible")
        && !cJSON_AddFalseToObject(spec, "preemptible")) {
        ctl_fail(ctl, "out of memory");
        goto fail;
    }
    return spec;
fail:
    cJSON_Delete(spec);
    return NULL;
}

/* Prints "musterctl: job ID: STATE (reason)" on stderr. */
static void wait_note(const char *id, const char *state, const char *reason)
{
    (void)fprintf(stderr, "musterctl: job %s: ", id);
    ctl_print_clean(stderr, state);
    if (reason && reason[0]) {
        (void)fputs(" (", stderr);
        ctl_print_clean(stderr, reason);
        (void)fputc(')', stderr);
    }
    (void)fputc('\n', stderr);
}

/* Reports a final job: the error on stderr unless it succeeded, the record with -o json. */
static int wait_done(struct ctl *ctl, const char *id, const cJSON *job, const char *state)
{
    int rc = strcmp(state, "SUCCEEDED") == 0 ? CTL_EXIT_OK : CTL_EXIT_FAIL;
    char b[32];

    if (rc != CTL_EXIT_OK) {
        const char *why = ctl_json_text(job, QUEUE_F_ERROR, b, sizeof(b));
        if (!why[0])
            why = ctl_json_text(job, QUEUE_F_REASON, b, sizeof(b));
        (void)fprintf(stderr, "musterctl: submit: job %s %s: ", id, state);
        ctl_print_clean(stderr, why[0] ? why : "no reason recorded");
        if (cJSON_GetObjectItemCaseSensitive(job, QUEUE_F_EXIT_CODE))
            (void)fprintf(stderr, " (exit code %lld)",
                          (long long)ctl_json_int(job, QUEUE_F_EXIT_CODE, 0));
        (void)fputc('\n', stderr);
    }
    if (ctl->output == CTL_OUT_JSON && ctl_json_print(ctl, job) != CTL_EXIT_OK)
        rc = CTL_EXIT_FAIL;
    return rc;
}

/*
 * Follows job id until it reaches a final state; the exit code is its outcome.  State changes
 * come from the events stream after last_id (taken before the submission, so none is missed
 * however fast the job runs); the job hash, read after every round, decides when it is over.
 */
static int submit_wait(
    struct ctl *ctl, struct queue *q, const char *id, char *last_id, size_t last_size)
{
    char shown[32] = "";
    int errors = 0;
    uint64_t start = mu_time_mono_ms();
    bool noted = false;

    for (;;) {
        struct mu_err err = { 0 };
        cJSON *events = NULL;
        cJSON *job = NULL;
        const cJSON *ev;
        char b[2][32];
        const char *state;

        if (queue_events_wait(q, id, CTL_WAIT_POLL_MS, last_id, last_size, &events, &err) != 0
            || queue_job_read(q, id, &job, &err) != 0) {
            cJSON_Delete(events);
            if (++errors >= CTL_WAIT_MAX_ERRORS)
                return ctl_fail(ctl, "job %s: giving up waiting: %s", id, err.msg);
            ctl_sleep_ms(CTL_WAIT_POLL_MS);
            continue;
        }
        errors = 0;
        cJSON_ArrayForEach(ev, events)
        {
            const char *st = ctl_json_text(ev, "state", b[0], sizeof(b[0]));
            wait_note(id, st, ctl_json_text(ev, "reason", b[1], sizeof(b[1])));
            mu_strlcpy(shown, st, sizeof(shown));
        }
        cJSON_Delete(events);
        if (!job) {
            if (!noted && mu_time_mono_ms() - start > CTL_WAIT_NOTE_MS) {
                (void)fprintf(stderr,
                              "musterctl: job %s: not taken in by musterd yet (is it running?)\n",
                              id);
                noted = true;
            }
            continue;
        }
        state = ctl_json_text(job, QUEUE_F_STATE, b[0], sizeof(b[0]));
        if (ctl_state_is_final(state)) {
            int rc;
            if (strcmp(shown, state) != 0) /* its event was trimmed, or came before we looked */
                wait_note(id, state, NULL);
            rc = wait_done(ctl, id, job, state);
            cJSON_Delete(job);
            return rc;
        }
        cJSON_Delete(job);
    }
}

/* Checks which form was used; CTL_EXIT_OK or a usage error. */
static int form_check(struct ctl *ctl, const struct ctl_args *args, bool *flag_form)
{
    const char *given = NULL;

    for (size_t i = 0; i < MU_ARRAY_LEN(spec_opts) && !given; i++) {
        if (ctl_args_get(ctl, args, spec_opts[i]))
            given = spec_opts[i];
    }
    *flag_form = args->dashdash >= 0;
    if (*flag_form) {
        if (args->dashdash > 0)
            return ctl_usage(ctl, "unexpected argument '%s' before --; the command goes after --",
                             args->argv[0]);
        if (args->argc == 0)
            return ctl_usage(ctl, "missing the command after --");
        return CTL_EXIT_OK;
    }
    if (args->argc == 0)
        return ctl_usage(ctl, "missing FILE, - or -- COMMAND");
    if (args->argc > 1 || given)
        return ctl_usage(ctl,
                         "%s%s%sput the command after --, e.g. 'musterctl submit --tasks 2 -- "
                         "python train.py'",
                         given ? "--" : "", given ? given : "", given ? " builds a spec: " : "");
    if (ctl_args_get(ctl, args, "dry-run"))
        return ctl_usage(ctl, "--dry-run needs the flag form (-- COMMAND)");
    return CTL_EXIT_OK;
}

/* Submits text (spec parsed) with queue_submit, or queue_submit_idem when the spec has an
 * idempotency key; 0 or -1 (printed). */
static int submit_send(struct ctl *ctl,
                       struct queue *q,
                       const cJSON *spec,
                       const char *text,
                       char *id,
                       size_t id_size,
                       bool *created)
{
    struct mu_err err = { 0 };
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(spec, "idempotency_key");

    *created = true;
    if (!cJSON_IsString(key)) {
        if (queue_submit(q, text, id, id_size, &err) == 0)
            return 0;
        ctl_fail(ctl, "%s", err.msg);
        return -1;
    }
    if (queue_submit_idem(q, text, key->valuestring, id, id_size, created, &err) != 0) {
        ctl_fail(ctl, "%s", err.msg);
        return -1;
    }
    if (!*created)
        (void)fprintf(stderr,
                      "musterctl: submit: idempotency key '%s' names job %s already; nothing "
                      "submitted\n",
                      key->valuestring, id);
    return 0;
}

/* Prints the id, or {"id", "created"} with -o json. */
static int submit_print(struct ctl *ctl, const char *id, bool created)
{
    cJSON *doc;
    int rc;

    if (ctl->output == CTL_OUT_TABLE) {
        printf("%s\n", id);
        return CTL_EXIT_OK;
    }
    doc = cJSON_CreateObject();
    if (!doc || !cJSON_AddStringToObject(doc, "id", id)
        || !cJSON_AddBoolToObject(doc, "created", created)) {
        cJSON_Delete(doc);
        return ctl_fail(ctl, "out of memory; job '%s' was submitted", id);
    }
    rc = ctl_json_print(ctl, doc);
    cJSON_Delete(doc);
    return rc;
}

int ctl_cmd_submit(struct ctl *ctl, const struct ctl_args *args)
{
    struct mu_err err = { 0 };
    char *text = NULL;
    cJSON *spec = NULL;
    struct queue *q;
    char id[QUEUE_JOB_ID_MAX];
    char last_id[64] = "0-0";
    bool flag_form = false;
    bool created = true;
    int rc = form_check(ctl, args, &flag_form);

    if (rc != CTL_EXIT_OK)
        return rc;
    rc = CTL_EXIT_FAIL;
    if (flag_form) {
        spec = spec_build(ctl, args);
        if (!spec) {
            rc = CTL_EXIT_USAGE;
            goto out;
        }
        text = cJSON_PrintUnformatted(spec);
        if (!text) {
            ctl_fail(ctl, "out of memory");
            goto out;
        }
    } else if (spec_read(ctl, args->argv[0], &text, &spec) != CTL_EXIT_OK) {
        goto out;
    }
    /* musterd's parse of the text, before connecting (queue_submit runs it again). */
    if (queue_submit_check(text, &err) != 0) {
        ctl_fail(ctl, "%s", err.msg);
        goto out;
    }
    if (flag_form && ctl_args_get(ctl, args, "dry-run")) {
        rc = ctl_json_print(ctl, spec);
        goto out;
    }
    q = ctl_queue(ctl);
    if (!q)
        goto out;
    if (ctl_args_get(ctl, args, "wait")) {
        cJSON *none = NULL;
        /* Where the job's events will start: the newest entry before the submission. */
        if (queue_events_read(q, NULL, 1, &none, last_id, sizeof(last_id), &err) != 0) {
            ctl_fail(ctl, "%s", err.msg);
            goto out;
        }
        cJSON_Delete(none);
    }
    if (submit_send(ctl, q, spec, text, id, sizeof(id), &created) != 0)
        goto out;
    if (ctl_args_get(ctl, args, "wait")) {
        if (ctl->output == CTL_OUT_TABLE) {
            printf("%s\n", id);
            (void)fflush(stdout);
        }
        rc = submit_wait(ctl, q, id, last_id, sizeof(last_id));
        goto out;
    }
    rc = submit_print(ctl, id, created);
out:
    cJSON_Delete(spec);
    if (flag_form)
        cJSON_free(text);
    else
        free(text);
    return rc;
}
