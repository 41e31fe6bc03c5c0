/* health.h -- active checks (rise/fall): a TCP connect, a protocol probe
 * (redis PING, memcache version) or an HTTP GET judged by its status line;
 * passive ejection after server_failure_limit connect failures, and
 * re-admission only after a successful probe. Runs on the control thread;
 * the one worker entry is health_passive_failure().
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_HEALTH_H
#define CHASHD_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf_addr;
struct conf_health;
struct server;

/* Register with the control loop (tick and the passive-failure eventfd).
 * 0 or -1. */
int health_init(void);
void health_deinit(void);

/* Cancel <s>'s probe in flight, if any (member removed or in maint). */
void health_cancel(struct server *s);

/*
 * Worker: a member of <p> has failed <fails> connects in a row. When that
 * reaches the pool's server_failure_limit (and auto_eject_hosts is on),
 * wake the control thread, which ejects the member. Lock-free: a write to
 * an eventfd.
 */
struct pool;
void health_passive_failure(struct pool *p, uint32_t fails);

/*
 * The request of a check of type http into <out> (<len> bytes):
 * "GET <path> HTTP/1.1", Host <hc->host> or else the member's address
 * <addr> as configured ("localhost" for a unix socket), User-Agent
 * chashd-health, Connection: close. Its length, or -1 when it does not
 * fit. Pure.
 */
int health_http_request(char *out, size_t len, const struct conf_health *hc,
                        const struct conf_addr *addr);

/*
 * Judge the answer to an http check from its first <len> bytes <buf>: the
 * status line "HTTP/1.x SSS ..." must carry <expect> exactly, or any 2xx
 * or 3xx when <expect> is 0. 1: passed; 0: not enough bytes yet to tell;
 * -1: failed, and <why> (of <whylen> bytes) names what came: "http status
 * 503, expected 2xx or 3xx", "not an HTTP status line: \"SSH-2.0\"" (the
 * bytes escaped: they come from the network). <closed>: nothing more will
 * come, so "not enough" is a failure too ("closed before a status line").
 * Pure.
 */
int health_http_status(const char *buf, size_t len, uint32_t expect,
                       bool closed, char *why, size_t whylen);

#endif /* CHASHD_HEALTH_H */
