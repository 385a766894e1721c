/* SPDX-License-Identifier: MIT */
/*
 * One line per event on stderr: time, level, module, message (docs/style.md §1.9).  Daemons run
 * under systemd or a test harness that captures stderr, so there is no log file handling here.
 * mu_log_limited keeps hostile input from flooding the log: a small fixed table of keys, each
 * allowed one line per interval, with a count of what was suppressed.
 */
#include "common/mu.h"

#include <stdio.h>
#include <string.h>

#include "common/mu_banned.h"

static enum mu_log_level min_level = MU_LOG_INFO;

static const char *const level_names[] = { "DEBUG", "INFO", "WARN", "ERROR" };

void mu_log_set_level(enum mu_log_level level)
{
    min_level = level;
}

int mu_log_level_parse(const char *text, enum mu_log_level *out)
{
    static const char *const names[] = { "debug", "info", "warn", "error" };
    for (size_t i = 0; i < MU_ARRAY_LEN(names); i++) {
        if (strcmp(text, names[i]) == 0) {
            *out = (enum mu_log_level)i;
            return 0;
        }
    }
    return -1;
}

__attribute__((format(printf, 3, 0))) static void log_emit(enum mu_log_level level,
                                                           const char *module,
                                                           const char *fmt,
                                                           va_list ap)
{
    char when[40];
    char line[1024];

    mu_time_format_iso(mu_time_wall_ms(), when, sizeof(when));
    (void)vsnprintf(line, sizeof(line), fmt, ap);
    (void)fprintf(stderr, "%s %s %s %s\n", when, level_names[level], module, line);
}

void mu_log(enum mu_log_level level, const char *module, const char *fmt, ...)
{
    va_list ap;
    if (level < min_level)
        return;
    va_start(ap, fmt);
    log_emit(level, module, fmt, ap);
    va_end(ap);
}

struct limit_slot {
    char key[48];
    uint64_t last_ms;
    unsigned long suppressed;
};

void mu_log_limited(enum mu_log_level level,
                    const char *module,
                    const char *key,
                    int interval_s,
                    const char *fmt,
                    ...)
{
    static struct limit_slot slots[32];
    struct limit_slot *slot = NULL;
    uint64_t now = mu_time_mono_ms();
    va_list ap;

    if (level < min_level)
        return;
    for (size_t i = 0; i < MU_ARRAY_LEN(slots) && !slot; i++) {
        if (strcmp(slots[i].key, key) == 0)
            slot = &slots[i];
    }
    if (!slot) {
        /* Reuse the stalest slot: a forgotten key only means one more line gets through. */
        slot = &slots[0];
        for (size_t i = 1; i < MU_ARRAY_LEN(slots); i++) {
            if (slots[i].last_ms < slot->last_ms)
                slot = &slots[i];
        }
        mu_strlcpy(slot->key, key, sizeof(slot->key));
        slot->last_ms = 0;
        slot->suppressed = 0;
    }
    if (slot->last_ms && now - slot->last_ms < (uint64_t)interval_s * 1000) {
        slot->suppressed++;
        return;
    }
    if (slot->suppressed)
        mu_log(level, module, "%lu similar message(s) suppressed (%s)", slot->suppressed, key);
    slot->last_ms = now ? now : 1;
    slot->suppressed = 0;
    va_start(ap, fmt);
    log_emit(level, module, fmt, ap);
    va_end(ap);
}

bool mu_never_(bool cond, const char *expr, const char *file, int line)
{
    if (cond)
        mu_log(MU_LOG_ERROR, "mu", "believed impossible state: %s at %s:%d", expr, file, line);
    return cond;
}
