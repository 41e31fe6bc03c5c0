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

#define CAP 4 /* small, so that PROTO_KEYS and growth are exercised */

static int
parse(const char *buf, size_t len, struct arrays *a, struct proto_request *rq,
      uint64_t value_max, struct proto_progress *progress)
{
    /* one growth is enough: room for every word */
    return harness_parse(&proto_memcache, buf, len, a, rq, 64 * 1024, value_max,
                         progress, 1);
}

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
    const char *buf = (const char *)data;
    struct arrays a = {0};
    struct proto_request rq, again;
    size_t pos = 0;
    int st, n = 0;
    /* the value limit comes from the input too: some runs hit it */
    uint64_t value_max = size > 0 && (data[0] & 1) ? 16 : 0;

    arrays_init(&a, CAP, 1);
    while (pos < size && n++ < 1000) {
        st = parse(buf + pos, size - pos, &a, &rq, value_max, NULL);
        if (st == PROTO_AGAIN)
            break;
        if (st == PROTO_FATAL) {
            if (rq.err == NULL || strncmp(rq.err, "CLIENT_ERROR ", 13) != 0)
                abort();
            break;
        }
        if (st == PROTO_INVALID) {
            if (rq.err == NULL || rq.head == 0 || rq.head > size - pos)
                abort();
            pos += rq.head;
            continue;
        }
        if (st != PROTO_OK)
            abort();
        check_ok(buf + pos, size - pos, &rq);
        if (parse(buf + pos, rq.head - 1, &a, &again, value_max, NULL) !=
            PROTO_AGAIN)
            abort();
        harness_pieces(&proto_memcache, buf + pos, &a, &rq, 64 * 1024,
                       value_max, data[pos] % 7 + 1, 1);
        if (rq.body != 0)
            break; /* the engine drops the value unparsed */
        pos += rq.head;
    }
    arrays_free(&a);
    return 0;
}
