/* main.c -- chashd: options, start-up, signals (reload, drain, stop) and
 * the reload that diffs pools and members against the running config.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <errno.h>
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
#include <unistd.h>

#include "chash/chash.h"
#include "admin.h"
#include "clock.h"
#include "conf.h"
#include "control.h"
#include "health.h"
#include "log.h"
#include "membership.h"
#include "metrics.h"
#include "pool.h"
#include "proto/proto.h"
#include "worker.h"

#define ERRLEN 1024

static const char usage[] =
    "usage: chashd [-c FILE] [-t] [--pid-file FILE] [--log FILE]\n"
    "              [--log-level LEVEL] [--version] [--help]\n"
    "  -c, --config FILE   the config (default: the embedded demo config)\n"
    "  -t, --test          check the config and exit (0 OK, 2 with the error)\n"
    "      --pid-file FILE write the process id to FILE\n"
    "      --log FILE      log to FILE instead of stderr (SIGUSR1 reopens)\n"
    "      --log-level L   error, warn, info or debug (overrides the config)\n"
    "  -V, --version       print the version\n"
    "  -h, --help          this text\n"
    "signals: SIGHUP reloads the config, SIGTERM/SIGINT drain and stop.\n";

/* What the process runs on. */
static struct conf *conf;      /* the running config */
static const char *conf_path;  /* NULL: the embedded config */
static int cli_log_level = -1; /* --log-level, -1 when not given */
static const char *pid_file;
static struct control_watch sigwatch = {.fd = -1};
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

/* What chashd can run today; conf_load accepts more (wave 2). */
static int
check_supported(const struct conf *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < c->npools; i++) {
        const struct conf_pool *cp = &c->pools[i];
        if (proto_find(cp->mode) == NULL) {
            snprintf(err, errlen, "pool '%s': mode %s is not supported yet",
                     cp->name, proto_mode_name(cp->mode));
            return -1;
        }
        if (cp->distribution >= CHASH_ALGO_COUNT) {
            snprintf(err, errlen,
                     "pool '%s': distribution %s is not supported by chashd "
                     "yet (use a consistent one: ring, maglev, rendezvous, "
                     "jump, ketama, nginx)",
                     cp->name, conf_dist_name(cp->distribution));
            return -1;
        }
        if (cp->listen.family == AF_UNIX) {
            snprintf(err, errlen,
                     "pool '%s': listen on a unix socket is not supported in "
                     "mode tcp (the key is the client's IP address)",
                     cp->name);
            return -1;
        }
    }
    return 0;
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

/*
 * Load the config again and apply it, or refuse it whole: a file that does
 * not load, a mode we cannot run or an address we cannot bind leaves the
 * running config untouched. Established connections are never touched.
 */
static void
reload(void)
{
    char err[ERRLEN];
    struct conf *nc = load(err, sizeof(err));
    unsigned nw = worker_count();
    int **fds = NULL;
    size_t i, failed = 0;

    log_info("reload: loading %s", conf_path ? conf_path : "<embedded>");
    if (nc == NULL || check_supported(nc, err, sizeof(err)) < 0 ||
        admin_reload_check(nc, err, sizeof(err)) < 0 ||
        membership_state_apply(nc, err, sizeof(err)) < 0) {
        log_error("reload refused, the running config stays: %s", err);
        metrics_note_reload(false);
        conf_destroy(nc);
        return;
    }
    /* Bind every new or moved listener first: a bind failure refuses the
     * reload before anything has changed. */
    fds = calloc(nc->npools, sizeof(*fds));
    if (fds == NULL)
        goto nomem;
    for (i = 0; i < nc->npools; i++) {
        const struct conf_pool *cp = &nc->pools[i];
        struct pool *p = pool_find(cp->name);
        if (p != NULL && conf_pool_same_listen(&p->cfg, cp))
            continue;
        fds[i] = malloc(sizeof(int) * nw);
        if (fds[i] == NULL)
            goto nomem;
        if (listener_open(&cp->listen, cp->backlog, fds[i], nw, err,
                          sizeof(err)) < 0) {
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
            if (pool_create(cp, true, &p, err, sizeof(err)) < 0) {
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
            if (pool_reconfigure(p, cp, err, sizeof(err)) < 0) {
                log_error("reload: %s", err);
                failed++;
            }
        }
        if (fds[i] != NULL) {
            pool_listen_start(p, fds[i]);
            free(fds[i]);
            fds[i] = NULL;
        }
    }
    membership_state_settle();
    admin_reconfigure(nc);
    if (nc->workers != conf->workers)
        log_warn("reload: workers %u -> %u needs a restart; still %u",
                 conf->workers, nc->workers, nw);
    if (cli_log_level < 0)
        log_set_level(nc->log_level);
    conf_destroy(conf);
    conf = nc;
    nc = NULL;
    /* A pool that could not be created or reconfigured (out of memory)
     * keeps running as before; the reload is not reported as a success. */
    metrics_note_reload(failed == 0);
    if (failed == 0)
        log_info("reload: done, %zu pools", pool_count());
    else
        log_error("reload: applied with %zu pools left as they were, %zu "
                  "pools",
                  failed, pool_count());
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
    conf_destroy(nc);
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
            if (draining)
                log_warn("SIGHUP ignored: stopping");
            else
                reload();
            break;
        case SIGUSR1:
            if (log_reopen() < 0)
                log_error("cannot reopen the log: %s", strerror(errno));
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

static int
write_pid_file(const char *path)
{
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return -1;
    fprintf(f, "%ld\n", (long)getpid());
    return fclose(f);
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

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"test", no_argument, NULL, 't'},
        {"pid-file", required_argument, NULL, 'p'},
        {"log", required_argument, NULL, 'l'},
        {"log-level", required_argument, NULL, 'L'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *log_file = NULL;
    char err[ERRLEN];
    bool test = false;
    sigset_t mask;
    int c, rc = 1;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":c:tVh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            conf_path = optarg;
            break;
        case 't':
            test = true;
            break;
        case 'p':
            pid_file = optarg;
            break;
        case 'l':
            log_file = optarg;
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

    conf = load(err, sizeof(err));
    if (conf == NULL) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (test) {
        printf("%s: configuration OK\n", conf_path ? conf_path : "<embedded>");
        conf_destroy(conf);
        return 0;
    }
    if (check_supported(conf, err, sizeof(err)) < 0) {
        fprintf(stderr, "chashd: %s\n", err);
        conf_destroy(conf);
        return 2;
    }
    if (log_open(log_file) < 0) {
        fprintf(stderr, "chashd: cannot open log %s: %s\n", log_file,
                strerror(errno));
        conf_destroy(conf);
        return 1;
    }
    log_set_level(cli_log_level >= 0 ? cli_log_level : conf->log_level);
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
        health_init() < 0 || membership_init() < 0) {
        log_error("cannot start: %s", strerror(errno));
        goto out;
    }
    if (membership_state_apply(conf, err, sizeof(err)) < 0) {
        log_error("cannot start: %s", err);
        rc = 2;
        goto out;
    }
    {
        int *fds = calloc(conf->npools * conf->workers, sizeof(int));
        if (fds == NULL)
            goto out;
        /* Bind everything before a single worker runs. */
        for (size_t i = 0; i < conf->npools; i++) {
            const struct conf_pool *cp = &conf->pools[i];
            if (listener_open(&cp->listen, cp->backlog, fds + i * conf->workers,
                              conf->workers, err, sizeof(err)) < 0) {
                log_error("pool %s: %s", cp->name, err);
                for (size_t j = 0; j < i * conf->workers; j++)
                    close(fds[j]);
                free(fds);
                goto out;
            }
        }
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
            pool_listen_start(p, fds + i * conf->workers);
            log_info("pool %s: listening on %s, mode %s, %zu members, "
                     "on_failure %s",
                     p->name, p->cfg.listen.text, proto_mode_name(p->cfg.mode),
                     p->nservers, conf_on_failure_name(p->cfg.on_failure));
        }
        free(fds);
    }
    membership_state_settle();
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
    if (pid_file == NULL)
        pid_file = conf->pid_file;
    if (pid_file != NULL && write_pid_file(pid_file) < 0) {
        log_error("cannot write pid file %s: %s", pid_file, strerror(errno));
        pid_file = NULL;
        goto out;
    }
    log_info("chashd %s started: %u workers, %zu pools, config %s",
             CHASH_VERSION_STRING, worker_count(), pool_count(),
             conf_path ? conf_path : "<embedded>");
    rc = control_run();
    log_info("chashd stopped");
out:
    admin_stop();
    worker_stop_all();
    health_deinit();
    pool_global_deinit();
    membership_state_free();
    if (sigwatch.fd >= 0)
        close(sigwatch.fd);
    control_deinit();
    if (pid_file != NULL)
        unlink(pid_file);
    conf_destroy(conf);
    log_close();
    return rc;
}
