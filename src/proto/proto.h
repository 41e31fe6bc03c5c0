/* proto.h -- the per-mode plug-in seam of the connection engine: what a
 * mode supplies (today: how to turn a client connection into a ring key).
 * Wave 2 adds request parsing for http, redis and memcache here.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROTO_H
#define CHASHD_PROTO_H

#include <stddef.h>
#include <sys/socket.h>

/* Longest key a mode produces from a connection ("[v6]:port"). */
#define PROTO_KEY_MAX 64

struct proto {
    const char *name; /* the config's mode name */
    int mode;         /* enum conf_mode */
    /*
     * The ring key for a client whose address is <peer>/<peerlen>, as
     * text into <buf> (<cap> bytes): <hash_key> (enum conf_hash_key)
     * selects the attribute. Returns the key length, or -1 when the
     * address family has no key (the connection is refused). A pure
     * function: no I/O, fuzzable.
     */
    int (*conn_key)(const struct sockaddr *peer, socklen_t peerlen,
                    int hash_key, char *buf, size_t cap);
};

/* The plug-in for <mode> (enum conf_mode), or NULL when that mode is not
 * implemented yet. */
const struct proto *proto_find(int mode);

/* "tcp", "http", "redis", "memcache" for messages. */
const char *proto_mode_name(int mode);

#endif /* CHASHD_PROTO_H */
