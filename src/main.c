/* main.c -- chashd: options, start-up, signals (reload, drain, stop) and
 * the reload that diffs pools and members against the running config.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chash/chash.h"
#include "loop/access_log.h"
#include "api/admin.h"
#include "loop/builder.h"
#include "base/clock.h"
#include "conf/conf.h"
#include "loop/control.h"
#include "control/etcd.h"
#include "data/fastpath.h"
#include "control/health.h"
#include "control/hot.h"
#include "base/log.h"
#include "control/membership.h"
#include "control/migration.h"
#include "api/metrics.h"
#include "base/notify.h"
#include "model/pool.h"
#include "control/replica.h"
#include "data/request.h"
#include "proto/modes.h"
#include "model/state.h"
#include "loop/worker.h"
#include "data/dispatch.h"

#define ERRLEN 1024

/* The config chashd reads without -c (and the one the unit passes). */
#ifndef CHASHD_CONF_PATH
#define CHASHD_CONF_PATH "/etc/chashd/chashd.yml"
#endif

static const char usage[] =
    "usage: chashd [-c FILE | --demo] [-t] [--pid-file FILE]\n"
    "              [--log stderr|syslog|FILE] [--log-format text|json]\n"
    "              [--log-level LEVEL] [--version] [--help]\n"
    "  -c, --config FILE   the config (default: " CHASHD_CONF_PATH ")\n"
    "      --demo          run the embedded demo config instead (make run)\n"
    "  -t, --test          check the config as a start would and exit\n"
    "                      (0 OK, 2 with the error)\n"
    "      --pid-file FILE write the process id to FILE (overrides\n"
    "                      global.pid_file)\n"
    "      --log DEST      stderr (default), syslog (facility daemon) or a\n"
    "                      FILE, which SIGUSR1 reopens (./syslog for a file\n"
    "                      of that name)\n"
    "      --log-format F  text (default) or json, one object per line\n"
    "      --log-level L   error, warn, info or debug (overrides the config)\n"
    "  -V, --version       print the version\n"
    "  -h, --help          this text\n"
    "signals: SIGHUP reloads the config, SIGTERM/SIGINT drain and stop,\n"
    "SIGUSR1 reopens the log file and the pools' access log files.\n";

/* What the process runs on. */
static struct conf *conf;      /* the running config */
static const char *conf_path;  /* NULL: the embedded demo config */
static int cli_log_level = -1; /* --log-level, -1 when not given */
static char *pid_file;         /* our copy: the config may be reloaded */
static bool pid_file_cli;      /* --pid-file given */
static struct control_watch sigwatch = {.fd = -1};

/* The repairer hands each key's repair to its home worker (request.h). */
static const struct replica_engine replica_engine = {
    .submit = request_repair_submit,
    .barrier_start = request_barrier_start,
    .barrier_passed = request_barrier_passed,
    .barrier_unref = request_barrier_unref,
};
static bool draining;
static uint64_t drain_deadline_ms;

static struct conf *
load(char *err, size_t errlen)
{
    if (conf_path != NULL)
        return conf_load(conf_path, err, errlen);
    return conf_load_string("<embedded>", conf_default_yaml,
                            strlen(conf_default_yaml), err, errlen);
}

/*
 * What chashd can run today; conf_load accepts more (the modes still to
 * come). The one check `chashd -t`, the start and every reload make, so
 * -t refuses exactly what a start would. 0, or -1 with "file:line: message" in
 * <err>.
 */
static int
check_supported(const struct conf *c, char *err, size_t errlen)
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

/* SIGUSR1: each pool's access log file under its path again (after a
 * rotation), as the daemon's log. */
static void
access_logs_reopen(void)
{
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        if (p->access_log != NULL && access_log_reopen(p->access_log) < 0)
            log_error("pool %s: cannot reopen the access log %s: %s", p->name,
                      access_log_where(p->access_log), strerror(errno));
    }
}

/*
 * Create the directory holding <path> when it is missing: mode 0755, one
 * level (its own parent must exist), so the shipped /run/chashd/chashd.pid
 * and /var/lib/chashd/state.json work on a fresh machine. 0, or -1 with
 * errno.
 */
static int
make_parent_dir(const char *path)
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

static void
raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            log_warn("cannot raise RLIMIT_NOFILE from %llu: %s",
                     (unsigned long long)was, strerror(errno));
    }
    log_info("open files limit: %llu", (unsigned long long)rl.rlim_cur);
}

/* Hand <fds> (one per worker) to the workers as <p>'s listeners. */
static void
pool_listen_start(struct pool *p, int *fds)
{
    for (unsigned i = 0; i < worker_count(); i++) {
        p->lfds[i] = fds[i];
        if (worker_add_listener(i, p, fds[i]) < 0)
            log_error("pool %s: cannot hand a listener to worker %u", p->name,
                      i);
    }
}

/* pool_on_published at start-up: every change the start made to <p> is
 * live (or failed): its listeners go to the workers. */
static void
listen_when_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)chg;
    (void)arg;
    if (!p->removed)
        pool_listen_start(p, p->lfds);
}

/* etcd's: a copy pool's members are etcd's now (etcd_defers_listen). */
static void
listen_now(struct pool *p)
{
    if (!p->removed)
        pool_listen_start(p, p->lfds);
}

static void
pool_listen_stop(struct pool *p)
{
    for (unsigned i = 0; i < worker_count(); i++) {
        if (p->lfds[i] >= 0)
            worker_del_listener(i, p->lfds[i]);
        p->lfds[i] = -1;
    }
}

/* ---- reload -------------------------------------------------------------- */

static size_t reload_failed; /* pools a reload left as they were */

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

/*
 * Load the tcp fast path once a tcp pool asks for it (at start, or with
 * the first reload that brings one), for <workers> workers; else, or when
 * the kernel or our privileges refuse it, one line says why those pools
 * splice in user space. Once per process: the answer does not change.
 * <why> gets the reason (or ""); returns whether it runs.
 */
static bool
fast_path_start(const struct conf *c, unsigned workers, bool quiet, char *why,
                size_t whylen)
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
 * Pool <p> is reloaded with <cp>, and keys move (<pl>): the members the
 * reload removes stay (drained) until their keys have moved, and the
 * migration is in place before the new ring is built. 0 or -1 (logged).
 */
static int
reload_migration(struct pool *p, struct conf_pool *cp,
                 const struct migration_plan *pl)
{
    const char *names[64];
    size_t n = 0;
    char err[ERRLEN];

    for (size_t k = 0; k < pl->nleaving; k++) {
        const struct server *s = pl->leaving[k];

        if (n < 64)
            names[n++] = s->name;
        if (conf_pool_add_server(cp, s->name, s->addr.text, s->weight) != 0) {
            log_error("reload: pool %s: out of memory", p->name);
            return -1;
        }
    }
    if (pl->nleaving > 64) {
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

/*
 * Apply config <nc> (loaded by a reload), or refuse it whole: a file that
 * did not load (NULL, <err> says why), a mode we cannot run or an address
 * we cannot bind leaves the running config untouched. Established
 * connections are never touched. Takes <nc>. 0 or -1.
 */
static int
reload_apply(struct conf *nc, char *err)
{
    unsigned nw = worker_count();
    int **fds = NULL;
    struct migration_plan *plans = NULL;
    size_t i, failed = 0, nplans = nc != NULL ? nc->npools : 0;
    int rc = -1;

    for (i = 0; nc != NULL && i < nc->nwarnings; i++)
        log_warn("reload: %s", nc->warnings[i]);
    if (nc == NULL || check_supported(nc, err, ERRLEN) < 0 ||
        check_access_logs(nc, err, ERRLEN) < 0 ||
        admin_reload_check(nc, err, ERRLEN) < 0 ||
        etcd_reload_check(nc, err, ERRLEN) < 0 ||
        membership_state_apply(nc, err, ERRLEN) < 0) {
        log_error("reload refused, the running config stays: %s", err);
        metrics_note_reload(false);
        conf_destroy(nc);
        return -1;
    }
    /* etcd pools keep the members etcd gave, not the config's seeds */
    etcd_conf_apply(nc);
    {
        char why[256];
        fast_path_start(nc, nw, false, why, sizeof(why));
    }
    /* migration: copy pools whose keys move: checked before anything
     * changes (a joining member must be empty; one migration at a time) */
    plans = calloc(nc->npools ? nc->npools : 1, sizeof(*plans));
    if (plans == NULL) {
        membership_state_abandon();
        goto nomem;
    }
    for (i = 0; i < nc->npools; i++) {
        struct pool *p = pool_find(nc->pools[i].name);

        if (p != NULL &&
            (migration_reload_plan(p, &nc->pools[i], &plans[i], err, ERRLEN) <
                 0 ||
             replica_reload_check(p, &nc->pools[i], err, ERRLEN) < 0)) {
            log_error("reload refused, the running config stays: %s", err);
            metrics_note_reload(false);
            membership_state_abandon();
            goto out;
        }
    }
    /* Bind every new or moved listener first: a bind failure refuses the
     * reload before anything has changed. */
    fds = calloc(nc->npools, sizeof(*fds));
    if (fds == NULL) {
        membership_state_abandon();
        goto nomem;
    }
    for (i = 0; i < nc->npools; i++) {
        const struct conf_pool *cp = &nc->pools[i];
        struct pool *p = pool_find(cp->name);
        if (p != NULL && conf_pool_same_listen(&p->cfg, cp))
            continue;
        fds[i] = malloc(sizeof(int) * nw);
        if (fds[i] == NULL)
            goto nomem;
        if (listener_open(&cp->listen, cp->backlog, cp->listen_perm, fds[i], nw,
                          err, ERRLEN) < 0) {
            free(fds[i]);
            fds[i] = NULL;
            log_error("reload refused, the running config stays: pool %s: "
                      "%s",
                      cp->name, err);
            metrics_note_reload(false);
            membership_state_abandon();
            goto out;
        }
    }
    /* Pools gone. */
    for (size_t j = pool_count(); j-- > 0;) {
        struct pool *p = pool_at(j);
        if (conf_pool_find(nc, p->name) == NULL) {
            pool_listen_stop(p);
            pool_remove(p);
        }
    }
    /* Pools kept or new. */
    for (i = 0; i < nc->npools; i++) {
        const struct conf_pool *cp = &nc->pools[i];
        struct pool *p = pool_find(cp->name);
        if (p == NULL) {
            /* A new pool has no traffic to protect: full weight at once,
             * like at start-up (ramping every member from 0 would only
             * refuse its first clients). */
            if (pool_create(cp, true, &p, err, ERRLEN) < 0) {
                /* Only out of memory gets here, after the sockets were
                 * bound: close them now (the cleanup below skips a
                 * reload that went ahead), so no client connects to a
                 * port nobody serves. */
                log_error("reload: %s", err);
                for (unsigned w = 0; fds[i] != NULL && w < nw; w++)
                    close(fds[i][w]);
                free(fds[i]);
                fds[i] = NULL;
                failed++;
                continue;
            }
            log_info("pool %s: added by reload, listening on %s", p->name,
                     cp->listen.text);
        } else {
            if (fds[i] != NULL) {
                log_info("pool %s: listen %s -> %s", p->name,
                         p->cfg.listen.text, cp->listen.text);
                pool_listen_stop(p);
            }
            if (plans[i].change &&
                reload_migration(p, &nc->pools[i], &plans[i]) < 0) {
                failed++;
                continue;
            }
            if (pool_reconfigure(p, cp, err, ERRLEN) < 0) {
                log_error("reload: %s", err);
                if (plans[i].change)
                    migration_cancel(p);
                failed++;
            } else if (plans[i].change) {
                for (size_t k = 0; k < plans[i].nleaving; k++)
                    pool_member_set_admin(p, plans[i].leaving[k]->name,
                                          STATE_ADMIN_DRAIN);
                if (pool_on_published(p, reload_migration_live, NULL) != 0)
                    migration_start(p);
            }
        }
        if (fds[i] != NULL && etcd_defers_listen(p) && !etcd_listening(p)) {
            /* etcd starts it (etcd_set_listen) */
            memcpy(p->lfds, fds[i], nw * sizeof(*fds[i]));
            free(fds[i]);
            fds[i] = NULL;
        }
        if (fds[i] != NULL) {
            pool_listen_start(p, fds[i]);
            free(fds[i]);
            fds[i] = NULL;
        }
    }
    admin_reconfigure(nc);
    if (nc->workers != conf->workers)
        log_warn("reload: workers %u -> %u needs a restart; still %u",
                 conf->workers, nc->workers, nw);
    if (!pid_file_cli &&
        strcmp(nc->pid_file ? nc->pid_file : "", pid_file ? pid_file : "") != 0)
        log_warn("reload: pid_file %s -> %s needs a restart; still %s",
                 pid_file ? pid_file : "(none)",
                 nc->pid_file ? nc->pid_file : "(none)",
                 pid_file ? pid_file : "(none)");
    if (nc->state_file != NULL && make_parent_dir(nc->state_file) < 0)
        log_warn("reload: cannot create the directory of state_file %s: %s",
                 nc->state_file, strerror(errno));
    if (cli_log_level < 0)
        log_set_level(nc->log_level);
    conf_destroy(conf);
    conf = nc;
    nc = NULL;
    /* A pool that could not be created or reconfigured (out of memory)
     * keeps running as before; the reload is not reported as a success. */
    metrics_note_reload(failed == 0);
    rc = failed == 0 ? 0 : -1;
    /* "reload: done" once the reload's migration reports are logged (they
     * are computed on the builder thread). */
    reload_failed = failed;
    membership_state_settle(reload_reported, NULL);
    goto out;
nomem:
    log_error("reload refused: out of memory");
    metrics_note_reload(false);
out:
    if (fds != NULL) {
        for (i = 0; nc != NULL && i < nc->npools; i++) {
            if (fds[i] == NULL)
                continue;
            for (unsigned w = 0; w < nw; w++)
                close(fds[i][w]);
            free(fds[i]);
        }
        free(fds);
    }
    for (i = 0; plans != NULL && i < nplans; i++)
        migration_plan_free(&plans[i]);
    free(plans);
    conf_destroy(nc);
    return rc;
}

/*
 * A reload loads the file on the builder thread: reading it, resolving
 * its host names (getaddrinfo can block for seconds when a resolver is
 * down) and checking its rings (seconds for millions of points) must not
 * stall health checks, ramps and the admin API. It is applied on the
 * control thread once loaded. A SIGHUP during a reload runs one more.
 */
struct reload_job {
    struct builder_job job;
    struct conf *nc;
    char err[ERRLEN];
};

/* Builder thread: each server of a migration: copy pool says how many
 * keys it holds (a joining one must hold none; reload_apply checks). */
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

static bool reloading;    /* a reload job is in flight */
static bool reload_again; /* SIGHUP came meanwhile */

static void reload_start(void);

static void
reload_work(struct builder_job *job)
{
    struct reload_job *rj = (struct reload_job *)job;

    rj->nc = load(rj->err, sizeof(rj->err));
    if (rj->nc != NULL)
        reload_probe(rj->nc);
}

static void
reload_loaded(struct builder_job *job)
{
    struct reload_job *rj = (struct reload_job *)job;
    int rc;

    reloading = false;
    if (job->cancelled || draining) {
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

static void
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
        metrics_note_reload(false);
        return;
    }
    if (notify_reloading("reloading the config") < 0)
        log_warn("cannot notify the service manager: %s", strerror(errno));
    log_info("reload: loading %s", conf_path ? conf_path : "<embedded>");
    rj->job.work = reload_work;
    rj->job.done = reload_loaded;
    reloading = true;
    builder_submit(&rj->job);
}

/* ---- signals and ticks --------------------------------------------------- */

static uint32_t
max_shutdown_timeout(void)
{
    uint32_t t = 0;

    for (size_t i = 0; i < pool_count(); i++)
        if (pool_at(i)->cfg.shutdown_timeout_ms > t)
            t = pool_at(i)->cfg.shutdown_timeout_ms;
    return t;
}

static void
signal_cb(struct control_watch *w, uint32_t events)
{
    struct signalfd_siginfo si;

    (void)events;
    while (read(w->fd, &si, sizeof(si)) == sizeof(si)) {
        switch (si.ssi_signo) {
        case SIGHUP:
            if (draining) {
                log_warn("SIGHUP ignored: stopping");
                break;
            }
            reload_start();
            break;
        case SIGUSR1:
            if (log_reopen() < 0)
                log_error("cannot reopen the log: %s", strerror(errno));
            access_logs_reopen();
            break;
        case SIGTERM:
        case SIGINT:
            if (draining) {
                log_info("second stop signal: closing %llu connections now",
                         (unsigned long long)worker_connections());
                control_stop(0);
                break;
            }
            draining = true;
            drain_deadline_ms = clock_ms() + max_shutdown_timeout();
            worker_stop_accepting();
            log_info("%s: stopped accepting; draining %llu connections for "
                     "up to %ums",
                     si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT",
                     (unsigned long long)worker_connections(),
                     max_shutdown_timeout());
            if (notify_send("STOPPING=1", "draining %llu connections",
                            (unsigned long long)worker_connections()) < 0)
                log_warn("cannot notify the service manager: %s",
                         strerror(errno));
            break;
        }
    }
}

static void
main_tick(uint64_t now, void *arg)
{
    (void)arg;
    pool_reclaim();
    if (draining) {
        uint64_t left = worker_connections();
        if (left == 0) {
            log_info("drained: all connections closed");
            control_stop(0);
        } else if (now >= drain_deadline_ms) {
            log_info("shutdown_timeout reached: closing %llu connections",
                     (unsigned long long)left);
            control_stop(0);
        }
    }
}

/*
 * Write our process id to <path> without trusting what is there: the
 * number goes into a new file with an unpredictable name in the same
 * directory (mkostemp: O_EXCL, never through a link), which is then
 * renamed over <path>. A symlink planted at <path> is replaced, its target
 * untouched; whoever reads <path> sees the old file or the whole new one.
 * A missing parent directory is created (one level). 0, or -1 with errno.
 */
static int
write_pid_file(const char *path)
{
    char *tmp = NULL, line[32];
    int fd, n, saved;

    if (make_parent_dir(path) < 0 || asprintf(&tmp, "%s.XXXXXX", path) < 0)
        return -1;
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        saved = errno;
        free(tmp);
        errno = saved;
        return -1;
    }
    n = snprintf(line, sizeof(line), "%ld\n", (long)getpid());
    errno = EIO; /* what a short write leaves */
    if (fchmod(fd, 0644) < 0 || write(fd, line, (size_t)n) != n) {
        saved = errno;
        close(fd);
        errno = saved;
        goto fail;
    }
    if (close(fd) < 0 || rename(tmp, path) < 0)
        goto fail;
    free(tmp);
    return 0;
fail:
    saved = errno;
    unlink(tmp);
    free(tmp);
    errno = saved;
    return -1;
}

/* Remove <path> at exit if it still holds our pid: a pid file another
 * chashd wrote since (a second instance, an operator) is not ours. */
static void
remove_pid_file(const char *path)
{
    char line[32];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return;
    n = read(fd, line, sizeof(line) - 1);
    close(fd);
    if (n <= 0)
        return;
    line[n] = '\0';
    if (strtol(line, NULL, 10) == (long)getpid())
        unlink(path);
}

/* ---- main ---------------------------------------------------------------- */

static int usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static int
usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "chashd: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s", usage);
    return 2;
}

/* ", migration copy (the default of 'mode: redis')" for a store pool, ""
 * for the others: what a membership change does to its data. */
static const char *
migration_phrase(const struct conf_pool *cp, char *buf, size_t cap)
{
    int n;

    if (cp->mode != CONF_MODE_REDIS && cp->mode != CONF_MODE_MEMCACHE)
        return "";
    n = snprintf(buf, cap, ", migration %s (%s)",
                 conf_migration_name(cp->migration),
                 cp->migration_line != 0          ? "set by 'migration:'"
                 : cp->replicas > 1               ? "replicas move no data yet"
                 : cp->mode == CONF_MODE_MEMCACHE ? "the default"
                 : cp->migration == CONF_MIGRATION_COPY
                     ? "the default of 'mode: redis'"
                     : "the default of twemproxy's 'redis: true'");
    if (cp->replicas > 1 && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n,
                 ", replicas %u (write_quorum %u, read_policy %s%s%.0u)",
                 cp->replicas, cp->write_quorum,
                 conf_read_policy_name(cp->read_policy),
                 cp->read_policy == CONF_READ_QUORUM ? ", read_quorum " : "",
                 cp->read_policy == CONF_READ_QUORUM ? cp->read_quorum : 0);
    return buf;
}

/* A migration's drain barrier goes to every worker. */
static unsigned
drain_workers(struct migration_drain *d)
{
    unsigned n = 0;

    for (unsigned i = 0; i < worker_count(); i++) {
        atomic_fetch_add(&d->refs, 1);
        if (worker_call(i, request_drain, d) == 0)
            n++;
        else
            migration_drain_unref(d);
    }
    return n;
}

/* Start-up: resume the migrations the state file holds. One that cannot
 * be resumed stays in the file (for a start with a config that has its
 * members again) and is logged: its keys may still be on old owners. */
static void
migrations_resume(void)
{
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        json_t *saved = membership_migration_saved(p->name);
        char err[512];

        if (saved == NULL)
            continue;
        if (p->cfg.migration != CONF_MIGRATION_COPY) {
            log_error("pool %s: the state file holds a migration, but the "
                      "pool is not 'migration: copy' now: not resumed; keys "
                      "may still be on their old owners",
                      p->name);
            continue;
        }
        if (migration_resume(p, saved, err, sizeof(err)) != 0)
            log_error("pool %s: cannot resume its migration: %s; keys may "
                      "still be on their old owners",
                      p->name, err);
    }
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"test", no_argument, NULL, 't'},
        {"pid-file", required_argument, NULL, 'p'},
        {"demo", no_argument, NULL, 'D'},
        {"log", required_argument, NULL, 'l'},
        {"log-format", required_argument, NULL, 'F'},
        {"log-level", required_argument, NULL, 'L'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *log_file = NULL, *cli_pid_file = NULL;
    char err[ERRLEN];
    bool test = false, demo = false;
    sigset_t mask;
    int c, log_format = LOG_FORMAT_TEXT, rc = 1;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":c:tVh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            conf_path = optarg;
            break;
        case 't':
            test = true;
            break;
        case 'D':
            demo = true;
            break;
        case 'p':
            cli_pid_file = optarg;
            break;
        case 'l':
            if (optarg[0] == '\0')
                return usage_error("--log: expected stderr, syslog or a "
                                   "file");
            log_file = optarg;
            break;
        case 'F':
            log_format = log_format_from_name(optarg);
            if (log_format < 0)
                return usage_error("--log-format '%s': expected text or json",
                                   optarg);
            break;
        case 'L':
            cli_log_level = log_level_from_name(optarg);
            if (cli_log_level < 0)
                return usage_error("--log-level '%s': expected error, warn, "
                                   "info or debug",
                                   optarg);
            break;
        case 'V':
            printf("chashd %s (libchash %s)\n", CHASH_VERSION_STRING,
                   CHASH_VERSION_STRING);
            return 0;
        case 'h':
            fputs(usage, stdout);
            return 0;
        case ':':
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (demo && conf_path != NULL)
        return usage_error("-c and --demo exclude each other");
    /* The demo runs only when asked: a missing config is an error, not a
     * daemon quietly proxying 127.0.0.1:8080 to ports nobody chose. */
    if (!demo && conf_path == NULL)
        conf_path = CHASHD_CONF_PATH;

    conf = load(err, sizeof(err));
    if (conf == NULL) {
        fprintf(stderr, "%s\n", err);
        if (strcmp(conf_path ? conf_path : "", CHASHD_CONF_PATH) == 0 &&
            access(CHASHD_CONF_PATH, F_OK) < 0)
            fprintf(stderr,
                    "chashd: no config at %s: give one with -c FILE, "
                    "or run the demo with --demo\n",
                    CHASHD_CONF_PATH);
        return 2;
    }
    /* -t refuses what a start refuses, with the same message. */
    if (check_supported(conf, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        conf_destroy(conf);
        return 2;
    }
    if (test) {
        /* What a start would run, pool by pool, and where each pool's mode
         * came from: a tcp pool written without `mode:` is a memcache
         * proxy by twemproxy's rule, and should not be a surprise. */
        for (size_t i = 0; i < conf->nwarnings; i++)
            fprintf(stderr, "%s\n", conf->warnings[i]);
        for (size_t i = 0; i < conf->npools; i++) {
            const struct conf_pool *cp = &conf->pools[i];
            char mig[256], chain[512];

            printf("pool %s: mode %s (%s), listen %s, %zu servers, %s/%s%s",
                   cp->name, conf_mode_name(cp->mode),
                   conf_mode_source_name(cp->mode_source), cp->listen.text,
                   cp->nservers, conf_dist_name(cp->distribution),
                   chash_hash_name(cp->ring.hash),
                   migration_phrase(cp, mig, sizeof(mig)));
            if (cp->mode == CONF_MODE_TCP || cp->mode == CONF_MODE_HTTP)
                printf(", hash_key %s",
                       conf_hash_chain_text(cp, chain, sizeof(chain)));
            if (cp->mode == CONF_MODE_TCP) {
                char why[256];

                if (cp->fast_path == CONF_FAST_PATH_OFF)
                    printf(", fast_path off");
                else if (fast_path_start(conf, conf->workers, true, why,
                                         sizeof(why)))
                    printf(", fast_path sockmap");
                else
                    printf(", fast_path off (sockmap unavailable: %s)", why);
            }
            if (cp->members_from == CONF_MEMBERS_ETCD)
                printf(", members from etcd %s/pools/%s/members/ (the "
                       "servers seed it when it is empty)",
                       conf->etcd.prefix, cp->name);
            putchar('\n');
        }
        printf("%s: configuration OK\n", conf_path ? conf_path : "<embedded>");
        fastpath_deinit();
        conf_destroy(conf);
        return 0;
    }
    log_set_format(log_format);
    if (log_file != NULL && strcmp(log_file, "syslog") == 0) {
        log_open_syslog("chashd");
    } else if (log_file != NULL && strcmp(log_file, "stderr") == 0) {
        log_open(NULL);
    } else if (log_open(log_file) < 0) {
        fprintf(stderr, "chashd: cannot open log %s: %s\n", log_file,
                strerror(errno));
        conf_destroy(conf);
        return 1;
    }
    log_set_level(cli_log_level >= 0 ? cli_log_level : conf->log_level);
    for (size_t i = 0; i < conf->nwarnings; i++)
        log_warn("%s", conf->warnings[i]);
    if (notify_init() < 0)
        log_warn("NOTIFY_SOCKET '%s' is not a unix socket path or "
                 "@abstract name: the service manager is not notified",
                 getenv("NOTIFY_SOCKET"));
    /* Ours, not the config's: a reload frees the config it points into. */
    pid_file_cli = cli_pid_file != NULL;
    if (cli_pid_file != NULL || conf->pid_file != NULL) {
        pid_file = strdup(cli_pid_file ? cli_pid_file : conf->pid_file);
        if (pid_file == NULL) {
            log_error("cannot start: %s", strerror(errno));
            conf_destroy(conf);
            log_close();
            return 1;
        }
    }
    metrics_init();

    /* Signals arrive through a signalfd in the control loop; the workers
     * inherit the blocked mask. A peer that closes must not kill us. */
    sigemptyset(&mask);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();

    if (control_init() < 0 || pool_global_init(conf->workers) < 0 ||
        health_init() < 0 || membership_init() < 0 || migration_init() < 0 ||
        hot_init() < 0 || replica_init(&replica_engine) < 0 ||
        builder_init() < 0) {
        log_error("cannot start: %s", strerror(errno));
        goto out;
    }
    /* state.c reports a state file it cannot write (and catches up once
     * it can): a directory we cannot create is worth a warning, not a
     * refusal to serve. */
    if (conf->state_file != NULL && make_parent_dir(conf->state_file) < 0)
        log_warn("cannot create the directory of state_file %s: %s",
                 conf->state_file, strerror(errno));
    if (membership_state_apply(conf, err, sizeof(err)) < 0) {
        log_error("cannot start: %s", err);
        rc = 2;
        goto out;
    }
    /* Before any port listens: whoever sees a port accept also finds the
     * pid file (a failed start below removes it again). */
    if (pid_file != NULL && write_pid_file(pid_file) < 0) {
        log_error("cannot write pid file %s: %s", pid_file, strerror(errno));
        free(pid_file);
        pid_file = NULL;
        goto out;
    }
    {
        int *fds = calloc(conf->npools * conf->workers, sizeof(int));
        if (fds == NULL)
            goto out;
        /* Bind everything before a single worker runs. */
        for (size_t i = 0; i < conf->npools; i++) {
            const struct conf_pool *cp = &conf->pools[i];
            if (listener_open(&cp->listen, cp->backlog, cp->listen_perm,
                              fds + i * conf->workers, conf->workers, err,
                              sizeof(err)) < 0) {
                log_error("pool %s: %s", cp->name, err);
                for (size_t j = 0; j < i * conf->workers; j++)
                    close(fds[j]);
                free(fds);
                goto out;
            }
        }
        fast_path_start(conf, conf->workers, false, err, sizeof(err));
        dispatch_init();
        if (worker_start_all(conf->workers) < 0) {
            log_error("cannot start the workers: %s", strerror(errno));
            free(fds);
            goto out;
        }
        for (size_t i = 0; i < conf->npools; i++) {
            struct pool *p;
            if (pool_create(&conf->pools[i], true, &p, err, sizeof(err)) < 0) {
                log_error("%s", err);
                free(fds);
                goto out;
            }
            /* handed to the workers once the snapshots the start-up makes
             * are live (listen_when_published): the sockets already
             * listen, so clients wait in the backlog meanwhile */
            memcpy(p->lfds, fds + i * conf->workers,
                   conf->workers * sizeof(*fds));
            char mig[256];

            log_info("pool %s: listening on %s, mode %s (%s), %zu members, "
                     "on_failure %s%s",
                     p->name, p->cfg.listen.text, conf_mode_name(p->cfg.mode),
                     conf_mode_source_name(p->cfg.mode_source), p->nservers,
                     conf_on_failure_name(p->cfg.on_failure),
                     migration_phrase(&p->cfg, mig, sizeof(mig)));
        }
        free(fds);
    }
    membership_state_settle(NULL, NULL);
    migration_set_barrier(drain_workers);
    migrations_resume();
    /* A resumed migration's view is in the snapshot being built: no
     * request may be served before it is live (it would skip the gate of a
     * key still on its old owner). */
    etcd_set_listen(listen_now);
    for (size_t i = 0; i < pool_count(); i++) {
        if (etcd_defers_listen(pool_at(i)))
            continue; /* etcd starts it once it is applied */
        if (pool_on_published(pool_at(i), listen_when_published, NULL) < 0)
            pool_listen_start(pool_at(i), pool_at(i)->lfds);
    }
    /* Pools with `members_from: etcd` list, watch and publish from here
     * on; until etcd answers they serve the config's servers. */
    if (etcd_start(conf, err, sizeof(err)) < 0) {
        log_error("cannot start: %s", err);
        goto out;
    }
    /* The admin API registers its own watch and tick with the loop. */
    if (admin_start(conf, err, sizeof(err)) < 0) {
        log_error("cannot start: %s", err);
        goto out;
    }
    sigwatch.fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    sigwatch.cb = signal_cb;
    if (sigwatch.fd < 0 || control_watch_add(&sigwatch, EPOLLIN) < 0 ||
        control_tick_add(main_tick, NULL) < 0) {
        log_error("cannot start: %s", strerror(errno));
        goto out;
    }
    log_info("chashd %s started: %u workers, %zu pools, config %s",
             CHASH_VERSION_STRING, worker_count(), pool_count(),
             conf_path ? conf_path : "<embedded>");
    /* Every listener and the admin API are up: the manager may start
     * what depends on us. */
    if (notify_send("READY=1", "serving %zu pools on %u workers", pool_count(),
                    worker_count()) < 0)
        log_warn("cannot notify the service manager: %s", strerror(errno));
    rc = control_run();
    log_info("chashd stopped");
out:
    /* Copiers first: where they are is saved for the next start. */
    migration_deinit();
    hot_deinit();
    etcd_stop();
    replica_deinit();
    /* Jobs first: a membership change waiting for one answers its
     * suspended admin connection before the admin server stops. */
    builder_deinit();
    admin_stop();
    worker_stop_all();
    fastpath_deinit(); /* after the workers: their pairs are closed */
    health_deinit();
    pool_global_deinit();
    membership_state_free();
    if (sigwatch.fd >= 0)
        close(sigwatch.fd);
    control_deinit();
    if (pid_file != NULL)
        remove_pid_file(pid_file);
    free(pid_file);
    notify_deinit();
    conf_destroy(conf);
    log_close();
    return rc;
}
