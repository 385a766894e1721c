/* SPDX-License-Identifier: MIT */
/*
 * The core's one stable sort, written once for its three users: the fair-share order's keys
 * (share.c, up to 100,000 per pass), the nodes' topology order (cluster.c) and the
 * reservation's timeline of running gangs' ends (pass.c).  It is a macro
 * that defines a function per element type rather than a qsort-style function because the
 * comparison must be inlined (about twice as fast as calls through a pointer on 100,000 keys)
 * and because qsort has no context argument in C11.  All users compare by a total order, so
 * stability is a guarantee kept, not one relied on.
 *
 * SCHED_SORT_DEFINE(name, type, ctx_type, less) defines
 *
 *     static void name(type *a, type *tmp, int n, ctx_type ctx);
 *
 * which sorts a[0..n) in place through the caller's scratch tmp[0..n) (nothing is allocated):
 * runs of 16 by insertion, then bottom-up merges.  less(ctx, x, y), with x and y of type
 * const type *, is true when *x goes strictly before *y.
 */
#ifndef MUSTER_CORE_SORT_H
#define MUSTER_CORE_SORT_H

#include <string.h>

#define SCHED_SORT_RUN 16

#define SCHED_SORT_DEFINE(name, type, ctx_type, less)                             \
    static void name(type *a, type *tmp, int n, ctx_type ctx)                     \
    {                                                                             \
        type *src = a;                                                            \
        type *dst = tmp;                                                          \
                                                                                  \
        for (int lo = 0; lo < n; lo += SCHED_SORT_RUN) {                          \
            int hi = lo + SCHED_SORT_RUN < n ? lo + SCHED_SORT_RUN : n;           \
            for (int i = lo + 1; i < hi; i++) {                                   \
                type k = a[i];                                                    \
                int j = i;                                                        \
                for (; j > lo && less(ctx, &k, &a[j - 1]); j--)                   \
                    a[j] = a[j - 1];                                              \
                a[j] = k;                                                         \
            }                                                                     \
        }                                                                         \
        for (int width = SCHED_SORT_RUN; width < n; width *= 2) {                 \
            type *t;                                                              \
            for (int lo = 0; lo < n; lo += 2 * width) {                           \
                int mid = lo + width < n ? lo + width : n;                        \
                int hi = lo + 2 * width < n ? lo + 2 * width : n;                 \
                int x = lo;                                                       \
                int y = mid;                                                      \
                int k = lo;                                                       \
                while (x < mid && y < hi)                                         \
                    dst[k++] = less(ctx, &src[y], &src[x]) ? src[y++] : src[x++]; \
                while (x < mid)                                                   \
                    dst[k++] = src[x++];                                          \
                while (y < hi)                                                    \
                    dst[k++] = src[y++];                                          \
            }                                                                     \
            t = src;                                                              \
            src = dst;                                                            \
            dst = t;                                                              \
        }                                                                         \
        if (src != a)                                                             \
            memcpy(a, src, (size_t)n * sizeof(*a));                               \
    }

#endif
