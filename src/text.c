/* text.c -- small text checks shared by the admin API and the membership
 * module.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "text.h"

#include <stdint.h>
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
