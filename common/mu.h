/* SPDX-License-Identifier: MIT */
/*
 * mu: the small shared base of every muster module (docs/style.md §1, §3).
 *
 * Errors are values with a message (struct mu_err), filled where the failure is understood and
 * prefixed with context on the way up.  Logging is one line per event.  Time helpers exist so
 * that the pure core never reads a clock itself: daemons read it here and pass `now` down.
 */
#ifndef MUSTER_COMMON_MU_H
#define MUSTER_COMMON_MU_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Error codes: one list, never renumbered.  X(name, value, default text). */
#define MU_ERR_LIST(X)                        \
    X(MU_E_OK, 0, "ok")                       \
    X(MU_E_INVAL, 1, "invalid argument")      \
    X(MU_E_NOMEM, 2, "out of memory")         \
    X(MU_E_IO, 3, "i/o error")                \
    X(MU_E_PARSE, 4, "parse error")           \
    X(MU_E_RANGE, 5, "value out of range")    \
    X(MU_E_NOTFOUND, 6, "not found")          \
    X(MU_E_REDIS, 7, "redis error")           \
    X(MU_E_ZMQ, 8, "zeromq error")            \
    X(MU_E_PROTO, 9, "protocol error")        \
    X(MU_E_SYS, 10, "system error")           \
    X(MU_E_CONFIG, 11, "configuration error") \
    X(MU_E_SPEC, 12, "invalid job spec")      \
    X(MU_E_TOOBIG, 13, "too large")           \
    X(MU_E_USAGE, 14, "usage error")          \
    X(MU_E_STATE, 15, "wrong state")          \
    X(MU_E_FENCED, 16, "not the leader")

#define MU_ERR_ENUM_ITEM(name, value, text) name = (value),
enum mu_err_code { MU_ERR_LIST(MU_ERR_ENUM_ITEM) };
#undef MU_ERR_ENUM_ITEM

struct mu_err {
    int code;      /* enum mu_err_code */
    char msg[256]; /* lower-case, problem first, no final period */
};

/* Fills err (if not NULL) with code and a formatted message; keeps errno; returns -1. */
int mu_errf(struct mu_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Puts formatted context in front of err's message (truncating at the end if needed). */
void mu_err_prefix(struct mu_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Resets err to MU_E_OK with an empty message. */
void mu_err_clear(struct mu_err *err);

/* The code's name ("MU_E_NOMEM") and default text; "unknown" for codes not in the list. */
const char *mu_err_name(int code);
const char *mu_err_text(int code);

/* Believed-but-unproven states: evaluate to the condition, log when it is violated.  The value
 * comes from x alone, not from mu_never_'s return, so that an analyzer sees the branch taken. */
#define MU_NEVER(x)  ((x) ? ((void)mu_never_(true, #x, __FILE__, __LINE__), true) : false)
#define MU_ALWAYS(x) ((x) ? true : ((void)mu_never_(true, #x, __FILE__, __LINE__), false))
bool mu_never_(bool cond, const char *expr, const char *file, int line);

#define MU_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* A result the caller must look at: the compiler fails a call that drops it (even through a
 * (void) cast, in GCC). */
#define MU_MUST_CHECK __attribute__((warn_unused_result))

/* ---- logging: "2026-11-22T08:00:00.123Z INFO sched job=… message" on stderr ---- */

enum mu_log_level { MU_LOG_DEBUG = 0, MU_LOG_INFO, MU_LOG_WARN, MU_LOG_ERROR };

void mu_log_set_level(enum mu_log_level level);
/* Parses "debug|info|warn|error"; returns -1 on anything else. */
int mu_log_level_parse(const char *text, enum mu_log_level *out);
void mu_log(enum mu_log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * Like mu_log, but at most one line per `key` every `interval_s` seconds; suppressed lines are
 * counted and the count is reported with the next line that gets through.  For hostile input.
 */
void mu_log_limited(enum mu_log_level level,
                    const char *module,
                    const char *key,
                    int interval_s,
                    const char *fmt,
                    ...) __attribute__((format(printf, 5, 6)));

/* ---- time (daemons only; the core takes `now` as a parameter) ---- */

uint64_t mu_time_wall_ms(void);       /* milliseconds since the Unix epoch */
uint64_t mu_time_mono_ms(void);       /* monotonic milliseconds, for timeouts */
uint64_t mu_time_mono_us(void);       /* monotonic microseconds, for benchmarks */
uint64_t mu_time_thread_cpu_us(void); /* CPU time of the calling thread, microseconds */
/* Formats wall ms as "2026-11-22T08:00:00.123Z" into buf (at least 32 bytes). */
void mu_time_format_iso(uint64_t wall_ms, char *buf, size_t size);

/* ---- strings ---- */

/* Copies at most size-1 bytes and terminates; returns strlen(src) (truncated if >= size). */
size_t mu_strlcpy(char *dst, const char *src, size_t size);
/* FNV-1a of n bytes at p: for tables and "did this text change" checks, not for security. */
uint64_t mu_hash(const void *p, size_t n);
/* Goes on with FNV-1a sum h over n more bytes: mu_hash(ab) == mu_hash_more(mu_hash(a), b), and
 * MU_HASH_START is the sum of nothing. */
#define MU_HASH_START 14695981039346656037ull
uint64_t mu_hash_more(uint64_t h, const void *p, size_t n);
/* snprintf that reports truncation: 0 when it fit, -1 when it did not (dst is still terminated). */
int mu_snprintf(char *dst, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Strict decimal integer: the whole string, no spaces, within [min, max].  0 or -1 with err. */
int mu_parse_i64(const char *text, int64_t min, int64_t max, int64_t *out, struct mu_err *err);
/* Strict finite double within [min, max]. */
int mu_parse_double(const char *text, double min, double max, double *out, struct mu_err *err);
/* True if s is a printable name: [A-Za-z0-9._:-], 1..max_len bytes. */
bool mu_name_is_valid(const char *s, size_t max_len);
/* True if s is a MIG profile name as nvidia-smi prints it: [Nc.]Ng.Mgb with an optional
 * "+suffix" ("1g.10gb", "3g.40gb", "1c.3g.71gb", "1g.10gb+me"), at most 31 bytes. */
bool mu_mig_profile_is_valid(const char *s);

/* ---- lines of a text (common/lines.c) ---- */

/* A cursor over a NUL-terminated text's lines: a plain value record the caller embeds; nothing
 * to release.  It borrows the text, which must outlive it. */
struct mu_lines {
    const char *next; /* borrowed: where the next line starts */
    int lineno;       /* 1-based number of the line last returned; 0 before the first */
};

/* Starts a cursor at the first line of text (NULL reads as no lines). */
void mu_lines_init(struct mu_lines *it, const char *text);
/* The next line as a borrowed span, without its '\n' and not NUL-terminated: valid as long as
 * the text.  False at the end.  It advances it->lineno. */
bool mu_lines_next(struct mu_lines *it, const char **line, size_t *len);
/* The next line that is not blank (only blanks, tabs and CRs), copied into buf (size bytes)
 * with trailing blanks, tabs and CRs cut; it->lineno is its number.  1 for a line, 0 at the end,
 * -1 with err (MU_E_PARSE, "line N: longer than SIZE-1 bytes") when a line, blank or not, does
 * not fit whole in size-1 bytes. */
int mu_lines_copy(struct mu_lines *it, char *buf, size_t size, struct mu_err *err);

/* ---- growable byte buffer (embedded: _init/_release) ---- */

struct mu_buf {
    char *data; /* always NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
    size_t max; /* cap on len; 0 = 64 MiB */
};

void mu_buf_init(struct mu_buf *b, size_t max);
void mu_buf_release(struct mu_buf *b);
int mu_buf_append(struct mu_buf *b, const void *data, size_t len, struct mu_err *err);
int mu_buf_appendf(struct mu_buf *b, struct mu_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends s as a JSON string literal, quotes included, escaping as RFC 8259 requires. */
int mu_buf_append_json_str(struct mu_buf *b, const char *s, struct mu_err *err);
/* Hands the data to the caller (free() it) and leaves b empty; NULL if b was empty. */
char *mu_buf_take(struct mu_buf *b);

/*
 * Reads a whole file (at most max_bytes) into a NUL-terminated heap string; free() it.  Follows
 * symlinks and reads whatever the path opens (a pipe, /dev/stdin, a /proc file): for files the
 * caller trusts or names itself.  Errors: MU_E_IO (open, read), MU_E_TOOBIG, MU_E_NOMEM.
 */
char *mu_file_read(const char *path, size_t max_bytes, size_t *len_out, struct mu_err *err);

/*
 * Reads a small file that someone else may have written (a task's checkpoint file, a shim's
 * record), guarded against what that someone may have put there instead: opened with O_NOFOLLOW
 * (a symlink is refused, its target never read) and O_NONBLOCK (a FIFO cannot block the caller),
 * it must be a regular file (a FIFO, a directory or a device is refused) of at most max_bytes,
 * a cap that also holds while reading (a file that grows meanwhile); reads are retried on EINTR.
 *
 * Returns 1 with *out a NUL-terminated heap string (free() it; the file may hold NUL bytes:
 * *len_out, which may be NULL, is its length) and *mtime_ms (may be NULL) the file's
 * modification time in wall ms; 0 when the file does not exist (ENOENT; nothing set, err
 * untouched); -1 with err, nothing set: MU_E_IO "cannot open 'P': ..." (a symlink: "Too many
 * levels of symbolic links"), "cannot stat 'P': ...", "'P' is not a regular file", "cannot read
 * 'P': ..."; MU_E_TOOBIG "'P' is larger than N bytes"; MU_E_NOMEM.  Blocks only on the disk.
 */
int mu_file_read_small(const char *path,
                       size_t max_bytes,
                       char **out,
                       size_t *len_out,
                       uint64_t *mtime_ms,
                       struct mu_err *err);

/* ---- string-keyed hash map (heap: _new/_free); values are borrowed pointers ---- */

struct mu_map;

/*
 * An empty map; free with mu_map_free (which frees the copied keys, not the values).
 * mu_map_free, mu_map_count and mu_map_next take m == NULL as an empty map (nothing to free, 0,
 * no values), so a cleanup path may walk and free a map its setup never created.  The other
 * calls need a map from mu_map_new.
 */
struct mu_map *mu_map_new(void);
void mu_map_free(struct mu_map *m);
/* Stores value under a copy of key, replacing any old value. */
int mu_map_put(struct mu_map *m, const char *key, void *value, struct mu_err *err);
/* The value or NULL. */
void *mu_map_get(const struct mu_map *m, const char *key);
/* Removes key; returns its value or NULL. */
void *mu_map_remove(struct mu_map *m, const char *key);
/* How many keys m holds; 0 for NULL. */
size_t mu_map_count(const struct mu_map *m);
/*
 * Iteration: start with *pos = 0; returns the next value and advances *pos, NULL at the end
 * (at once for m == NULL).  Removing the returned key during iteration is allowed; adding keys
 * is not.
 */
void *mu_map_next(const struct mu_map *m, size_t *pos);

/* ---- Redis URLs: the one grammar of every way of naming Redis (common/url.c) ---- */

/* Where muster finds Redis and its keys when nothing names them: the flag, MUSTER_REDIS_URL,
 * the config's "redis" and the libraries all fall back to these. */
#define MU_REDIS_URL_DEFAULT  "redis://127.0.0.1:6379"
#define MU_KEY_PREFIX_DEFAULT "muster:"

enum { MU_REDIS_SENTINELS_MAX = 8 };

struct mu_redis_host {
    char host[256];
    int port;
};

struct mu_redis_url {
    char host[256]; /* the server; with Sentinels, the primary they named last (port 0: none yet) */
    int port;
    char user[128];     /* "" = none */
    char password[256]; /* "" = none */
    int db;
    int nsentinels; /* > 0: redis+sentinel://, the primary is asked of these */
    struct mu_redis_host sentinels[MU_REDIS_SENTINELS_MAX];
    char master[128]; /* the primary's name in the Sentinels' configuration */
};

/* "redis://[user:pass@]host[:port][/db]" (also "redis://:pass@host"), port default 6379; or
 * "redis+sentinel://[user:pass@]host[:port][,host[:port]...]/master[/db]", Sentinel port default
 * 26379, at most MU_REDIS_SENTINELS_MAX of them, the credentials and db the primary's.  Parses
 * only: nothing is resolved or connected (queue_new does that).  Errors are MU_E_PARSE and name
 * the URL; out is zeroed first and undefined on failure. */
int mu_redis_url_parse(const char *url, struct mu_redis_url *out, struct mu_err *err);

/* ---- small things ---- */

/* Parses a signal name ("SIGUSR1", "USR1", "TERM") or number; -1 if unknown. */
int mu_signal_parse(const char *name);
/* "SIGUSR1" for a known number, else "SIG?" */
const char *mu_signal_name(int sig);
/* A duration for people, rounded up to what is shown: "45s", "5m", "2h05m" (negative = "0s").
 * Truncated to fit size (NUL always written when size > 0). */
void mu_duration_format(int64_t s, char *buf, size_t size);

#endif
