/* error.c -- the error reply every request mode writes in place of a
 * member's: one line, from the mode's texts (struct proto_error_texts).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proto/proto.h"

/* Append <s> at <out>[*<w>], up to <room>, CR and LF made blanks: an
 * error reply is one line whatever the detail says. */
static void
put_text(char *out, size_t *w, size_t room, const char *s)
{
    for (; *s != '\0' && *w < room; s++)
        out[(*w)++] = *s == '\r' || *s == '\n' ? ' ' : *s;
}

size_t
proto_error_reply(const struct proto_error_texts *t, char *out, size_t cap,
                  int kind, const char *msg)
{
    bool detail = msg != NULL && msg[0] != '\0';
    size_t w = 0, lead = t->lead[0] != '\0';
    const char *text;

    if (cap < lead + 2) /* not even the lead and CRLF */
        return 0;
    if (kind >= 0 && kind < PROTO_ERR_REQUEST)
        text = t->kinds[kind];
    else if (!detail)
        text = t->request;
    else
        text = t->has_code(msg) ? "" : t->request_prefix;
    put_text(out, &w, lead, t->lead);
    put_text(out, &w, cap - 2, text);
    if (detail) {
        if (kind >= 0 && kind < PROTO_ERR_REQUEST)
            put_text(out, &w, cap - 2, ": ");
        put_text(out, &w, cap - 2, msg);
    }
    out[w++] = '\r';
    out[w++] = '\n';
    return w;
}
