/* stats.c -- summing the per-worker counter slots of stats.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "base/stats.h"

#include <string.h>
#include <time.h>

static struct {
    double unix_s;         /* process start, Unix seconds */
    struct timespec mono; /* the same, monotonic, for uptime */
} stats_start;

void
stats_process_start(void)
{
    struct timespec now;

    if (stats_start.unix_s != 0)
        return;
    clock_gettime(CLOCK_REALTIME, &now);
    stats_start.unix_s = (double)now.tv_sec + now.tv_nsec / 1e9;
    clock_gettime(CLOCK_MONOTONIC, &stats_start.mono);
}

double
stats_uptime(void)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - stats_start.mono.tv_sec) +
           (now.tv_nsec - stats_start.mono.tv_nsec) / 1e9;
}

double
stats_start_unix(void)
{
    return stats_start.unix_s;
}

void
stats_label_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\\\", f);
        else if (*s == '"')
            fputs("\\\"", f);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

void
stats_server_sum(const struct stats_server *slots, size_t nslots,
                 struct stats_server_sum *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < nslots; i++) {
        out->conns_total += stats_get(&slots[i].conns_total);
        out->connect_failures += stats_get(&slots[i].connect_failures);
        out->connect_timeouts += stats_get(&slots[i].connect_timeouts);
        out->early_closes += stats_get(&slots[i].early_closes);
        out->requests += stats_get(&slots[i].requests);
        out->request_errors += stats_get(&slots[i].request_errors);
        out->request_timeouts += stats_get(&slots[i].request_timeouts);
        out->request_failures += stats_get(&slots[i].request_failures);
        out->inflight += stats_get(&slots[i].inflight);
        out->latency_sum_us += stats_get(&slots[i].latency_sum_us);
        for (size_t b = 0; b < STATS_LATENCY_BUCKETS; b++)
            out->latency[b] += stats_get(&slots[i].latency[b]);
        out->bytes_in += stats_get(&slots[i].bytes_in);
        out->bytes_out += stats_get(&slots[i].bytes_out);
    }
}

void
stats_pool_sum(const struct stats_pool *slots, size_t nslots,
               struct stats_pool_sum *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < nslots; i++) {
        out->accepted += stats_get(&slots[i].accepted);
        out->first_choice += stats_get(&slots[i].first_choice);
        out->spilled += stats_get(&slots[i].spilled);
        out->failed_over += stats_get(&slots[i].failed_over);
        out->refused_limit += stats_get(&slots[i].refused_limit);
        out->refused_error += stats_get(&slots[i].refused_error);
        out->no_member += stats_get(&slots[i].no_member);
        out->retries += stats_get(&slots[i].retries);
        out->idle_timeouts += stats_get(&slots[i].idle_timeouts);
        out->bytes_in += stats_get(&slots[i].bytes_in);
        out->bytes_out += stats_get(&slots[i].bytes_out);
        out->requests += stats_get(&slots[i].requests);
        out->fragments += stats_get(&slots[i].fragments);
        out->local += stats_get(&slots[i].local);
        out->refused += stats_get(&slots[i].refused);
        out->errors += stats_get(&slots[i].errors);
        out->protocol_errors += stats_get(&slots[i].protocol_errors);
        out->gate_moved += stats_get(&slots[i].gate_moved);
        out->gate_absent += stats_get(&slots[i].gate_absent);
        out->gate_failed += stats_get(&slots[i].gate_failed);
    }
}
