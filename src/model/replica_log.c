/* replica_log.c -- the members' logs of missed keys and the fill's views
 * (replica_log.h).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "model/replica_log.h"

#include <stdlib.h>
#include <string.h>

#include "chash/chash.h"
#include "base/log.h"
#include "model/pool.h"

/* ---- the logs (any thread) ----------------------------------------------- */

/* A noted key: its generation, its length, its bytes. */
#define KEY_GEN(p) (p)
#define KEY_LEN(p) ((p) + sizeof(uint64_t))
#define KEY_BYTES(p) ((p) + sizeof(uint64_t) + sizeof(uint32_t))
#define KEY_HEAD (sizeof(uint64_t) + sizeof(uint32_t))

void
replica_log_init(struct replica_log *l)
{
    memset(l, 0, sizeof(*l));
    pthread_mutex_init(&l->lock, NULL);
}

static void
keys_free(char **keys, size_t cap)
{
    for (size_t i = 0; i < cap; i++)
        free(keys[i]);
    free(keys);
}

void
replica_log_deinit(struct replica_log *l)
{
    keys_free(l->keys, l->cap);
    free(l->unsettled);
    pthread_mutex_destroy(&l->lock);
}

static uint32_t
key_len(const char *p)
{
    uint32_t len;

    memcpy(&len, KEY_LEN(p), sizeof(len));
    return len;
}

/* The slot of <key> (<len> bytes) in <keys> (<cap> slots, a power of
 * two): where it is, or the empty slot where it would go. */
static size_t
slot_of(char **keys, size_t cap, const char *key, uint32_t len)
{
    size_t i = (size_t)chash_hash(CHASH_HASH_XXH3, key, len) & (cap - 1);

    while (keys[i] != NULL &&
           !(key_len(keys[i]) == len &&
             memcmp(KEY_BYTES(keys[i]), key, len) == 0))
        i = (i + 1) & (cap - 1);
    return i;
}

/* Whether <l> notes nothing at all (its lock held). */
static bool
log_clean(const struct replica_log *l)
{
    return l->n == 0 && !l->whole && l->nunsettled == 0;
}

/* Every key behind (the lock held). */
static void
log_whole(struct replica_log *l)
{
    keys_free(l->keys, l->cap);
    l->keys = NULL;
    l->cap = l->n = 0;
    l->whole = true;
    l->whole_gen = atomic_fetch_add(&l->gen, 1) + 1;
    atomic_store(&l->dirty, true);
}

/* Note one key (the lock held). */
static void
log_put(struct replica_log *l, const char *key, uint32_t len, size_t cap,
        uint64_t gen)
{
    size_t i;
    char *p;

    if (l->n >= cap) {
        log_whole(l); /* more than the log holds: compared whole */
        return;
    }
    if ((l->n + 1) * 2 > l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        char **nk = calloc(ncap, sizeof(*nk));

        if (nk == NULL) {
            log_whole(l); /* out of memory: a key forgotten would stay
                             behind unseen */
            return;
        }
        for (size_t k = 0; k < l->cap; k++)
            if (l->keys[k] != NULL)
                nk[slot_of(nk, ncap, KEY_BYTES(l->keys[k]),
                           key_len(l->keys[k]))] = l->keys[k];
        free(l->keys);
        l->keys = nk;
        l->cap = ncap;
    }
    i = slot_of(l->keys, l->cap, key, len);
    if (l->keys[i] != NULL) {
        memcpy(KEY_GEN(l->keys[i]), &gen, sizeof(gen)); /* noted again */
        return;
    }
    if ((p = malloc(KEY_HEAD + len)) == NULL) {
        log_whole(l);
        return;
    }
    memcpy(KEY_GEN(p), &gen, sizeof(gen));
    memcpy(KEY_LEN(p), &len, sizeof(len));
    memcpy(KEY_BYTES(p), key, len);
    l->keys[i] = p;
    l->n++;
}

void
replica_note(struct server *s, const char *keys, size_t keyslen, size_t cap)
{
    struct replica_log *l = &s->rlog;
    size_t off = 0;
    uint64_t gen;

    pthread_mutex_lock(&l->lock);
    gen = atomic_fetch_add(&l->gen, 1) + 1;
    atomic_store(&l->dirty, true);
    while (!l->whole && off + sizeof(uint32_t) <= keyslen) {
        uint32_t len;

        memcpy(&len, keys + off, sizeof(len));
        off += sizeof(len);
        if (len > keyslen - off)
            break;
        log_put(l, keys + off, len, cap, gen);
        off += len;
    }
    pthread_mutex_unlock(&l->lock);
}

void
replica_note_whole(struct server *s, const char *why)
{
    struct replica_log *l = &s->rlog;

    pthread_mutex_lock(&l->lock);
    log_whole(l);
    pthread_mutex_unlock(&l->lock);
    log_info("member %s: every key is compared with the other members (%s)",
             s->name, why);
}

bool
replica_keys_current(struct server *s, const char *keys, size_t keyslen)
{
    struct replica_log *l = &s->rlog;
    size_t off = 0;
    bool cur = true;

    if (!atomic_load_explicit(&l->dirty, memory_order_acquire))
        return true;
    pthread_mutex_lock(&l->lock);
    if (l->whole) {
        cur = false;
    } else if (l->n > 0) {
        while (cur && off + sizeof(uint32_t) <= keyslen) {
            uint32_t len;

            memcpy(&len, keys + off, sizeof(len));
            off += sizeof(len);
            if (len > keyslen - off)
                break;
            cur = l->keys[slot_of(l->keys, l->cap, keys + off, len)] == NULL;
            off += len;
        }
    }
    pthread_mutex_unlock(&l->lock);
    return cur;
}

uint64_t
replica_gen(struct server *s)
{
    return atomic_load(&s->rlog.gen);
}

/* Remove the key at slot <i> of <l> (the lock held): the run after it is
 * put back where a lookup finds it. */
static void
log_remove(struct replica_log *l, size_t i)
{
    free(l->keys[i]);
    l->keys[i] = NULL;
    l->n--;
    for (size_t j = (i + 1) & (l->cap - 1); l->keys[j] != NULL;
         j = (j + 1) & (l->cap - 1)) {
        char *p = l->keys[j];

        l->keys[j] = NULL;
        l->keys[slot_of(l->keys, l->cap, KEY_BYTES(p), key_len(p))] = p;
    }
}

void
replica_clear(struct server *s, const char *key, size_t len, uint64_t gen)
{
    struct replica_log *l = &s->rlog;

    pthread_mutex_lock(&l->lock);
    if (l->n > 0) {
        size_t i = slot_of(l->keys, l->cap, key, (uint32_t)len);
        uint64_t noted;

        if (l->keys[i] != NULL) {
            memcpy(&noted, KEY_GEN(l->keys[i]), sizeof(noted));
            if (noted <= gen)
                log_remove(l, i); /* (else: missed again since the read) */
        }
    }
    if (log_clean(l))
        atomic_store(&l->dirty, false);
    pthread_mutex_unlock(&l->lock);
}

/* The whole comparison that began at generation <gen> is done: the
 * member is behind on nothing it did not miss since. */
void
replica_whole_done(struct server *s, uint64_t gen)
{
    struct replica_log *l = &s->rlog;

    pthread_mutex_lock(&l->lock);
    if (l->whole && l->whole_gen <= gen)
        l->whole = false;
    if (log_clean(l))
        atomic_store(&l->dirty, false);
    pthread_mutex_unlock(&l->lock);
}

void
replica_unsettled(struct server *s, const char *laddr)
{
    struct replica_log *l = &s->rlog;
    char(*u)[64];

    pthread_mutex_lock(&l->lock);
    atomic_store(&l->dirty, true);
    u = realloc(l->unsettled, (l->nunsettled + 1) * sizeof(*u));
    if (u == NULL) {
        log_whole(l);
    } else {
        l->unsettled = u;
        snprintf(u[l->nunsettled++], sizeof(*u), "%s", laddr);
    }
    pthread_mutex_unlock(&l->lock);
}

bool
replica_settled(struct server *s)
{
    struct replica_log *l = &s->rlog;
    bool settled;

    if (!atomic_load_explicit(&l->dirty, memory_order_acquire))
        return true;
    pthread_mutex_lock(&l->lock);
    settled = l->nunsettled == 0;
    pthread_mutex_unlock(&l->lock);
    return settled;
}

/* The addresses still to settle on <s>, copied into *<out> (freed by the
 * caller); their number. */
size_t
replica_unsettled_list(struct server *s, char (**out)[64])
{
    struct replica_log *l = &s->rlog;
    size_t n;

    pthread_mutex_lock(&l->lock);
    n = l->nunsettled;
    *out = n ? malloc(n * sizeof(**out)) : NULL;
    if (*out != NULL)
        memcpy(*out, l->unsettled, n * sizeof(**out));
    else
        n = 0;
    pthread_mutex_unlock(&l->lock);
    return n;
}

/* <laddr> is settled on <s>: forgotten. */
void
replica_settled_one(struct server *s, const char *laddr)
{
    struct replica_log *l = &s->rlog;

    pthread_mutex_lock(&l->lock);
    for (size_t i = 0; i < l->nunsettled; i++)
        if (strcmp(l->unsettled[i], laddr) == 0) {
            memmove(&l->unsettled[i], &l->unsettled[i + 1],
                    (l->nunsettled - i - 1) * sizeof(*l->unsettled));
            l->nunsettled--;
            break;
        }
    if (log_clean(l))
        atomic_store(&l->dirty, false);
    pthread_mutex_unlock(&l->lock);
}

int
replica_identity(struct server *s, const char *id)
{
    struct replica_log *l = &s->rlog;
    int changed = 0;

    pthread_mutex_lock(&l->lock);
    if (l->ident[0] != 0 && strcmp(l->ident, id) != 0) {
        log_whole(l);
        changed = 1;
    }
    snprintf(l->ident, sizeof(l->ident), "%s", id);
    pthread_mutex_unlock(&l->lock);
    return changed;
}

bool
replica_whole(struct server *s)
{
    bool whole;

    if (!atomic_load_explicit(&s->rlog.dirty, memory_order_acquire))
        return false;
    pthread_mutex_lock(&s->rlog.lock);
    whole = s->rlog.whole;
    pthread_mutex_unlock(&s->rlog.lock);
    return whole;
}

bool
replica_readable(const struct server *s)
{
    return !atomic_load_explicit((_Atomic bool *)&s->rlog.dirty,
                                 memory_order_relaxed);
}

size_t
replica_pending(struct server *s)
{
    size_t n;

    pthread_mutex_lock(&s->rlog.lock);
    n = s->rlog.n;
    pthread_mutex_unlock(&s->rlog.lock);
    return n;
}

/* Copy the keys noted on <s> into *<out> (each: 4-byte length, bytes;
 * freed by the caller), their generation at the copy in *<gen>; whether
 * it is whole in *<whole>. The number of keys. */
size_t
replica_log_keys(struct server *s, char **out, size_t *outlen, bool *whole)
{
    struct replica_log *l = &s->rlog;
    size_t n = 0, len = 0;
    char *b = NULL;

    pthread_mutex_lock(&l->lock);
    *whole = l->whole;
    for (size_t i = 0; i < l->cap; i++)
        if (l->keys[i] != NULL)
            len += sizeof(uint32_t) + key_len(l->keys[i]);
    if (len > 0 && (b = malloc(len)) != NULL) {
        size_t off = 0;

        for (size_t i = 0; i < l->cap; i++) {
            uint32_t kl;

            if (l->keys[i] == NULL)
                continue;
            kl = key_len(l->keys[i]);
            memcpy(b + off, &kl, sizeof(kl));
            memcpy(b + off + sizeof(kl), KEY_BYTES(l->keys[i]), kl);
            off += sizeof(kl) + kl;
            n++;
        }
    } else if (len > 0) {
        log_whole(l); /* out of memory: compared whole instead */
        *whole = true;
    }
    pthread_mutex_unlock(&l->lock);
    *out = b;
    *outlen = b != NULL ? len : 0;
    return n;
}

/* ---- the fill's views ---------------------------------------------------- */

/* Whether <a> and <b> place keys alike (the same members, in the same
 * ring). */
bool
replica_same_placement(const struct pool_snapshot *a, const struct pool_snapshot *b)
{
    if (a == b)
        return true;
    if (a->ring == NULL || b->ring == NULL)
        return a->ring == b->ring;
    if (a->n != b->n || a->set.replicas != b->set.replicas ||
        chash_ring_checksum(a->ring) != chash_ring_checksum(b->ring))
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (a->servers[i] != b->servers[i])
            return false;
    return true;
}

void
replica_view_unref(struct replica_view *v)
{
    if (v == NULL || --v->refs > 0)
        return;
    pool_snapshot_unpin(v->base);
    for (size_t i = 0; i < v->nsince; i++)
        pool_snapshot_unpin(v->since[i]);
    free(v->since);
    free(v);
}

/* A view of base <base> and the placements <since> (<n>), pinned. */
struct replica_view *
replica_view_new(struct pool_snapshot *base, struct pool_snapshot *const *since,
         size_t n)
{
    struct replica_view *v = calloc(1, sizeof(*v));

    if (v == NULL ||
        (n > 0 && (v->since = calloc(n, sizeof(*since))) == NULL)) {
        free(v);
        return NULL;
    }
    v->refs = 1;
    v->base = base;
    pool_snapshot_pin(base);
    for (size_t i = 0; i < n; i++) {
        v->since[i] = since[i];
        pool_snapshot_pin(since[i]);
    }
    v->nsince = n;
    return v;
}

int
replica_fill_view(struct pool *p, struct replica_view **out)
{
    struct pool_snapshot *cur = atomic_load(&p->snap);
    struct replica_view *v = p->fill_view;

    *out = NULL;
    if (p->cfg.replicas <= 1) {
        replica_view_unref(v);
        p->fill_view = NULL;
        return 0;
    }
    if (v == NULL && cur != NULL) {
        /* the placement running now holds the keys (a pool that starts,
         * or turns replication on) */
        if ((v = replica_view_new(cur, NULL, 0)) == NULL)
            return -1;
        p->fill_view = v;
    } else if (v != NULL && cur != NULL &&
               !replica_same_placement(cur,
                               v->nsince ? v->since[v->nsince - 1] : v->base)) {
        /* a placement that was published: writes went to its sets */
        struct pool_snapshot **since = calloc(v->nsince + 1, sizeof(*since));
        struct replica_view *nv;

        if (since == NULL)
            return -1;
        memcpy(since, v->since, v->nsince * sizeof(*since));
        since[v->nsince] = cur;
        nv = replica_view_new(v->base, since, v->nsince + 1);
        free(since);
        if (nv == NULL)
            return -1;
        replica_view_unref(v);
        p->fill_view = v = nv;
    }
    if (v != NULL)
        v->refs++;
    *out = v;
    return 0;
}

bool
replica_fill_same(const struct pool_snapshot *snap)
{
    const struct replica_view *v = snap->fill;

    if (v == NULL)
        return true;
    return v->nsince == 0 &&
           (v->base->ring == NULL || replica_same_placement(v->base, snap));
}

/* Whether member <s> is in the set of a key of ring hash <hash> in
 * <snap>: by identity (workers: a member removed and added again under
 * its name is a new one, filled again), or, <by_addr>, by address (the
 * repairer: a server that left under one identity and came back under
 * another is still the same copies). */
static bool
in_set_hash(const struct pool_snapshot *snap, uint64_t hash,
            const struct server *s, bool by_addr)
{
    size_t idx[REPLICAS_MAX], n;

    n = pool_replica_set(snap, hash, idx);
    for (size_t i = 0; i < n; i++) {
        const struct server *m = snap->servers[idx[i]];

        if (m == s || (by_addr && conf_addr_equal(&m->addr, &s->addr)))
            return true;
    }
    return false;
}

bool
replica_current(const struct replica_view *v, uint64_t hash,
                const struct server *s)
{
    if (v->base->ring == NULL)
        return true; /* nothing was placed: nothing to hold */
    if (!in_set_hash(v->base, hash, s, false))
        return false;
    for (size_t i = 0; i < v->nsince; i++)
        if (!in_set_hash(v->since[i], hash, s, false))
            return false;
    return true;
}
