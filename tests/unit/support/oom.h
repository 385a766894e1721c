/* SPDX-License-Identifier: MIT */
/*
 * Allocation-failure injection for the unit tests (issue #41, docs/style.md §1.8): a counting
 * allocator that fails the Nth allocation, and oom_run, which runs one scenario with N = 1, 2, …
 * until a run completes without reaching N (curl's "torture" tests).  Every failure must come
 * back as -1 with a message in err (or the scenario's documented fallback, a 0); a crash fails
 * the test and a leak fails it under ASan and valgrind, which run every unit test in CI.
 *
 * Only an executable linked with the options in tests/CMakeLists.txt (-Wl,--wrap=malloc,…)
 * reaches this allocator; see oom.c for why a link-time seam.  MUSTER_OOM_VERBOSE=1 in the
 * environment prints each call site as it first fails and each fallback (addresses for
 * addr2line; run under `setarch -R` to make them stable).
 */
#ifndef MUSTER_TESTS_OOM_H
#define MUSTER_TESTS_OOM_H

#include <stdbool.h>

#include "common/mu.h"

/* One scenario: 0 on success, or -1 with err filled.  Must free what it allocated either way. */
typedef int (*oom_scenario_fn)(void *arg, struct mu_err *err);

/*
 * Runs fn(arg) once unarmed (it must succeed), then with allocation N failed for N = 1, 2, …
 * until a run allocates fewer than N times.  Fails the running cmocka test when a failed run
 * returns -1 with an empty message, or when a run returns -1 without any failure injected.
 * Returns the number of allocations of the clean run; *fallbacks (may be NULL) counts the runs
 * that returned 0 although an allocation failed.
 */
int oom_run(const char *name, oom_scenario_fn fn, void *arg, int *fallbacks);

/* The distinct call sites (return addresses) that oom_run has failed so far, for the report. */
int oom_sites(void);

/* Stop injecting: allocations from now on all succeed (the default). */
void oom_disarm(void);

#endif
