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

#endif /* CHASHD_TEXT_H */
