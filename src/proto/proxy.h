/* proxy.h -- the PROXY protocol (HAProxy's proxy-protocol.txt, versions 1
 * and 2) as pure functions: a header at the start of a connection parsed
 * into the client's and the reached addresses, and a header written for
 * a connection chashd opens to a member. No I/O, no allocation, no state.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROTO_PROXY_H
#define CHASHD_PROTO_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

enum proxy_status { PROXY_OK, PROXY_AGAIN, PROXY_INVALID };

/* The longest v1 line, CRLF included ("PROXY UNKNOWN" with two IPv6
 * addresses and two ports of five digits: the spec's worst case). */
#define PROXY_V1_MAX 107
/* The longest v2 header taken: 16 bytes and the addresses and TLVs its
 * length field announces. The field allows 64 KiB; what senders put
 * there (TLS details, a unique id, padding) stays far below this. */
#define PROXY_V2_MAX 4096
/* The longest header proxy_write writes: a v1 TCP6 line (104 bytes). */
#define PROXY_WRITE_MAX 108

/*
 * A parsed header. <src> and <dst> are AF_INET or AF_INET6 with their
 * ports, <srclen> and <dstlen> their sizes; with <local> set they are
 * zeroed: the sender asks to keep the connection's own endpoints (v1
 * UNKNOWN; v2 LOCAL, or v2 PROXY for a family other than TCP over IPv4
 * or IPv6, which the spec says to treat as UNSPEC).
 */
struct proxy_header {
    size_t len;                       /* bytes of the header (consumed) */
    int version;                      /* 1 or 2 */
    bool local;                       /* keep the connection's own addresses */
    struct sockaddr_storage src, dst; /* the client and the address it
                                         reached (when !local) */
    socklen_t srclen, dstlen;
};

/*
 * Parse a PROXY header (v1 or v2, told apart by the first bytes) at the
 * start of <buf> (<len> bytes). PROXY_OK: <h> is filled and h->len bytes
 * are the header (those after it are the client's own). PROXY_AGAIN: no
 * byte so far breaks the grammar, more are needed (<h> is untouched; an
 * address is judged whole, once the space after it came). AGAIN never
 * comes for PROXY_V2_MAX bytes or more: a reader that peeks that many
 * needs no other bound. PROXY_INVALID: the bytes are not, and cannot
 * become, a header the spec allows; *<err> is a static reason naming
 * what is wrong. Once INVALID, more bytes stay INVALID; once OK, more
 * bytes give the same header. Never reads past <len>, whatever the bytes.
 */
int proxy_parse(const char *buf, size_t len, struct proxy_header *h,
                const char **err);

/*
 * Write a header of <version> (CONF_PROXY_V1 or CONF_PROXY_V2) for a
 * connection from <src> (<srclen> bytes) to <dst> into <out> (<cap>
 * bytes); returns its length, or 0 when it does not fit (PROXY_WRITE_MAX
 * always does) or <version> is neither. IPv4-mapped IPv6 addresses are
 * written as IPv4 (as HAProxy does); an IPv4 and an IPv6 address are both
 * written as IPv6. Another family on either side (a unix socket), or a
 * length too short for its family, writes v1 "PROXY UNKNOWN\r\n" or a v2
 * LOCAL header: the receiver then keeps the connection's own addresses.
 */
size_t proxy_write(int version, const struct sockaddr *src, socklen_t srclen,
                   const struct sockaddr *dst, socklen_t dstlen, char *out,
                   size_t cap);

#endif /* CHASHD_PROTO_PROXY_H */
