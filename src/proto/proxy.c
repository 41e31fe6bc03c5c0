/* proxy.c -- the PROXY protocol, versions 1 and 2 (see proxy.h).
 *
 * A receiver that takes a PROXY header trusts the sender with the
 * client's address, so the parser is as strict as proxy-protocol.txt:
 * anything that does not match the grammar exactly closes the connection
 * (the spec asks for that, so that a sender's mistake shows at once
 * rather than as wrong addresses). Version 1 is one text line of at most
 * 107 bytes: "PROXY TCP4|TCP6 src dst sport dport\r\n" with single spaces,
 * addresses in their family's text (inet_pton of that family: no leading
 * zeros in IPv4, one "::" in IPv6), ports 0..65535 without leading zeros;
 * or "PROXY UNKNOWN" and anything up to the CRLF. Version 2 is a 16-byte
 * binary block (a 12-byte signature no other protocol starts with, the
 * version and command, the family and transport, the length of what
 * follows) then the addresses and TLVs.
 *
 * Both are parsed from the first byte each time they are called: the
 * caller peeks at what the socket holds and consumes only the header once
 * it is whole (the bytes after it stay the client's). A header is short
 * and arrives at once, nearly always, so there is no resumable state to
 * keep and nothing the fuzzer could desynchronise. Each field is judged
 * as soon as its bytes are there, so that a client speaking some other
 * protocol is refused on its first bytes, not after a timeout.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proto/proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "conf/conf.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Version 2's first 12 bytes: CRLF CRLF NUL CRLF "QUIT" LF. */
static const unsigned char v2_sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                         0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
#define V2_HEAD 16 /* signature, ver_cmd, family, length */

/* v2 command (low nibble of the 13th byte) and family bytes. */
#define V2_LOCAL 0x0
#define V2_PROXY 0x1
#define V2_TCP4 0x11
#define V2_TCP6 0x21

/* The longest address text inet_pton takes for IPv6 ("::ffff:" and a
 * dotted quad included, as inet_ntop writes IPv4-mapped addresses): a
 * sender may use any of them. */
#define V1_ADDR_MAX (INET6_ADDRSTRLEN - 1)

/* ---- version 1 ----------------------------------------------------------- */

/*
 * A cursor over the line. <len> is the caller's length capped at
 * PROXY_V1_MAX: running out of bytes there means the line is too long
 * (INVALID), before it that more may come (AGAIN).
 */
struct v1 {
    const char *buf;
    size_t len;
    size_t pos;
};

/* The bytes ran out before the line's end: the spec bounds the line at
 * 107 bytes with its CRLF, so a sender that has written that many without
 * one is not sending a header, and waiting for more would let a client
 * hold the connection with an endless line. */
static int
v1_out_of_bytes(const struct v1 *v, const char **err)
{
    if (v->len == PROXY_V1_MAX) {
        *err = "PROXY v1: no CRLF in the first 107 bytes";
        return PROXY_INVALID;
    }
    return PROXY_AGAIN;
}

/* The one family word of "TCP4 ", "TCP6 ", "UNKNOWN" the bytes at the
 * cursor start with (its index in <families>, the cursor past it), or
 * AGAIN while the bytes there are a prefix of one of them. */
static const char *const v1_families[] = {"TCP4 ", "TCP6 ", "UNKNOWN"};

static int
v1_family(struct v1 *v, size_t *which, const char **err)
{
    size_t avail = v->len - v->pos;
    bool prefix = false;

    for (size_t i = 0; i < ARRAY_SIZE(v1_families); i++) {
        size_t n = strlen(v1_families[i]);
        size_t cmp = n < avail ? n : avail;

        if (memcmp(v->buf + v->pos, v1_families[i], cmp) != 0)
            continue;
        if (cmp == n) {
            *which = i;
            v->pos += n;
            return PROXY_OK;
        }
        prefix = true;
    }
    if (prefix)
        return v1_out_of_bytes(v, err);
    *err = "PROXY v1: the protocol is not TCP4, TCP6 or UNKNOWN followed by "
           "one space";
    return PROXY_INVALID;
}

/*
 * "UNKNOWN": the sender could not tell the addresses. The spec lets it
 * write anything before the CRLF and tells the receiver to ignore it --
 * anything but a lone CR or LF, which must not end a line.
 */
static int
v1_unknown(struct v1 *v, const char **err)
{
    if (v->pos < v->len && v->buf[v->pos] != ' ' && v->buf[v->pos] != '\r') {
        *err = "PROXY v1: UNKNOWN followed by neither a space nor CRLF";
        return PROXY_INVALID;
    }
    for (; v->pos < v->len; v->pos++) {
        char ch = v->buf[v->pos];

        if (ch == '\n') {
            *err = "PROXY v1: a line ended by LF alone";
            return PROXY_INVALID;
        }
        if (ch != '\r')
            continue;
        if (v->pos + 1 == v->len)
            break;
        if (v->buf[v->pos + 1] != '\n') {
            *err = "PROXY v1: CR not followed by LF";
            return PROXY_INVALID;
        }
        v->pos += 2;
        return PROXY_OK;
    }
    return v1_out_of_bytes(v, err);
}

static bool
addr_char(char ch, bool v6)
{
    if ((ch >= '0' && ch <= '9') || ch == '.')
        return true;
    return v6 &&
           (ch == ':' || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F'));
}

/* What is wrong with an address field, for the source and the
 * destination. */
struct v1_field_errors {
    const char *empty, *bad_char, *too_long, *bad;
};

static const struct v1_field_errors src_errors = {
    "PROXY v1: empty source address (two spaces?)",
    "PROXY v1: a character that is not its family's in the source address",
    "PROXY v1: source address too long",
    "PROXY v1: the source address is not one of the protocol's family",
};
static const struct v1_field_errors dst_errors = {
    "PROXY v1: empty destination address (two spaces?)",
    "PROXY v1: a character that is not its family's in the destination "
    "address",
    "PROXY v1: destination address too long",
    "PROXY v1: the destination address is not one of the protocol's family",
};

/*
 * An address of the family <v6> up to the space after it, into <addr>
 * (4 or 16 bytes): only its family's characters, at most as many as its
 * longest text, parsed whole by inet_pton once the space is there.
 */
static int
v1_addr(struct v1 *v, bool v6, void *addr, const struct v1_field_errors *e,
        const char **err)
{
    size_t start = v->pos;
    char text[V1_ADDR_MAX + 1];

    for (;; v->pos++) {
        size_t n = v->pos - start;

        if (v->pos == v->len)
            return v1_out_of_bytes(v, err);
        if (v->buf[v->pos] == ' ') {
            if (n == 0) {
                *err = e->empty;
                return PROXY_INVALID;
            }
            memcpy(text, v->buf + start, n);
            text[n] = '\0';
            if (inet_pton(v6 ? AF_INET6 : AF_INET, text, addr) != 1) {
                *err = e->bad;
                return PROXY_INVALID;
            }
            v->pos++;
            return PROXY_OK;
        }
        if (!addr_char(v->buf[v->pos], v6)) {
            *err = e->bad_char;
            return PROXY_INVALID;
        }
        if (n == (v6 ? V1_ADDR_MAX : INET_ADDRSTRLEN - 1)) {
            *err = e->too_long;
            return PROXY_INVALID;
        }
    }
}

/*
 * A port up to <delim>: 1 to 5 decimal digits, no leading zero (the spec
 * forbids them: they could be read as octal), at most 65535. The cursor
 * stops past <delim>.
 */
static int
v1_port(struct v1 *v, char delim, uint16_t *port, const char *what,
        const char **err)
{
    size_t start = v->pos;
    uint32_t value = 0;

    for (;; v->pos++) {
        char ch;

        if (v->pos == v->len)
            return v1_out_of_bytes(v, err);
        ch = v->buf[v->pos];
        if (ch == delim && v->pos > start) {
            *port = (uint16_t)value;
            v->pos++;
            return PROXY_OK;
        }
        /* a digit, not after a leading zero, the value still a port */
        if (ch < '0' || ch > '9' || (v->pos > start && value == 0)) {
            *err = what;
            return PROXY_INVALID;
        }
        value = value * 10 + (uint32_t)(ch - '0');
        if (value > 65535) {
            *err = what;
            return PROXY_INVALID;
        }
    }
}

/* Version 1: the line after the family, for TCP4 (<v6> false) or TCP6. */
static int
v1_tcp(struct v1 *v, bool v6, struct proxy_header *h, const char **err)
{
    unsigned char src[16], dst[16];
    uint16_t sport, dport;
    int r;

    if ((r = v1_addr(v, v6, src, &src_errors, err)) != PROXY_OK ||
        (r = v1_addr(v, v6, dst, &dst_errors, err)) != PROXY_OK ||
        (r = v1_port(v, ' ', &sport,
                     "PROXY v1: the source port is not 0..65535 (without "
                     "leading zeros) followed by one space",
                     err)) != PROXY_OK ||
        (r = v1_port(v, '\r', &dport,
                     "PROXY v1: the destination port is not 0..65535 "
                     "(without leading zeros) followed by CRLF",
                     err)) != PROXY_OK)
        return r;
    if (v->pos == v->len)
        return v1_out_of_bytes(v, err);
    if (v->buf[v->pos] != '\n') {
        *err = "PROXY v1: CR not followed by LF";
        return PROXY_INVALID;
    }
    v->pos++;

    memset(h, 0, sizeof(*h));
    if (v6) {
        struct sockaddr_in6 s = {.sin6_family = AF_INET6};

        memcpy(&s.sin6_addr, src, 16);
        s.sin6_port = htons(sport);
        memcpy(&h->src, &s, sizeof(s));
        memcpy(&s.sin6_addr, dst, 16);
        s.sin6_port = htons(dport);
        memcpy(&h->dst, &s, sizeof(s));
        h->srclen = h->dstlen = sizeof(s);
    } else {
        struct sockaddr_in s = {.sin_family = AF_INET};

        memcpy(&s.sin_addr, src, 4);
        s.sin_port = htons(sport);
        memcpy(&h->src, &s, sizeof(s));
        memcpy(&s.sin_addr, dst, 4);
        s.sin_port = htons(dport);
        memcpy(&h->dst, &s, sizeof(s));
        h->srclen = h->dstlen = sizeof(s);
    }
    return PROXY_OK;
}

static int
v1_parse(const char *buf, size_t len, struct proxy_header *h, const char **err)
{
    struct v1 v = {buf, len < PROXY_V1_MAX ? len : PROXY_V1_MAX, 0};
    size_t family;
    int r;

    /* "PROXY " */
    for (const char *lit = "PROXY "; *lit != '\0'; lit++, v.pos++) {
        if (v.pos == v.len)
            return v1_out_of_bytes(&v, err);
        if (v.buf[v.pos] != *lit) {
            *err = "not a PROXY header (neither \"PROXY \" nor the v2 "
                   "signature)";
            return PROXY_INVALID;
        }
    }
    /* The family word carries its space (TCP4 and TCP6 have addresses
     * after it); UNKNOWN may end the line at once. */
    if ((r = v1_family(&v, &family, err)) != PROXY_OK)
        return r;
    if (family == 2) {
        /* UNKNOWN: the connection's own addresses */
        if ((r = v1_unknown(&v, err)) != PROXY_OK)
            return r;
        memset(h, 0, sizeof(*h));
        h->local = true;
    } else if ((r = v1_tcp(&v, family == 1, h, err)) != PROXY_OK) {
        return r;
    }
    h->len = v.pos;
    h->version = 1;
    return PROXY_OK;
}

/* ---- version 2 ----------------------------------------------------------- */

/*
 * The size of the address block of family byte <fam> under the PROXY
 * command, or -1 for a byte the spec does not list. The spec lists UNSPEC
 * (0x00), TCP and UDP over IPv4 (0x11, 0x12) and IPv6 (0x21, 0x22), and
 * unix stream and datagram sockets (0x31, 0x32), and says that a receiver
 * that does not support one of them takes it as UNSPEC (the connection's
 * own addresses); any other byte must be refused.
 */
static int
v2_addr_len(unsigned fam)
{
    switch (fam) {
    case 0x00:
        return 0;
    case 0x11:
    case 0x12:
        return 2 * 4 + 2 * 2;
    case 0x21:
    case 0x22:
        return 2 * 16 + 2 * 2;
    case 0x31:
    case 0x32:
        return 2 * 108;
    default:
        return -1;
    }
}

/* The TLVs in <p>[0..<n>): each a type byte, a 16-bit big-endian length
 * and that many bytes, the last ending exactly at <n>. Their content is
 * not ours (TLS details, a unique id, padding): only the framing is
 * checked, as a cut TLV means a header we misread. */
static bool
v2_tlvs_whole(const unsigned char *p, size_t n)
{
    size_t pos = 0;

    while (pos < n) {
        size_t vlen;

        if (n - pos < 3)
            return false;
        vlen = (size_t)p[pos + 1] << 8 | p[pos + 2];
        if (vlen > n - pos - 3)
            return false;
        pos += 3 + vlen;
    }
    return true;
}

static int
v2_parse(const char *buf, size_t len, struct proxy_header *h, const char **err)
{
    const unsigned char *b = (const unsigned char *)buf;
    size_t cmp = len < sizeof(v2_sig) ? len : sizeof(v2_sig);
    unsigned cmd = 0, fam = 0;
    size_t total;
    int alen = 0;

    if (memcmp(b, v2_sig, cmp) != 0) {
        *err = "not a PROXY header (neither \"PROXY \" nor the v2 "
               "signature)";
        return PROXY_INVALID;
    }
    /* Each byte is judged as soon as it is there. */
    if (len > 12) {
        if (b[12] >> 4 != 2) {
            *err = "PROXY v2: the version is not 2";
            return PROXY_INVALID;
        }
        cmd = b[12] & 0x0F;
        if (cmd != V2_LOCAL && cmd != V2_PROXY) {
            *err = "PROXY v2: the command is neither LOCAL nor PROXY";
            return PROXY_INVALID;
        }
    }
    if (len > 13 && cmd == V2_PROXY) {
        /* LOCAL: the spec says the family is ignored */
        fam = b[13];
        alen = v2_addr_len(fam);
        if (alen < 0) {
            *err = "PROXY v2: an address family or transport the spec "
                   "does not define";
            return PROXY_INVALID;
        }
    }
    if (len < V2_HEAD)
        return PROXY_AGAIN;
    total = V2_HEAD + ((size_t)b[14] << 8 | b[15]);
    /* The length field is judged as soon as it is there, before the
     * bytes it announces: a client that claims 64 KiB, or fewer bytes
     * than its family's addresses, is refused at its 16th byte rather
     * than when the wait for the rest runs out. */
    if (total > PROXY_V2_MAX) {
        *err = "PROXY v2: a header longer than 4096 bytes";
        return PROXY_INVALID;
    }
    if (total - V2_HEAD < (size_t)alen) {
        *err = "PROXY v2: the length is shorter than the addresses of "
               "its family";
        return PROXY_INVALID;
    }
    if (len < total)
        return PROXY_AGAIN;
    if (cmd == V2_PROXY && fam != 0x00 &&
        !v2_tlvs_whole(b + V2_HEAD + alen, total - V2_HEAD - (size_t)alen)) {
        *err = "PROXY v2: a TLV runs past the header's length";
        return PROXY_INVALID;
    }

    /* The addresses are taken for TCP only: chashd splices streams, and
     * the spec lets a receiver use the connection's own endpoints for a
     * family it does not support rather than refuse it. */
    memset(h, 0, sizeof(*h));
    h->len = total;
    h->version = 2;
    if (cmd == V2_PROXY && fam == V2_TCP4) {
        struct sockaddr_in s = {.sin_family = AF_INET};

        memcpy(&s.sin_addr, b + 16, 4);
        memcpy(&s.sin_port, b + 24, 2);
        memcpy(&h->src, &s, sizeof(s));
        memcpy(&s.sin_addr, b + 20, 4);
        memcpy(&s.sin_port, b + 26, 2);
        memcpy(&h->dst, &s, sizeof(s));
        h->srclen = h->dstlen = sizeof(s);
    } else if (cmd == V2_PROXY && fam == V2_TCP6) {
        struct sockaddr_in6 s = {.sin6_family = AF_INET6};

        memcpy(&s.sin6_addr, b + 16, 16);
        memcpy(&s.sin6_port, b + 48, 2);
        memcpy(&h->src, &s, sizeof(s));
        memcpy(&s.sin6_addr, b + 32, 16);
        memcpy(&s.sin6_port, b + 50, 2);
        memcpy(&h->dst, &s, sizeof(s));
        h->srclen = h->dstlen = sizeof(s);
    } else {
        /* LOCAL, UNSPEC, UDP, unix: the connection's own addresses */
        h->local = true;
    }
    return PROXY_OK;
}

int
proxy_parse(const char *buf, size_t len, struct proxy_header *h,
            const char **err)
{
    /* The two versions differ in their first byte: 'P' or CR. */
    if (len == 0)
        return PROXY_AGAIN;
    if (buf[0] == 'P')
        return v1_parse(buf, len, h, err);
    if (buf[0] == '\r')
        return v2_parse(buf, len, h, err);
    *err = "not a PROXY header (neither \"PROXY \" nor the v2 signature)";
    return PROXY_INVALID;
}

/* ---- writing ------------------------------------------------------------- */

/*
 * The writer sends what the spec recommends a proxy send: the addresses of
 * the connection it relays, one family for both ends. When it cannot name
 * them (a unix socket, which v1 cannot express and few receivers take in
 * v2), it says so with UNKNOWN or LOCAL rather than inventing addresses: a
 * receiver then keys on chashd's own connection, which is wrong only for
 * it, and visibly so.
 */

/* An endpoint as written: IPv4 (IPv4-mapped IPv6 included) or IPv6, its
 * address in network order, its port in host order. */
struct endpoint {
    int family;
    unsigned char addr[16];
    uint16_t port;
};

static bool
endpoint_of(const struct sockaddr *sa, socklen_t len, struct endpoint *e)
{
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in s;

        memcpy(&s, sa, sizeof(s));
        e->family = AF_INET;
        memcpy(e->addr, &s.sin_addr, 4);
        e->port = ntohs(s.sin_port);
        return true;
    }
    if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 s;

        memcpy(&s, sa, sizeof(s));
        e->port = ntohs(s.sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&s.sin6_addr)) {
            /* a dual-stack listener's IPv4 client: it is IPv4 */
            e->family = AF_INET;
            memcpy(e->addr, &s.sin6_addr.s6_addr[12], 4);
        } else {
            e->family = AF_INET6;
            memcpy(e->addr, &s.sin6_addr, 16);
        }
        return true;
    }
    return false;
}

/* IPv4 <e> as its IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
static void
endpoint_map6(struct endpoint *e)
{
    if (e->family != AF_INET)
        return;
    memmove(e->addr + 12, e->addr, 4);
    memset(e->addr, 0, 10);
    e->addr[10] = e->addr[11] = 0xFF;
    e->family = AF_INET6;
}

static size_t
write_v1(const struct endpoint *src, const struct endpoint *dst, char *out,
         size_t cap)
{
    char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];
    int n;

    /* the short UNKNOWN form: the spec lets the sender omit the rest */
    if (src == NULL) {
        n = snprintf(out, cap, "PROXY UNKNOWN\r\n");
    } else {
        if (inet_ntop(src->family, src->addr, s, sizeof(s)) == NULL ||
            inet_ntop(dst->family, dst->addr, d, sizeof(d)) == NULL)
            return 0;
        n = snprintf(out, cap, "PROXY %s %s %s %u %u\r\n",
                     src->family == AF_INET ? "TCP4" : "TCP6", s, d,
                     (unsigned)src->port, (unsigned)dst->port);
    }
    if (n < 0 || (size_t)n >= cap)
        return 0;
    return (size_t)n;
}

static size_t
write_v2(const struct endpoint *src, const struct endpoint *dst, char *out,
         size_t cap)
{
    unsigned char *o = (unsigned char *)out;
    size_t alen = 0, a;

    /* LOCAL carries no addresses (family UNSPEC, length 0), as the spec
     * advises; PROXY the two addresses and ports of its family, no TLV */
    if (src != NULL)
        alen = src->family == AF_INET ? 12 : 36;
    if (cap < V2_HEAD + alen)
        return 0;
    memcpy(o, v2_sig, sizeof(v2_sig));
    o[12] = 0x20 | (src != NULL ? V2_PROXY : V2_LOCAL);
    o[13] = src == NULL ? 0x00 : src->family == AF_INET ? V2_TCP4 : V2_TCP6;
    o[14] = (unsigned char)(alen >> 8);
    o[15] = (unsigned char)alen;
    if (src == NULL)
        return V2_HEAD;
    /* both addresses, then both ports, in network order */
    a = src->family == AF_INET ? 4 : 16;
    memcpy(o + V2_HEAD, src->addr, a);
    memcpy(o + V2_HEAD + a, dst->addr, a);
    o[V2_HEAD + 2 * a] = (unsigned char)(src->port >> 8);
    o[V2_HEAD + 2 * a + 1] = (unsigned char)src->port;
    o[V2_HEAD + 2 * a + 2] = (unsigned char)(dst->port >> 8);
    o[V2_HEAD + 2 * a + 3] = (unsigned char)dst->port;
    return V2_HEAD + alen;
}

size_t
proxy_write(int version, const struct sockaddr *src, socklen_t srclen,
            const struct sockaddr *dst, socklen_t dstlen, char *out, size_t cap)
{
    struct endpoint s, d;
    bool known = endpoint_of(src, srclen, &s) && endpoint_of(dst, dstlen, &d);

    if (known && s.family != d.family) {
        /* one line names one family: the IPv4 one is mapped */
        endpoint_map6(&s);
        endpoint_map6(&d);
    }
    switch (version) {
    case CONF_PROXY_V1:
        return write_v1(known ? &s : NULL, known ? &d : NULL, out, cap);
    case CONF_PROXY_V2:
        return write_v2(known ? &s : NULL, known ? &d : NULL, out, cap);
    default:
        return 0;
    }
}
