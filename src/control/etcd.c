/* etcd.c -- pools whose members come from etcd: see etcd.h and
 * doc/etcd.md. Facts about etcd 3.4's JSON gateway that the module relies
 * on (base64 keys and values, int64 as strings, omitted zero fields, the
 * watch stream's framing, the resume rule, compaction and wipe detection)
 * are in doc/etcd.md's "Talking to etcd".
 *
 * The module in files (what they share: etcd_int.h):
 *   etcd.c            start, reload, stop; the queue of messages from the
 *                     etcd threads to the control thread, and its drain
 *   etcd_http.c       HTTP to etcd's JSON gateway, and its JSON pieces
 *   etcd_watch.c      the watcher thread: list, seed, watch
 *   etcd_session.c    the session thread: lease, instance record, writes
 *   etcd_fence.c      the fence of pools that copy keys
 *   etcd_apply.c      etcd's records into the pools (through membership)
 *   etcd_migration.c  one migration, several instances
 *   etcd_write.c      the admin API's writes as etcd transactions
 *   etcd_status.c     the link's state, /api/cluster, the metrics
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/clock.h"
#include "base/log.h"
#include "conf/conf.h"
#include "control/etcd_int.h"
#include "control/migration.h"
#include "model/pool.h"

/* The module's singletons (etcd_int.h says who touches what). */
struct etcd_settings etcd_cfg;
struct etcd_shared_state etcd_shared = {.mu = PTHREAD_MUTEX_INITIALIZER,
                                        .cond = PTHREAD_COND_INITIALIZER,
                                        .efd = -1,
                                        .watch_fd = -1};
struct etcd_control etcd_ctl;

/* ---- messages to the control thread -------------------------------------- */

void
etcd_post(struct etcd_msg *m)
{
    uint64_t one = 1;

    pthread_mutex_lock(&etcd_shared.mu);
    m->next = NULL;
    *etcd_shared.tail = m;
    etcd_shared.tail = &m->next;
    pthread_mutex_unlock(&etcd_shared.mu);
    if (write(etcd_shared.efd, &one, sizeof(one)) < 0) {
        /* the counter is already non-zero: the loop will drain */
    }
}

void
etcd_post_status(bool up, const char *state, const char *fmt, ...)
{
    struct etcd_msg *m = calloc(1, sizeof(*m));
    va_list ap;

    if (m == NULL)
        return;
    m->type = ETCD_MSG_STATUS;
    m->up = up;
    snprintf(m->state, sizeof(m->state), "%s", state);
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(m->error, sizeof(m->error), fmt, ap);
        va_end(ap);
    }
    etcd_post(m);
}

/* ---- etcd pools ---------------------------------------------------------- */

struct etcd_cpool *
etcd_cpool_find(const char *name)
{
    for (size_t i = 0; i < etcd_ctl.npools; i++)
        if (strcmp(etcd_ctl.pools[i].name, name) == 0)
            return &etcd_ctl.pools[i];
    return NULL;
}

bool
etcd_defers_listen(const struct pool *p)
{
    return p->cfg.members_from == CONF_MEMBERS_ETCD &&
           p->cfg.migration == CONF_MIGRATION_COPY;
}

bool
etcd_listening(const struct pool *p)
{
    const struct etcd_cpool *cp = etcd_cpool_find(p->name);

    return !etcd_shared.running || cp == NULL || cp->listening;
}

void
etcd_set_listen(etcd_listen_fn *fn)
{
    etcd_ctl.listen = fn;
}

bool
etcd_pool(const struct pool *p)
{
    return etcd_shared.running && p != NULL &&
           p->cfg.members_from == CONF_MEMBERS_ETCD;
}

/* ---- the control thread's loop ------------------------------------------- */

/* On every control tick: the fence's log lines, the
 * migration writes retried, the admin writes not applied in time. */
static void
tick(uint64_t now_ms, void *arg)
{
    (void)arg;
    etcd_fence_tick(now_ms);
    if (now_ms >= etcd_ctl.reconcile_ms) {
        etcd_ctl.reconcile_ms = now_ms + 200; /* retries of the migration
                                                 writes */
        etcd_migration_reconcile_all();
    }
    etcd_writes_expire(now_ms);
}

/* The etcd threads' messages, in order. */
static void
drain_cb(struct control_watch *watch, uint32_t events)
{
    uint64_t v;
    struct etcd_msg *m;

    (void)watch, (void)events;
    if (read(etcd_shared.efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        return;
    for (;;) {
        pthread_mutex_lock(&etcd_shared.mu);
        m = etcd_shared.head;
        if (m != NULL) {
            etcd_shared.head = m->next;
            if (etcd_shared.head == NULL)
                etcd_shared.tail = &etcd_shared.head;
        }
        pthread_mutex_unlock(&etcd_shared.mu);
        if (m == NULL)
            break;
        switch (m->type) {
        case ETCD_MSG_POOLS:
            etcd_on_pools(m);
            break;
        case ETCD_MSG_INSTANCES:
            json_decref(etcd_ctl.instances);
            etcd_ctl.instances = json_incref(m->data);
            etcd_migration_reconcile_all(); /* a barrier may pass without them
                                             */
            etcd_listen_check();
            etcd_fence_check();
            break;
        case ETCD_MSG_STATUS:
            etcd_on_status(m);
            break;
        case ETCD_MSG_WRITTEN:
            etcd_on_written(m->w);
            continue; /* the message is the write's own */
        }
        json_decref(m->data);
        json_decref(m->revs);
        free(m);
    }
}

/* ---- start, reload, stop ------------------------------------------------- */

/* The value text of the config's server <cs> as a member record. */
static json_t *
seed_value(const struct conf_server *cs)
{
    json_t *r = json_pack("{s:s,s:I,s:s}", "address", cs->addr.text, "weight",
                          (json_int_t)cs->weight, "state", "up");
    char *t = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *s = t ? json_string(t) : NULL;

    free(t);
    json_decref(r);
    return s;
}

static void
seeds_free(struct etcd_seed *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].pool);
        json_decref(v[i].members);
    }
    free(v);
}

/* The seeds of <conf>'s etcd pools, in place of the running ones. */
static void
seeds_set(const struct conf *conf)
{
    struct etcd_seed *v = calloc(conf->npools ? conf->npools : 1, sizeof(*v));
    size_t n = 0;

    if (v == NULL)
        return;
    for (size_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        if (cp->members_from != CONF_MEMBERS_ETCD)
            continue;
        v[n].pool = strdup(cp->name);
        v[n].members = json_object();
        for (size_t k = 0; k < cp->nservers; k++)
            json_object_set_new(v[n].members, cp->servers[k].name,
                                seed_value(&cp->servers[k]));
        n++;
    }
    pthread_mutex_lock(&etcd_shared.mu);
    seeds_free(etcd_shared.seeds, etcd_shared.nseeds);
    etcd_shared.seeds = v;
    etcd_shared.nseeds = n;
    pthread_mutex_unlock(&etcd_shared.mu);
    /* the control side's pools */
    for (size_t i = 0; i < n; i++)
        if (etcd_cpool_find(v[i].pool) == NULL) {
            struct etcd_cpool *np =
                realloc(etcd_ctl.pools,
                        (etcd_ctl.npools + 1) * sizeof(*etcd_ctl.pools));
            if (np == NULL)
                continue;
            etcd_ctl.pools = np;
            memset(&etcd_ctl.pools[etcd_ctl.npools], 0,
                   sizeof(*etcd_ctl.pools));
            etcd_ctl.pools[etcd_ctl.npools].name = strdup(v[i].pool);
            etcd_ctl.pools[etcd_ctl.npools].records = json_object();
            etcd_ctl.npools++;
        }
}

static char *
dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static const struct membership_remote etcd_remote = {
    .owns = etcd_pool,
    .write = etcd_member_write,
};

int
etcd_start(const struct conf *conf, char *err, size_t errlen)
{
    bool any = false;

    for (size_t i = 0; i < conf->npools; i++)
        any |= conf->pools[i].members_from == CONF_MEMBERS_ETCD;
    if (!any || !conf->etcd.enabled)
        return 0;
    membership_set_remote(&etcd_remote);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        snprintf(err, errlen, "etcd: cannot initialise libcurl");
        return -1;
    }
    etcd_cfg.endpoints = calloc(conf->etcd.nendpoints, sizeof(char *));
    if (etcd_cfg.endpoints == NULL)
        goto nomem;
    for (size_t i = 0; i < conf->etcd.nendpoints; i++)
        if ((etcd_cfg.endpoints[etcd_cfg.nendpoints++] =
                 strdup(conf->etcd.endpoints[i])) == NULL)
            goto nomem;
    etcd_cfg.prefix = strdup(conf->etcd.prefix);
    etcd_cfg.instance = strdup(conf->etcd.instance);
    etcd_cfg.lease_ttl_ms = conf->etcd.lease_ttl_ms;
    etcd_cfg.timeout_ms = conf->etcd.timeout_ms;
    etcd_cfg.username = dup_or_null(conf->etcd.username);
    etcd_cfg.password = dup_or_null(conf->etcd.password);
    etcd_cfg.ca_file = dup_or_null(conf->etcd.ca_file);
    etcd_cfg.cert_file = dup_or_null(conf->etcd.cert_file);
    etcd_cfg.key_file = dup_or_null(conf->etcd.key_file);
    if (etcd_cfg.prefix == NULL || etcd_cfg.instance == NULL)
        goto nomem;
    etcd_shared.tail = &etcd_shared.head;
    etcd_shared.wtail = &etcd_shared.writes;
    etcd_shared.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (etcd_shared.efd < 0) {
        snprintf(err, errlen, "etcd: eventfd: %s", strerror(errno));
        return -1;
    }
    etcd_shared.watch.fd = etcd_shared.efd;
    etcd_shared.watch.cb = drain_cb;
    if (control_watch_add(&etcd_shared.watch, EPOLLIN) != 0) {
        snprintf(err, errlen, "etcd: %s", strerror(errno));
        return -1;
    }
    etcd_ctl.started_ms = clock_wall_ms();
    if (control_tick_add(tick, NULL) != 0) {
        snprintf(err, errlen, "etcd: %s", strerror(errno));
        return -1;
    }
    snprintf(etcd_ctl.state, sizeof(etcd_ctl.state), "starting");
    migration_etcd_set(&etcd_migration_ops);
    seeds_set(conf);
    etcd_shared.running = true;
    if (pthread_create(&etcd_shared.watcher, NULL, etcd_watcher_main, NULL) !=
            0 ||
        pthread_create(&etcd_shared.session, NULL, etcd_session_main, NULL) !=
            0) {
        snprintf(err, errlen, "etcd: cannot start its threads");
        etcd_shared.running = false;
        return -1;
    }
    log_info("etcd: instance %s, %s/ on %s%s (lease %us)", etcd_cfg.instance,
             etcd_cfg.prefix, etcd_cfg.endpoints[0],
             etcd_cfg.nendpoints > 1 ? " ..." : "",
             (etcd_cfg.lease_ttl_ms + 999) / 1000);
    return 0;
nomem:
    snprintf(err, errlen, "etcd: out of memory");
    return -1;
}

void
etcd_conf_apply(struct conf *conf)
{
    if (!etcd_shared.running)
        return;
    if (conf->etcd.enabled &&
        (strcmp(conf->etcd.prefix, etcd_cfg.prefix) != 0 ||
         strcmp(conf->etcd.instance, etcd_cfg.instance) != 0 ||
         conf->etcd.nendpoints != etcd_cfg.nendpoints ||
         strcmp(conf->etcd.endpoints[0], etcd_cfg.endpoints[0]) != 0))
        log_warn("reload: global.etcd changed: it takes effect at the next "
                 "start (still %s/ on %s as %s)",
                 etcd_cfg.prefix, etcd_cfg.endpoints[0], etcd_cfg.instance);
    seeds_set(conf);
    /* Pools that take their members from etcd keep the members etcd gave:
     * their servers in <conf> become those (the config's only seed). */
    for (size_t i = 0; i < conf->npools; i++) {
        struct conf_pool *cp = &conf->pools[i];
        struct pool *p = pool_find(cp->name);
        struct etcd_cpool *c = etcd_cpool_find(cp->name);

        if (cp->members_from != CONF_MEMBERS_ETCD || p == NULL ||
            p->cfg.members_from != CONF_MEMBERS_ETCD || c == NULL || !c->listed)
            continue;
        for (size_t k = 0; k < cp->nservers; k++)
            conf_server_deinit(&cp->servers[k]);
        cp->nservers = 0;
        for (size_t k = 0; k < p->nservers; k++) {
            struct server *s = p->servers[k];
            if (atomic_load(&s->state) == SERVER_REMOVED)
                continue;
            if (conf_pool_add_server(cp, s->name, s->addr.text, s->weight) != 0)
                log_warn("reload: pool %s: cannot keep member %s", cp->name,
                         s->name);
        }
    }
    pthread_mutex_lock(&etcd_shared.mu);
    etcd_shared.relist = true; /* a new etcd pool may need its records */
    pthread_mutex_unlock(&etcd_shared.mu);
    etcd_kick_watch();
}

int
etcd_reload_check(const struct conf *conf, char *err, size_t errlen)
{
    for (size_t i = 0; i < conf->npools; i++)
        if (conf->pools[i].members_from == CONF_MEMBERS_ETCD &&
            !etcd_shared.running) {
            snprintf(err, errlen,
                     "%s:%d: pool '%s': members_from: etcd needs a restart "
                     "(etcd was not in use when chashd started)",
                     conf->file, conf->pools[i].line, conf->pools[i].name);
            return -1;
        }
    return 0;
}

void
etcd_stop(void)
{
    if (!etcd_shared.running)
        return;
    atomic_store(&etcd_shared.stop, true);
    etcd_kick_watch();
    pthread_mutex_lock(&etcd_shared.mu);
    pthread_cond_broadcast(&etcd_shared.cond);
    pthread_mutex_unlock(&etcd_shared.mu);
    pthread_join(etcd_shared.watcher, NULL);
    pthread_join(etcd_shared.session, NULL);
    etcd_shared.running = false;
    control_watch_del(&etcd_shared.watch);
    close(etcd_shared.efd);
    etcd_shared.efd = -1;
    /* every admin write still out is answered: queued, written, or
     * waiting to be applied */
    while (etcd_shared.head != NULL) {
        struct etcd_msg *m = etcd_shared.head;
        etcd_shared.head = m->next;
        if (m->type == ETCD_MSG_WRITTEN) {
            etcd_write_answer(m->w, 503, 0, "chashd is stopping");
            continue; /* the message is the write's own */
        }
        json_decref(m->data);
        json_decref(m->revs);
        free(m);
    }
    while (etcd_shared.writes != NULL) {
        struct etcd_write *w = etcd_shared.writes;
        etcd_shared.writes = w->next;
        etcd_write_answer(w, 503, 0, "chashd is stopping");
    }
    while (etcd_ctl.waiting != NULL) {
        struct etcd_write *w = etcd_ctl.waiting;
        etcd_ctl.waiting = w->next;
        etcd_write_answer(w, 503, 0, "chashd is stopping");
    }
    free(etcd_shared.publish);
    seeds_free(etcd_shared.seeds, etcd_shared.nseeds);
    for (size_t i = 0; i < etcd_ctl.npools; i++) {
        free(etcd_ctl.pools[i].name);
        json_decref(etcd_ctl.pools[i].records);
    }
    free(etcd_ctl.pools);
    json_decref(etcd_ctl.instances);
    for (size_t i = 0; i < etcd_cfg.nendpoints; i++)
        free(etcd_cfg.endpoints[i]);
    free(etcd_cfg.endpoints);
    free(etcd_cfg.prefix);
    free(etcd_cfg.instance);
    free(etcd_cfg.username);
    free(etcd_cfg.password);
    free(etcd_cfg.ca_file);
    free(etcd_cfg.cert_file);
    free(etcd_cfg.key_file);
    curl_global_cleanup();
}
