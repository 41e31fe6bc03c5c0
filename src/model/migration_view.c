/* migration_view.c -- the view of a running migration that snapshots
 * carry, its drain barrier's references, and the gate's helpers. See
 * migration_view.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "model/migration_view.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "chash/chash.h"
#include "conf/conf.h"
#include "model/pool.h"

void
migration_view_ref(struct migration_view *v)
{
    v->refs++;
}

void
migration_view_unref(struct migration_view *v)
{
    if (v == NULL || --v->refs > 0)
        return;
    pool_snapshot_unpin(v->old);
    free(v);
}

void
migration_drain_unref(struct migration_drain *d)
{
    if (d != NULL && atomic_fetch_sub(&d->refs, 1) == 1)
        free(d);
}

/* ---- the gate's helpers, shared by the request path and the copiers ---- */

int
migration_host_port(const struct conf_addr *a, char *host, size_t hostcap,
                    char *port, size_t portcap)
{
    const void *ip;

    if (a->family == AF_INET)
        ip = &((const struct sockaddr_in *)&a->sa)->sin_addr;
    else if (a->family == AF_INET6)
        ip = &((const struct sockaddr_in6 *)&a->sa)->sin6_addr;
    else
        return -1;
    if (inet_ntop(a->family, ip, host, (socklen_t)hostcap) == NULL)
        return -1;
    snprintf(port, portcap, "%u", (unsigned)a->port);
    return 0;
}

/* Whether the error text <t> (<n> bytes) contains <word>. */
static bool
has_word(const char *t, size_t n, const char *word)
{
    size_t w = strlen(word);

    for (size_t i = 0; i + w <= n; i++)
        if (memcmp(t + i, word, w) == 0)
            return true;
    return false;
}

int
migration_migrate_result(const char *buf, size_t len)
{
    if (len >= 3 && memcmp(buf, "+OK", 3) == 0)
        return GATE_MOVED;
    if (len >= 6 && memcmp(buf, "+NOKEY", 6) == 0)
        return GATE_ABSENT;
    /* The target has the key: a copy from an earlier move whose reply was
     * lost (IOERR), or a leftover a joining member should not have had.
     * Under the migration's invariant the old owner's copy is the current
     * one: REPLACE. IOERR: the key may be on both, equal: REPLACE. */
    if (len > 0 && buf[0] == '-' &&
        (has_word(buf, len, "BUSYKEY") || has_word(buf, len, "IOERR")))
        return GATE_RETRY;
    return GATE_FAILED;
}

/* ---- the stages ---------------------------------------------------------- */

/* Whether some member both gives and takes keys between <was> and <now>
 * (1, or 0; -1: no key moves between them): then two of them may MIGRATE
 * to each other at once, and a redis-server blocks in MIGRATE until its
 * target answers -- each would wait for the other. Such a migration runs
 * in two stages (struct migration_view). */
static int
members_swap(const struct pool_snapshot *was, const struct pool_snapshot *now)
{
    struct chash_flow *fl;
    size_t n = 0;
    int swap = 0;

    if (chash_ring_flows(was->ring, now->ring, NULL, 0, &n) != 0)
        return 0;
    if (n == 0)
        return -1;
    if ((fl = calloc(n, sizeof(*fl))) == NULL ||
        chash_ring_flows(was->ring, now->ring, fl, n, &n) != 0) {
        free(fl);
        return 1; /* cannot tell: the safe way */
    }
    for (size_t i = 0; i < n && !swap; i++)
        for (size_t k = 0; k < n && !swap; k++)
            swap = now->servers[fl[i].to] == was->servers[fl[k].from];
    free(fl);
    return swap;
}

void
migration_view_decide(struct migration_view *v, const struct pool_snapshot *now)
{
    int undecided = MIG_STAGE_UNDECIDED, swap;

    if (atomic_load(&v->stage) != MIG_STAGE_UNDECIDED || now->ring == NULL)
        return;
    swap = v->old->ring != NULL ? members_swap(v->old, now) : 0;
    if (swap < 0)
        return; /* nothing moves in this one: a later snapshot decides */
    atomic_compare_exchange_strong(&v->stage, &undecided, swap);
}
