/* SPDX-License-Identifier: MIT */
/*
 * Clock reads for the daemons.  The placement and preemption core never calls these: time is a
 * parameter there, which keeps it deterministic under test and replay (docs/design.md §1).
 */
#include "common/mu.h"

#include <stdio.h>
#include <time.h>

#include "common/mu_banned.h"

static uint64_t clock_us(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t mu_time_wall_ms(void)
{
    return clock_us(CLOCK_REALTIME) / 1000u;
}

uint64_t mu_time_mono_ms(void)
{
    return clock_us(CLOCK_MONOTONIC) / 1000u;
}

uint64_t mu_time_mono_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}

uint64_t mu_time_thread_cpu_us(void)
{
    return clock_us(CLOCK_THREAD_CPUTIME_ID);
}

void mu_time_format_iso(uint64_t wall_ms, char *buf, size_t size)
{
    time_t secs = (time_t)(wall_ms / 1000u);
    struct tm tm;
    char base[24];

    if (!gmtime_r(&secs, &tm) || strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
        mu_strlcpy(buf, "invalid-time", size);
        return;
    }
    (void)snprintf(buf, size, "%s.%03uZ", base, (unsigned)(wall_ms % 1000u));
}
