/* tcp.h -- mode tcp (L4): the key is the client's address.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROTO_TCP_H
#define CHASHD_PROTO_TCP_H

#include <stddef.h>
#include <sys/socket.h>

#include "proto/proto.h"

extern const struct proto proto_tcp;

/*
 * The key text of a peer address: "127.0.0.5" (source_ip) or
 * "127.0.0.5:40000" (source_ip_port); IPv6 compressed ("::1",
 * "[::1]:40000"). An IPv4-mapped IPv6 peer (a dual-stack listener) gives
 * its IPv4 text, so a client keeps its member whatever the listener's
 * family. -1 for AF_UNIX and unknown families.
 */
int tcp_conn_key(const struct sockaddr *peer, socklen_t peerlen, int hash_key,
                 char *buf, size_t cap);

#endif /* CHASHD_PROTO_TCP_H */
