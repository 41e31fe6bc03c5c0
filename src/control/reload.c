/* reload.c -- the config reload: load on the builder thread, check the
 * new config whole (modes, access logs, the api layer's hook, etcd, the
 * state file, migrations, replicas, listeners), then diff pools and
 * members against the running config on the control thread.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/reload.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chash/chash.h"
#include "base/log.h"
#include "base/notify.h"
#include "conf/conf.h"
#include "control/etcd.h"
#include "control/membership.h"
#include "control/migration.h"
#include "control/replica.h"
#include "data/fastpath.h"
#include "loop/access_log.h"
#include "loop/builder.h"
#include "loop/worker.h"
#include "model/pool.h"
#include "model/state.h"
#include "proto/modes.h"

#define RELOAD_ERRLEN 1024
#define RELOAD_MAX_LEAVING 64 /* members one reload may remove at once */

static struct reload_process *proc; /* reload_init's */
static struct reload_hooks hooks;   /* reload_init's copy */
static size_t reload_failed;        /* pools a reload left as they were */
static bool reloading;              /* a reload job is in flight */
static bool reload_again;           /* SIGHUP came meanwhile */

/* ---- shared with the start ----------------------------------------------- */

struct conf *
reload_load(const char *conf_path, char *err, size_t errlen)
{
    if (conf_path != NULL)
        return conf_load(conf_path, err, errlen);
    return conf_load_string("<embedded>", conf_default_yaml,
                            strlen(conf_default_yaml), err, errlen);
}

int
reload_check_supported(const struct conf *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < c->npools; i++) {
        const struct conf_pool *cp = &c->pools[i];
        if (proto_find(cp->mode) == NULL) {
            /* A pool that is memcache by default (no `mode:`, no
             * `redis:`) says so: it was likely meant to be tcp. */
            snprintf(err, errlen,
                     "%s:%d: pool '%s': mode %s is not supported yet%s%s%s",
                     c->file, cp->line, cp->name, conf_mode_name(cp->mode),
                     cp->mode_source == CONF_MODE_SRC_DEFAULT ? " (" : "",
                     cp->mode_source == CONF_MODE_SRC_DEFAULT
                         ? conf_mode_source_name(cp->mode_source)
                         : "",
                     cp->mode_source == CONF_MODE_SRC_DEFAULT ? ")" : "");
            return -1;
        }
        if (cp->distribution >= CHASH_ALGO_COUNT) {
            snprintf(err, errlen,
                     "%s:%d: pool '%s': distribution %s is not supported by "
                     "chashd yet (use a consistent one: ring, maglev, "
                     "rendezvous, jump, ketama, nginx)",
                     c->file, cp->line, cp->name,
                     conf_dist_name(cp->distribution));
            return -1;
        }
        if (cp->listen.family == AF_UNIX && cp->mode == CONF_MODE_TCP) {
            snprintf(err, errlen,
                     "%s:%d: pool '%s': listen on a unix socket is not "
                     "supported in mode tcp (the key is the client's IP "
                     "address)",
                     c->file, cp->listen_line, cp->name);
            return -1;
        }
    }
    return 0;
}

/* Whether a tcp pool of <c> asks for the kernel's fast path. */
static bool
fast_path_wanted(const struct conf *c)
{
    for (size_t i = 0; i < c->npools; i++)
        if (c->pools[i].mode == CONF_MODE_TCP &&
            c->pools[i].fast_path == CONF_FAST_PATH_SOCKMAP)
            return true;
    return false;
}

bool
reload_fast_path_start(const struct conf *c, unsigned workers, bool quiet,
                       char *why, size_t whylen)
{
    static bool tried;
    static char reason[256];

    if (!tried && fast_path_wanted(c)) {
        tried = true;
        if (fastpath_init(workers, reason, sizeof(reason)) == 0) {
            if (!quiet)
                log_info("fast path: sockmap loaded: the bytes of tcp pools "
                         "with fast_path: sockmap move in the kernel");
        } else if (!quiet) {
            log_warn("fast path: sockmap unavailable, tcp pools splice in "
                     "user space: %s",
                     reason);
        }
    }
    snprintf(why, whylen, "%s", reason);
    return fastpath_ready();
}

void
reload_listen_start(struct pool *p, int *fds)
{
    for (unsigned i = 0; i < worker_count(); i++) {
        p->lfds[i] = fds[i];
        if (worker_add_listener(i, p, fds[i]) < 0)
            log_error("pool %s: cannot hand a listener to worker %u", p->name,
                      i);
    }
}

void
reload_listen_stop(struct pool *p)
{
    for (unsigned i = 0; i < worker_count(); i++) {
        if (p->lfds[i] >= 0)
            worker_del_listener(i, p->lfds[i]);
        p->lfds[i] = -1;
    }
}

int
reload_make_parent_dir(const char *path)
{
    char *dir = strdup(path), *slash;
    int rc = 0, saved;

    if (dir == NULL)
        return -1;
    slash = strrchr(dir, '/');
    if (slash != NULL && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            rc = -1;
    }
    saved = errno;
    free(dir);
    errno = saved;
    return rc;
}

/* ---- checks before anything changes -------------------------------------- */

static void
note_verdict(bool ok)
{
    if (hooks.verdict != NULL)
        hooks.verdict(ok);
}

/*
 * Every access log file of <c> can be opened (and is created when
 * missing): a reload that could not open one is refused whole, before
 * anything changes, as one that cannot bind a listener. pool_create and
 * pool_reconfigure then open them for good. 0, or -1 with the pool, the
 * file and why in <err>.
 */
static int
check_access_logs(const struct conf *c, char *err, size_t errlen)
{
    char why[320];

    for (size_t i = 0; i < c->npools; i++) {
        const struct conf_pool *cp = &c->pools[i];

        if (cp->access_log != NULL &&
            access_log_check(cp->access_log, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "pool %s: access_log: %s", cp->name, why);
            return -1;
        }
    }
    return 0;
}

/*
 * The checks of <nc> as a whole, in order, after logging its warnings:
 * 0, or -1 with why in <err> (<nc> NULL: the loader's message is there
 * already). The last, membership_state_apply, leaves a pending state
 * that a later refusal abandons.
 */
static int
reload_check(struct conf *nc, char *err)
{
    for (size_t i = 0; nc != NULL && i < nc->nwarnings; i++)
        log_warn("reload: %s", nc->warnings[i]);
    if (nc == NULL || reload_check_supported(nc, err, RELOAD_ERRLEN) < 0 ||
        check_access_logs(nc, err, RELOAD_ERRLEN) < 0 ||
        (hooks.check != NULL && hooks.check(nc, err, RELOAD_ERRLEN) < 0) ||
        etcd_reload_check(nc, err, RELOAD_ERRLEN) < 0 ||
        membership_state_apply(nc, err, RELOAD_ERRLEN) < 0)
        return -1;
    return 0;
}

/* A refusal after the first checks (logged by the caller): counted, and
 * the pending state file dropped. */
static void
refused(void)
{
    note_verdict(false);
    membership_state_abandon();
}

/*
 * One reload being applied: what it has checked and bound so far, which
 * reload_txn_free releases whatever happened.
 */
struct reload_txn {
    struct conf *nc;              /* the new config; NULL once it runs */
    char *err;                    /* RELOAD_ERRLEN bytes, the caller's */
    unsigned nw;                  /* workers */
    struct migration_plan *plans; /* per pool of <nc>: keys to move */
    size_t nplans;
    int **fds;     /* per pool of <nc>: its new listeners, or NULL */
    size_t failed; /* pools left as they were */
};

enum { RELOAD_GO, RELOAD_REFUSED, RELOAD_NOMEM };

/* Migration: copy pools whose keys move: checked before anything changes
 * (a joining member must be empty; one migration at a time); and the
 * replicas. RELOAD_GO, or a refusal (logged). */
static int
reload_plan(struct reload_txn *t)
{
    struct conf *nc = t->nc;

    t->plans = calloc(nc->npools ? nc->npools : 1, sizeof(*t->plans));
    if (t->plans == NULL) {
        membership_state_abandon();
        return RELOAD_NOMEM;
    }
    for (size_t i = 0; i < nc->npools; i++) {
        struct pool *p = pool_find(nc->pools[i].name);

        if (p != NULL && (migration_reload_plan(p, &nc->pools[i], &t->plans[i],
                                                t->err, RELOAD_ERRLEN) < 0 ||
                          replica_reload_check(p, &nc->pools[i], t->err,
                                               RELOAD_ERRLEN) < 0)) {
            log_error("reload refused, the running config stays: %s", t->err);
            refused();
            return RELOAD_REFUSED;
        }
    }
    return RELOAD_GO;
}

/* Bind every new or moved listener first: a bind failure refuses the
 * reload before anything has changed. RELOAD_GO, or a refusal. */
static int
reload_bind(struct reload_txn *t)
{
    struct conf *nc = t->nc;

    t->fds = calloc(nc->npools, sizeof(*t->fds));
    if (t->fds == NULL) {
        membership_state_abandon();
        return RELOAD_NOMEM;
    }
    for (size_t i = 0; i < nc->npools; i++) {
        const struct conf_pool *cp = &nc->pools[i];
        struct pool *p = pool_find(cp->name);
        if (p != NULL && conf_pool_same_listen(&p->cfg, cp))
            continue;
        t->fds[i] = malloc(sizeof(int) * t->nw);
        if (t->fds[i] == NULL)
            return RELOAD_NOMEM;
        if (listener_open(&cp->listen, cp->backlog, cp->listen_perm, t->fds[i],
                          t->nw, t->err, RELOAD_ERRLEN) < 0) {
            free(t->fds[i]);
            t->fds[i] = NULL;
            log_error("reload refused, the running config stays: pool %s: "
                      "%s",
                      cp->name, t->err);
            refused();
            return RELOAD_REFUSED;
        }
    }
    return RELOAD_GO;
}

/* ---- applying ------------------------------------------------------------ */

/*
 * Pool <p> is reloaded with <cp>, and keys move (<pl>): the members the
 * reload removes stay (drained) until their keys have moved, and the
 * migration is in place before the new ring is built. 0 or -1 (logged).
 */
static int
reload_migration(struct pool *p, struct conf_pool *cp,
                 const struct migration_plan *pl)
{
    const char *names[RELOAD_MAX_LEAVING];
    size_t n = 0;
    char err[RELOAD_ERRLEN];

    for (size_t k = 0; k < pl->nleaving; k++) {
        const struct server *s = pl->leaving[k];

        if (n < RELOAD_MAX_LEAVING)
            names[n++] = s->name;
        if (conf_pool_add_server(cp, s->name, s->addr.text, s->weight) != 0) {
            log_error("reload: pool %s: out of memory", p->name);
            return -1;
        }
    }
    if (pl->nleaving > RELOAD_MAX_LEAVING) {
        log_error("reload: pool %s: at most 64 members may leave at once",
                  p->name);
        return -1;
    }
    if (migration_prepare(p, "reload", names, n, 0, pl->keys_total, err,
                          sizeof(err)) != 0) {
        log_error("reload: %s", err);
        return -1;
    }
    return 0;
}

/* A reload's migration is live: drain, then copy. */
static void
reload_migration_live(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)arg;
    if (chg != NULL)
        migration_start(p);
}

/* Close and forget pool <i>'s new listeners. */
static void
close_listeners(struct reload_txn *t, size_t i)
{
    for (unsigned w = 0; t->fds[i] != NULL && w < t->nw; w++)
        close(t->fds[i][w]);
    free(t->fds[i]);
    t->fds[i] = NULL;
}

/* Pool <i> of the new config is new: created (into *<out>), or counted as
 * failed (-1). */
static int
reload_pool_add(struct reload_txn *t, size_t i, struct pool **out)
{
    const struct conf_pool *cp = &t->nc->pools[i];

    /* A new pool has no traffic to protect: full weight at once, like at
     * start-up (ramping every member from 0 would only refuse its first
     * clients). */
    if (pool_create(cp, true, out, t->err, RELOAD_ERRLEN) < 0) {
        /* Only out of memory gets here, after the sockets were bound:
         * close them now (the cleanup skips a reload that went ahead), so
         * no client connects to a port nobody serves. */
        log_error("reload: %s", t->err);
        close_listeners(t, i);
        t->failed++;
        return -1;
    }
    log_info("pool %s: added by reload, listening on %s", (*out)->name,
             cp->listen.text);
    return 0;
}

/*
 * Running pool <p> takes pool <i> of the new config: its listeners leave
 * the workers when it moves; its keys move when the plan says so. -1 when
 * its migration could not be prepared (counted as failed: the pool keeps
 * running as it was, its new listeners are not handed over); 0 otherwise,
 * a reconfiguration that failed counted.
 */
static int
reload_pool_change(struct reload_txn *t, size_t i, struct pool *p)
{
    const struct conf_pool *cp = &t->nc->pools[i];
    const struct migration_plan *pl = &t->plans[i];

    if (t->fds[i] != NULL) {
        log_info("pool %s: listen %s -> %s", p->name, p->cfg.listen.text,
                 cp->listen.text);
        reload_listen_stop(p);
    }
    if (pl->change && reload_migration(p, &t->nc->pools[i], pl) < 0) {
        t->failed++;
        return -1;
    }
    if (pool_reconfigure(p, cp, t->err, RELOAD_ERRLEN) < 0) {
        log_error("reload: %s", t->err);
        if (pl->change)
            migration_cancel(p);
        t->failed++;
    } else if (pl->change) {
        for (size_t k = 0; k < pl->nleaving; k++)
            pool_member_set_admin(p, pl->leaving[k]->name, STATE_ADMIN_DRAIN);
        if (pool_on_published(p, reload_migration_live, NULL) != 0)
            migration_start(p);
    }
    return 0;
}

/* Pool <i> of the new config, kept or new; then its new listeners go to
 * the workers (or to etcd, which starts them once it is applied). */
static void
reload_pool(struct reload_txn *t, size_t i)
{
    const struct conf_pool *cp = &t->nc->pools[i];
    struct pool *p = pool_find(cp->name);

    if (p == NULL ? reload_pool_add(t, i, &p) < 0
                  : reload_pool_change(t, i, p) < 0)
        return;
    if (t->fds[i] != NULL && etcd_defers_listen(p) && !etcd_listening(p)) {
        /* etcd starts it (etcd_set_listen) */
        memcpy(p->lfds, t->fds[i], t->nw * sizeof(*t->fds[i]));
        free(t->fds[i]);
        t->fds[i] = NULL;
    }
    if (t->fds[i] != NULL) {
        reload_listen_start(p, t->fds[i]);
        free(t->fds[i]);
        t->fds[i] = NULL;
    }
}

/* Pools gone, then pools kept or new. */
static void
reload_pools(struct reload_txn *t)
{
    for (size_t j = pool_count(); j-- > 0;) {
        struct pool *p = pool_at(j);
        if (conf_pool_find(t->nc, p->name) == NULL) {
            reload_listen_stop(p);
            pool_remove(p);
        }
    }
    for (size_t i = 0; i < t->nc->npools; i++)
        reload_pool(t, i);
}

static void
reload_reported(void *arg)
{
    (void)arg;
    if (reload_failed == 0)
        log_info("reload: done, %zu pools", pool_count());
    else
        log_error("reload: applied with %zu pools left as they were, %zu "
                  "pools",
                  reload_failed, pool_count());
}

/*
 * The pools are reloaded: the rest of the new config (what the api layer
 * takes, what needs a restart, the state file's directory, the log
 * level), then it becomes the running one. 0, or -1 when a pool was left
 * as it was.
 */
static int
reload_commit(struct reload_txn *t)
{
    struct conf *nc = t->nc;
    const char *pid_file = proc->pid_file;

    if (hooks.apply != NULL)
        hooks.apply(nc);
    if (nc->workers != proc->conf->workers)
        log_warn("reload: workers %u -> %u needs a restart; still %u",
                 proc->conf->workers, nc->workers, t->nw);
    if (!proc->pid_file_cli &&
        strcmp(nc->pid_file ? nc->pid_file : "", pid_file ? pid_file : "") != 0)
        log_warn("reload: pid_file %s -> %s needs a restart; still %s",
                 pid_file ? pid_file : "(none)",
                 nc->pid_file ? nc->pid_file : "(none)",
                 pid_file ? pid_file : "(none)");
    if (nc->state_file != NULL && reload_make_parent_dir(nc->state_file) < 0)
        log_warn("reload: cannot create the directory of state_file %s: %s",
                 nc->state_file, strerror(errno));
    if (proc->log_level < 0)
        log_set_level(nc->log_level);
    conf_destroy(proc->conf);
    proc->conf = nc;
    t->nc = NULL;
    /* A pool that could not be created or reconfigured (out of memory)
     * keeps running as before; the reload is not reported as a success. */
    note_verdict(t->failed == 0);
    /* "reload: done" once the reload's migration reports are logged (they
     * are computed on the builder thread). */
    reload_failed = t->failed;
    membership_state_settle(reload_reported, NULL);
    return t->failed == 0 ? 0 : -1;
}

/* What a reload bound, planned and loaded and did not hand on. */
static void
reload_txn_free(struct reload_txn *t)
{
    if (t->fds != NULL) {
        /* A reload that went ahead (<nc> NULL) handed every listener on
         * or closed it. */
        for (size_t i = 0; t->nc != NULL && i < t->nc->npools; i++)
            close_listeners(t, i);
        free(t->fds);
    }
    for (size_t i = 0; t->plans != NULL && i < t->nplans; i++)
        migration_plan_free(&t->plans[i]);
    free(t->plans);
    conf_destroy(t->nc);
}

/*
 * Apply config <nc> (loaded by a reload), or refuse it whole: a file that
 * did not load (NULL, <err> says why), a mode we cannot run or an address
 * we cannot bind leaves the running config untouched. Established
 * connections are never touched. Takes <nc>. 0 or -1.
 */
static int
reload_apply(struct conf *nc, char *err)
{
    struct reload_txn t = {
        .nc = nc,
        .err = err,
        .nw = worker_count(),
        .nplans = nc != NULL ? nc->npools : 0,
    };
    char why[256];
    int step, rc = -1;

    if (reload_check(nc, err) < 0) {
        log_error("reload refused, the running config stays: %s", err);
        note_verdict(false);
        conf_destroy(nc);
        return -1;
    }
    /* etcd pools keep the members etcd gave, not the config's seeds */
    etcd_conf_apply(nc);
    reload_fast_path_start(nc, t.nw, false, why, sizeof(why));
    step = reload_plan(&t);
    if (step == RELOAD_GO)
        step = reload_bind(&t);
    if (step == RELOAD_NOMEM) {
        log_error("reload refused: out of memory");
        note_verdict(false);
    } else if (step == RELOAD_GO) {
        reload_pools(&t);
        rc = reload_commit(&t);
    }
    reload_txn_free(&t);
    return rc;
}

/* ---- the job ------------------------------------------------------------- */

/*
 * A reload loads the file on the builder thread: reading it, resolving
 * its host names (getaddrinfo can block for seconds when a resolver is
 * down) and checking its rings (seconds for millions of points) must not
 * stall health checks, ramps and the admin API. It is applied on the
 * control thread once loaded. A SIGHUP during a reload runs one more.
 */
struct reload_job {
    struct builder_job job;
    const char *conf_path; /* (ref in the reload_process) */
    struct conf *nc;
    char err[RELOAD_ERRLEN];
};

/* Builder thread: each server of a migration: copy pool says how many
 * keys it holds (a joining one must hold none; reload_plan checks). */
static void
reload_probe(struct conf *nc)
{
    for (size_t i = 0; i < nc->npools; i++) {
        struct conf_pool *cp = &nc->pools[i];
        struct migration_probe pr = {0};
        const char **addrs;
        int64_t *keys;

        if (cp->migration != CONF_MIGRATION_COPY || cp->nservers == 0)
            continue;
        addrs = calloc(cp->nservers, sizeof(*addrs));
        keys = calloc(cp->nservers, sizeof(*keys));
        if (addrs == NULL || keys == NULL) {
            free(addrs);
            free(keys);
            continue; /* not probed: a joining member is refused */
        }
        for (size_t k = 0; k < cp->nservers; k++)
            addrs[k] = cp->servers[k].addr.text;
        pr.addresses = addrs;
        pr.n = cp->nservers;
        pr.auth = cp->redis_auth;
        pr.db = cp->redis_db;
        pr.flush = -1;
        pr.timeout_ms = 1000;
        pr.keys = keys;
        migration_probe(&pr);
        for (size_t k = 0; k < cp->nservers; k++) {
            cp->servers[k].probed = true;
            cp->servers[k].keys = keys[k];
        }
        free(addrs);
        free(keys);
    }
}

/* Builder thread. */
static void
reload_work(struct builder_job *job)
{
    struct reload_job *rj = (struct reload_job *)job;

    rj->nc = reload_load(rj->conf_path, rj->err, sizeof(rj->err));
    if (rj->nc != NULL)
        reload_probe(rj->nc);
}

/* Control thread: the config is loaded (or not): apply it. */
static void
reload_loaded(struct builder_job *job)
{
    struct reload_job *rj = (struct reload_job *)job;
    int rc;

    reloading = false;
    if (job->cancelled || proc->draining) {
        conf_destroy(rj->nc); /* stopping: not applied */
        free(rj);
        return;
    }
    if (reload_apply(rj->nc, rj->err) == 0)
        rc =
            notify_send("READY=1", "serving %zu pools; reloaded", pool_count());
    else
        rc = notify_send("READY=1",
                         "serving %zu pools; the last reload was "
                         "refused or partial (see the log)",
                         pool_count());
    if (rc < 0)
        log_warn("cannot notify the service manager: %s", strerror(errno));
    free(rj);
    if (reload_again) {
        reload_again = false;
        reload_start();
    }
}

void
reload_init(struct reload_process *p, const struct reload_hooks *h)
{
    proc = p;
    hooks = *h;
}

void
reload_start(void)
{
    struct reload_job *rj;

    if (reloading) {
        reload_again = true;
        return;
    }
    rj = calloc(1, sizeof(*rj));
    if (rj == NULL) {
        log_error("reload refused: out of memory");
        note_verdict(false);
        return;
    }
    if (notify_reloading("reloading the config") < 0)
        log_warn("cannot notify the service manager: %s", strerror(errno));
    log_info("reload: loading %s",
             proc->conf_path ? proc->conf_path : "<embedded>");
    rj->conf_path = proc->conf_path;
    rj->job.work = reload_work;
    rj->job.done = reload_loaded;
    reloading = true;
    builder_submit(&rj->job);
}
