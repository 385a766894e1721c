/* SPDX-License-Identifier: MIT */
/*
 * Plain-text tables in the style of squeue and kubectl: a header row, columns padded to their
 * widest cell, two spaces between columns.  When the table is wider than the terminal, the
 * columns marked flexible (node lists, reasons, labels) give up width, widest first, and their
 * cells are cut with "…"; the others never are, so ids stay copyable.  Widths count UTF-8
 * characters, not bytes.  Colour wraps the state column only when ctl->color says so, and is
 * added after padding so that escape codes never count as width.
 */
#include "cli/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define CTL_TABLE_GAP      2
#define CTL_TABLE_MIN_FLEX 8 /* a flexible column keeps at least this many characters */
#define CTL_COLOR_RESET    "\033[0m"
#define CTL_COLOR_GREEN    "\033[32m"
#define CTL_COLOR_RED      "\033[31m"
#define CTL_COLOR_YELLOW   "\033[33m"

struct ctl_table {
    const char *const *headers; /* borrowed */
    size_t ncols;
    bool flex[16];
    bool state[16];
    char ***rows; /* per row, one allocation: ncols cell pointers, then the cells' bytes */
    size_t nrows;
    size_t cap_rows;
};

const char *ctl_state_color(const char *state)
{
    static const struct {
        const char *state;
        const char *color;
    } colors[] = {
        { "RUNNING", CTL_COLOR_GREEN },   { "SUCCEEDED", CTL_COLOR_GREEN },
        { "ready", CTL_COLOR_GREEN },     { "FAILED", CTL_COLOR_RED },
        { "REJECTED", CTL_COLOR_RED },    { "TIMEOUT", CTL_COLOR_RED },
        { "lost", CTL_COLOR_RED },        { "terminating", CTL_COLOR_RED },
        { "PENDING", CTL_COLOR_YELLOW },  { "cordoned", CTL_COLOR_YELLOW },
        { "draining", CTL_COLOR_YELLOW }, { "PREEMPTING", CTL_COLOR_YELLOW },
        { "down", CTL_COLOR_YELLOW },
    };

    for (size_t i = 0; i < MU_ARRAY_LEN(colors); i++) {
        if (strcmp(state, colors[i].state) == 0)
            return colors[i].color;
    }
    return NULL;
}

/* Display width of UTF-8 text: every byte that does not continue a sequence. */
static size_t text_width(const char *s)
{
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        w += (*p & 0xC0) != 0x80;
    return w;
}

struct ctl_table *ctl_table_new(const char *const *headers, size_t ncols)
{
    struct ctl_table *t;

    if (ncols == 0 || ncols > MU_ARRAY_LEN(t->flex))
        return NULL;
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->headers = headers;
    t->ncols = ncols;
    return t;
}

void ctl_table_free(struct ctl_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nrows; i++)
        free(t->rows[i]);
    free(t->rows);
    free(t);
}

void ctl_table_set_flex(struct ctl_table *t, size_t col)
{
    if (col < t->ncols)
        t->flex[col] = true;
}

void ctl_table_set_state(struct ctl_table *t, size_t col)
{
    if (col < t->ncols)
        t->state[col] = true;
}

/* Copies s to d with control characters replaced, so stored text cannot drive the terminal;
 * returns the byte after the copy's NUL. */
static char *cell_copy(char *d, const char *s, size_t len)
{
    memcpy(d, s, len);
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)d[i] < 0x20 || d[i] == 0x7f)
            d[i] = '?';
    }
    d[len] = '\0';
    return d + len + 1;
}

int ctl_table_add(struct ctl_table *t, const char *const *cells)
{
    size_t len[16];
    size_t size = t->ncols * sizeof(char *);
    char **row;
    char *p;

    if (t->nrows == t->cap_rows) {
        size_t cap = t->cap_rows ? t->cap_rows * 2 : 16;
        char ***grown = realloc(t->rows, cap * sizeof(*grown));
        if (!grown)
            return -1;
        t->rows = grown;
        t->cap_rows = cap;
    }
    for (size_t c = 0; c < t->ncols; c++) {
        len[c] = cells[c] ? strlen(cells[c]) : 0;
        size += len[c] + 1;
    }
    row = malloc(size);
    if (!row)
        return -1;
    p = (char *)(row + t->ncols);
    for (size_t c = 0; c < t->ncols; c++) {
        row[c] = p;
        p = cell_copy(p, cells[c] ? cells[c] : "", len[c]);
    }
    t->rows[t->nrows++] = row;
    return 0;
}

/* Shrinks flexible columns, widest first, until the table fits `width` or none can shrink. */
static void fit_widths(const struct ctl_table *t, size_t *w, size_t width)
{
    size_t total = 0;

    for (size_t c = 0; c < t->ncols; c++)
        total += w[c] + (c ? CTL_TABLE_GAP : 0);
    while (width && total > width) {
        size_t best = t->ncols;
        for (size_t c = 0; c < t->ncols; c++) {
            size_t floor = text_width(t->headers[c]);
            if (floor < CTL_TABLE_MIN_FLEX)
                floor = CTL_TABLE_MIN_FLEX;
            if (t->flex[c] && w[c] > floor && (best == t->ncols || w[c] > w[best]))
                best = c;
        }
        if (best == t->ncols)
            return;
        w[best]--;
        total--;
    }
}

/* Prints s in at most w characters (cut with "…"), padded to w unless it is the last column. */
static void print_cell(FILE *out, const char *s, size_t w, bool last, const char *color)
{
    size_t sw = text_width(s);
    size_t shown = 0;

    if (color)
        (void)fputs(color, out);
    if (sw <= w) {
        (void)fputs(s, out);
        shown = sw;
    } else {
        const unsigned char *p = (const unsigned char *)s;
        /* Copy whole characters up to w - 1, then the ellipsis. */
        while (*p && shown < w - 1) {
            (void)fputc(*p++, out);
            while ((*p & 0xC0) == 0x80)
                (void)fputc(*p++, out);
            shown++;
        }
        (void)fputs("…", out);
        shown++;
    }
    if (color)
        (void)fputs(CTL_COLOR_RESET, out);
    if (!last) {
        static const char spaces[] =
            "                                                                ";
        for (size_t pad = w + CTL_TABLE_GAP - shown; pad > 0;) {
            size_t k = pad < sizeof(spaces) - 1 ? pad : sizeof(spaces) - 1;
            (void)fwrite(spaces, 1, k, out);
            pad -= k;
        }
    }
}

void ctl_table_print(const struct ctl_table *t, const struct ctl *ctl, FILE *out)
{
    size_t w[16];

    for (size_t c = 0; c < t->ncols; c++) {
        w[c] = text_width(t->headers[c]);
        for (size_t r = 0; r < t->nrows; r++) {
            size_t cw = text_width(t->rows[r][c]);
            if (cw > w[c])
                w[c] = cw;
        }
    }
    fit_widths(t, w, ctl->width);
    for (size_t c = 0; c < t->ncols; c++)
        print_cell(out, t->headers[c], w[c], c + 1 == t->ncols, NULL);
    (void)fputc('\n', out);
    for (size_t r = 0; r < t->nrows; r++) {
        char *const *row = t->rows[r];
        size_t end = t->ncols; /* cells from end on are empty: no trailing blanks */
        while (end > 1 && row[end - 1][0] == '\0')
            end--;
        for (size_t c = 0; c < end; c++) {
            const char *color = ctl->color && t->state[c] ? ctl_state_color(row[c]) : NULL;
            print_cell(out, row[c], w[c], c + 1 == end, color);
        }
        (void)fputc('\n', out);
    }
}
