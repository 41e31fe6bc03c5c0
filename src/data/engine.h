/* engine.h -- what the connection engines (splice.c, http.c, request.c)
 * share: admitting a client, routing counts, a member's failed connect,
 * access log entries, PROXY headers. Which engine serves a mode is
 * dispatch.h's.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_ENGINE_H
#define CHASHD_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct worker;
struct listener;
struct pool;

/* Take client <fd> (non-blocking, close-on-exec) accepted on <l> from
 * <peer>: the engine owns it from here (closes it on any failure). */
typedef void engine_accept_fn(struct worker *w, struct listener *l, int fd,
                              const struct sockaddr *peer, socklen_t peerlen);

/* A client of pool <p> accepted by worker <w>: counted, and admitted
 * (true: <p>'s `active` counts it, the engine's to give back at its
 * close; its socket has the pool's options, TCP_NODELAY and
 * tcpkeepalive's SO_KEEPALIVE) or refused at `client_connections`
 * (false: <fd> is closed). */
bool engine_admit(struct worker *w, struct pool *p, int fd);

/* Count routing decision <decision> (enum stats_decision) in <st>, the
 * worker's stats slot of the pool. */
struct stats_pool;
void engine_count_decision(struct stats_pool *st, int decision);

/* A connect of worker <w> to member <s> of <p> failed (<timeout>, or
 * errno <err>): counted against the member (its failures in a row reach
 * server_failure_limit: the control thread ejects it), logged (rate
 * limited). The caller tries the next member. */
struct server;
void engine_connect_failed(struct worker *w, struct pool *p, struct server *s,
                           bool timeout, int err);

/*
 * A connection to member <s>, the one way every engine opens one: a
 * non-blocking, close-on-exec socket, TCP_NODELAY over TCP, SO_KEEPALIVE
 * when <keepalive> (the pool's tcpkeepalive), its connect started.
 *   ENGINE_CONNECTING: in progress, *<fd> open (an output edge tells);
 *   ENGINE_CONNECTED: at once (a unix socket, mostly), and not to itself;
 *   ENGINE_NO_SOCKET: no descriptor (errno), *<fd> -1: not the member's
 *     failure;
 *   ENGINE_CONNECT_FAILED: refused at once, or connected to itself
 *     (ECONNREFUSED; see io_connected_to_self), errno set, *<fd> still
 *     open: the caller closes it as it closes a connection that fails
 *     later, and counts the member's failure (engine_connect_failed).
 */
enum engine_dial {
    ENGINE_CONNECTING,
    ENGINE_CONNECTED,
    ENGINE_NO_SOCKET,
    ENGINE_CONNECT_FAILED
};
int engine_member_dial(const struct server *s, bool keepalive, int *fd);

/* A connection (tcp) or request (http) is done with member *<s> of <p>:
 * its place in the bounded-load counts given back (when *<counted>) and
 * its reference dropped; *<s> NULL after. NULL *<s>: nothing. */
void engine_release_member(struct pool *p, struct server **s, bool *counted);

/* The fields every access log line has (access_log.h): pool <p>, the
 * client <peer> (<peerlen> 0: none), member <s> (NULL: none), the routing
 * decision (or ACCESS_NO_ROUTING) and the retries of <attempts> connects. */
struct access_entry;
void engine_access_entry(struct access_entry *e, const struct pool *p,
                         const struct sockaddr_storage *peer, socklen_t peerlen,
                         const struct server *s, int routing,
                         uint32_t attempts);

/* send_proxy: the PROXY header (<version>: enum conf_send_proxy) of a
 * client connection <fd> from <src> to <dst> (NULL: the address <fd>
 * reached), into <out> (PROXY_WRITE_MAX bytes); its length. */
size_t engine_proxy_hello(int fd, int version, const struct sockaddr *src,
                          socklen_t srclen, const struct sockaddr *dst,
                          socklen_t dstlen, char *out);

#endif /* CHASHD_ENGINE_H */
