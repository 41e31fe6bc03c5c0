/* hot.c -- the control thread's side of the hot key summaries (hot.h):
 * once a second, each keyed pool's worker summaries are merged into its
 * hottest keys, and each member's request rate is set against its share
 * of the ring (a member that gets twice the requests its share predicts
 * has a load ratio of 2). GET /api/pools/{pool}/hot, the chashd_hot_* and
 * chashd_member_load_* families. doc/hot.md.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/hot.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chash/chash.h"
#include "base/clock.h"
#include "base/stats.h"
#include "conf/conf.h"
#include "control/membership.h"
#include "loop/control.h"
#include "model/pool.h"

#define HOT_TICK_MS 1000
#define HOT_TOP 20    /* keys shown per pool */
#define HOT_METRIC 10 /* of which in the metrics */

struct hkey {
    uint64_t hash;
    uint32_t len;
    char key[HOT_KEY_MAX];
    double rate, rate_min; /* per second */
    bool spread;           /* its reads go to any replica */
};

struct hmember {
    char *name;
    uint64_t requests; /* at the last tick */
    double rate;       /* per second, over the last tick */
    bool seen;
};

/* One keyed pool's view. */
struct hview {
    char *pool;
    uint64_t at_ms;   /* merged then */
    double keys_rate; /* keys routed per second (all of them) */
    double window_s;
    struct hkey keys[HOT_TOP];
    size_t nkeys;
    struct hmember *mem;
    size_t nmem;
    uint64_t mem_ms; /* members sampled then */
    struct hview *next;
};

static struct hview *views;

static struct hview *
view_get(const char *pool, bool make)
{
    struct hview *v;

    for (v = views; v != NULL; v = v->next)
        if (strcmp(v->pool, pool) == 0)
            return v;
    if (!make || (v = calloc(1, sizeof(*v))) == NULL)
        return NULL;
    if ((v->pool = strdup(pool)) == NULL) {
        free(v);
        return NULL;
    }
    v->next = views;
    views = v;
    return v;
}

static void
view_free(struct hview *v)
{
    for (size_t i = 0; i < v->nmem; i++)
        free(v->mem[i].name);
    free(v->mem);
    free(v->pool);
    free(v);
}

static int
by_rate(const void *a, const void *b)
{
    double x = ((const struct hkey *)a)->rate_min,
           y = ((const struct hkey *)b)->rate_min;

    return x < y ? 1 : x > y ? -1 : 0;
}

/* Merge the workers' last windows of <p> into <v>'s hottest keys. */
static void
merge(struct pool *p, struct hview *v, uint64_t now_ms)
{
    unsigned nw = pool_workers();
    struct hkey *all = calloc((size_t)nw * HOT_K + 1, sizeof(*all));
    struct hot_entry e[HOT_K];
    size_t n = 0;
    double rate = 0, window = 0;

    if (all == NULL)
        return;
    for (unsigned w = 0; w < nw; w++) {
        uint64_t total, ms;
        uint64_t since = now_ms > 2 * HOT_WINDOW_MS + HOT_TICK_MS
                             ? now_ms - 2 * HOT_WINDOW_MS - HOT_TICK_MS
                             : 0;
        int k = hot_read(&p->hot[w], since, e, &total, &ms);
        double secs;

        if (k < 0 || ms == 0)
            continue;
        secs = (double)ms / 1000.0;
        rate += (double)total / secs;
        if (secs > window)
            window = secs;
        for (int i = 0; i < k; i++) {
            size_t j;

            for (j = 0; j < n && all[j].hash != e[i].hash; j++)
                ;
            if (j == n) {
                all[n].hash = e[i].hash;
                all[n].len = e[i].len;
                memcpy(all[n].key, e[i].key, HOT_KEY_MAX);
                n++;
            }
            all[j].rate += (double)e[i].count / secs;
            all[j].rate_min += (double)(e[i].count - e[i].err) / secs;
        }
    }
    /* by the count each key is sure to have had; keys whose sure count
     * is under 1/(4K) of the window's are not shown: a summary of K
     * counters cannot tell them from the churn of cold keys (their counts
     * are mostly inherited) */
    qsort(all, n, sizeof(*all), by_rate);
    while (n > 0 && all[n - 1].rate_min * 4 * HOT_K < rate)
        n--;
    v->nkeys = n < HOT_TOP ? n : HOT_TOP;
    memcpy(v->keys, all, v->nkeys * sizeof(*all));
    v->keys_rate = rate;
    v->window_s = window;
    v->at_ms = now_ms;
    free(all);
}

/* hot_keys: spread: the keys whose sure rate reaches the threshold, by
 * their ring hash, for the workers (data/request_rep.c spread_key). A
 * key cut at HOT_KEY_MAX bytes cannot be hashed: it is not spread. */
static void
spread_set(struct pool *p, struct hview *v)
{
    const struct pool_snapshot *snap = atomic_load(&p->snap);
    unsigned n = 0;

    for (size_t i = 0; i < v->nkeys; i++) {
        struct hkey *k = &v->keys[i];
        size_t off, len;

        k->spread = false;
        if (p->cfg.hot_keys != CONF_HOT_SPREAD || snap == NULL ||
            snap->ring == NULL || !snap->set.hot_spread ||
            k->len > HOT_KEY_MAX || k->rate_min < p->cfg.hot_key_threshold ||
            n == POOL_HOT_SPREAD)
            continue;
        len = chash_key_tag(k->key, k->len, snap->set.hash_tag, &off);
        atomic_store_explicit(&p->hot_spread[n++],
                              chash_ring_hash(snap->ring, k->key + off, len),
                              memory_order_relaxed);
        k->spread = true;
    }
    for (unsigned i = n; i < POOL_HOT_SPREAD; i++)
        atomic_store_explicit(&p->hot_spread[i], 0, memory_order_relaxed);
}

static struct hmember *
member_get(struct hview *v, const char *name)
{
    struct hmember *m;

    for (size_t i = 0; i < v->nmem; i++)
        if (strcmp(v->mem[i].name, name) == 0)
            return &v->mem[i];
    m = realloc(v->mem, (v->nmem + 1) * sizeof(*m));
    if (m == NULL)
        return NULL;
    v->mem = m;
    m = &v->mem[v->nmem];
    memset(m, 0, sizeof(*m));
    if ((m->name = strdup(name)) == NULL)
        return NULL;
    v->nmem++;
    return m;
}

/* Each member's requests per second since the last tick. */
static void
sample_members(struct pool *p, struct hview *v, uint64_t now_ms)
{
    double dt = v->mem_ms ? (double)(now_ms - v->mem_ms) / 1000.0 : 0;

    for (size_t i = 0; i < v->nmem; i++)
        v->mem[i].seen = false;
    for (size_t i = 0; i < p->nservers; i++) {
        struct server *s = p->servers[i];
        struct stats_server_sum sum;
        struct hmember *m = member_get(v, s->name);
        bool fresh;

        if (m == NULL)
            continue;
        stats_server_sum(s->stats, pool_workers(), &sum);
        fresh = m->requests == 0 && m->rate == 0;
        m->rate = dt > 0 && !fresh && sum.requests >= m->requests
                      ? (double)(sum.requests - m->requests) / dt
                      : 0;
        m->requests = sum.requests ? sum.requests : 1; /* 0: not sampled */
        m->seen = true;
    }
    for (size_t i = 0; i < v->nmem;) { /* members gone */
        if (v->mem[i].seen) {
            i++;
            continue;
        }
        free(v->mem[i].name);
        v->mem[i] = v->mem[--v->nmem];
    }
    v->mem_ms = now_ms;
}

static void
hot_tick(uint64_t now_ms, void *arg)
{
    static uint64_t next;
    struct hview **pp;

    (void)arg;
    if (now_ms < next)
        return;
    next = now_ms + HOT_TICK_MS;
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        struct hview *v;

        if (p->hot == NULL || p->removed)
            continue;
        if ((v = view_get(p->name, true)) == NULL)
            continue;
        merge(p, v, now_ms);
        spread_set(p, v);
        sample_members(p, v, now_ms);
    }
    for (pp = &views; *pp != NULL;) { /* pools gone */
        struct pool *p = pool_find((*pp)->pool);
        if (p == NULL || p->hot == NULL) {
            struct hview *v = *pp;
            *pp = v->next;
            view_free(v);
            continue;
        }
        pp = &(*pp)->next;
    }
}

int
hot_init(void)
{
    return control_tick_add(hot_tick, NULL);
}

void
hot_deinit(void)
{
    while (views != NULL) {
        struct hview *v = views;
        views = v->next;
        view_free(v);
    }
}

/* The share of member <name> in <snap>'s ring (0: not in it). */
static double
share_of(const struct pool_snapshot *snap, const char *name)
{
    for (size_t i = 0; snap != NULL && snap->ring != NULL && i < snap->n; i++)
        if (strcmp(snap->members[i].name, name) == 0)
            return chash_ring_share(snap->ring, i);
    return 0;
}

static double
members_rate(const struct hview *v)
{
    double t = 0;

    for (size_t i = 0; i < v->nmem; i++)
        t += v->mem[i].rate;
    return t;
}

json_t *
hot_json(struct pool *p)
{
    json_t *j = json_object(), *keys = json_array(), *mems = json_array();
    const struct hview *v = view_get(p->name, false);
    const struct pool_snapshot *snap = atomic_load(&p->snap);
    double total = v ? members_rate(v) : 0;

    json_object_set_new(j, "pool", json_string(p->name));
    json_object_set_new(j, "hot_keys",
                        json_string(p->hot == NULL
                                        ? "off (tcp: no key)"
                                        : conf_hot_keys_name(p->cfg.hot_keys)));
    json_object_set_new(j, "window_s", json_real(v ? v->window_s : 0));
    if (p->cfg.hot_keys == CONF_HOT_SPREAD)
        json_object_set_new(j, "threshold",
                            json_integer(p->cfg.hot_key_threshold));
    json_object_set_new(j, "keys_per_s", json_real(v ? v->keys_rate : 0));
    for (size_t i = 0; v != NULL && i < v->nkeys; i++) {
        const struct hkey *k = &v->keys[i];
        size_t kept = k->len < HOT_KEY_MAX ? k->len : HOT_KEY_MAX;
        char text[HOT_KEY_MAX * 4 + 8];
        const struct server *owner =
            k->len <= HOT_KEY_MAX && snap != NULL
                ? pool_snapshot_owner(snap, k->key, k->len)
                : NULL;

        hot_key_text(k->key, kept, k->len, text, sizeof(text));
        json_array_append_new(
            keys,
            json_pack("{s:s,s:b,s:I,s:f,s:f,s:f,s:o,s:b}", "key", text,
                      "truncated", k->len > HOT_KEY_MAX, "bytes",
                      (json_int_t)k->len, "rate", k->rate, "rate_min",
                      k->rate_min, "fraction",
                      v->keys_rate > 0 ? k->rate / v->keys_rate : 0.0, "member",
                      owner ? json_string(owner->name) : json_null(), "spread",
                      k->spread));
    }
    for (size_t i = 0; v != NULL && i < v->nmem; i++) {
        const struct hmember *m = &v->mem[i];
        double share = share_of(snap, m->name);
        double ratio = share > 0 && total > 0 ? (m->rate / total) / share : 0.0;

        json_array_append_new(
            mems,
            json_pack("{s:s,s:f,s:f,s:o}", "name", m->name, "requests_per_s",
                      m->rate, "share", share, "load_ratio",
                      share > 0 && total > 0 ? json_real(ratio) : json_null()));
    }
    json_object_set_new(j, "keys", keys);
    json_object_set_new(j, "members", mems);
    return j;
}

void
hot_metrics(FILE *f)
{
    bool any = false;

    for (const struct hview *v = views; v != NULL; v = v->next)
        any |= v->nkeys > 0 || v->nmem > 0;
    if (!any)
        return;
    fputs("# HELP chashd_hot_key_requests_per_second The hottest keys of a "
          "pool: requests per second routing each (hot_keys: track; the "
          "first 10)\n# TYPE chashd_hot_key_requests_per_second gauge\n",
          f);
    for (const struct hview *v = views; v != NULL; v = v->next)
        for (size_t i = 0; i < v->nkeys && i < HOT_METRIC; i++) {
            const struct hkey *k = &v->keys[i];
            char text[HOT_KEY_MAX * 4 + 8];

            hot_key_text(k->key, k->len < HOT_KEY_MAX ? k->len : HOT_KEY_MAX,
                         k->len, text, sizeof(text));
            fputs("chashd_hot_key_requests_per_second{pool=\"", f);
            stats_label_escape(f, v->pool);
            fputs("\",key=\"", f);
            stats_label_escape(f, text);
            fprintf(f, "\"} %.3f\n", k->rate);
        }
    fputs("# HELP chashd_member_requests_per_second Requests sent to a "
          "member per second, over the last second\n# TYPE "
          "chashd_member_requests_per_second gauge\n",
          f);
    for (const struct hview *v = views; v != NULL; v = v->next)
        for (size_t i = 0; i < v->nmem; i++) {
            fputs("chashd_member_requests_per_second{pool=\"", f);
            stats_label_escape(f, v->pool);
            fputs("\",member=\"", f);
            stats_label_escape(f, v->mem[i].name);
            fprintf(f, "\"} %.3f\n", v->mem[i].rate);
        }
    fputs("# HELP chashd_member_load_ratio A member's part of the pool's "
          "requests over its share of the ring (1: as its share predicts)\n"
          "# TYPE chashd_member_load_ratio gauge\n",
          f);
    for (const struct hview *v = views; v != NULL; v = v->next) {
        struct pool *p = pool_find(v->pool);
        const struct pool_snapshot *snap = p ? atomic_load(&p->snap) : NULL;
        double total = members_rate(v);

        for (size_t i = 0; total > 0 && i < v->nmem; i++) {
            double share = share_of(snap, v->mem[i].name);

            if (share <= 0)
                continue;
            fputs("chashd_member_load_ratio{pool=\"", f);
            stats_label_escape(f, v->pool);
            fputs("\",member=\"", f);
            stats_label_escape(f, v->mem[i].name);
            fprintf(f, "\"} %.3f\n", (v->mem[i].rate / total) / share);
        }
    }
}

/* ---- rebalance ----------------------------------------------------------- */

#define REBALANCE_STEPS 64 /* rings tried at most */

/* Member <name>'s requests per second in <v> (0: not measured). */
static double
rate_of(const struct hview *v, const char *name)
{
    for (size_t k = 0; k < v->nmem; k++)
        if (strcmp(v->mem[k].name, name) == 0)
            return v->mem[k].rate;
    return 0;
}

/*
 * The load model of a proposal: the hot keys are point masses (their
 * measured rates, on the member the ring puts them on); the rest of the
 * load spreads over the key space (a member takes its share of it). Each
 * member's predicted load ratio: its part of the load over its capacity,
 * the part of the weights the operator gave it (the weights before).
 */
struct model {
    size_t n;
    struct chash_member *m; /* the weights tried (names: the snapshot's) */
    const double *cap;      /* [n] capacity fractions */
    const struct hkey *hot;
    size_t nhot;
    double rest, total; /* requests/s off the hot keys, all of them */
    const struct pool_snapshot *snap;
    const struct chash_config *cfg;
    double *ratio; /* [n] out */
};

/* Predict <md>'s ratios for its weights; the worst, or -1 (no ring). */
static double
model_run(struct model *md)
{
    struct chash_ring *r = NULL;
    double worst = 0;

    if (chash_ring_create(md->cfg, md->m, md->n, &r) != 0)
        return -1;
    for (size_t i = 0; i < md->n; i++)
        md->ratio[i] = md->rest * chash_ring_share(r, i);
    for (size_t k = 0; k < md->nhot; k++) {
        size_t off, len = chash_key_tag(md->hot[k].key, md->hot[k].len,
                                        md->snap->set.hash_tag, &off);
        size_t at =
            chash_ring_lookup(r, chash_ring_hash(r, md->hot[k].key + off, len));

        if (at < md->n)
            md->ratio[at] += md->hot[k].rate_min;
    }
    for (size_t i = 0; i < md->n; i++) {
        md->ratio[i] = md->cap[i] > 0 && md->total > 0
                           ? (md->ratio[i] / md->total) / md->cap[i]
                           : 0;
        if (md->ratio[i] > worst)
            worst = md->ratio[i];
    }
    chash_ring_destroy(r);
    return worst;
}

/* A rebalance's working state: the model, and per member ([n] each) the
 * best weights found, the capacities and the ratios measured now. */
struct rebalance {
    struct model md;
    uint32_t *bestw;
    double *capf, *ratio, *now;
    double worst;   /* the measured worst ratio */
    double best;    /* the best modeled worst */
    double modeled; /* the modeled worst with the weights now, -1: none */
    int steps;      /* rings tried */
};

static void
rebalance_free(struct rebalance *rb)
{
    free(rb->md.m);
    free(rb->bestw);
    free(rb->capf);
    free(rb->ratio);
    free(rb->now);
}

/* Set <rb> up for <p>'s snapshot <snap> (<n> members) and its view <v>,
 * whose members take <total> requests/s: what was measured, and the
 * model of it. 0, or -1 when out of memory. */
static int
rebalance_init(struct rebalance *rb, struct pool *p,
               const struct pool_snapshot *snap, size_t n,
               const struct hview *v, double total)
{
    double hot = 0, wsum = 0, scale = 10;
    size_t nhot = 0;

    memset(rb, 0, sizeof(*rb));
    rb->modeled = -1;
    rb->md.m = calloc(n, sizeof(*rb->md.m));
    rb->bestw = calloc(n, sizeof(*rb->bestw));
    rb->capf = calloc(n, sizeof(*rb->capf));
    rb->ratio = calloc(n, sizeof(*rb->ratio));
    rb->now = calloc(n, sizeof(*rb->now));
    if (rb->md.m == NULL || rb->bestw == NULL || rb->capf == NULL ||
        rb->ratio == NULL || rb->now == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        wsum += snap->members[i].weight;
        if (snap->members[i].weight >= 10)
            scale = 1; /* small weights get room to move: x10 */
    }
    /* what was measured: each member's part of the load over its
     * capacity (with weights that place by share, its load ratio) */
    for (size_t i = 0; i < n; i++) {
        rb->capf[i] = snap->members[i].weight / wsum;
        rb->now[i] = (rate_of(v, snap->members[i].name) / total) / rb->capf[i];
        if (rb->now[i] > rb->worst)
            rb->worst = rb->now[i];
        rb->md.m[i] = snap->members[i];
        rb->md.m[i].ramp = 1.0;
        rb->md.m[i].weight = (uint32_t)(snap->members[i].weight * scale);
        rb->bestw[i] = rb->md.m[i].weight;
    }
    for (size_t k = 0; k < v->nkeys; k++)
        if (v->keys[k].len <= HOT_KEY_MAX) {
            hot += v->keys[k].rate_min;
            nhot = k + 1;
        }
    rb->md.n = n;
    rb->md.cap = rb->capf;
    rb->md.hot = v->keys;
    rb->md.nhot = nhot;
    rb->md.total = total;
    rb->md.rest = total > hot ? total - hot : 0;
    rb->md.snap = snap;
    rb->md.cfg = &p->cfg.ring;
    rb->md.ratio = rb->ratio;
    rb->best = rb->worst;
    return 0;
}

/* The worst member gives 10% of its weight at a time, while that makes
 * the worst better than <target> would have it (bounded:
 * REBALANCE_STEPS rings); <rb>'s best weights are the best found. */
static void
rebalance_search(struct rebalance *rb, double target)
{
    struct model *md = &rb->md;

    if (rb->worst <= target)
        return;
    rb->best = rb->modeled = model_run(md);
    for (rb->steps = 1; rb->steps < REBALANCE_STEPS && rb->best > target;
         rb->steps++) {
        size_t w = 0;
        double got;

        for (size_t i = 1; i < md->n; i++)
            if (rb->ratio[i] > rb->ratio[w])
                w = i;
        if (md->m[w].weight <= 1)
            break;
        md->m[w].weight -= md->m[w].weight / 10 ? md->m[w].weight / 10 : 1;
        got = model_run(md);
        if (got < 0)
            break;
        if (got < rb->best) {
            rb->best = got;
            for (size_t i = 0; i < md->n; i++)
                rb->bestw[i] = md->m[i].weight;
        }
    }
}

/* The members' weights now and proposed into a JSON array, the changes
 * into <ops> (at most <cap>; *<nops> of them); the weights found are
 * proposed only when they are <better>. */
static json_t *
rebalance_members(const struct rebalance *rb, const struct pool_snapshot *snap,
                  bool better, struct membership_batch_op *ops, size_t cap,
                  size_t *nops)
{
    json_t *arr = json_array();

    for (size_t i = 0; i < rb->md.n; i++) {
        uint32_t nw = better ? rb->bestw[i] : snap->members[i].weight;

        json_array_append_new(
            arr,
            json_pack("{s:s,s:I,s:I,s:f}", "name", snap->members[i].name,
                      "weight", (json_int_t)snap->members[i].weight,
                      "new_weight", (json_int_t)nw, "load_ratio", rb->now[i]));
        if (nw != snap->members[i].weight && *nops < cap) {
            memset(&ops[*nops], 0, sizeof(ops[*nops]));
            ops[*nops].op = MEMBERSHIP_UPDATE;
            ops[*nops].name = snap->members[i].name;
            ops[*nops].has_weight = true;
            ops[*nops].weight = nw;
            (*nops)++;
        }
    }
    return arr;
}

int
hot_rebalance(struct pool *p, double target, struct membership_batch_op *ops,
              size_t cap, json_t **proposal)
{
    const struct hview *v = view_get(p->name, false);
    const struct pool_snapshot *snap = atomic_load(&p->snap);
    double total = v ? members_rate(v) : 0, predicted;
    size_t n = snap ? snap->n : 0, nops = 0;
    struct rebalance rb;
    bool better;
    json_t *j, *arr;

    *proposal = NULL;
    if (v == NULL || total <= 0 || n == 0 || snap->ring == NULL)
        return -1;
    if (rebalance_init(&rb, p, snap, n, v, total) != 0) {
        rebalance_free(&rb);
        return -1;
    }
    rebalance_search(&rb, target);
    /* The model is judged against itself: the weights it found against
     * the weights now, both modeled (the hot keys' rates and the members'
     * are measured over different windows; comparing a modeled ratio with
     * a measured one refused good proposals when they drifted apart). The
     * ratio predicted is the measured worst scaled by the model's gain. */
    better = rb.worst > target && rb.modeled > 0 && rb.best < rb.modeled;
    arr = rebalance_members(&rb, snap, better, ops, cap, &nops);
    predicted = nops > 0 ? rb.worst * (rb.best / rb.modeled) : rb.worst;
    j = json_object();
    json_object_set_new(j, "pool", json_string(p->name));
    json_object_set_new(j, "target", json_real(target));
    json_object_set_new(j, "worst_ratio", json_real(rb.worst));
    json_object_set_new(j, "predicted_worst_ratio", json_real(predicted));
    json_object_set_new(j, "meets_target", json_boolean(predicted <= target));
    json_object_set_new(j, "rings_tried", json_integer(rb.steps));
    json_object_set_new(j, "members", arr);
    json_object_set_new(
        j, "note",
        json_string(rb.worst <= target
                        ? "every member's load is within the target of "
                          "its capacity: nothing to change"
                    : nops == 0 ? "no weight change makes the most loaded "
                                  "member better (a single key may carry its "
                                  "load: hot_keys: spread spreads its reads)"
                                : "the model: the hot keys where the new ring "
                                  "puts them, the rest of the load by share; "
                                  "capacity: the weights before"));
    *proposal = j;
    rebalance_free(&rb);
    return (int)nops;
}
