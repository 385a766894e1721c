/* SPDX-License-Identifier: MIT */
/*
 * cfg_sched: the config as the pure core's inputs, the one translation musterd and muster-sim
 * share.  A module of its own, above config/ and core/ (issue #41): the config parser does not
 * know the core, and the core never sees the config.
 */
#ifndef MUSTER_CFG_SCHED_CFG_SCHED_H
#define MUSTER_CFG_SCHED_CFG_SCHED_H

#include "config/cfg.h"
#include "core/sched.h"

/* A cluster of c's pools and topology levels, no node yet (free with sched_cluster_free); NULL
 * with err. */
struct sched_cluster *cfg_sched_cluster_new(const struct cfg *c, struct mu_err *err);
/* c's queues' quotas for sched_quota_queues_init, into out[0..n); returns n (at most
 * SCHED_MAX_QUEUES - 1: the core keeps the last entry for queues no longer configured). */
int cfg_sched_quotas(const struct cfg *c, struct sched_quota_config *out);

#endif
