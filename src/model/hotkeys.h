/* hotkeys.h -- the hottest keys of a pool (doc/hot.md): each worker keeps,
 * per pool, a space-saving top-K summary of the keys its requests route
 * (Metwally et al.: K counters; a key not counted takes the smallest
 * counter's place, and its count starts from it, so a key seen more than
 * total/K times in a window is always among them, its count over by at
 * most the error it inherited). Written by its worker alone, with no lock:
 * at the end of each window the worker publishes the summary under a
 * sequence counter and starts a new one; the control thread reads the
 * published ones (hot_read) and merges them (control/hot.c). This
 * header is the summary itself, which the data path writes.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_HOTKEYS_H
#define CHASHD_HOTKEYS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "chash/chash.h"

#define HOT_K 32           /* keys counted per worker and pool */
#define HOT_KEY_MAX 64     /* bytes of a key kept to show it */
#define HOT_WINDOW_MS 2000 /* a summary covers this long */

struct hot_entry {
    uint64_t hash;
    uint64_t count;
    uint64_t err; /* the count it inherited: the true count is at least
                     count - err */
    uint32_t len; /* the key's length (its first HOT_KEY_MAX bytes kept) */
    char key[HOT_KEY_MAX];
};

/* One worker's summary of one pool. */
struct hot {
    /* the worker's, while the window runs */
    uint64_t hs[HOT_K]; /* key hashes, first: what a lookup scans */
    uint64_t cnt[HOT_K];
    struct hot_entry e[HOT_K];
    unsigned n;
    uint64_t total; /* keys noted in the window */
    uint64_t start_ms;
    /* the last window, published (seq odd while it is written) */
    _Atomic uint64_t seq;
    struct hot_entry pub[HOT_K];
    unsigned npub;
    uint64_t pub_total, pub_end_ms, pub_ms;
} __attribute__((aligned(64)));

/* A key's identity in the summaries: the library's XXH3-64 of its bytes
 * (the whole key, whatever the pool's hash or hash tag). */
static inline uint64_t
hot_hash(const char *key, size_t len)
{
    return chash_hash(CHASH_HASH_XXH3, key, len);
}

/* The worker publishes the window that ends at <now_ms>. */
static inline void
hot_publish(struct hot *h, uint64_t now_ms)
{
    uint64_t s = atomic_load_explicit(&h->seq, memory_order_relaxed);

    atomic_store_explicit(&h->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (unsigned i = 0; i < h->n; i++) {
        h->pub[i] = h->e[i];
        h->pub[i].count = h->cnt[i];
    }
    h->npub = h->n;
    h->pub_total = h->total;
    h->pub_end_ms = now_ms;
    h->pub_ms = h->start_ms ? now_ms - h->start_ms : 0;
    atomic_store_explicit(&h->seq, s + 2, memory_order_release);
    h->n = 0;
    h->total = 0;
    h->start_ms = now_ms;
}

/* A request of the worker routed key <key> (<len> bytes, hash <hash>) at
 * <now_ms>. */
static inline void
hot_note(struct hot *h, uint64_t now_ms, const char *key, size_t len,
         uint64_t hash)
{
    unsigned i, min = 0;

    if (h->start_ms == 0)
        h->start_ms = now_ms ? now_ms : 1;
    else if (now_ms - h->start_ms >= HOT_WINDOW_MS)
        hot_publish(h, now_ms);
    h->total++;
    for (i = 0; i < h->n; i++)
        if (h->hs[i] == hash) {
            h->cnt[i]++;
            return;
        }
    if (h->n < HOT_K) {
        i = h->n++;
        h->cnt[i] = 1;
        h->e[i].err = 0;
    } else {
        for (i = 1; i < HOT_K; i++)
            if (h->cnt[i] < h->cnt[min])
                min = i;
        i = min;
        h->e[i].err = h->cnt[i];
        h->cnt[i]++;
    }
    h->hs[i] = hash;
    h->e[i].hash = hash;
    h->e[i].len = (uint32_t)len;
    memcpy(h->e[i].key, key, len < HOT_KEY_MAX ? len : HOT_KEY_MAX);
}

/* Read <h>'s published window into <out> (HOT_K entries): how many, or
 * -1 when none was published since <since_ms> (the worker saw no key:
 * nothing to show). <total> and <ms> the window's keys and length. Any
 * thread; retried while the worker writes it. */
static inline int
hot_read(const struct hot *h, uint64_t since_ms, struct hot_entry *out,
         uint64_t *total, uint64_t *ms)
{
    for (int tries = 0; tries < 100; tries++) {
        uint64_t s = atomic_load_explicit(&h->seq, memory_order_acquire);
        unsigned n;

        if (s & 1)
            continue;
        n = h->npub;
        if (n > HOT_K)
            continue;
        memcpy(out, h->pub, n * sizeof(*out));
        *total = h->pub_total;
        *ms = h->pub_ms;
        if (h->pub_end_ms < since_ms)
            n = 0, *total = 0;
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&h->seq, memory_order_relaxed) != s)
            continue;
        return s == 0 || (n == 0 && *total == 0) ? -1 : (int)n;
    }
    return -1;
}

/* <key>'s first <len> bytes (of <full>) as shown: printable ASCII as is,
 * other bytes as \\xNN, a backslash doubled; "..." when it was cut at
 * HOT_KEY_MAX bytes. */
static inline void
hot_key_text(const char *key, size_t len, size_t full, char *out, size_t cap)
{
    size_t o = 0;

    for (size_t i = 0; i < len && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)key[i];

        if (c == '\\') {
            out[o++] = '\\';
            out[o++] = '\\';
        } else if (c >= 0x20 && c < 0x7f) {
            out[o++] = (char)c;
        } else {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        }
    }
    if (full > len && o + 4 < cap) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o < cap ? o : cap - 1] = '\0';
}

#endif /* CHASHD_HOTKEYS_H */
