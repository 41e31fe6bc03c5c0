/* request_harness.h -- what the request-parser fuzz targets share: the
 * caller's arrays, grown as a parser asks (PROTO_KEYS), a parse that
 * resumes from its progress as the engine does, and the check that a
 * request fed in pieces parses exactly as it did whole.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASH_FUZZ_REQUEST_HARNESS_H
#define CHASH_FUZZ_REQUEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

struct arrays {
    struct proto_span *args, *keys;
    char *scratch;
    size_t argcap, keycap, scratchcap;
};

/* Small arrays, so that PROTO_KEYS and growth are exercised. */
static void
arrays_init(struct arrays *a, size_t cap, size_t scratchcap)
{
    a->argcap = a->keycap = cap;
    a->scratchcap = scratchcap;
    a->args = malloc(cap * sizeof(*a->args));
    a->keys = malloc(cap * sizeof(*a->keys));
    a->scratch = malloc(scratchcap);
    if (a->args == NULL || a->keys == NULL || a->scratch == NULL)
        abort();
}

static void
arrays_free(struct arrays *a)
{
    free(a->args);
    free(a->keys);
    free(a->scratch);
}

static void
arrays_grow(struct arrays *a, const struct proto_request *rq)
{
    if (rq->nkeys > rq->nargs)
        abort(); /* the contract: nkeys never exceeds nargs */
    if (rq->nargs > a->argcap) {
        a->argcap = rq->nargs;
        a->args = realloc(a->args, a->argcap * sizeof(*a->args));
    }
    if (rq->nkeys > a->keycap) {
        a->keycap = rq->nkeys;
        a->keys = realloc(a->keys, a->keycap * sizeof(*a->keys));
    }
    if (rq->scratchlen > a->scratchcap) {
        a->scratchcap = rq->scratchlen;
        a->scratch = realloc(a->scratch, a->scratchcap);
    }
    if (a->args == NULL || a->keys == NULL || a->scratch == NULL)
        abort();
}

/* <p>'s parse of <buf>, the arrays grown as asked (at most <rounds>
 * times), <progress> handled as the engine handles it. */
static int
harness_parse(const struct proto *p, const char *buf, size_t len,
              struct arrays *a, struct proto_request *rq, uint64_t max,
              uint64_t value_max, struct proto_progress *progress, int rounds)
{
    int st;

    for (;;) {
        memset(rq, 0, sizeof(*rq));
        rq->progress = progress;
        rq->args = a->args;
        rq->argcap = a->argcap;
        rq->keys = a->keys;
        rq->keycap = a->keycap;
        rq->scratch = a->scratch;
        rq->scratchcap = a->scratchcap;
        rq->max = max;
        rq->value_max = value_max;
        st = p->parse_request(buf, len, rq);
        if (progress != NULL && (st != PROTO_AGAIN || rq->head > 0))
            memset(progress, 0, sizeof(*progress)); /* a new request */
        if (st != PROTO_KEYS)
            return st;
        if (rounds-- == 0)
            abort();
        arrays_grow(a, rq);
    }
}

/* <buf>'s request <whole> fed <step> bytes more at a time, resuming: it
 * waits until its head is in, then parses as it did whole (its words
 * too). */
static void
harness_pieces(const struct proto *p, const char *buf, struct arrays *a,
               const struct proto_request *whole, uint64_t max,
               uint64_t value_max, size_t step, int rounds)
{
    struct proto_progress progress = {0};
    struct proto_request rq;
    struct proto_span *args;
    size_t len, nargs = whole->nargs;
    int st;

    args = malloc((nargs ? nargs : 1) * sizeof(*args));
    if (args == NULL)
        abort();
    memcpy(args, whole->args, nargs * sizeof(*args));
    for (len = step;; len += step) {
        if (len > whole->head)
            len = whole->head;
        st = harness_parse(p, buf, len, a, &rq, max, value_max, &progress,
                           rounds);
        if (len < whole->head) {
            if (st != PROTO_AGAIN)
                abort();
            continue;
        }
        if (st != PROTO_OK || rq.head != whole->head ||
            rq.body != whole->body || rq.flags != whole->flags ||
            rq.nkeys != whole->nkeys || rq.nargs != nargs ||
            rq.command != whole->command ||
            memcmp(rq.args, args, nargs * sizeof(*args)) != 0)
            abort();
        break;
    }
    free(args);
}

/* A request mode's parser as a fuzz target sees it. */
struct harness {
    const struct proto *proto;
    uint64_t max, value_max; /* rq->max, rq->value_max */
    int rounds;              /* array growths a parse may ask for */
    size_t cap, scratchcap;  /* the arrays' first sizes */
    const char *fatal;       /* what a PROTO_FATAL reason starts with */
    bool invalid;            /* PROTO_INVALID may come (then skipped) */
    /* The mode's own checks of a whole parse. */
    void (*check_ok)(const char *buf, size_t len,
                     const struct proto_request *rq);
    /* Whether <rq> resumes from its progress (NULL: always). */
    bool (*resumes)(const struct proto_request *rq);
};

/*
 * <data> as a client's pipeline, request after request: each ends in a
 * whole parse (the mode's checks; its prefix waits; exactly its head
 * parses the same; fed in pieces it parses as it did whole), a refusal
 * with a reason, a wait, or a close with <h>->fatal's reason.
 */
static void
harness_run(const struct harness *h, const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct arrays a = {0};
    struct proto_request rq, again;
    size_t pos = 0, fatal = strlen(h->fatal);
    int st, n = 0;

    arrays_init(&a, h->cap, h->scratchcap);
    while (pos < size && n++ < 1000) {
        st = harness_parse(h->proto, buf + pos, size - pos, &a, &rq, h->max,
                           h->value_max, NULL, h->rounds);
        if (st == PROTO_AGAIN)
            break;
        if (st == PROTO_FATAL) {
            if (rq.err == NULL || strncmp(rq.err, h->fatal, fatal) != 0)
                abort();
            break;
        }
        if (st == PROTO_INVALID && h->invalid) {
            if (rq.err == NULL || rq.head == 0 || rq.head > size - pos)
                abort();
            pos += rq.head;
            continue;
        }
        if (st != PROTO_OK)
            abort();
        h->check_ok(buf + pos, size - pos, &rq);
        /* the same bytes minus one wait; exactly the head is the same */
        if (harness_parse(h->proto, buf + pos, rq.head - 1, &a, &again, h->max,
                          h->value_max, NULL, h->rounds) != PROTO_AGAIN)
            abort();
        if (harness_parse(h->proto, buf + pos, rq.head, &a, &again, h->max,
                          h->value_max, NULL, h->rounds) != PROTO_OK ||
            again.head != rq.head || again.body != rq.body ||
            again.flags != rq.flags || again.nkeys != rq.nkeys)
            abort();
        if (h->resumes == NULL || h->resumes(&rq))
            harness_pieces(h->proto, buf + pos, &a, &rq, h->max, h->value_max,
                           data[pos] % 7 + 1, h->rounds);
        if (rq.body != 0)
            break; /* the engine forwards or drops the value unparsed */
        pos += rq.head;
    }
    arrays_free(&a);
}

#endif /* CHASH_FUZZ_REQUEST_HARNESS_H */
