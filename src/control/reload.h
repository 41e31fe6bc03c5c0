/* reload.h -- the config reload (SIGHUP): the file loaded again on the
 * builder thread, checked whole, then applied pool by pool on the control
 * thread; and the pieces of it a start shares (the checks, the fast path,
 * handing listeners to the workers).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_RELOAD_H
#define CHASHD_RELOAD_H

#include <stdbool.h>
#include <stddef.h>

struct conf;
struct pool;

/*
 * What the process runs on. main's: it fills it in at start-up and owns
 * every pointer in it; a reload reads the command line's choices and
 * replaces <conf> (destroying the one it replaces). Control thread only.
 */
struct reload_process {
    struct conf *conf;     /* the running config */
    const char *conf_path; /* NULL: the embedded demo config */
    int log_level;         /* --log-level, or -1: the config's */
    char *pid_file;        /* the pid file written (a copy), or NULL */
    bool pid_file_cli;     /* --pid-file given: the config's is not ours */
    bool draining;         /* stopping: a reload loaded now is dropped */
};

/*
 * The parts of a reload that sit in the api layer, above this one, which
 * main registers (the admin API's token and address, the reload counter
 * of /metrics). Each may be NULL.
 *   check:   before anything changes: 0, or -1 with why in <err>, which
 *            refuses the reload (admin_reload_check);
 *   apply:   the pools are reloaded: take what else <next> says
 *            (admin_reconfigure);
 *   verdict: every reload's outcome, once (metrics_note_reload).
 */
struct reload_hooks {
    int (*check)(const struct conf *next, char *err, size_t errlen);
    void (*apply)(const struct conf *next);
    void (*verdict)(bool ok);
};

/* Reloads read and update <proc> (kept: it must outlive every reload)
 * and call <hooks> (copied). Before the first reload_start(). */
void reload_init(struct reload_process *proc, const struct reload_hooks *hooks);

/*
 * SIGHUP: load the config again on the builder thread, then apply it on
 * the control thread, or refuse it whole (logged; the running config
 * stays). A reload asked for while one is loading runs once that one is
 * done. Reports to the service manager (RELOADING=1, then READY=1).
 */
void reload_start(void);

/* The config at <conf_path>, or the embedded demo one when NULL: as
 * conf_load, NULL with "file:line: message" in <err>. */
struct conf *reload_load(const char *conf_path, char *err, size_t errlen);

/*
 * What chashd can run today; conf_load accepts more (the modes still to
 * come). The one check `chashd -t`, the start and every reload make, so
 * -t refuses exactly what a start would. 0, or -1 with "file:line:
 * message" in <err>.
 */
int reload_check_supported(const struct conf *c, char *err, size_t errlen);

/*
 * Load the tcp fast path once a tcp pool asks for it (at start, or with
 * the first reload that brings one), for <workers> workers; else, or when
 * the kernel or our privileges refuse it, one line says why those pools
 * splice in user space (none when <quiet>). Once per process: the answer
 * does not change. <why> gets the reason (or ""); returns whether it runs.
 */
bool reload_fast_path_start(const struct conf *c, unsigned workers, bool quiet,
                            char *why, size_t whylen);

/* Hand <fds> (one per worker) to the workers as <p>'s listeners. */
void reload_listen_start(struct pool *p, int *fds);

/* Take <p>'s listeners back from the workers (each one's -1 then). */
void reload_listen_stop(struct pool *p);

/*
 * Create the directory holding <path> when it is missing: mode 0755, one
 * level (its own parent must exist), so the shipped /run/chashd/chashd.pid
 * and /var/lib/chashd/state.json work on a fresh machine. 0, or -1 with
 * errno.
 */
int reload_make_parent_dir(const char *path);

#endif /* CHASHD_RELOAD_H */
