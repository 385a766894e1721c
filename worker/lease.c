/* SPDX-License-Identifier: MIT */
/*
 * The lease record <run-dir>/lease (protocol/README.md "The lease and stale commands"): how
 * long this node may still run tasks without a word from the scheduler, in CLOCK_MONOTONIC ms.
 * The worker writes it; every muster-shim reads it and stops its task by itself once it runs
 * out, so the scheduler's wait before requeueing holds even when the worker is dead or frozen.
 *
 * A fixed-size binary file shared by mapping: the worker maps it read-write and stores into it,
 * each shim maps the same inode read-only and loads from it.  The file is never replaced once
 * valid (a rename would leave the running shims reading an orphaned inode); only a file that is
 * not a valid lease record is replaced, and then by a complete one renamed into place, so a
 * reader never sees it half written.  The fields are lock-free atomics, which are address-free,
 * so two processes mapping the page agree on them without a lock.
 *
 * Also here, the worker's rule for renewing it (lease by round trip): an answer that carries
 * back echo_ms, the worker's clock when it sent the HELLO or HEARTBEAT answered, proves the
 * scheduler heard the node after echo_ms, so it cannot judge it lost before echo_ms + lease_s.
 * An answer older than the newest one that renewed the lease renews nothing (it sat in a socket
 * while the worker was frozen); the first one a worker process gets sets the lease outright,
 * shorter or not, over what a previous run left, since monotonic clocks restart at boot.
 */
#include "worker/wrk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mu_banned.h"

#define LEASE_MAGIC   0x5345414cu /* "LAES" little-endian: a lease record of this layout */
#define LEASE_VERSION 1u

/* The file's bytes, exactly; the host's byte order (the file never leaves the machine). */
struct lease_file {
    uint32_t magic;
    uint32_t version;
    _Atomic uint32_t lease_s;  /* the scheduler's node_lost_after_s; 0 = no lease */
    uint32_t reserved;         /* 0 */
    _Atomic uint64_t until_ms; /* CLOCK_MONOTONIC ms the lease runs to; 0 = no lease */
};

/* Lock-free is what makes an atomic address-free (C11 7.17.5), so that it works across two
 * mappings of one page in two processes. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a 32-bit atomic must be lock-free");
_Static_assert(sizeof(uint64_t) != sizeof(unsigned long) || ATOMIC_LONG_LOCK_FREE == 2,
               "a 64-bit atomic must be lock-free");
_Static_assert(sizeof(uint64_t) != sizeof(unsigned long long) || ATOMIC_LLONG_LOCK_FREE == 2,
               "a 64-bit atomic must be lock-free");
_Static_assert(sizeof(struct lease_file) == 24, "the lease record is 24 bytes");

struct wrk_lease {
    struct lease_file *map; /* MAP_SHARED; read-only for a reader */
    bool writable;
    uint64_t echo_ms; /* writer: the newest echo that renewed it in this process; 0 = none yet */
};

/* Checks an open fd: a regular file of exactly the record's size. */
static int check_fd(int fd, const char *path, struct mu_err *err)
{
    struct stat st;

    if (fstat(fd, &st) != 0)
        return mu_errf(err, MU_E_IO, "cannot stat '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return mu_errf(err, MU_E_PARSE, "'%s' is not a regular file", path);
    if (st.st_size != (off_t)sizeof(struct lease_file))
        return mu_errf(err, MU_E_PARSE, "'%s' is %lld bytes, not a lease record of %zu", path,
                       (long long)st.st_size, sizeof(struct lease_file));
    return 0;
}

static struct lease_file *map_fd(int fd, bool writable, const char *path, struct mu_err *err)
{
    void *p = mmap(NULL, sizeof(struct lease_file), writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        mu_errf(err, MU_E_IO, "cannot map '%s': %s", path, strerror(errno));
        return NULL;
    }
    return p;
}

static int check_map(const struct lease_file *f, const char *path, struct mu_err *err)
{
    if (f->magic != LEASE_MAGIC || f->version != LEASE_VERSION)
        return mu_errf(err, MU_E_PARSE, "'%s' is not a lease record (magic %08x, version %u)", path,
                       (unsigned)f->magic, (unsigned)f->version);
    return 0;
}

/* Opens and maps an existing record; NULL with err when it is missing or not a record. */
static struct lease_file *open_existing(const char *path, bool writable, struct mu_err *err)
{
    struct lease_file *f = NULL;
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0) {
        mu_errf(err, errno == ENOENT ? MU_E_NOTFOUND : MU_E_IO, "cannot open '%s': %s", path,
                strerror(errno));
        return NULL;
    }
    if (check_fd(fd, path, err) == 0)
        f = map_fd(fd, writable, path, err);
    (void)close(fd); /* the mapping keeps the inode */
    if (f && check_map(f, path, err) != 0) {
        (void)munmap(f, sizeof(*f));
        f = NULL;
    }
    return f;
}

/* Writes a fresh record (no lease) as "<path>.tmp" and renames it over path. */
static struct lease_file *create_fresh(const char *path, struct mu_err *err)
{
    char tmp[PROTO_PATH_MAX + 8];
    struct lease_file *f = NULL;
    int fd;

    if (mu_snprintf(tmp, sizeof(tmp), "%s.tmp", path) != 0) {
        mu_errf(err, MU_E_TOOBIG, "lease path '%s' is too long", path);
        return NULL;
    }
    (void)unlink(tmp); /* a leftover of a worker that died here */
    fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        mu_errf(err, MU_E_IO, "cannot create '%s': %s", tmp, strerror(errno));
        return NULL;
    }
    if (ftruncate(fd, (off_t)sizeof(struct lease_file)) != 0) {
        mu_errf(err, MU_E_IO, "cannot size '%s': %s", tmp, strerror(errno));
        goto fail;
    }
    f = map_fd(fd, true, tmp, err);
    if (!f)
        goto fail;
    f->magic = LEASE_MAGIC;
    f->version = LEASE_VERSION;
    f->reserved = 0;
    atomic_store(&f->lease_s, 0);
    atomic_store(&f->until_ms, 0);
    if (rename(tmp, path) != 0) {
        mu_errf(err, MU_E_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        goto fail;
    }
    (void)close(fd);
    return f;
fail:
    if (f)
        (void)munmap(f, sizeof(*f));
    (void)close(fd);
    (void)unlink(tmp);
    return NULL;
}

struct wrk_lease *wrk_lease_new(const char *path, bool writable, struct mu_err *err)
{
    struct wrk_lease *l;
    struct lease_file *f;
    struct mu_err why;

    mu_err_clear(&why);
    f = open_existing(path, writable, writable ? &why : err);
    if (!f && writable) {
        /* Only the worker replaces a file that is missing or not a record; a symlink is
         * replaced too (rename replaces the link, never its target). */
        if (why.code != MU_E_NOTFOUND)
            mu_log(MU_LOG_WARN, "wrk", "replacing the lease record: %s", why.msg);
        f = create_fresh(path, err);
    }
    if (!f)
        return NULL;
    l = calloc(1, sizeof(*l));
    if (!l) {
        (void)munmap(f, sizeof(*f));
        mu_errf(err, MU_E_NOMEM, "out of memory for the lease");
        return NULL;
    }
    l->map = f;
    l->writable = writable;
    return l;
}

void wrk_lease_free(struct wrk_lease *l)
{
    if (!l)
        return;
    (void)munmap(l->map, sizeof(*l->map));
    free(l);
}

void wrk_lease_read(const struct wrk_lease *l, int *lease_s, uint64_t *until_ms)
{
    if (lease_s)
        *lease_s = (int)atomic_load(&l->map->lease_s);
    if (until_ms)
        *until_ms = atomic_load(&l->map->until_ms);
}

bool wrk_lease_holds(const struct wrk_lease *l, uint64_t now_ms)
{
    int lease_s;
    uint64_t until;

    wrk_lease_read(l, &lease_s, &until);
    return lease_s <= 0 || (until != 0 && now_ms < until);
}

bool wrk_lease_renew(struct wrk_lease *l, int lease_s, uint64_t echo_ms, bool ok, uint64_t now_ms)
{
    int old_s;
    uint64_t old_until;
    uint64_t until;

    wrk_lease_read(l, &old_s, &old_until);
    if (echo_ms == 0)
        return false; /* not an answer, or a scheduler that does not speak the round trip */
    if (lease_s <= 0)
        lease_s = old_s;
    until = old_until;
    /* "I do not know you" (ok false) proves nothing; an echo from the future is not ours. */
    if (ok && lease_s > 0 && echo_ms <= now_ms && echo_ms >= l->echo_ms) {
        l->echo_ms = echo_ms;
        until = echo_ms + (uint64_t)lease_s * 1000u;
    }
    if (lease_s == old_s && until == old_until)
        return false;
    wrk_lease_write(l, lease_s, until);
    return true;
}

void wrk_lease_write(struct wrk_lease *l, int lease_s, uint64_t until_ms)
{
    if (MU_NEVER(!l->writable) || lease_s < 0)
        return; /* a reader's mapping is read-only: a store would fault */
    atomic_store(&l->map->lease_s, (uint32_t)lease_s);
    atomic_store(&l->map->until_ms, until_ms);
}
