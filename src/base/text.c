/* text.c -- small text checks shared by the admin API and the membership
 * module.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "base/text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

void
text_utf8_scrub(char *s)
{
    unsigned char *p = (unsigned char *)s;

    while (*p != '\0') {
        size_t n, i;
        uint32_t cp;

        if (*p < 0x80) {
            p++;
            continue;
        }
        if (*p >= 0xC2 && *p <= 0xDF)
            n = 1, cp = *p & 0x1Fu;
        else if (*p >= 0xE0 && *p <= 0xEF)
            n = 2, cp = *p & 0x0Fu;
        else if (*p >= 0xF0 && *p <= 0xF4)
            n = 3, cp = *p & 0x07u;
        else {
            *p++ = '?';
            continue;
        }
        /* a NUL stops the loop: it is not a continuation byte */
        for (i = 1; i <= n && (p[i] & 0xC0) == 0x80; i++)
            cp = cp << 6 | (p[i] & 0x3Fu);
        /* overlong forms, surrogates and code points past U+10FFFF are
         * not UTF-8 either */
        if (i <= n ||
            (n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
            *p++ = '?';
            continue;
        }
        p += n + 1;
    }
}

bool
text_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > TEXT_NAME_MAX)
        return false;
    for (; *s; s++)
        if (*s <= ' ' || *s > '~' || *s == '/')
            return false;
    return true;
}

bool
text_has_control(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return true;
    return false;
}

static int
hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int
text_url_control(const char *url, bool *in_query)
{
    bool query = false;

    for (const char *p = url; *p != '\0'; p++) {
        char b = *p;

        if (b == '?')
            query = true;
        /* "%4" or "%zz" is no escape: a decoder leaves it as it is (so
         * does libmicrohttpd's), and so does this scan. */
        if (b == '%' && hex_digit(p[1]) >= 0 && hex_digit(p[2]) >= 0) {
            b = (char)(hex_digit(p[1]) << 4 | hex_digit(p[2]));
            p += 2;
        }
        if (text_has_control(&b, 1)) {
            if (in_query != NULL)
                *in_query = query;
            return (unsigned char)b;
        }
    }
    return -1;
}

/* ---- bounded lines (the daemon log, the access log) ---------------------- */

void
text_put(struct text_line *l, const char *s, size_t n)
{
    if (l->full || n > l->cap - l->len) {
        l->full = true;
        return;
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

void
text_puts(struct text_line *l, const char *s)
{
    text_put(l, s, strlen(s));
}

/*
 * Length of the well-formed UTF-8 sequence at <s> (of <n> bytes left), or
 * 0 when the bytes there are not one: a stray continuation byte, a
 * truncated sequence, an overlong form, a surrogate or a code point above
 * U+10FFFF (RFC 3629, table 3-7 of the Unicode standard).
 */
size_t
text_utf8_len(const unsigned char *s, size_t n)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t len;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4;
    else
        return 0;
    if (len > n)
        return 0;
    /* The second byte's range excludes overlongs (e0, f0), surrogates
     * (ed) and code points past U+10FFFF (f4). */
    if (s[0] == 0xe0)
        lo = 0xa0;
    else if (s[0] == 0xed)
        hi = 0x9f;
    else if (s[0] == 0xf0)
        lo = 0x90;
    else if (s[0] == 0xf4)
        hi = 0x8f;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

/*
 * Append <msg> (<n> bytes) as the inside of a JSON string: '"', '\' and
 * every control character escaped (DEL too, so a terminal shows it), the
 * line and paragraph separators U+2028/9 escaped (valid JSON, but they
 * end a line in JavaScript), and each byte that is not part of a
 * well-formed UTF-8 sequence replaced by \ufffd: a JSON text must be
 * UTF-8 (RFC 8259), and \u00XX would name a different character.
 */
void
text_put_json(struct text_line *l, const char *msg, size_t n)
{
    const unsigned char *s = (const unsigned char *)msg;
    char esc[8];

    for (size_t i = 0; i < n && !l->full;) {
        size_t k = text_utf8_len(s + i, n - i);

        if (k == 0) {
            text_puts(l, "\\ufffd");
            i++;
            continue;
        }
        if (k == 3 && s[i] == 0xe2 && s[i + 1] == 0x80 &&
            (s[i + 2] == 0xa8 || s[i + 2] == 0xa9)) {
            text_puts(l, s[i + 2] == 0xa8 ? "\\u2028" : "\\u2029");
        } else if (k > 1) {
            text_put(l, msg + i, k);
        } else if (s[i] == '"' || s[i] == '\\') {
            esc[0] = '\\';
            esc[1] = (char)s[i];
            text_put(l, esc, 2);
        } else if (s[i] == '\n') {
            text_puts(l, "\\n");
        } else if (s[i] == '\r') {
            text_puts(l, "\\r");
        } else if (s[i] == '\t') {
            text_puts(l, "\\t");
        } else if (s[i] < 0x20 || s[i] == 0x7f) {
            snprintf(esc, sizeof(esc), "\\u%04x", s[i]);
            text_puts(l, esc);
        } else {
            text_put(l, msg + i, 1);
        }
        i += k;
    }
}
