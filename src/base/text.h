/* text.h -- small text checks shared by the admin API and the membership
 * module: UTF-8 scrubbing for JSON, and member names as the config allows.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_TEXT_H
#define CHASHD_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Longest member name: the config's bound (twemproxy hashes "<name>-<i>"
 * into a 273-byte buffer). */
#define TEXT_NAME_MAX 255

/*
 * Replace, in place, every byte of <s> that is not part of valid UTF-8 by
 * '?'. Messages echo URLs, which libmicrohttpd percent-decodes to any
 * bytes (%FF), and snprintf may cut a message inside a character: jansson
 * refuses such strings, and the client would get no answer at all.
 */
void text_utf8_scrub(char *s);

/* A member name given at run time: one word as in `servers:` (no
 * whitespace, no control byte, no '/', so it fits a URL path segment),
 * printable ASCII, 1 to TEXT_NAME_MAX bytes. */
bool text_name_ok(const char *s);

/* True when <s> (<len> bytes) holds a control byte (below 0x20, or 0x7f)
 * or a NUL. */
bool text_has_control(const char *s, size_t len);

/*
 * The first control byte (as text_has_control) that <url>, the target of
 * a request line as sent, holds raw or percent-encoded ("%00", "%0a",
 * "%7F"): its value, or -1 when there is none. *<in_query> (may be NULL)
 * says whether it sits after the '?'. An HTTP server decodes the URL into
 * C strings: "members/web-1%00junk" reached the handler as "web-1", and a
 * "%0a" in a name would end up in the log and the state file.
 */
int text_url_control(const char *url, bool *in_query);

/* A line being built in a caller's buffer: <len> never passes <cap>; once
 * something does not fit, nothing more is added (<full>), so an escape is
 * never cut in half. */
struct text_line {
    char *buf;
    size_t len;
    size_t cap;
    bool full;
};

/* Append <n> bytes of <s> to <l>, whole or not at all. */
void text_put(struct text_line *l, const char *s, size_t n);
void text_puts(struct text_line *l, const char *s);

/* Length of the well-formed UTF-8 sequence at <s> (<n> bytes left), 0
 * when the bytes there are not one (RFC 3629). */
size_t text_utf8_len(const unsigned char *s, size_t n);

/* Append <s> (<n> bytes) as the inside of a JSON string: '"', '\' and
 * control bytes (DEL too) escaped, U+2028/9 escaped, each byte that is not
 * well-formed UTF-8 as \ufffd (RFC 8259). */
void text_put_json(struct text_line *l, const char *s, size_t n);

#endif /* CHASHD_TEXT_H */
