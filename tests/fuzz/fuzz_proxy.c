/* fuzz_proxy.c -- libFuzzer driver for the PROXY protocol parser and
 * writer: any bytes are what a client sends first. The parse must end in
 * a header that lies in the bytes (a v1 line of at most 107 bytes ending
 * in CRLF, a v2 block of at most PROXY_V2_MAX), a wait for more that the
 * bytes' prefixes share, or a refusal with a reason that more bytes do
 * not undo -- never a crash or a read past the end. A header parsed must
 * parse the same from exactly its own bytes, every shorter prefix must
 * wait, and its addresses written back (both versions) must parse to the
 * same endpoints.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "proto/proxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An endpoint compared across versions: IPv4-mapped IPv6 as IPv4 (the
 * writer writes it so). */
struct endpoint {
    int family;
    unsigned char addr[16];
    uint16_t port;
};

static struct endpoint
endpoint_of(const struct sockaddr_storage *ss, socklen_t len)
{
    struct endpoint e;

    memset(&e, 0, sizeof(e));
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
        if (len != sizeof(*s))
            abort();
        e.family = AF_INET;
        memcpy(e.addr, &s->sin_addr, 4);
        e.port = s->sin_port;
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
        if (len != sizeof(*s))
            abort();
        e.port = s->sin6_port;
        if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
            e.family = AF_INET;
            memcpy(e.addr, &s->sin6_addr.s6_addr[12], 4);
        } else {
            e.family = AF_INET6;
            memcpy(e.addr, &s->sin6_addr, 16);
        }
    } else {
        abort(); /* a header's addresses are IPv4 or IPv6 */
    }
    return e;
}

static void
check_prefixes(const char *buf, size_t upto)
{
    struct proxy_header h;
    const char *err;

    for (size_t k = 0; k < upto; k++)
        if (proxy_parse(buf, k, &h, &err) != PROXY_AGAIN)
            abort();
}

/* <h> parsed from <buf>: written back in both versions, it parses to the
 * same endpoints (a mixed IPv4 / mapped pair excepted: see endpoint). */
static void
check_round_trip(const struct proxy_header *h)
{
    static const int versions[] = {CONF_PROXY_V1, CONF_PROXY_V2};
    struct endpoint src = endpoint_of(&h->src, h->srclen);
    struct endpoint dst = endpoint_of(&h->dst, h->dstlen);

    for (size_t i = 0; i < 2; i++) {
        char out[PROXY_WRITE_MAX];
        struct proxy_header back;
        const char *err;
        size_t n;

        n = proxy_write(versions[i], (const struct sockaddr *)&h->src,
                        h->srclen, (const struct sockaddr *)&h->dst, h->dstlen,
                        out, sizeof(out));
        if (n == 0 || proxy_parse(out, n, &back, &err) != PROXY_OK ||
            back.len != n || back.local)
            abort();
        struct endpoint s2 = endpoint_of(&back.src, back.srclen);
        struct endpoint d2 = endpoint_of(&back.dst, back.dstlen);
        if (memcmp(&s2, &src, sizeof(src)) != 0 ||
            memcmp(&d2, &dst, sizeof(dst)) != 0)
            abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct proxy_header h, again;
    const char *err = NULL;
    char *longer;
    int r;

    r = proxy_parse(buf, size, &h, &err);
    switch (r) {
    case PROXY_OK:
        if (h.len == 0 || h.len > size || (h.version != 1 && h.version != 2))
            abort();
        if (h.version == 1 &&
            (h.len > PROXY_V1_MAX || buf[h.len - 2] != '\r' ||
             buf[h.len - 1] != '\n' || memchr(buf, '\n', h.len - 1) != NULL))
            abort();
        if (h.version == 2 && h.len > PROXY_V2_MAX)
            abort();
        if (proxy_parse(buf, h.len, &again, &err) != PROXY_OK ||
            memcmp(&again, &h, sizeof(h)) != 0)
            abort();
        /* every prefix waits (v2's long TLV runs: the first bytes and
         * the last, as each step costs a walk of the TLVs) */
        if (h.len <= PROXY_V1_MAX) {
            check_prefixes(buf, h.len);
        } else {
            check_prefixes(buf, 64);
            if (proxy_parse(buf, h.len - 1, &again, &err) != PROXY_AGAIN)
                abort();
        }
        if (!h.local)
            check_round_trip(&h);
        break;
    case PROXY_AGAIN:
        if (size >= PROXY_V2_MAX)
            abort();
        check_prefixes(buf, size < PROXY_V1_MAX ? size : PROXY_V1_MAX);
        break;
    case PROXY_INVALID:
        if (err == NULL || err[0] == '\0')
            abort();
        /* more bytes never make it valid */
        longer = malloc(size + 8);
        if (longer == NULL)
            return 0;
        if (size > 0)
            memcpy(longer, buf, size);
        memcpy(longer + size, "\r\n0 0\r\n\r\n", 8);
        if (proxy_parse(longer, size + 8, &again, &err) != PROXY_INVALID)
            abort();
        free(longer);
        break;
    default:
        abort();
    }
    return 0;
}
