/* http.h -- the http mode's engine inside one worker: HTTP/1.1 on both
 * sides with keep-alive. Each request of a client connection is routed on
 * its own, by the pool's hash_key chain (a header, a cookie, a query
 * parameter, the path, the uri, the host, the client's address), to a
 * member, over the worker's pooled connections to that member. One
 * request of a connection is in flight at a time: pipelined requests wait
 * in the client's buffer and are answered in order. Bodies stream through
 * (Content-Length and chunked, both ways); an Upgrade answered 101 turns
 * the pair into a tunnel. chashd writes 400/413/414/431/502/503/504 itself
 * and retries an idempotent request on the next member when its member
 * fails before any byte of a response.
 * Runs inside one worker; nothing here is shared between threads.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_HTTP_H
#define CHASHD_HTTP_H

#include <sys/socket.h>

struct worker;
struct listener;

/* engine_accept_fn for http pools (engine.h). */
void http_accept(struct worker *w, struct listener *l, int fd,
                 const struct sockaddr *peer, socklen_t peerlen);

#endif /* CHASHD_HTTP_H */
