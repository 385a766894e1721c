/* SPDX-License-Identifier: MIT */
/*
 * The benchmarks' clocks and sorting, in one place: monotonic and wall nanoseconds, a sleep in
 * microseconds, and the int64 comparison the percentile tables sort with.  Header-only (static
 * inline), as each benchmark is one program linked with as little as it needs.
 */
#ifndef MUSTER_BENCH_TIMING_H
#define MUSTER_BENCH_TIMING_H

#include <stdint.h>
#include <time.h>

static inline int64_t mono_ns(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int64_t wall_ns(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    (void)nanosleep(&ts, NULL);
}

/* qsort comparison of int64_t, ascending. */
static inline int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a;
    int64_t y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#endif
