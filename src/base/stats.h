/* stats.h -- the counters chashd keeps per pool and per member, in one
 * place, for the log, the admin API and Prometheus metrics.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_STATS_H
#define CHASHD_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Two kinds of counters:
 *
 * - Gauges that decide routing (active connections per member and per
 *   pool) are ONE relaxed atomic shared by all workers (fields `active` in
 *   struct server and struct pool, pool.h). Bounded loads compare them on
 *   every new connection, and summing per-worker slots there would cost a
 *   cache miss per worker per candidate; an atomic add happens only at
 *   connect and close, so sharing is cheap.
 *
 * - Monotonic counters (totals, bytes, failures, decisions) are
 *   PER-WORKER slots, one cache line per worker, written only by their
 *   worker with a plain relaxed load+store (no locked instruction on the
 *   data path) and summed by readers (stats_*_sum). Readers may run on
 *   any thread at any time; a sum is a consistent-enough snapshot (each
 *   64-bit load is atomic, the set is not).
 *
 * Slot index = worker id (0..workers-1). The control thread (health
 * checks) writes only the fields marked "control" and owns no slot.
 */

/* Latency buckets of the store modes' replies, in microseconds (upper
 * bounds; the last is +Inf). */
#define STATS_LATENCY_BUCKETS 12
#define STATS_LATENCY_BOUNDS_US                                                \
    {                                                                          \
        100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000,  \
            UINT64_MAX                                                         \
    }

/* Per member, per worker. */
struct stats_server {
    _Atomic uint64_t conns_total; /* backend connections established */
    _Atomic uint64_t
        connect_failures; /* refused, reset or timed out connects */
    _Atomic uint64_t connect_timeouts; /* of which timed out */
    _Atomic uint64_t early_closes;     /* connections the member reset, or
                                          closed while its client waited,
                                          before its first byte */
    _Atomic uint64_t bytes_in;         /* bytes read from the member */
    _Atomic uint64_t bytes_out;        /* bytes written to the member */
    /* store modes: requests (fragments) sent, and how they ended */
    _Atomic uint64_t requests;
    _Atomic uint64_t request_errors;   /* error replies from the member */
    _Atomic uint64_t request_timeouts; /* failed by `timeout` */
    _Atomic uint64_t request_failures; /* failed by the connection */
    _Atomic uint64_t inflight;         /* a gauge: sent, not answered */
    /* latency of its replies, a Prometheus histogram (stats.h buckets) */
    _Atomic uint64_t latency[STATS_LATENCY_BUCKETS];
    _Atomic uint64_t latency_sum_us;
} __attribute__((aligned(64)));

/* Routing decisions, made by the router (model/pool.h),
 * counted per pool in stats_pool and named in access log lines. */
enum stats_decision {
    STATS_FIRST_CHOICE,
    STATS_SPILLED,
    STATS_FAILED_OVER,
    STATS_REFUSED_ERROR,
    STATS_NO_MEMBER
};

/* Per pool, per worker: every routing decision is counted once. */
struct stats_pool {
    _Atomic uint64_t accepted;      /* client connections accepted */
    _Atomic uint64_t first_choice;  /* went to the key's owner */
    _Atomic uint64_t spilled;       /* owner over the bounded-load cap */
    _Atomic uint64_t failed_over;   /* owner unusable or its connect failed */
    _Atomic uint64_t refused_limit; /* client_connections reached */
    _Atomic uint64_t refused_error; /* on_failure: error, owner unusable */
    _Atomic uint64_t no_member; /* no usable member left (or retries spent) */
    _Atomic uint64_t retries;   /* backend connects after the first */
    _Atomic uint64_t idle_timeouts; /* connections closed by idle_timeout */
    _Atomic uint64_t bytes_in;      /* bytes read from clients */
    _Atomic uint64_t bytes_out;     /* bytes written to clients */
    /* store modes */
    /* requests = forwarded + local + refused */
    _Atomic uint64_t requests;        /* client requests (also unparsable) */
    _Atomic uint64_t fragments;       /* pieces sent to members (a split
                                         request counts one per member) */
    _Atomic uint64_t local;           /* answered by chashd, no error */
    _Atomic uint64_t refused;         /* answered by chashd with an error:
                                         refused, unparsable, no member,
                                         a wrong AUTH ... */
    _Atomic uint64_t errors;          /* forwarded, and the reply is an
                                         error: the member's, a timeout,
                                         a failed connection */
    _Atomic uint64_t protocol_errors; /* unparsable input: closed */
    /* migration: keys a request moved from their old owner before it ran
     * (MIGRATE +OK), found gone already (+NOKEY), or could not move */
    _Atomic uint64_t gate_moved, gate_absent, gate_failed;
} __attribute__((aligned(64)));

/* Sums over all workers' slots (any thread). */
struct stats_server_sum {
    uint64_t conns_total, connect_failures, connect_timeouts, early_closes;
    uint64_t bytes_in, bytes_out;
    uint64_t requests, request_errors, request_timeouts, request_failures;
    uint64_t inflight;
    uint64_t latency[STATS_LATENCY_BUCKETS], latency_sum_us;
};
struct stats_pool_sum {
    uint64_t accepted, first_choice, spilled, failed_over;
    uint64_t refused_limit, refused_error, no_member, retries, idle_timeouts;
    uint64_t bytes_in, bytes_out;
    uint64_t requests, fragments, local, refused, errors, protocol_errors;
    uint64_t gate_moved, gate_absent, gate_failed;
};

/* The bucket of a latency of <us> microseconds. */
static inline size_t
stats_latency_bucket(uint64_t us)
{
    static const uint64_t bounds[] = STATS_LATENCY_BOUNDS_US;
    size_t i = 0;

    while (us > bounds[i])
        i++;
    return i;
}

/* Add <n> to a counter only the calling worker writes. */
static inline void
stats_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* Take <n> off a gauge only the calling worker writes. */
static inline void
stats_sub(_Atomic uint64_t *c, uint64_t n)
{
    uint64_t v = atomic_load_explicit(c, memory_order_relaxed);

    atomic_store_explicit(c, v > n ? v - n : 0, memory_order_relaxed);
}

static inline uint64_t
stats_get(const _Atomic uint64_t *c)
{
    return atomic_load_explicit((_Atomic uint64_t *)c, memory_order_relaxed);
}

void stats_server_sum(const struct stats_server *slots, size_t nslots,
                      struct stats_server_sum *out);
void stats_pool_sum(const struct stats_pool *slots, size_t nslots,
                    struct stats_pool_sum *out);

/* Note the process start (for uptime); call once at start-up, later calls
 * are ignored. */
void stats_process_start(void);
/* Seconds since stats_process_start (any thread). */
double stats_uptime(void);
/* The process start as Unix seconds (0 before stats_process_start). */
double stats_start_unix(void);

/* Write <s> as a Prometheus label value (without quotes): backslash,
 * double quote and newline escaped, as the text format requires. Every
 * module that exposes its own metrics uses it. */
void stats_label_escape(FILE *f, const char *s);

#endif /* CHASHD_STATS_H */
