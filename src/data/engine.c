/* engine.c -- what every connection engine does alike: admit a client,
 * count a routing decision, account a member's failed connect, give a
 * member back, fill an access log line, write a PROXY header. The table
 * of engines by mode sits above them (data/dispatch.c).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/engine.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/invariant.h"
#include "base/log.h"
#include "base/stats.h"
#include "conf/conf.h"
#include "loop/access_log.h"
#include "loop/io.h"
#include "loop/worker.h"
#include "model/pool.h"
#include "proto/proxy.h"

bool
engine_admit(struct worker *w, struct pool *p, int fd)
{
    const struct pool_snapshot *snap = pool_snapshot(p);
    struct stats_pool *st = &p->stats[w->id];
    uint64_t active;
    int one = 1;

    stats_add(&st->accepted, 1);
    active = atomic_fetch_add_explicit(&p->active, 1, memory_order_relaxed);
    if (snap->set.client_connections > 0 &&
        active >= snap->set.client_connections) {
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_relaxed);
        stats_add(&st->refused_limit, 1);
        log_info_limited(10,
                         "pool %s: client refused: client_connections %u "
                         "reached",
                         p->name, snap->set.client_connections);
        close(fd);
        return false;
    }
    /* (a unix socket's client refuses TCP_NODELAY: harmless) */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (snap->set.tcpkeepalive)
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    return true;
}

void
engine_count_decision(struct stats_pool *st, int decision)
{
    switch (decision) {
    case STATS_FIRST_CHOICE:
        stats_add(&st->first_choice, 1);
        break;
    case STATS_SPILLED:
        stats_add(&st->spilled, 1);
        break;
    case STATS_FAILED_OVER:
        stats_add(&st->failed_over, 1);
        break;
    case STATS_REFUSED_ERROR:
        stats_add(&st->refused_error, 1);
        break;
    default:
        stats_add(&st->no_member, 1);
        break;
    }
}

int
engine_member_dial(const struct server *s, bool keepalive, int *fd)
{
    int one = 1;

    *fd = socket(s->addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                 0);
    if (*fd < 0)
        return ENGINE_NO_SOCKET;
    if (keepalive)
        setsockopt(*fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    if (s->addr.family != AF_UNIX)
        setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(*fd, (const struct sockaddr *)&s->addr.sa, s->addr.salen) ==
        0) {
        if (!io_connected_to_self(*fd, &s->addr.sa))
            return ENGINE_CONNECTED;
        errno = ECONNREFUSED;
        return ENGINE_CONNECT_FAILED;
    }
    return errno == EINPROGRESS ? ENGINE_CONNECTING : ENGINE_CONNECT_FAILED;
}

void
engine_connect_failed(struct worker *w, struct pool *p, struct server *s,
                      bool timeout, int err)
{
    stats_add(&s->stats[w->id].connect_failures, 1);
    if (timeout)
        stats_add(&s->stats[w->id].connect_timeouts, 1);
    pool_member_failed(p, s);
    log_info_limited(10, "pool %s: connect to %s (%s) failed: %s", p->name,
                     s->name, s->addr.text,
                     timeout ? "timed out" : strerror(err));
}

size_t
engine_proxy_hello(int fd, int version, const struct sockaddr *src,
                   socklen_t srclen, const struct sockaddr *dst,
                   socklen_t dstlen, char *out)
{
    struct sockaddr_storage self;
    socklen_t selflen = sizeof(self);
    size_t n;

    if (dst == NULL) {
        if (getsockname(fd, (struct sockaddr *)&self, &selflen) < 0)
            selflen = 0; /* an UNKNOWN / LOCAL header then */
        dst = (const struct sockaddr *)&self;
        dstlen = selflen;
    }
    n = proxy_write(version, src, srclen, dst, dstlen, out, PROXY_WRITE_MAX);
    INVARIANT(n > 0); /* PROXY_WRITE_MAX always fits */
    return n;
}

void
engine_release_member(struct pool *p, struct server **s, bool *counted)
{
    if (*s == NULL)
        return;
    if (*counted) {
        atomic_fetch_sub_explicit(&(*s)->active, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&p->active_backends, 1, memory_order_relaxed);
        *counted = false;
    }
    server_unref(*s);
    *s = NULL;
}

void
engine_access_entry(struct access_entry *e, const struct pool *p,
                    const struct sockaddr_storage *peer, socklen_t peerlen,
                    const struct server *s, int routing, uint32_t attempts)
{
    e->pool = p->name;
    e->client = peerlen > 0 ? (const struct sockaddr *)peer : NULL;
    e->client_len = peerlen;
    if (s != NULL) {
        e->member = s->name;
        e->member_addr = s->addr.text;
    }
    e->routing = routing;
    e->retries = attempts > 1 ? attempts - 1 : 0;
}
