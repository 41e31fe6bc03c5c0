/* fuzz_redis_request.c -- libFuzzer driver for the redis mode's request
 * parser: any bytes are a client's pipeline. Each request must end in a
 * whole parse whose spans lie in the buffer (or the scratch), a refusal
 * with a reason, a wait for more bytes, or a "Protocol error" -- never a
 * crash, a read past the end, or a loop. A prefix of a parsed request
 * must wait, and the arrays must be enough once grown as asked. The same
 * request fed in pieces, resuming from the parser's progress as the
 * engine does, must parse exactly as it did whole.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/redis.h"
#include "request_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_span(struct proto_span s, size_t limit)
{
    if (s.off > limit || s.len > limit - s.off)
        abort();
}

static void
check_ok(const char *buf, size_t len, const struct proto_request *rq)
{
    size_t limit, i, j, nargs = rq->nargs;
    const char *base;

    if (rq->head == 0 || rq->head > len)
        abort();
    if (rq->flags & PROTO_REQ_REFUSED) {
        if (rq->err == NULL || rq->nkeys != 0)
            abort();
        return;
    }
    if (rq->err != NULL || rq->nargs > rq->argcap || rq->nkeys > rq->keycap)
        abort();
    if (rq->flags & PROTO_REQ_INLINE) {
        base = rq->scratch;
        limit = rq->scratchlen;
        if (rq->body != 0 || limit > rq->scratchcap)
            abort();
    } else {
        base = buf;
        limit = rq->head;
    }
    if (rq->body != 0) {
        /* a streamed last argument starts at head, with its CRLF after */
        struct proto_span last = rq->args[nargs - 1];

        if (nargs < 2 || last.off != rq->head || last.len + 2 != rq->body ||
            last.len < PROTO_STREAM_MIN)
            abort();
        nargs--;
    }
    for (i = 0; i < nargs; i++)
        check_span(rq->args[i], limit);
    /* every key is one of the arguments, never the command name */
    for (i = 0; i < rq->nkeys; i++) {
        for (j = 1; j < nargs; j++)
            if (rq->keys[i].off == rq->args[j].off &&
                rq->keys[i].len == rq->args[j].len)
                break;
        if (j == nargs)
            abort();
    }
    if (rq->nargs > 0 && rq->command >= 0 &&
        redis_command_find(base + rq->args[0].off, rq->args[0].len) !=
            rq->command)
        abort();
    if (rq->nkeys > 1 && !(rq->flags & (PROTO_REQ_SAME | PROTO_REQ_SPLIT)))
        abort();
}

/* Inline lines do not resume: they are parsed whole each time. */
static bool
resumes(const struct proto_request *rq)
{
    return !(rq->flags & PROTO_REQ_INLINE);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the size limit comes from the input too: some runs hit it */
    struct harness h = {
        .proto = &proto_redis,
        .max = size > 0 && (data[0] & 1) ? 4096 : 0,
        .rounds = 2, /* the args first, then the keys */
        .cap = 8,    /* small, so that PROTO_KEYS and growth happen */
        .scratchcap = 64,
        .fatal = "Protocol error: ",
        .invalid = false, /* never used: a refusal is PROTO_OK */
        .check_ok = check_ok,
        .resumes = resumes,
    };

    harness_run(&h, data, size);
    return 0;
}
