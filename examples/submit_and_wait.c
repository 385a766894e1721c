/* SPDX-License-Identifier: MIT */
/*
 * submit_and_wait: the libmuster example.  Connects to muster's Redis, submits a 2-task gang
 * with the spec builder, waits for it to finish and prints the outcome.
 *
 *   cc -std=c11 -Wall -Werror submit_and_wait.c $(pkg-config --cflags --libs muster) \
 *       -o submit_and_wait
 *   MUSTER_REDIS_URL=redis://127.0.0.1:6379 ./submit_and_wait [-g GPUS] [-q QUEUE] [-t TIMEOUT_S]
 *       [-k IDEMPOTENCY_KEY] [-- COMMAND ARGS...]
 *
 * Exit status: 0 when the job SUCCEEDED, 1 when it ended otherwise or on an error, 2 for a usage
 * error, 3 when it was still running after the timeout.
 *
 * getopt and optarg are POSIX, not C11: with -std=c11 the C library declares them only when a
 * feature-test macro asks, so the file asks itself, before its first #include.
 */
#define _POSIX_C_SOURCE 200809L /* NOLINT(bugprone-reserved-identifier): POSIX's own switch */

#include <muster.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int usage(void)
{
    (void)fprintf(stderr, "usage: submit_and_wait [-g GPUS_PER_TASK] [-q QUEUE] [-t TIMEOUT_S] "
                          "[-k IDEMPOTENCY_KEY] [-- COMMAND ARGS...]\n");
    return 2;
}

/* One line: how the job ended, where it ran and for how long. */
static void print_outcome(const char *id, const struct muster_job *job)
{
    int code;

    printf("job %s %s attempt %d", id, muster_job_state_name(job), muster_job_attempt(job));
    if (muster_job_exit_code(job, &code))
        printf(" exit %d", code);
    if (muster_job_nodes(job)[0])
        printf(" nodes %s", muster_job_nodes(job));
    if (muster_job_error(job)[0])
        printf(" error: %s", muster_job_error(job));
    printf(" (ran %lld ms)\n",
           muster_job_started_at_ms(job)
               ? (long long)(muster_job_finished_at_ms(job) - muster_job_started_at_ms(job))
               : 0LL);
}

int main(int argc, char **argv)
{
    static const char *const default_cmd[] = { "sh", "-c",
                                               "echo rank $RANK of $WORLD_SIZE on $MUSTER_NODE" };
    struct muster_error err = { 0 };
    struct muster *m = NULL;
    struct muster_spec *spec = NULL;
    struct muster_job *job = NULL;
    const char *queue = NULL, *key = NULL;
    char id[MUSTER_ID_MAX];
    int gpus = 1, timeout_s = 300, opt, rc = 1;
    bool created = false;

    while ((opt = getopt(argc, argv, "g:q:t:k:h")) != -1) {
        switch (opt) {
        case 'g':
            gpus = (int)strtol(optarg, NULL, 10);
            break;
        case 'q':
            queue = optarg;
            break;
        case 't':
            timeout_s = (int)strtol(optarg, NULL, 10);
            break;
        case 'k':
            key = optarg;
            break;
        case 'h':
            usage();
            return 0;
        default:
            return usage();
        }
    }
    if (strcmp(muster_version(), MUSTER_VERSION) != 0)
        (void)fprintf(stderr, "warning: built with muster.h %s, running libmuster %s\n",
                      MUSTER_VERSION, muster_version());

    /* The builder keeps its first error; check once when submitting. */
    spec = muster_spec_new();
    if (!spec) {
        (void)fprintf(stderr, "submit_and_wait: out of memory\n");
        return 1;
    }
    muster_spec_set_name(spec, "libmuster-example");
    muster_spec_set_tasks(spec, 2);
    muster_spec_set_gpus_per_task(spec, gpus);
    muster_spec_set_max_retries(spec, 0);
    muster_spec_set_env(spec, "EXAMPLE", "submit_and_wait");
    if (queue)
        muster_spec_set_queue(spec, queue);
    if (key)
        muster_spec_set_idempotency_key(spec, key);
    if (optind < argc)
        muster_spec_set_command(spec, argc - optind, (const char *const *)argv + optind);
    else
        muster_spec_set_command(spec, 3, default_cmd);

    m = muster_connect(NULL, NULL, &err); /* MUSTER_REDIS_URL or redis://127.0.0.1:6379 */
    if (!m) {
        (void)fprintf(stderr, "submit_and_wait: %s\n", err.message);
        goto out;
    }
    if (muster_spec_submit(m, spec, id, sizeof(id), &created, &err) != 0) {
        (void)fprintf(stderr, "submit_and_wait: submit: %s\n", err.message);
        goto out;
    }
    printf("job %s %s\n", id, created ? "submitted" : "already submitted (same idempotency key)");
    (void)fflush(stdout); /* show the id now: the wait may be long */

    switch (muster_job_wait(m, id, timeout_s * 1000, &job, &err)) {
    case 0:
        break;
    case 1:
        printf("job %s still %s after %d s\n", id, job ? muster_job_state_name(job) : "queued",
               timeout_s);
        rc = 3;
        goto out;
    default:
        (void)fprintf(stderr, "submit_and_wait: wait: %s\n", err.message);
        goto out;
    }
    print_outcome(id, job);
    rc = muster_job_state(job) == MUSTER_STATE_SUCCEEDED ? 0 : 1;
out:
    muster_job_free(job);
    muster_close(m);
    muster_spec_free(spec);
    return rc;
}
