/* tcp.c -- mode tcp (L4): the ring key of a connection is its client's
 * IP address (or address and port), as text, so that `chash lookup` with
 * the same text names the same member.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proto/tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "conf/conf.h"

const struct proto proto_tcp = {
    .name = "tcp",
    .mode = CONF_MODE_TCP,
    .conn_key = tcp_conn_key,
};

int
tcp_conn_key(const struct sockaddr *peer, socklen_t peerlen, int hash_key,
             char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN];
    unsigned port;
    bool v6 = false;
    int n;

    if (peer->sa_family == AF_INET && peerlen >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)peer;
        if (inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip)) == NULL)
            return -1;
        port = ntohs(sin->sin_port);
    } else if (peer->sa_family == AF_INET6 &&
               peerlen >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)peer;
        if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
            if (inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], ip,
                          sizeof(ip)) == NULL)
                return -1;
        } else {
            if (inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip)) == NULL)
                return -1;
            v6 = true;
        }
        port = ntohs(sin6->sin6_port);
    } else {
        return -1;
    }
    if (hash_key == CONF_HASH_KEY_SOURCE_IP_PORT)
        n = snprintf(buf, cap, v6 ? "[%s]:%u" : "%s:%u", ip, port);
    else
        n = snprintf(buf, cap, "%s", ip);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    return n;
}
