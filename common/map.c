/* SPDX-License-Identifier: MIT */
/*
 * A small open-addressing hash map from strings to borrowed pointers, for the daemons' tables
 * (jobs by id, nodes by name).  Linear probing with tombstones; grows at 50 % load so probes
 * stay short.  Keys are copied; values are the caller's.  The read-only calls and mu_map_free
 * take NULL as an empty map, so cleanup code need not know how far its setup got.
 */
#include "common/mu.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static char tombstone[1];

struct mu_map_slot {
    char *key; /* NULL = empty, tombstone = deleted */
    void *value;
};

struct mu_map {
    struct mu_map_slot *slots;
    size_t cap; /* power of two */
    size_t count;
    size_t used; /* count + tombstones */
};

static uint64_t hash_str(const char *s)
{
    return mu_hash(s, strlen(s));
}

struct mu_map *mu_map_new(void)
{
    struct mu_map *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->cap = 64;
    m->slots = calloc(m->cap, sizeof(*m->slots));
    if (!m->slots) {
        free(m);
        return NULL;
    }
    return m;
}

void mu_map_free(struct mu_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].key && m->slots[i].key != tombstone)
            free(m->slots[i].key);
    }
    free(m->slots);
    free(m);
}

static struct mu_map_slot *find_slot(const struct mu_map *m, const char *key)
{
    size_t i = hash_str(key) & (m->cap - 1);
    for (;;) {
        struct mu_map_slot *s = &m->slots[i];
        if (!s->key)
            return NULL;
        if (s->key != tombstone && strcmp(s->key, key) == 0)
            return s;
        i = (i + 1) & (m->cap - 1);
    }
}

static int grow(struct mu_map *m, struct mu_err *err)
{
    size_t cap = m->count * 4 > m->cap ? m->cap * 2 : m->cap;
    struct mu_map_slot *old = m->slots;
    size_t old_cap = m->cap;
    struct mu_map_slot *slots = calloc(cap, sizeof(*slots));

    if (!slots)
        return mu_errf(err, MU_E_NOMEM, "map: out of memory");
    m->slots = slots;
    m->cap = cap;
    m->used = m->count;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].key && old[i].key != tombstone) {
            size_t j = hash_str(old[i].key) & (cap - 1);
            while (slots[j].key)
                j = (j + 1) & (cap - 1);
            slots[j] = old[i];
        }
    }
    free(old);
    return 0;
}

int mu_map_put(struct mu_map *m, const char *key, void *value, struct mu_err *err)
{
    struct mu_map_slot *s = find_slot(m, key);
    size_t i;
    char *copy;

    if (s) {
        s->value = value;
        return 0;
    }
    if ((m->used + 1) * 2 > m->cap && grow(m, err) != 0)
        return -1;
    copy = strdup(key);
    if (!copy)
        return mu_errf(err, MU_E_NOMEM, "map: out of memory");
    i = hash_str(key) & (m->cap - 1);
    while (m->slots[i].key && m->slots[i].key != tombstone)
        i = (i + 1) & (m->cap - 1);
    if (!m->slots[i].key)
        m->used++;
    m->slots[i].key = copy;
    m->slots[i].value = value;
    m->count++;
    return 0;
}

void *mu_map_get(const struct mu_map *m, const char *key)
{
    struct mu_map_slot *s = find_slot(m, key);
    return s ? s->value : NULL;
}

void *mu_map_remove(struct mu_map *m, const char *key)
{
    struct mu_map_slot *s = find_slot(m, key);
    void *value;
    if (!s)
        return NULL;
    value = s->value;
    free(s->key);
    s->key = tombstone;
    s->value = NULL;
    m->count--;
    return value;
}

size_t mu_map_count(const struct mu_map *m)
{
    return m ? m->count : 0;
}

void *mu_map_next(const struct mu_map *m, size_t *pos)
{
    /* NULL-safe like mu_map_free: a daemon's cleanup walks its maps whatever setup reached. */
    while (m && *pos < m->cap) {
        const struct mu_map_slot *s = &m->slots[(*pos)++];
        if (s->key && s->key != tombstone)
            return s->value;
    }
    return NULL;
}
