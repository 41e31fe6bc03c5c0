/* hp_side.h -- libhttp-parser (Debian's libhttp-parser-dev) behind a
 * neutral struct, for the differential test of chashd's http parser.
 * http_parser.h and our proto/http.h both define HTTP_GET, HTTP_HEAD...,
 * so each parser lives in its own translation unit.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASH_DIFF_HP_SIDE_H
#define CHASH_DIFF_HP_SIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a parser made of the first request of a buffer. */
enum diff_verdict {
    DIFF_ACCEPT,     /* a whole request, head and body */
    DIFF_REFUSE,     /* an error */
    DIFF_INCOMPLETE, /* more bytes needed */
    DIFF_UPGRADE     /* libhttp-parser: an upgrade, the rest not parsed */
};

#define DIFF_FIELD_MAX 4096
#define DIFF_HEADERS_MAX 160

/* Text copied out of the buffer, NUL-terminated for printing (a NUL
 * inside is kept: lengths are authoritative). */
struct diff_text {
    char s[DIFF_FIELD_MAX];
    size_t len;
};

struct diff_message {
    int verdict; /* enum diff_verdict */
    const char *err;
    struct diff_text method, url;
    int major, minor;
    size_t nheaders;
    struct diff_text name[DIFF_HEADERS_MAX], value[DIFF_HEADERS_MAX];
    bool chunked;          /* the body was chunked */
    struct diff_text body; /* its bytes, decoded */
    size_t consumed;       /* bytes of the request, head and body */
    bool keep_alive;
};

/* libhttp-parser's reading of the first request in <buf>. */
void hp_parse_request(const char *buf, size_t len, struct diff_message *m);

/* Append <n> bytes at <at> to <t> (false when it would not fit). */
bool diff_text_add(struct diff_text *t, const char *at, size_t n);

#endif /* CHASH_DIFF_HP_SIDE_H */
