/* SPDX-License-Identifier: MIT */
/*
 * access/internal.h: the parsed "access" section, shared by parse.c (the walk), resolve.c (known
 * users and their effective limits) and decide.c (the checks).  Private to access/.
 */
#ifndef MUSTER_ACCESS_INTERNAL_H
#define MUSTER_ACCESS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "access/access.h"
#include "common/mu.h"

#define ACC_PATH_LEN 192 /* "access.groups.<63 bytes>.members[9999]" and the like */

/* The keys of a LIMITS object (and of a group's or a user's entry), as bits of acc_entry.set. */
enum acc_key {
    ACC_K_QUEUES,
    ACC_K_MAX_PRIORITY,
    ACC_K_NON_PREEMPTIBLE,
    ACC_K_MAX_RUNNING_GPUS,
    ACC_K_MAX_PENDING_JOBS,
    ACC_K_SUBMIT_FOR, /* users only */
    ACC_K_MEMBERS,    /* groups only */
    ACC_K_COUNT,
};

enum acc_kind { ACC_DEFAULTS, ACC_GROUP, ACC_USER };

/* A list of names as written ("queues", "members", "submit_for", "operators"). */
struct acc_list {
    int n;
    char (*names)[ACCESS_NAME_MAX]; /* n names, in the written order */
    bool all;                       /* the list is ["*"] */
};

/* One entry: "defaults", a group or a user. */
struct acc_entry {
    enum acc_kind kind;
    char name[ACCESS_NAME_MAX]; /* "" for defaults */
    unsigned set;               /* 1u << enum acc_key, for each key the entry gives */
    struct acc_list queues;
    int64_t max_priority;
    bool non_preemptible;
    int64_t max_running_gpus;   /* 0 = no cap */
    int64_t max_pending_jobs;   /* 0 = no cap */
    struct acc_list members;    /* groups: user names, sorted once resolved */
    struct acc_list submit_for; /* users: as written ("@vision" included) */
    struct acc_list for_users;  /* users: submit_for with each "@group" expanded, sorted, unique */
};

/* Where one effective limit of a user comes from. */
struct acc_src {
    const struct acc_entry *e; /* the entry, or NULL for the built-in default */
    bool groups;               /* queues only: the union over the user's groups that set them */
};

/* A known user and its effective limits, computed once at parse. */
struct acc_known {
    char name[ACCESS_NAME_MAX];
    bool is_operator;
    const struct acc_entry *own; /* its "users" entry, or NULL */
    int *groups;                 /* indexes into access.groups of the groups it is a member of */
    int ngroups;
    struct acc_src src[ACC_K_SUBMIT_FOR]; /* by enum acc_key, the LIMITS keys */
    int64_t max_priority;
    bool non_preemptible;
    int64_t max_running_gpus;
    int64_t max_pending_jobs;
};

struct access {
    enum access_identity identity;
    struct acc_entry defaults; /* kind ACC_DEFAULTS; set == 0 when absent */
    struct acc_list operators; /* as written */
    struct acc_entry *groups;  /* sorted by name */
    int ngroups;
    struct acc_entry *users; /* sorted by name */
    int nusers;
    struct acc_known *known; /* sorted by name, unique */
    int nknown;
};

/* The key names, by enum acc_key. */
extern const char *const acc_key_names[ACC_K_COUNT];

/* Whether s is a user or group name: 1..ACCESS_NAME_MAX-1 bytes of [A-Za-z0-9._-]. */
bool acc_name_is_valid(const char *s);

/* The group called name in a, or NULL. */
const struct acc_entry *acc_group_find(const struct access *a, const char *name);
/* The known user called name in a, or NULL. */
const struct acc_known *acc_known_find(const struct access *a, const char *name);
/* Whether name is in the sorted list l. */
bool acc_list_has_sorted(const struct acc_list *l, const char *name);
/* Sorts l by name (strcmp). */
void acc_list_sort(struct acc_list *l);

/* "access.groups.vision.queues", "access.defaults.max_priority", "built-in default". */
void acc_entry_path(char *buf, size_t size, const struct acc_entry *e, enum acc_key k);

/*
 * After the walk: sorts groups and users, checks that every "@group" exists, expands them,
 * builds the known users (at most ACCESS_USERS_MAX) and their effective limits.  -1 with err
 * (MU_E_CONFIG with a key path, or MU_E_NOMEM).
 */
int acc_resolve(struct access *a, struct mu_err *err);

/* Frees what a holds, not a itself. */
void acc_release(struct access *a);

#endif
