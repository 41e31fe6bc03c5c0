/* fuzz_memcache_request.c -- libFuzzer driver for the memcache mode's
 * request parser: any bytes are a client's pipeline. Each request must
 * end in a whole parse whose spans lie in the buffer (its keys among its
 * words, its value inside it), a refusal with memcached's words, a wait
 * for more bytes, or a close for the binary protocol or a line too long
 * -- never a crash, a read past the end, or a loop. A prefix of a parsed
 * request must wait; the same request fed in pieces, resuming from the
 * parser's progress as the engine does, must parse exactly as it did
 * whole; a request that goes to a member holds exactly one line and, for
 * a storage command, its value ended by "\r\n" (so a member answers it
 * once and stays in step).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/memcache.h"
#include "proto/proto.h"
#include "request_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_ok(const char *buf, size_t len, const struct proto_request *rq)
{
    const char *nl;
    size_t line;

    if (rq->head == 0 || rq->head > len || rq->nargs == 0 ||
        rq->nargs > rq->argcap || rq->nkeys > rq->keycap)
        abort();
    nl = memchr(buf, '\n', rq->head);
    if (nl == NULL)
        abort();
    line = (size_t)(nl - buf) + 1;
    for (size_t i = 0; i < rq->nargs; i++)
        if (rq->args[i].off + rq->args[i].len > line || rq->args[i].len == 0)
            abort();
    if (rq->flags & PROTO_REQ_REFUSED) {
        /* answered by chashd: never routed */
        if (rq->err == NULL || rq->nkeys != 0)
            abort();
        return;
    }
    for (size_t i = 0; i < rq->nkeys; i++) {
        size_t j;
        if (rq->keys[i].len > MC_KEY_MAX)
            abort();
        for (j = 1; j < rq->nargs; j++)
            if (rq->keys[i].off == rq->args[j].off &&
                rq->keys[i].len == rq->args[j].len)
                break;
        if (j == rq->nargs)
            abort();
    }
    if (rq->body != 0 || rq->err != NULL)
        abort();
    if (rq->head != line) {
        /* a value follows its line, and ends with "\r\n" */
        if (rq->command != MC_MS &&
            (rq->command < MC_SET || rq->command > MC_CAS))
            abort();
        if (rq->head < line + 2 || buf[rq->head - 2] != '\r' ||
            buf[rq->head - 1] != '\n')
            abort();
    }
    if (!(rq->flags & PROTO_REQ_LOCAL) && rq->command != MC_FLUSH_ALL &&
        rq->nkeys == 0)
        abort(); /* forwarded, so routed by a key */
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the value limit comes from the input too: some runs hit it */
    struct harness h = {
        .proto = &proto_memcache,
        .max = 64 * 1024,
        .value_max = size > 0 && (data[0] & 1) ? 16 : 0,
        .rounds = 1, /* one growth: room for every word */
        .cap = 4,    /* small, so that PROTO_KEYS and growth happen */
        .scratchcap = 1,
        .fatal = "CLIENT_ERROR ",
        .invalid = true,
        .check_ok = check_ok,
    };

    harness_run(&h, data, size);
    return 0;
}
