/* dispatch.c -- the table of connection engines, by mode: the one file of
 * data/ above all the engines (engine.c holds what they share, below
 * them).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/dispatch.h"

#include <unistd.h>

#include "conf/conf.h"
#include "data/engine.h"
#include "data/http.h"
#include "data/memcache_mode.h"
#include "data/redis_mode.h"
#include "data/request.h"
#include "data/splice.h"
#include "model/pool.h"

static void
dispatch_accept(struct worker *w, struct listener *l, int fd,
                const struct sockaddr *peer, socklen_t peerlen)
{
    engine_accept_fn *accept_fn;

    switch (pool_snapshot(l->pool)->set.mode) {
    case CONF_MODE_TCP:
        accept_fn = splice_accept;
        break;
    case CONF_MODE_HTTP:
        accept_fn = http_accept;
        break;
    case CONF_MODE_REDIS:
    case CONF_MODE_MEMCACHE:
        accept_fn = request_accept;
        break;
    default:
        close(fd); /* a mode without an engine never gets a listener */
        return;
    }
    accept_fn(w, l, fd, peer, peerlen);
}

static void
dispatch_listening(struct worker *w, struct listener *l)
{
    int mode = pool_snapshot(l->pool)->set.mode;

    if (mode == CONF_MODE_REDIS || mode == CONF_MODE_MEMCACHE)
        request_preconnect(w, l->pool);
}

static const char *
dispatch_pool_name(const struct pool *p)
{
    return p->name;
}

static bool
dispatch_address_ours(const struct conf_addr *addr)
{
    for (size_t i = 0; i < pool_count(); i++)
        if (conf_addr_equal(&pool_at(i)->cfg.listen, addr))
            return true;
    return false;
}

static const struct worker_hooks dispatch_worker_hooks = {
    .accept = dispatch_accept,
    .listening = dispatch_listening,
    .pool_ref = pool_ref,
    .pool_unref = pool_unref,
    .pool_name = dispatch_pool_name,
    .address_ours = dispatch_address_ours,
    .enter = pool_epoch_enter,
    .quiesce = pool_epoch_quiesce,
};

void
dispatch_init(void)
{
    redis_mode_init();
    request_register_modes(&redis_request_mode, &memcache_request_mode);
    worker_set_hooks(&dispatch_worker_hooks);
}
