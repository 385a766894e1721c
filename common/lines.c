/* SPDX-License-Identifier: MIT */
/*
 * A cursor over the lines of a NUL-terminated text, for the line-oriented parsers (nvidia-smi's
 * CSV and -L listing in worker/, the CURVE key and allow files in protocol/).  They used to cut
 * lines with a loop of their own each; this is that loop, once.  A '\n' ends a line, a last line
 * without one still counts, and nothing after a final '\n' is a line.  mu_lines_next borrows
 * from the text; mu_lines_copy skips blank lines, copies the next one into a caller's fixed
 * buffer and reports a line that does not fit as an error naming the line, never truncating it.
 */
#include "common/mu.h"

#include <string.h>

#include "common/mu_banned.h"

void mu_lines_init(struct mu_lines *it, const char *text)
{
    it->next = text;
    it->lineno = 0;
}

bool mu_lines_next(struct mu_lines *it, const char **line, size_t *len)
{
    const char *p = it->next;
    const char *eol;

    if (!p || !*p)
        return false;
    eol = strchr(p, '\n');
    *line = p;
    *len = eol ? (size_t)(eol - p) : strlen(p);
    it->next = eol ? eol + 1 : p + *len;
    it->lineno++;
    return true;
}

int mu_lines_copy(struct mu_lines *it, char *buf, size_t size, struct mu_err *err)
{
    const char *line;
    size_t len;

    do {
        if (!mu_lines_next(it, &line, &len))
            return 0;
        if (len >= size)
            return mu_errf(err, MU_E_PARSE, "line %d: longer than %zu bytes", it->lineno, size - 1);
        while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r'))
            len--;
    } while (strspn(line, " \t") >= len); /* blank: nothing but blanks, tabs and CRs */
    memcpy(buf, line, len);
    buf[len] = '\0';
    return 1;
}
