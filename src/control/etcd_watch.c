/* etcd_watch.c -- module etcd: the watcher thread. It lists <prefix>/
 * whole, seeds the pools etcd holds nothing for, then watches the prefix
 * from the next revision; every change of records it sees goes to the
 * control thread as a message (etcd.c). doc/etcd.md, "Talking to etcd",
 * has the stream's framing, the resume rule and how a compaction or a
 * wipe of etcd is told.
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd_int.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "conf/etcd_codec.h"

/* The watcher's state: what it knows of etcd's records (its thread
 * only). */
struct watcher {
    struct etcd_http eh;
    json_t *pools;     /* {pool: {member: [mod_rev, value]}} etcd pools */
    json_t *instances; /* {id: [mod_rev, value]} */
    json_t *touched;   /* pools changed by the message at hand: {pool:
                          the mod_revision of its last event} */
    bool inst_touched;
    int64_t next_rev;
    int verdict; /* of the stream: 0 reconnect, 1 list again */
    bool created;
    bool up;        /* the last list or watch worked (logged on a change) */
    bool down_said; /* "unreachable" was logged since */
    char err[256];
};

static bool
seeded_pool(const char *pool)
{
    bool yes = false;

    pthread_mutex_lock(&etcd_shared.mu);
    for (size_t i = 0; i < etcd_shared.nseeds; i++)
        if (strcmp(etcd_shared.seeds[i].pool, pool) == 0)
            yes = true;
    pthread_mutex_unlock(&etcd_shared.mu);
    return yes;
}

/* A value as a JSON string. One that is not UTF-8 cannot be a record:
 * it is held as "" (not a record: ignored, and alike on every instance,
 * whether it came by a list or an event). */
static json_t *
jvalue(const char *value, size_t len)
{
    json_t *j = json_stringn(value, len);

    return j != NULL ? j : json_string("");
}

/* Apply one KV (a put: <value> non-NULL; a delete: NULL) at <mod_rev>
 * (created at <create_rev>). A pool's migration keys are held with its
 * members, under names a member cannot have ("/migration", "/copier",
 * "/barrier/<epoch>.<stage>/<id>"), with their create revision third. */
static void
watcher_kv(struct watcher *w, const char *b64key, const char *b64value,
           int64_t mod_rev, int64_t create_rev, int64_t lease, bool del)
{
    size_t klen, vlen = 0, plen = strlen(etcd_cfg.prefix);
    char *key = b64key ? etcd_b64_decode(b64key, &klen) : NULL;
    char *value = NULL, *pool, *member, meta[300];
    int kind;

    if (key == NULL || klen != strlen(key) || klen <= plen + 1 ||
        strncmp(key, etcd_cfg.prefix, plen) != 0 || key[plen] != '/')
        goto out;
    kind = etcd_key_split(key + plen + 1, &pool, &member);
    if (kind == ETCD_KEY_OTHER)
        goto out;
    if (!del) {
        value = b64value ? etcd_b64_decode(b64value, &vlen) : strdup("");
        if (value == NULL)
            goto out;
    }
    if (kind == ETCD_KEY_INSTANCE) {
        if (del)
            json_object_del(w->instances, member);
        else
            json_object_set_new(w->instances, member,
                                json_pack("[I,o,I]", (json_int_t)mod_rev,
                                          jvalue(value, vlen),
                                          (json_int_t)lease));
        w->inst_touched = true;
        goto out;
    }
    if (!seeded_pool(pool))
        goto out; /* not a pool of ours */
    if (kind == ETCD_KEY_MIGRATION) {
        snprintf(meta, sizeof(meta), "/%s", member);
        member = meta;
    }
    {
        json_t *pm = json_object_get(w->pools, pool);
        json_t *old;

        if (pm == NULL) {
            pm = json_object();
            json_object_set_new(w->pools, pool, pm);
        }
        old = json_object_get(pm, member);
        if (old != NULL && etcd_jint(json_array_get(old, 0)) >= mod_rev)
            goto out; /* seen (a resumed watch replays) */
        if (del)
            json_object_del(pm, member);
        else
            json_object_set_new(pm, member,
                                json_pack("[I,o,I]", (json_int_t)mod_rev,
                                          jvalue(value, vlen),
                                          (json_int_t)create_rev));
        json_object_set_new(w->touched, pool, json_integer(mod_rev));
    }
out:
    free(key);
    free(value);
}

/* Hand the pools of <w->touched> (or, for a list, every etcd pool) and the
 * instance records to the control thread. */
static void
watcher_post(struct watcher *w, bool list, uint64_t rev)
{
    struct etcd_msg *m;
    const char *name;
    json_t *v;

    if (list || json_object_size(w->touched) > 0) {
        m = calloc(1, sizeof(*m));
        if (m != NULL) {
            m->type = ETCD_MSG_POOLS;
            m->rev = rev;
            m->list = list;
            if (list) {
                /* a pool's change in a list is as new as its newest
                 * record (a delete made meanwhile left none) */
                const char *mn;
                json_t *rec;

                m->data = json_deep_copy(w->pools);
                m->revs = json_object();
                json_object_foreach(w->pools, name, v)
                {
                    int64_t newest = 0;
                    json_object_foreach(v, mn, rec)
                    {
                        if (etcd_jint(json_array_get(rec, 0)) > newest)
                            newest = etcd_jint(json_array_get(rec, 0));
                    }
                    json_object_set_new(m->revs, name, json_integer(newest));
                }
            } else {
                m->data = json_object();
                m->revs = json_deep_copy(w->touched);
                json_object_foreach(w->touched, name, v)
                {
                    json_t *pm = json_object_get(w->pools, name);
                    json_object_set_new(
                        m->data, name, pm ? json_deep_copy(pm) : json_object());
                }
            }
            etcd_post(m);
        }
    }
    if (list || w->inst_touched) {
        m = calloc(1, sizeof(*m));
        if (m != NULL) {
            m->type = ETCD_MSG_INSTANCES;
            m->data = json_deep_copy(w->instances);
            etcd_post(m);
        }
    }
    json_object_clear(w->touched);
    w->inst_touched = false;
}

/*
 * Seed pool <s> (no record under its prefix): its servers, in one txn that
 * only succeeds while the prefix is still empty (a compare over the
 * range: an empty range compares as create_revision 0). Pools of more
 * than 127 servers put the rest as create-if-absent, after.
 */
static void
watcher_seed(struct watcher *w, const struct etcd_seed *s)
{
    char pfx[512], key[768], err[256];
    json_t *txn, *cmp, *ops, *out = NULL;
    const char *name;
    json_t *v;
    long st;
    size_t n = 0;
    int rc;

    snprintf(pfx, sizeof(pfx), "%s/pools/%s/members/", etcd_cfg.prefix,
             s->pool);
    cmp = json_pack("[{s:o,s:o,s:s,s:s,s:s}]", "key", etcd_jb64(pfx),
                    "range_end", etcd_jb64_end(pfx), "target", "CREATE",
                    "result", "EQUAL", "create_revision", "0");
    ops = json_array();
    json_object_foreach(s->members, name, v)
    {
        if (++n >= ETCD_TXN_OPS_MAX)
            break;
        etcd_member_key(key, sizeof(key), s->pool, name);
        json_array_append_new(ops, json_pack("{s:{s:o,s:o}}", "request_put",
                                             "key", etcd_jb64(key), "value",
                                             etcd_jb64(json_string_value(v))));
    }
    txn = json_pack("{s:o,s:o}", "compare", cmp, "success", ops);
    rc = etcd_http_post(&w->eh, "/v3/kv/txn", txn, &out, &st, err, sizeof(err));
    json_decref(txn);
    if (rc != 0) {
        log_warn("etcd: pool %s: cannot seed its members: %s", s->pool, err);
        return;
    }
    if (!json_is_true(json_object_get(out, "succeeded"))) {
        json_decref(out);
        return; /* another instance seeded it first */
    }
    log_info("etcd: pool %s: no members in etcd: seeded %zu from the config "
             "under %s (revision %" PRId64 ")",
             s->pool, json_object_size(s->members), pfx,
             etcd_jint(etcd_jpath(out, "header", "revision")));
    json_decref(out);
    n = 0;
    json_object_foreach(s->members, name, v)
    {
        json_t *one;
        if (++n < ETCD_TXN_OPS_MAX)
            continue;
        etcd_member_key(key, sizeof(key), s->pool, name);
        one = json_pack("{s:[{s:o,s:s,s:s,s:s}],s:[{s:{s:o,s:o}}]}", "compare",
                        "key", etcd_jb64(key), "target", "CREATE", "result",
                        "EQUAL", "create_revision", "0", "success",
                        "request_put", "key", etcd_jb64(key), "value",
                        etcd_jb64(json_string_value(v)));
        if (etcd_http_post(&w->eh, "/v3/kv/txn", one, &out, &st, err,
                           sizeof(err)) != 0)
            log_warn("etcd: pool %s: cannot seed %s: %s", s->pool, name, err);
        json_decref(out);
        json_decref(one);
    }
}

/* List <prefix>/ whole: the records REPLACE what the watcher had. Seeds
 * the pools found empty. 0 or -1. */
static int
watcher_list(struct watcher *w)
{
    char pfx[512];
    json_t *rq, *out = NULL, *kvs;
    long st;
    size_t i;

    snprintf(pfx, sizeof(pfx), "%s/", etcd_cfg.prefix);
    rq = json_pack("{s:o,s:o}", "key", etcd_jb64(pfx), "range_end",
                   etcd_jb64_end(pfx));
    if (etcd_http_post(&w->eh, "/v3/kv/range", rq, &out, &st, w->err,
                       sizeof(w->err)) != 0) {
        json_decref(rq);
        return -1;
    }
    json_decref(rq);
    json_object_clear(w->pools);
    json_object_clear(w->instances);
    json_object_clear(w->touched);
    kvs = json_object_get(out, "kvs");
    for (i = 0; i < json_array_size(kvs); i++) {
        json_t *kv = json_array_get(kvs, i);
        watcher_kv(w, json_string_value(json_object_get(kv, "key")),
                   json_string_value(json_object_get(kv, "value")),
                   etcd_jint(json_object_get(kv, "mod_revision")),
                   etcd_jint(json_object_get(kv, "create_revision")),
                   etcd_jint(json_object_get(kv, "lease")), false);
    }
    w->next_rev = etcd_jint(etcd_jpath(out, "header", "revision")) + 1;
    json_decref(out);

    /* seed the pools etcd holds nothing for */
    pthread_mutex_lock(&etcd_shared.mu);
    etcd_shared.relist = false;
    for (i = 0; i < etcd_shared.nseeds; i++) {
        struct etcd_seed s = etcd_shared.seeds[i];
        json_t *pm = json_object_get(w->pools, s.pool), *rec;
        const char *mn;
        bool members = false;

        json_object_foreach(pm, mn, rec)
        {
            members |= mn[0] != '/';
        }
        if (members)
            continue;
        s.pool = strdup(s.pool);
        json_incref(s.members);
        pthread_mutex_unlock(&etcd_shared.mu);
        if (s.pool != NULL)
            watcher_seed(w, &s);
        free(s.pool);
        json_decref(s.members);
        pthread_mutex_lock(&etcd_shared.mu);
    }
    pthread_mutex_unlock(&etcd_shared.mu);
    watcher_post(w, true, (uint64_t)(w->next_rev - 1));
    return 0;
}

/* One line of the watch stream. Nonzero ends the stream. */
static int
watcher_line(struct etcd_http *eh, const char *s, size_t n, void *arg)
{
    struct watcher *w = arg;
    json_t *j = json_loadb(s, n, 0, NULL), *r, *evs;
    int64_t hrev;
    int stop = 0;

    (void)eh;
    if (j == NULL)
        return 0; /* an empty line */
    if (json_object_get(j, "error") != NULL) {
        const char *m =
            json_string_value(etcd_jpath(j, "error", "message"))
                ? json_string_value(etcd_jpath(j, "error", "message"))
                : json_string_value(json_object_get(j, "error"));
        snprintf(w->err, sizeof(w->err), "watch ended: %s", m ? m : "an error");
        json_decref(j);
        return 1;
    }
    r = json_object_get(j, "result");
    hrev = etcd_jint(etcd_jpath(r, "header", "revision"));
    if (json_is_true(json_object_get(r, "canceled")) ||
        json_object_get(r, "compact_revision") != NULL) {
        log_warn("etcd: the watch from revision %" PRId64 " was canceled "
                 "(compacted up to revision %" PRId64 "): listing again",
                 w->next_rev,
                 etcd_jint(json_object_get(r, "compact_revision")));
        w->verdict = 1;
        stop = 1;
    } else if (json_is_true(json_object_get(r, "created"))) {
        w->created = true;
        if (hrev < w->next_rev - 1) {
            log_warn("etcd: the store went back to revision %" PRId64
                     " (we had %" PRId64 "): etcd was wiped; listing again",
                     hrev, w->next_rev - 1);
            w->verdict = 1;
            stop = 1;
        } else {
            etcd_post_status(true, "watching", NULL);
            if (w->down_said)
                log_info("etcd: reachable again: watching %s/ from revision "
                         "%" PRId64,
                         etcd_cfg.prefix, w->next_rev);
            w->down_said = false;
            w->up = true;
        }
    } else if ((evs = json_object_get(r, "events")) != NULL &&
               json_array_size(evs) > 0) {
        int64_t last = w->next_rev - 1;
        for (size_t i = 0; i < json_array_size(evs); i++) {
            json_t *ev = json_array_get(evs, i),
                   *kv = json_object_get(ev, "kv");
            const char *type = json_string_value(json_object_get(ev, "type"));
            int64_t mr = etcd_jint(json_object_get(kv, "mod_revision"));

            watcher_kv(w, json_string_value(json_object_get(kv, "key")),
                       json_string_value(json_object_get(kv, "value")), mr,
                       etcd_jint(json_object_get(kv, "create_revision")),
                       etcd_jint(json_object_get(kv, "lease")),
                       type != NULL && strcmp(type, "DELETE") == 0);
            if (mr > last)
                last = mr;
        }
        w->next_rev = last + 1;
        watcher_post(w, false, (uint64_t)last);
    } else if (hrev > 0 && hrev + 1 > w->next_rev) {
        w->next_rev = hrev + 1; /* progress: caught up */
    }
    json_decref(j);
    return stop;
}

/* Watch <prefix>/ from w->next_rev until the stream ends. */
static void
watcher_watch(struct watcher *w)
{
    char pfx[512], url[512], *text;
    json_t *rq;
    struct curl_slist *hdr;
    CURLcode cc;

    snprintf(pfx, sizeof(pfx), "%s/", etcd_cfg.prefix);
    rq = json_pack("{s:{s:o,s:o,s:I,s:b}}", "create_request", "key",
                   etcd_jb64(pfx), "range_end", etcd_jb64_end(pfx),
                   "start_revision", (json_int_t)w->next_rev, "progress_notify",
                   1);
    text = json_dumps(rq, JSON_COMPACT);
    json_decref(rq);
    if (text == NULL)
        return;
    w->verdict = 0;
    w->created = false;
    w->eh.watch = true;
    w->eh.line = watcher_line;
    w->eh.arg = w;
    w->eh.len = w->eh.done = 0;
    hdr = etcd_http_setup(&w->eh, "/v3/watch", text, url, sizeof(url));
    cc = curl_easy_perform(w->eh.h);
    curl_slist_free_all(hdr);
    if (w->eh.len > w->eh.done) /* a last message without '\n' */
        watcher_line(&w->eh, w->eh.buf + w->eh.done, w->eh.len - w->eh.done, w);
    w->eh.watch = false;
    w->eh.line = NULL;
    if (cc != CURLE_OK && w->verdict == 0 && cc != CURLE_WRITE_ERROR &&
        cc != CURLE_ABORTED_BY_CALLBACK)
        snprintf(w->err, sizeof(w->err), "%s: %s", etcd_cfg.endpoints[w->eh.ep],
                 curl_easy_strerror(cc));
    else if (cc == CURLE_ABORTED_BY_CALLBACK && !atomic_load(&etcd_shared.stop))
        snprintf(w->err, sizeof(w->err), "the lease keepalive failed");
    if (cc != CURLE_OK && cc != CURLE_WRITE_ERROR)
        w->eh.ep = (w->eh.ep + 1) % etcd_cfg.nendpoints;
    free(text);
}

void *
etcd_watcher_main(void *arg)
{
    struct watcher w = {0};
    bool need_list = true;
    uint64_t backoff = ETCD_BACKOFF_MIN_MS;
    bool auth_said = false; /* a failing authentication was logged */

    (void)arg;
    if (etcd_http_init(&w.eh) != 0)
        return NULL;
    w.pools = json_object();
    w.instances = json_object();
    w.touched = json_object();
    while (!atomic_load(&etcd_shared.stop)) {
        if (etcd_cfg.username != NULL && w.eh.token[0] == '\0' &&
            etcd_http_auth(&w.eh, w.err, sizeof(w.err)) != 0) {
            etcd_post_status(false, "authenticating", "%s", w.err);
            if (!auth_said)
                log_warn("etcd: %s", w.err);
            auth_said = true;
            w.up = false;
            etcd_backoff(&backoff);
            continue;
        }
        pthread_mutex_lock(&etcd_shared.mu);
        if (etcd_shared.relist)
            need_list = true;
        pthread_mutex_unlock(&etcd_shared.mu);
        if (need_list) {
            if (watcher_list(&w) != 0) {
                etcd_post_status(false, "listing", "%s", w.err);
                if (!w.down_said)
                    log_warn("etcd: cannot list %s/ (%s): pools keep their "
                             "members (the config's servers until etcd "
                             "answers once); retrying",
                             etcd_cfg.prefix, w.err);
                w.down_said = true;
                w.up = false;
                etcd_backoff(&backoff);
                continue;
            }
            auth_said = false;
            need_list = false;
            backoff = ETCD_BACKOFF_MIN_MS;
            etcd_post_status(true, "listed", NULL);
            log_info("etcd: listed %s/ at revision %" PRId64, etcd_cfg.prefix,
                     w.next_rev - 1);
            w.down_said = false;
            w.up = true;
        }
        atomic_store(&etcd_shared.kick, false);
        watcher_watch(&w);
        if (atomic_load(&etcd_shared.stop))
            break;
        if (w.verdict == 1) {
            need_list = true;
            etcd_post_status(true, "relisting", NULL);
            continue;
        }
        if (w.created)
            backoff = ETCD_BACKOFF_MIN_MS;
        etcd_post_status(false, "reconnecting", "%s", w.err);
        if (w.up)
            log_warn("etcd: the watch broke (%s): pools keep their members; "
                     "reconnecting from revision %" PRId64,
                     w.err, w.next_rev);
        w.down_said |= w.up;
        w.up = false;
        etcd_backoff(&backoff);
    }
    json_decref(w.pools);
    json_decref(w.instances);
    json_decref(w.touched);
    etcd_http_deinit(&w.eh);
    return NULL;
}
