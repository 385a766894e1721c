/* SPDX-License-Identifier: MIT */
/*
 * proto transport, CURVE key material (issue #5, "who may do what"): generating and checking Z85
 * keys, the key files (one key, comments and blank lines around it; written 0600 when secret)
 * and the allow-list of worker public keys that transport_zap.c enforces.  libzmq encrypts and
 * authenticates; we only load keys.  '#' is a Z85 character, so the parsers treat a line that is
 * exactly one valid key as a key, never a comment.  Every error names the file and line.
 */
#include "protocol/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/mu_banned.h"

static const char z85_chars[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                ".-:+=^!/*?&<>()[]{}@%$#";

bool proto_curve_available(void)
{
    return zmq_has("curve") != 0;
}

bool proto_curve_key_valid(const char *text)
{
    uint8_t raw[32];

    if (!text || strlen(text) != PROTO_CURVE_KEY_LEN)
        return false;
    for (const char *p = text; *p; p++) {
        if (!strchr(z85_chars, *p))
            return false;
    }
    /* Five characters above 2^32 - 1 are Z85 characters but no key. */
    return zmq_z85_decode(raw, text) != NULL;
}

int proto_curve_keypair(struct proto_curve *out, struct mu_err *err)
{
    memset(out, 0, sizeof(*out));
    if (!proto_curve_available())
        return mu_errf(err, MU_E_ZMQ,
                       "this libzmq has no CURVE support (zmq_has(\"curve\") is false); install "
                       "a libzmq built with libsodium");
    if (zmq_curve_keypair(out->public_key, out->secret_key) != 0)
        return mu_errf(err, MU_E_ZMQ, "zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
    return 0;
}

/*
 * The next line of it (without its newline), with leading and trailing blanks cut.  Returns the
 * line's length, or -1 at the end; it->lineno numbers the line.
 */
static int next_line(struct mu_lines *it, const char **line)
{
    const char *p;
    const char *end;
    size_t len;

    if (!mu_lines_next(it, &p, &len))
        return -1;
    end = p + len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
        end--;
    *line = p;
    len = (size_t)(end - p);
    return len > 4096 ? 4096 : (int)len;
}

/*
 * '#' is a Z85 character, so a line that is exactly one valid key is a key even when it starts
 * with '#'; any other line starting with '#' is a comment.
 */
static bool line_is_key(const char *line, int len)
{
    char key[PROTO_CURVE_KEY_LEN + 1];

    if (len != PROTO_CURVE_KEY_LEN)
        return false;
    memcpy(key, line, PROTO_CURVE_KEY_LEN);
    key[PROTO_CURVE_KEY_LEN] = '\0';
    return proto_curve_key_valid(key);
}

/* The one key of a key file's text (comments and blank lines around it). */
static int parse_key_file(const char *text, const char *path, char *out, struct mu_err *err)
{
    struct mu_lines it;
    const char *line;
    int len;
    bool found = false;

    mu_lines_init(&it, text);
    while ((len = next_line(&it, &line)) >= 0) {
        int lineno = it.lineno;

        if (len == 0 || (line[0] == '#' && !line_is_key(line, len)))
            continue;
        if (!line_is_key(line, len))
            return mu_errf(err, MU_E_CONFIG,
                           "%s:%d: expected a CURVE key (%d Z85 characters, as 'musterctl "
                           "keygen' writes), got %d characters",
                           path, lineno, PROTO_CURVE_KEY_LEN, len);
        if (found)
            return mu_errf(err, MU_E_CONFIG, "%s:%d: more than one key in the file", path, lineno);
        memcpy(out, line, PROTO_CURVE_KEY_LEN);
        out[PROTO_CURVE_KEY_LEN] = '\0';
        found = true;
    }
    if (!found)
        return mu_errf(err, MU_E_CONFIG, "%s: no CURVE key in the file", path);
    return 0;
}

int proto_curve_load_secret(const char *path, struct proto_curve *out, struct mu_err *err)
{
    struct stat st;
    char *text = NULL;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (stat(path, &st) != 0)
        return mu_errf(err, MU_E_IO, "secret key '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return mu_errf(err, MU_E_CONFIG, "secret key '%s': not a regular file", path);
    if ((st.st_mode & 077) != 0)
        return mu_errf(err, MU_E_CONFIG,
                       "secret key '%s': mode %04o lets other users read it; run "
                       "'chmod 600 %s' (or make a new pair with 'musterctl keygen')",
                       path, (unsigned)(st.st_mode & 07777), path);
    text = mu_file_read(path, 64u << 10, NULL, err);
    if (!text) {
        mu_err_prefix(err, "secret key: ");
        return -1;
    }
    if (parse_key_file(text, path, out->secret_key, err) != 0)
        goto out;
    if (zmq_curve_public(out->public_key, out->secret_key) != 0) {
        (void)mu_errf(err, MU_E_CONFIG, "secret key '%s': cannot derive the public key: %s", path,
                      zmq_strerror(zmq_errno()));
        goto out;
    }
    rc = 0;
out:
    if (rc != 0)
        memset(out, 0, sizeof(*out));
    if (text) {
        memset(text, 0, strlen(text));
        free(text);
    }
    return rc;
}

int proto_curve_load_public(const char *key_or_path, char *out, size_t out_size, struct mu_err *err)
{
    char *text;
    int rc;

    if (out_size <= PROTO_CURVE_KEY_LEN)
        return mu_errf(err, MU_E_INVAL, "public key buffer too small");
    out[0] = '\0';
    if (!key_or_path || !key_or_path[0])
        return mu_errf(err, MU_E_INVAL, "empty public key");
    if (proto_curve_key_valid(key_or_path)) {
        (void)mu_strlcpy(out, key_or_path, out_size);
        return 0;
    }
    text = mu_file_read(key_or_path, 64u << 10, NULL, err);
    if (!text) {
        mu_err_prefix(err,
                      "public key: not %d Z85 characters, and as a file: ", PROTO_CURVE_KEY_LEN);
        return -1;
    }
    rc = parse_key_file(text, key_or_path, out, err);
    free(text);
    return rc;
}

/* Writes text to path, created with mode (exclusively when excl). */
static int write_file(
    const char *path, const char *text, mode_t mode, bool excl, struct mu_err *err)
{
    size_t len = strlen(text);
    size_t done = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (excl ? O_EXCL : O_TRUNC), mode);

    if (fd < 0)
        return mu_errf(err, MU_E_IO, "cannot create '%s': %s%s", path, strerror(errno),
                       errno == EEXIST ? " (refusing to overwrite a key; remove it first)" : "");
    /* The mode given to open is filtered by the umask: set it exactly. */
    if (fchmod(fd, mode) != 0) {
        (void)mu_errf(err, MU_E_IO, "chmod '%s': %s", path, strerror(errno));
        goto fail;
    }
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            (void)mu_errf(err, MU_E_IO, "write '%s': %s", path, strerror(errno));
            goto fail;
        }
        done += (size_t)n;
    }
    if (close(fd) != 0)
        return mu_errf(err, MU_E_IO, "close '%s': %s", path, strerror(errno));
    return 0;
fail:
    (void)close(fd);
    (void)unlink(path);
    return -1;
}

int proto_curve_save(const struct proto_curve *keys,
                     const char *secret_path,
                     const char *public_path,
                     struct mu_err *err)
{
    char text[512];
    int rc;

    if (!proto_curve_key_valid(keys->public_key) || !proto_curve_key_valid(keys->secret_key))
        return mu_errf(err, MU_E_INVAL, "not a CURVE key pair");
    (void)mu_snprintf(text, sizeof(text),
                      "# muster CURVE secret key: keep this file private (mode 0600)\n"
                      "# public key: %s\n"
                      "%s\n",
                      keys->public_key, keys->secret_key);
    rc = write_file(secret_path, text, 0600, true, err);
    memset(text, 0, sizeof(text));
    if (rc != 0)
        return -1;
    (void)mu_snprintf(text, sizeof(text), "%s\n", keys->public_key);
    if (write_file(public_path, text, 0644, true, err) != 0) {
        (void)unlink(secret_path);
        return -1;
    }
    return 0;
}

/* ---- allow-list ---- */

/* Splits a line into at most 3 blank-separated words (the third only to spot a comment). */
static int split_words(const char *line, int len, const char **w, int *wl)
{
    int n = 0;
    int i = 0;

    while (i < len && n < 3) {
        while (i < len && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i >= len)
            break;
        w[n] = line + i;
        while (i < len && line[i] != ' ' && line[i] != '\t')
            i++;
        wl[n] = (int)(line + i - w[n]);
        n++;
    }
    return n;
}

static int allow_add(struct proto_allow **list,
                     int *count,
                     int *cap,
                     const struct proto_allow *e,
                     struct mu_err *err)
{
    if (*count == *cap) {
        int ncap = *cap ? *cap * 2 : 16;
        struct proto_allow *n = realloc(*list, (size_t)ncap * sizeof(**list));
        if (!n)
            return mu_errf(err, MU_E_NOMEM, "out of memory for the allow-list");
        *list = n;
        *cap = ncap;
    }
    (*list)[(*count)++] = *e;
    return 0;
}

/* One entry line into e; 0 or -1 with err (without the "origin:line: " prefix). */
static int allow_line(const char *line, int len, struct proto_allow *e, struct mu_err *err)
{
    const char *w[3] = { NULL, NULL, NULL };
    int wl[3] = { 0, 0, 0 };
    int n = split_words(line, len, w, wl);
    const char *key;
    int key_len;

    memset(e, 0, sizeof(*e));
    if (n == 0)
        return mu_errf(err, MU_E_CONFIG, "empty entry"); /* callers skip blank lines */
    if (n >= 2 && w[1][0] == '#' && !line_is_key(w[1], wl[1]))
        n = 1; /* "KEY # comment" */
    else if (n == 3 && w[2][0] != '#')
        return mu_errf(err, MU_E_CONFIG, "expected 'KEY' or 'NODE KEY', got more words");
    if (n == 1) {
        key = w[0];
        key_len = wl[0];
    } else {
        if (wl[0] >= PROTO_NODE_MAX) {
            return mu_errf(err, MU_E_CONFIG, "node name longer than %d characters",
                           PROTO_NODE_MAX - 1);
        }
        memcpy(e->node, w[0], (size_t)wl[0]);
        e->node[wl[0]] = '\0';
        if (!mu_name_is_valid(e->node, PROTO_NODE_MAX - 1))
            return mu_errf(err, MU_E_CONFIG,
                           "node name '%s': expected 1..%d characters of [A-Za-z0-9._:-]", e->node,
                           PROTO_NODE_MAX - 1);
        key = w[1];
        key_len = wl[1];
    }
    if (!line_is_key(key, key_len))
        return mu_errf(err, MU_E_CONFIG,
                       "expected a CURVE public key (%d Z85 characters, as 'musterctl keygen' "
                       "prints), got '%.*s'",
                       PROTO_CURVE_KEY_LEN, key_len > 48 ? 48 : key_len, key);
    memcpy(e->key, key, PROTO_CURVE_KEY_LEN);
    e->key[PROTO_CURVE_KEY_LEN] = '\0';
    return 0;
}

int proto_allow_parse(
    const char *text, const char *origin, struct proto_allow **out, int *count, struct mu_err *err)
{
    struct proto_allow *list = NULL;
    struct proto_allow e;
    const char *line;
    int len;
    int n = 0;
    int cap = 0;
    int bound = 0;
    struct mu_lines it;

    *out = NULL;
    *count = 0;
    mu_lines_init(&it, text);
    while ((len = next_line(&it, &line)) >= 0) {
        if (len == 0 || (line[0] == '#' && !line_is_key(line, len)))
            continue;
        if (allow_line(line, len, &e, err) != 0)
            goto fail_line;
        for (int i = 0; i < n; i++) {
            if (strcmp(list[i].key, e.key) == 0) {
                (void)mu_errf(err, MU_E_CONFIG, "key listed twice (first on an earlier line)");
                goto fail_line;
            }
            if (e.node[0] && strcmp(list[i].node, e.node) == 0) {
                (void)mu_errf(err, MU_E_CONFIG, "node '%s' has two keys", e.node);
                goto fail_line;
            }
        }
        if (n > 0 && (bound > 0) != (e.node[0] != '\0')) {
            (void)mu_errf(err, MU_E_CONFIG,
                          "either every key names its node ('NODE KEY') or none does: an "
                          "unbound key could take a bound node's name");
            goto fail_line;
        }
        if (allow_add(&list, &n, &cap, &e, err) != 0)
            goto fail;
        if (e.node[0])
            bound++;
    }
    *out = list;
    *count = n;
    return 0;
fail_line:
    mu_err_prefix(err, "%s:%d: ", origin, it.lineno);
fail:
    free(list);
    return -1;
}
