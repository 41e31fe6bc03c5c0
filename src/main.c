/* main.c -- chashd: the wiring. Options, start-up in order (each layer's
 * init, the hooks between layers, the pools and their listeners),
 * signals (SIGHUP reload, SIGUSR1 reopen the logs, SIGTERM/SIGINT drain
 * and stop) and the shutdown in order. The reload is control/reload.c.
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
#include "api/admin.h"
#include "api/metrics.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/notify.h"
#include "conf/conf.h"
#include "control/etcd.h"
#include "control/health.h"
#include "control/hot.h"
#include "control/membership.h"
#include "control/migration.h"
#include "control/reload.h"
#include "control/replica.h"
#include "data/dispatch.h"
#include "data/fastpath.h"
#include "data/request.h"
#include "loop/access_log.h"
#include "loop/builder.h"
#include "loop/control.h"
#include "loop/worker.h"
#include "model/pool.h"
#include "model/state.h"
#include "proto/modes.h"

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

/* What the command line asks for besides the config (which goes straight
 * into the reload_process). */
struct cmdline {
    const char *log_file; /* --log, NULL: stderr */
    const char *pid_file; /* --pid-file, NULL: the config's */
    int log_format;       /* --log-format */
    bool test;            /* -t */
    bool demo;            /* --demo */
};

/* What the process runs on: the running config, what a reload keeps from
 * the command line, whether we drain (control/reload.h). */
static struct reload_process proc = {.log_level = -1};
static struct control_watch sigwatch = {.fd = -1};
static uint64_t drain_deadline_ms;

/* The repairer hands each key's repair to its home worker (request.h). */
static const struct replica_engine replica_engine = {
    .submit = request_repair_submit,
    .barrier_start = request_barrier_start,
    .barrier_passed = request_barrier_passed,
    .barrier_unref = request_barrier_unref,
};

/* The api layer's part of a reload: the admin API's token and address,
 * the reload counter. */
static const struct reload_hooks reload_hooks = {
    .check = admin_reload_check,
    .apply = admin_reconfigure,
    .verdict = metrics_note_reload,
};

/* ---- helpers of the start ------------------------------------------------ */

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

/* pool_on_published at start-up: every change the start made to <p> is
 * live (or failed): its listeners go to the workers. */
static void
listen_when_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)chg;
    (void)arg;
    if (!p->removed)
        reload_listen_start(p, p->lfds);
}

/* etcd's: a copy pool's members are etcd's now (etcd_defers_listen). */
static void
listen_now(struct pool *p)
{
    if (!p->removed)
        reload_listen_start(p, p->lfds);
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

    if (reload_make_parent_dir(path) < 0 ||
        asprintf(&tmp, "%s.XXXXXX", path) < 0)
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

/* SIGTERM or SIGINT (<signo>): the first drains, the second stops now. */
static void
stop_signal(uint32_t signo)
{
    if (proc.draining) {
        log_info("second stop signal: closing %llu connections now",
                 (unsigned long long)worker_connections());
        control_stop(0);
        return;
    }
    proc.draining = true;
    drain_deadline_ms = clock_ms() + max_shutdown_timeout();
    worker_stop_accepting();
    log_info("%s: stopped accepting; draining %llu connections for "
             "up to %ums",
             signo == SIGTERM ? "SIGTERM" : "SIGINT",
             (unsigned long long)worker_connections(), max_shutdown_timeout());
    if (notify_send("STOPPING=1", "draining %llu connections",
                    (unsigned long long)worker_connections()) < 0)
        log_warn("cannot notify the service manager: %s", strerror(errno));
}

static void
signal_cb(struct control_watch *w, uint32_t events)
{
    struct signalfd_siginfo si;

    (void)events;
    while (read(w->fd, &si, sizeof(si)) == sizeof(si)) {
        switch (si.ssi_signo) {
        case SIGHUP:
            if (proc.draining) {
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
            stop_signal(si.ssi_signo);
            break;
        }
    }
}

static void
main_tick(uint64_t now, void *arg)
{
    (void)arg;
    pool_reclaim();
    if (proc.draining) {
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

/* ---- options and the config ---------------------------------------------- */

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

/* One option <opt> (getopt_long's answer) into <cl> and proc: -1 to go
 * on, or the exit code (0 for --version and --help, 2 for a bad one). */
static int
parse_option(int opt, char **argv, struct cmdline *cl)
{
    switch (opt) {
    case 'c':
        proc.conf_path = optarg;
        return -1;
    case 't':
        cl->test = true;
        return -1;
    case 'D':
        cl->demo = true;
        return -1;
    case 'p':
        cl->pid_file = optarg;
        return -1;
    case 'l':
        if (optarg[0] == '\0')
            return usage_error("--log: expected stderr, syslog or a "
                               "file");
        cl->log_file = optarg;
        return -1;
    case 'F':
        cl->log_format = log_format_from_name(optarg);
        if (cl->log_format < 0)
            return usage_error("--log-format '%s': expected text or json",
                               optarg);
        return -1;
    case 'L':
        proc.log_level = log_level_from_name(optarg);
        if (proc.log_level < 0)
            return usage_error("--log-level '%s': expected error, warn, "
                               "info or debug",
                               optarg);
        return -1;
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

/* The command line into <cl> and proc: -1 to go on, or the exit code. */
static int
parse_args(int argc, char **argv, struct cmdline *cl)
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
    int opt, rc;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":c:tVh", opts, NULL)) != -1)
        if ((rc = parse_option(opt, argv, cl)) >= 0)
            return rc;
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (cl->demo && proc.conf_path != NULL)
        return usage_error("-c and --demo exclude each other");
    /* The demo runs only when asked: a missing config is an error, not a
     * daemon quietly proxying 127.0.0.1:8080 to ports nobody chose. */
    if (!cl->demo && proc.conf_path == NULL)
        proc.conf_path = CHASHD_CONF_PATH;
    return -1;
}

/* The config into proc.conf, checked as -t, a start and every reload
 * check it: 0, or 2 with the error printed. */
static int
config_load(void)
{
    const char *path = proc.conf_path;
    char err[ERRLEN];

    proc.conf = reload_load(path, err, sizeof(err));
    if (proc.conf == NULL) {
        fprintf(stderr, "%s\n", err);
        if (strcmp(path ? path : "", CHASHD_CONF_PATH) == 0 &&
            access(CHASHD_CONF_PATH, F_OK) < 0)
            fprintf(stderr,
                    "chashd: no config at %s: give one with -c FILE, "
                    "or run the demo with --demo\n",
                    CHASHD_CONF_PATH);
        return 2;
    }
    /* -t refuses what a start refuses, with the same message. */
    if (reload_check_supported(proc.conf, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        conf_destroy(proc.conf);
        return 2;
    }
    return 0;
}

/* -t: one line for pool <cp> of <conf>: what a start would run. */
static void
config_test_pool(const struct conf *conf, const struct conf_pool *cp)
{
    char mig[256], chain[512];

    printf("pool %s: mode %s (%s), listen %s, %zu servers, %s/%s%s", cp->name,
           conf_mode_name(cp->mode), conf_mode_source_name(cp->mode_source),
           cp->listen.text, cp->nservers, conf_dist_name(cp->distribution),
           chash_hash_name(cp->ring.hash),
           migration_phrase(cp, mig, sizeof(mig)));
    if (cp->mode == CONF_MODE_TCP || cp->mode == CONF_MODE_HTTP)
        printf(", hash_key %s", conf_hash_chain_text(cp, chain, sizeof(chain)));
    if (cp->mode == CONF_MODE_TCP) {
        char why[256];

        if (cp->fast_path == CONF_FAST_PATH_OFF)
            printf(", fast_path off");
        else if (reload_fast_path_start(conf, conf->workers, true, why,
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

/*
 * -t: what a start would run, pool by pool, and where each pool's mode
 * came from: a tcp pool written without `mode:` is a memcache proxy by
 * twemproxy's rule, and should not be a surprise. Exit code 0.
 */
static int
config_test(void)
{
    const struct conf *conf = proc.conf;

    for (size_t i = 0; i < conf->nwarnings; i++)
        fprintf(stderr, "%s\n", conf->warnings[i]);
    for (size_t i = 0; i < conf->npools; i++)
        config_test_pool(conf, &conf->pools[i]);
    printf("%s: configuration OK\n",
           proc.conf_path ? proc.conf_path : "<embedded>");
    fastpath_deinit();
    conf_destroy(proc.conf);
    return 0;
}

/* ---- start --------------------------------------------------------------- */

/*
 * What the process needs before anything starts: the log (where, how,
 * how much), the service manager's socket, our copy of the pid file's
 * path (a reload frees the config it points into), the metrics. 0, or
 * the exit code with the running config destroyed.
 */
static int
start_process(const struct cmdline *cl)
{
    const char *log_file = cl->log_file;
    struct conf *conf = proc.conf;

    log_set_format(cl->log_format);
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
    log_set_level(proc.log_level >= 0 ? proc.log_level : conf->log_level);
    for (size_t i = 0; i < conf->nwarnings; i++)
        log_warn("%s", conf->warnings[i]);
    if (notify_init() < 0)
        log_warn("NOTIFY_SOCKET '%s' is not a unix socket path or "
                 "@abstract name: the service manager is not notified",
                 getenv("NOTIFY_SOCKET"));
    proc.pid_file_cli = cl->pid_file != NULL;
    if (cl->pid_file != NULL || conf->pid_file != NULL) {
        proc.pid_file = strdup(cl->pid_file ? cl->pid_file : conf->pid_file);
        if (proc.pid_file == NULL) {
            log_error("cannot start: %s", strerror(errno));
            conf_destroy(conf);
            log_close();
            return 1;
        }
    }
    metrics_init();
    reload_init(&proc, &reload_hooks);
    return 0;
}

/* Signals arrive through a signalfd in the control loop (<mask>); the
 * workers inherit the blocked mask. A peer that closes must not kill us. */
static void
start_signals(sigset_t *mask)
{
    sigemptyset(mask);
    sigaddset(mask, SIGHUP);
    sigaddset(mask, SIGTERM);
    sigaddset(mask, SIGINT);
    sigaddset(mask, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, mask, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The control plane's modules, in order. 0, or -1 (logged). */
static int
start_modules(void)
{
    if (control_init() < 0 || pool_global_init(proc.conf->workers) < 0 ||
        health_init() < 0 || membership_init() < 0 || migration_init() < 0 ||
        hot_init() < 0 || replica_init(&replica_engine) < 0 ||
        builder_init() < 0) {
        log_error("cannot start: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* The state file's runtime changes onto the config, then the pid file:
 * 0, or the exit code (logged). */
static int
start_state(void)
{
    const struct conf *conf = proc.conf;
    char err[ERRLEN];

    /* state.c reports a state file it cannot write (and catches up once
     * it can): a directory we cannot create is worth a warning, not a
     * refusal to serve. */
    if (conf->state_file != NULL &&
        reload_make_parent_dir(conf->state_file) < 0)
        log_warn("cannot create the directory of state_file %s: %s",
                 conf->state_file, strerror(errno));
    if (membership_state_apply(proc.conf, err, sizeof(err)) < 0) {
        log_error("cannot start: %s", err);
        return 2;
    }
    /* Before any port listens: whoever sees a port accept also finds the
     * pid file (a failed start below removes it again). */
    if (proc.pid_file != NULL && write_pid_file(proc.pid_file) < 0) {
        log_error("cannot write pid file %s: %s", proc.pid_file,
                  strerror(errno));
        free(proc.pid_file);
        proc.pid_file = NULL;
        return 1;
    }
    return 0;
}

/* Bind every pool's listeners (<workers> each, into <fds>) before a
 * single worker runs. 0, or -1 (logged) with none left open. */
static int
start_bind(int *fds, unsigned workers)
{
    const struct conf *conf = proc.conf;
    char err[ERRLEN];

    for (size_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        if (listener_open(&cp->listen, cp->backlog, cp->listen_perm,
                          fds + i * workers, workers, err, sizeof(err)) < 0) {
            log_error("pool %s: %s", cp->name, err);
            for (size_t j = 0; j < i * workers; j++)
                close(fds[j]);
            return -1;
        }
    }
    return 0;
}

/* The config's pools, their listeners (<fds>, <workers> per pool) kept
 * for when their snapshots are live. 0, or -1 (logged). */
static int
start_pool_create(const int *fds, unsigned workers)
{
    const struct conf *conf = proc.conf;
    char err[ERRLEN];

    for (size_t i = 0; i < conf->npools; i++) {
        struct pool *p;
        if (pool_create(&conf->pools[i], true, &p, err, sizeof(err)) < 0) {
            log_error("%s", err);
            return -1;
        }
        /* handed to the workers once the snapshots the start-up makes
         * are live (listen_when_published): the sockets already
         * listen, so clients wait in the backlog meanwhile */
        memcpy(p->lfds, fds + i * workers, workers * sizeof(*fds));
        char mig[256];

        log_info("pool %s: listening on %s, mode %s (%s), %zu members, "
                 "on_failure %s%s",
                 p->name, p->cfg.listen.text, conf_mode_name(p->cfg.mode),
                 conf_mode_source_name(p->cfg.mode_source), p->nservers,
                 conf_on_failure_name(p->cfg.on_failure),
                 migration_phrase(&p->cfg, mig, sizeof(mig)));
    }
    return 0;
}

/* Listeners bound, the fast path, the workers, the pools. 0, or -1
 * (logged; silent when out of memory, as ever). */
static int
start_pools(void)
{
    unsigned workers = proc.conf->workers;
    int *fds = calloc(proc.conf->npools * workers, sizeof(int));
    char why[ERRLEN];
    int rc = -1;

    if (fds == NULL)
        return -1;
    if (start_bind(fds, workers) < 0)
        goto out;
    reload_fast_path_start(proc.conf, workers, false, why, sizeof(why));
    dispatch_init();
    if (worker_start_all(workers) < 0) {
        log_error("cannot start the workers: %s", strerror(errno));
        goto out;
    }
    rc = start_pool_create(fds, workers);
out:
    free(fds);
    return rc;
}

/* The start's changes settle, migrations resume, then each pool's
 * listeners go to the workers once its snapshot is live. */
static void
start_listening(void)
{
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
            reload_listen_start(pool_at(i), pool_at(i)->lfds);
    }
}

/* etcd, the admin API, the signals and the tick in the control loop.
 * 0, or -1 (logged). */
static int
start_control(sigset_t *mask)
{
    char err[ERRLEN];

    /* Pools with `members_from: etcd` list, watch and publish from here
     * on; until etcd answers they serve the config's servers. */
    if (etcd_start(proc.conf, err, sizeof(err)) < 0) {
        log_error("cannot start: %s", err);
        return -1;
    }
    /* The admin API registers its own watch and tick with the loop. */
    if (admin_start(proc.conf, err, sizeof(err)) < 0) {
        log_error("cannot start: %s", err);
        return -1;
    }
    sigwatch.fd = signalfd(-1, mask, SFD_NONBLOCK | SFD_CLOEXEC);
    sigwatch.cb = signal_cb;
    if (sigwatch.fd < 0 || control_watch_add(&sigwatch, EPOLLIN) < 0 ||
        control_tick_add(main_tick, NULL) < 0) {
        log_error("cannot start: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/*
 * Start everything in order and serve until stopped. The exit code: the
 * control loop's, 2 for a state file that does not fit the config, 1 for
 * any other failed start. What started is stopped by stop().
 */
static int
run(void)
{
    sigset_t mask;
    int rc;

    start_signals(&mask);
    raise_nofile();
    if (start_modules() < 0)
        return 1;
    if ((rc = start_state()) != 0)
        return rc;
    if (start_pools() < 0)
        return 1;
    start_listening();
    if (start_control(&mask) < 0)
        return 1;
    log_info("chashd %s started: %u workers, %zu pools, config %s",
             CHASH_VERSION_STRING, worker_count(), pool_count(),
             proc.conf_path ? proc.conf_path : "<embedded>");
    /* Every listener and the admin API are up: the manager may start
     * what depends on us. */
    if (notify_send("READY=1", "serving %zu pools on %u workers", pool_count(),
                    worker_count()) < 0)
        log_warn("cannot notify the service manager: %s", strerror(errno));
    rc = control_run();
    log_info("chashd stopped");
    return rc;
}

/* ---- stop ---------------------------------------------------------------- */

/* Everything run() started, in order; safe for what did not start. */
static void
stop(void)
{
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
    if (proc.pid_file != NULL)
        remove_pid_file(proc.pid_file);
    free(proc.pid_file);
    notify_deinit();
    conf_destroy(proc.conf);
    log_close();
}

int
main(int argc, char **argv)
{
    struct cmdline cl = {.log_format = LOG_FORMAT_TEXT};
    int rc;

    if ((rc = parse_args(argc, argv, &cl)) >= 0)
        return rc;
    if ((rc = config_load()) != 0)
        return rc;
    if (cl.test)
        return config_test();
    if ((rc = start_process(&cl)) != 0)
        return rc;
    rc = run();
    stop();
    return rc;
}
