/* SPDX-License-Identifier: MIT */
/*
 * muster-stamp DIR: the task of the latency benchmark.  Writes the wall-clock time it started
 * (ns) to DIR/<MUSTER_JOB_ID>.<RANK> and exits, with no shell in between so that the number
 * measures muster and not /bin/sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/mu.h"

#include "common/mu_banned.h"

int main(int argc, char **argv)
{
    struct timespec ts;
    char path[4096];
    char tmp[4200];
    const char *job = getenv("MUSTER_JOB_ID");
    const char *rank = getenv("RANK");
    FILE *f;

    (void)clock_gettime(CLOCK_REALTIME, &ts);
    if (argc != 2 || !job || !rank) {
        (void)fputs("usage: muster-stamp DIR (run by muster-worker)\n", stderr);
        return 2;
    }
    if (mu_snprintf(path, sizeof(path), "%s/%s.%s", argv[1], job, rank) != 0
        || mu_snprintf(tmp, sizeof(tmp), "%s.tmp", path) != 0)
        return 1;
    f = fopen(tmp, "w");
    if (!f)
        return 1;
    (void)fprintf(f, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return 1;
    return 0;
}
