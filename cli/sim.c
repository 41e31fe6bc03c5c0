/* sim.c -- `chash sim`: play a membership history (init, then adds,
 * removes and reweights) over a key set and report, per step, the
 * distribution and the migration measured key by key against the exact
 * figures of chash_ring_share() and chash_ring_diff().
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chash/chash.h"
#include "util.h"

#define CMD "sim"

static const char usage_text[] =
    "usage: chash sim [--members LIST] [--algo A] [--hash H] [--points N]\n"
    "                 [--table-size M] [--keys N] [--key-prefix S] [--seed N]\n"
    "                 [--ops OPS] [--fail NAME [--factor F]] [--clients N]\n"
    "                 [--json]\n"
    "       chash sim --config FILE --pool NAME [--keys N] [--key-prefix S]\n"
    "                 [--seed N] [--ops OPS] [--fail NAME [--factor F]]\n"
    "                 [--clients N] [--json]\n"
    "  --members LIST  name[=weight],... (default Server-A,Server-B,Server-C)\n"
    "  --points N      the ring's points per unit of weight (default 160)\n"
    "  --config FILE --pool NAME\n"
    "                  start from the pool's members, algorithm, hash and\n"
    "                  points as chashd builds them\n"
    "  --keys N        keys <prefix>0 .. <prefix>N-1 (default 10000)\n"
    "  --key-prefix S  key prefix (default data_key_)\n"
    "  --seed N        keys are <prefix><16 hex digits> from a splitmix64\n"
    "                  stream seeded with N instead of <prefix><i>; clients\n"
    "                  get random 10.x.y.z addresses\n"
    "  --ops OPS       +NAME[=W] add, -NAME remove, NAME=W reweight, comma\n"
    "                  separated (with the default members and no --fail:\n"
    "                  +Server-D,-Server-B,+Server-E; else none)\n"
    "  --fail NAME     where NAME's keys go when it fails: next distinct\n"
    "                  member vs bounded loads with --factor F (default the\n"
    "                  pool's balance_factor with --config, else 1.25)\n"
    "  --clients N     play N client addresses 10.0.x.y as keys and print\n"
    "                  each client whose server changes, then the mapping\n"
    "  --json          one JSON document instead of text\n";

enum op_kind { OP_INIT, OP_ADD, OP_REMOVE, OP_REWEIGHT };

struct sim_op {
    int kind;        /* enum op_kind */
    char *name;      /* the member the op is about (NULL for init) */
    uint32_t weight; /* add, reweight */
    char *text;      /* as written, for the report */
};

struct sim {
    struct cli_ring r; /* the initial members and how rings are built */
    uint64_t nkeys;
    const char *prefix;
    bool seeded;
    uint64_t seed;
    struct sim_op *ops;
    size_t nops;
    const char *fail;
    double factor;
    bool clients;
    bool json;
    FILE *out;      /* stdout, or the JSON buffer */
    uint64_t *hash; /* key hashes, computed once with the init ring */
    /* Every name ever seen gets a global id, so that owners of different
     * steps (different member arrays) compare by name in O(1). */
    char **names;
    size_t nnames;
};

/* Key or client address number <i> into <buf>. Seeded keys use the i-th
 * splitmix64 output, so any key is addressable without a stored list. */
static void
key_text(const struct sim *s, uint64_t i, char *buf, size_t len)
{
    uint64_t r = 0;

    if (s->seeded) {
        uint64_t st = s->seed + i * 0x9e3779b97f4a7c15ULL;
        r = cli_splitmix64(&st);
    }
    if (s->clients) {
        uint64_t host = s->seeded ? r : i + 1;
        snprintf(buf, len, "10.%u.%u.%u", (unsigned)(host >> 16 & 255),
                 (unsigned)(host >> 8 & 255), (unsigned)(host & 255));
    } else if (s->seeded) {
        snprintf(buf, len, "%s%016" PRIx64, s->prefix, r);
    } else {
        snprintf(buf, len, "%s%" PRIu64, s->prefix, i);
    }
}

static long
name_id(struct sim *s, const char *name)
{
    for (size_t i = 0; i < s->nnames; i++)
        if (strcmp(s->names[i], name) == 0)
            return (long)i;
    char **n = realloc(s->names, (s->nnames + 1) * sizeof(*n));
    if (n == NULL)
        return -1;
    s->names = n;
    if ((n[s->nnames] = strdup(name)) == NULL)
        return -1;
    return (long)s->nnames++;
}

static void
ops_free(struct sim *s)
{
    for (size_t i = 0; i < s->nops; i++) {
        free(s->ops[i].name);
        free(s->ops[i].text);
    }
    free(s->ops);
    s->ops = NULL;
    s->nops = 0;
}

/* Parse one op item and check it against the membership <ms> as it
 * stands before the op; apply it to <ms> so the next item sees it. */
static int
parse_op(const char *item, size_t len, struct cli_members *ms,
         struct sim_op *op)
{
    char *buf = strndup(item, len), *name, *eq;
    int rc = -1;
    long at;

    memset(op, 0, sizeof(*op));
    if (buf == NULL || (op->text = strdup(buf)) == NULL) {
        free(buf);
        cli_error(CMD, "out of memory");
        return -1;
    }
    name = buf;
    if (*name == '+') {
        op->kind = OP_ADD;
        name++;
    } else if (*name == '-') {
        op->kind = OP_REMOVE;
        name++;
    } else {
        op->kind = OP_REWEIGHT;
    }
    op->weight = 1;
    eq = strrchr(name, '=');
    if (eq != NULL && op->kind != OP_REMOVE) {
        *eq = '\0';
        if (cli_parse_u32(CMD, "weight", eq + 1, 0, UINT32_MAX, &op->weight) !=
            0)
            goto bad;
    } else if (op->kind == OP_REWEIGHT) {
        cli_error(CMD,
                  "op '%s': write +NAME to add, -NAME to remove, "
                  "NAME=W to reweight",
                  op->text);
        goto bad;
    }
    if (*name == '\0') {
        cli_error(CMD, "op '%s' has no member name", op->text);
        goto bad;
    }
    at = cli_members_find(ms, name);
    if (op->kind == OP_ADD && at >= 0) {
        cli_error(CMD, "op '%s': %s is already a member", op->text, name);
        goto bad;
    }
    if (op->kind != OP_ADD && at < 0) {
        cli_error(CMD, "op '%s': %s is not a member at that point", op->text,
                  name);
        goto bad;
    }
    if (op->kind == OP_REMOVE && ms->n == 1) {
        cli_error(CMD, "op '%s' would leave no member", op->text);
        goto bad;
    }
    if ((op->name = strdup(name)) == NULL)
        goto oom;
    if (op->kind == OP_ADD && cli_members_add(ms, name, op->weight) != 0)
        goto oom;
    if (op->kind == OP_REMOVE)
        cli_members_remove(ms, (size_t)at);
    if (op->kind == OP_REWEIGHT)
        ms->m[at].weight = op->weight;
    rc = 0;
    goto out;
oom:
    cli_error(CMD, "out of memory");
bad:
    free(op->name);
    free(op->text);
    op->name = op->text = NULL;
out:
    free(buf);
    return rc;
}

static int
parse_ops(struct sim *s, const char *list)
{
    struct cli_members ms;
    const char *p = list;
    int rc = 0;

    if (cli_members_copy(&ms, &s->r.ms) != 0) {
        cli_error(CMD, "out of memory");
        return -1;
    }
    ops_free(s);
    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        struct sim_op *ops = realloc(s->ops, (s->nops + 1) * sizeof(*ops));
        if (ops == NULL) {
            cli_error(CMD, "out of memory");
            rc = -1;
            break;
        }
        s->ops = ops;
        if (parse_op(p, len, &ms, &s->ops[s->nops]) != 0) {
            rc = -1;
            break;
        }
        s->nops++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    cli_members_free(&ms);
    if (rc != 0)
        ops_free(s);
    return rc;
}

/* The state of one step: its membership, ring and who owns each key. */
struct step {
    struct cli_members ms;
    struct chash_ring *ring;
    uint32_t *gid;   /* global name id per array index */
    uint32_t *owner; /* global name id of each key's owner */
    uint64_t *count; /* keys per array index */
};

static void
step_free(struct step *st)
{
    cli_members_free(&st->ms);
    chash_ring_destroy(st->ring);
    free(st->gid);
    free(st->owner);
    free(st->count);
    memset(st, 0, sizeof(*st));
}

static int
step_build(struct sim *s, struct step *st)
{
    if (cli_ring_create(CMD, &s->r.cfg, &st->ms, &st->ring) != 0)
        return -1;
    st->gid = malloc(st->ms.n * sizeof(*st->gid));
    st->count = calloc(st->ms.n, sizeof(*st->count));
    st->owner = malloc(s->nkeys * sizeof(*st->owner));
    if (st->gid == NULL || st->count == NULL || st->owner == NULL)
        goto oom;
    for (size_t i = 0; i < st->ms.n; i++) {
        long id = name_id(s, st->ms.m[i].name);
        if (id < 0)
            goto oom;
        st->gid[i] = (uint32_t)id;
    }
    if (s->hash == NULL) {
        /* The key hash depends only on the hash function, which every
         * step shares: hash the keys once. */
        char buf[256];
        s->hash = malloc(s->nkeys * sizeof(*s->hash));
        if (s->hash == NULL)
            goto oom;
        for (uint64_t k = 0; k < s->nkeys; k++) {
            size_t off, len;

            key_text(s, k, buf, sizeof(buf));
            /* a redis or memcache pool hashes the tagged part only */
            len = chash_key_tag(buf, strlen(buf), s->r.tag, &off);
            s->hash[k] = chash_ring_hash(st->ring, buf + off, len);
        }
    }
    for (uint64_t k = 0; k < s->nkeys; k++) {
        size_t m = chash_ring_lookup(st->ring, s->hash[k]);
        st->count[m]++;
        st->owner[k] = st->gid[m];
    }
    return 0;
oom:
    cli_error(CMD, "out of memory");
    return -1;
}

/* Load balance against the weights: x_i = keys_i / (K * w_i / W) over
 * members of non-zero weight; peak is max x_i (mean is 1 by design), cv
 * the standard deviation of x_i. */
static void
balance(const struct sim *s, const struct step *st, double *peak, double *cv)
{
    double wsum = 0, sum = 0, sq = 0, n = 0;

    *peak = 0;
    for (size_t i = 0; i < st->ms.n; i++)
        wsum += st->ms.m[i].weight;
    for (size_t i = 0; i < st->ms.n; i++) {
        if (st->ms.m[i].weight == 0)
            continue;
        double x = (double)st->count[i] /
                   ((double)s->nkeys * st->ms.m[i].weight / wsum);
        if (x > *peak)
            *peak = x;
        sum += x;
        sq += x * x;
        n++;
    }
    double mean = n > 0 ? sum / n : 0;
    *cv = n > 0 && mean > 0 ? sqrt(fmax(0, sq / n - mean * mean)) / mean : 0;
    if (mean > 0)
        *peak /= mean;
}

/* What moved between <prev> and <cur> because of <op>. */
struct migration {
    uint64_t moved;      /* keys whose owner changed, by name */
    uint64_t between;    /* of those, keys between two members neither
                            of which is the op's member */
    double exact;        /* chash_ring_diff */
    bool exact_is_exact; /* chash_ring_diff_exact */
    double optimal;      /* from the exact shares */
    double by_weight;    /* from the weights alone */
};

static double
weight_share(const struct cli_members *ms, const char *name)
{
    double w = 0, mine = 0;

    for (size_t i = 0; i < ms->n; i++) {
        w += ms->m[i].weight;
        if (strcmp(ms->m[i].name, name) == 0)
            mine = ms->m[i].weight;
    }
    return w > 0 ? mine / w : 0;
}

static int
migrate(struct sim *s, const struct step *prev, const struct step *cur,
        const struct sim_op *op, struct migration *mg)
{
    long changed = name_id(s, op->name);
    long pi = cli_members_find(&prev->ms, op->name);
    long ci = cli_members_find(&cur->ms, op->name);
    double before = pi >= 0 ? chash_ring_share(prev->ring, (size_t)pi) : 0;
    double after = ci >= 0 ? chash_ring_share(cur->ring, (size_t)ci) : 0;
    int rc;

    memset(mg, 0, sizeof(*mg));
    for (uint64_t k = 0; k < s->nkeys; k++) {
        if (prev->owner[k] == cur->owner[k])
            continue;
        mg->moved++;
        if ((long)prev->owner[k] != changed && (long)cur->owner[k] != changed)
            mg->between++;
    }
    rc = chash_ring_diff(prev->ring, cur->ring, &mg->exact);
    if (rc != 0) {
        cli_error(CMD, "chash_ring_diff: %s", chash_strerror(rc));
        return -1;
    }
    mg->exact_is_exact = chash_ring_diff_exact(cur->ring) != 0;
    /* The least any placement could move: the share the added member
     * takes, the share the removed one had, or the change of the
     * reweighted one's share. */
    mg->optimal = fabs(after - before);
    mg->by_weight = fabs(weight_share(&cur->ms, op->name) -
                         weight_share(&prev->ms, op->name));
    return 0;
}

static size_t
name_width(const struct step *st)
{
    size_t w = 8;

    for (size_t i = 0; i < st->ms.n; i++)
        if (strlen(st->ms.m[i].name) > w)
            w = strlen(st->ms.m[i].name);
    return w;
}

static void
text_step(const struct sim *s, const struct step *st, const char *title,
          const char *who, const struct migration *mg)
{
    FILE *f = s->out;
    int w = (int)name_width(st);
    double peak, cv;

    fprintf(f, "== %s: %zu members\n", title, st->ms.n);
    fprintf(f, "  %-*s %6s %10s %8s %8s%s\n", w, "member", "weight", "keys",
            "keys%", "share", st->ms.zoned ? "  zone" : "");
    for (size_t i = 0; i < st->ms.n; i++) {
        double share = chash_ring_share(st->ring, i);
        fprintf(f, "  %-*s %6" PRIu32 " %10" PRIu64 " %7.2f%% %7.3f%%", w,
                st->ms.m[i].name, st->ms.m[i].weight, st->count[i],
                100.0 * (double)st->count[i] / (double)s->nkeys, 100.0 * share);
        if (st->ms.zoned)
            fprintf(f, "  %s", st->ms.zones[i] ? st->ms.zones[i] : "-");
        fputc('\n', f);
    }
    balance(s, st, &peak, &cv);
    fprintf(f,
            "  load: peak/mean %.3f, coefficient of variation %.3f "
            "(keys against weights)\n",
            peak, cv);
    if (mg == NULL) {
        fputc('\n', f);
        return;
    }
    double measured = (double)mg->moved / (double)s->nkeys;
    fprintf(
        f, "  moved (key by key):   %" PRIu64 " of %" PRIu64 " keys = %.2f%%\n",
        mg->moved, s->nkeys, 100.0 * measured);
    fprintf(f, "  moved (exact):        %.3f%% of the hash space%s\n",
            100.0 * mg->exact,
            mg->exact_is_exact ? "" : " (sampled at 2^20 points)");
    fprintf(f, "  optimum (exact):      %.3f%% = %s\n", 100.0 * mg->optimal,
            title[0] == '+'   ? "the added member's share"
            : title[0] == '-' ? "the removed member's share"
                              : "the change of the member's share");
    fprintf(f, "  optimum (by weight):  %.3f%%%s\n", 100.0 * mg->by_weight,
            title[0] == '+'   ? " = w/W after the add (1/(N+1) when equal)"
            : title[0] == '-' ? " = w/W before the remove (1/N when equal)"
                              : " = |w'/W' - w/W|");
    if (mg->optimal > 0)
        fprintf(f, "  moved / optimum:      %.3f key by key, %.3f exact\n",
                measured / mg->optimal, mg->exact / mg->optimal);
    fprintf(f, "  moved between members other than %s: %" PRIu64 " keys\n", who,
            mg->between);
    if (s->r.cfg.algo == CHASH_ALGO_JUMP && title[0] == '-' && mg->between > 0)
        fprintf(f, "  (jump takes array order as identity: removing a member "
                   "that is not the last renumbers the ones after it)\n");
    fputc('\n', f);
}

static void
json_step(const struct sim *s, const struct step *st, const char *op,
          const struct migration *mg, bool first)
{
    FILE *f = s->out;
    double peak, cv;

    balance(s, st, &peak, &cv);
    fprintf(f, "%s{\"op\":", first ? "" : ",");
    cli_json_string(f, op);
    fprintf(f, ",\"members\":[");
    for (size_t i = 0; i < st->ms.n; i++) {
        fprintf(f, "%s{\"name\":", i ? "," : "");
        cli_json_string(f, st->ms.m[i].name);
        fprintf(
            f, ",\"weight\":%" PRIu32 ",\"keys\":%" PRIu64 ",\"share\":%.12g}",
            st->ms.m[i].weight, st->count[i], chash_ring_share(st->ring, i));
    }
    fprintf(f,
            "],\"moved_keys\":%" PRIu64 ",\"moved_fraction\":%.9g,"
            "\"exact_moved\":%.9g,\"exact_is_exact\":%s,\"optimal\":%.9g,"
            "\"optimal_by_weight\":%.9g,\"moved_between_survivors\":%" PRIu64
            ",\"peak_to_mean\":%.6g,\"cv\":%.6g",
            mg ? mg->moved : 0, mg ? (double)mg->moved / (double)s->nkeys : 0.0,
            mg ? mg->exact : 0.0,
            mg == NULL || mg->exact_is_exact ? "true" : "false",
            mg ? mg->optimal : 0.0, mg ? mg->by_weight : 0.0,
            mg ? mg->between : 0, peak, cv);
}

/* --clients: every client whose server changed in this step. */
static void
client_changes(const struct sim *s, const struct step *prev,
               const struct step *cur)
{
    char buf[64];
    bool any = false;

    if (s->json)
        fprintf(s->out, ",\"changes\":[");
    for (uint64_t k = 0; k < s->nkeys; k++) {
        if (prev->owner[k] == cur->owner[k])
            continue;
        key_text(s, k, buf, sizeof(buf));
        if (s->json) {
            fprintf(s->out, "%s{\"client\":\"%s\",\"from\":", any ? "," : "",
                    buf);
            cli_json_string(s->out, s->names[prev->owner[k]]);
            fprintf(s->out, ",\"to\":");
            cli_json_string(s->out, s->names[cur->owner[k]]);
            fputc('}', s->out);
        } else {
            fprintf(s->out, "  client %-15s %s -> %s\n", buf,
                    s->names[prev->owner[k]], s->names[cur->owner[k]]);
        }
        any = true;
    }
    if (s->json)
        fputc(']', s->out);
    else if (!any)
        fprintf(s->out, "  no client changed server\n");
    if (!s->json)
        fputc('\n', s->out);
}

static void
client_mapping(const struct sim *s, const struct step *st)
{
    char buf[64];

    fprintf(s->out, s->json ? ",\"final\":[" : "== final mapping\n");
    for (uint64_t k = 0; k < s->nkeys; k++) {
        key_text(s, k, buf, sizeof(buf));
        if (s->json) {
            fprintf(s->out, "%s{\"client\":\"%s\",\"member\":", k ? "," : "",
                    buf);
            cli_json_string(s->out, s->names[st->owner[k]]);
            fputc('}', s->out);
        } else {
            fprintf(s->out, "  %-15s %s\n", buf, s->names[st->owner[k]]);
        }
    }
    if (s->json)
        fputc(']', s->out);
}

/*
 * --fail: the avalanche view on the initial membership, in two worlds.
 * Plain: keys sit with their owner; the failed member's keys go to the
 * next distinct member in preference order (chash_ring_lookup_n's second
 * choice: what on_failure: failover does). Bounded: every key was placed
 * one by one with chash_ring_lookup_bounded(), live loads counting each
 * admission, as chashd places connections with a balance_factor; on the
 * failure the failed member's keys are placed again one by one on the
 * survivors' ring, the survivors keeping theirs. Long (about 130 lines):
 * the two worlds are computed side by side, key by key, so that their
 * counts come from one pass.
 */
static int
fail_view(struct sim *s, const struct step *init)
{
    long f = cli_members_find(&init->ms, s->fail);
    struct step surv = {0};
    uint64_t *plain = NULL, *bounded = NULL, *load = NULL, total = 0;
    uint64_t *bbefore = NULL, failed_plain = 0, failed_bounded = 0;
    uint32_t *bowner = NULL;
    size_t pref[2], n = init->ms.n;
    double wsum = 0;
    int rc = -1;

    if (cli_members_copy(&surv.ms, &init->ms) != 0)
        goto oom;
    cli_members_remove(&surv.ms, (size_t)f);
    if (cli_ring_create(CMD, &s->r.cfg, &surv.ms, &surv.ring) != 0)
        goto out;
    plain = calloc(n, sizeof(*plain));
    load = calloc(n, sizeof(*load));
    bounded = calloc(n, sizeof(*bounded));
    bbefore = calloc(n, sizeof(*bbefore));
    bowner = malloc(s->nkeys * sizeof(*bowner));
    if (!plain || !load || !bounded || !bbefore || !bowner)
        goto oom;

    /* plain world: the failed member's keys go to the second choice */
    for (size_t i = 0; i < n; i++)
        plain[i] = init->count[i];
    for (uint64_t k = 0; k < s->nkeys; k++) {
        if ((long)chash_ring_lookup(init->ring, s->hash[k]) != f)
            continue;
        failed_plain++;
        if (chash_ring_lookup_n(init->ring, s->hash[k], pref, 2) == 2)
            plain[pref[1]]++;
    }
    /* bounded world: place all keys with live loads, then fail */
    for (uint64_t k = 0; k < s->nkeys; k++) {
        size_t m = chash_ring_lookup_bounded(init->ring, s->hash[k], load,
                                             total, s->factor);
        bowner[k] = (uint32_t)m;
        load[m]++;
        total++;
    }
    failed_bounded = load[f];
    total -= load[f];
    /* survivors' loads, indexed like surv (init index minus one past f) */
    for (size_t i = 0; i < n; i++) {
        if ((long)i == f)
            continue;
        bbefore[i] = load[i];
        bounded[i - ((long)i > f)] = load[i];
    }
    for (uint64_t k = 0; k < s->nkeys; k++) {
        if ((long)bowner[k] != f)
            continue;
        size_t m = chash_ring_lookup_bounded(surv.ring, s->hash[k], bounded,
                                             total, s->factor);
        bounded[m]++;
        total++;
    }
    for (size_t i = 0; i < surv.ms.n; i++)
        wsum += (double)chash_ring_member_points(surv.ring, i);

    FILE *o = s->out;
    int w = (int)name_width(init);
    double peak_plain = 0, peak_bounded = 0, worst = 0;
    if (s->json) {
        fprintf(o, ",\"fail\":{\"member\":");
        cli_json_string(o, s->fail);
        fprintf(o,
                ",\"keys\":%" PRIu64 ",\"keys_bounded\":%" PRIu64
                ",\"factor\":%g,\"survivors\":[",
                failed_plain, failed_bounded, s->factor);
    } else {
        fprintf(o,
                "== fail %s: where its keys go (plain: it held %" PRIu64
                "; with bounded loads, factor %g: it held %" PRIu64 ")\n",
                s->fail, failed_plain, s->factor, failed_bounded);
        fprintf(o, "  %-*s | %-26s | %-26s | %7s\n", w, "survivor",
                "next distinct member", "bounded loads", "cap");
    }
    for (size_t i = 0, j = 0; i < n; i++) {
        if ((long)i == f)
            continue;
        /* The cap the last admission allows: ceil(factor x K x w / W). */
        double fair = (double)s->nkeys *
                      (double)chash_ring_member_points(surv.ring, j) / wsum;
        double cap = ceil(s->factor * fair);
        if (fair > 0) {
            peak_plain = fmax(peak_plain, (double)plain[i] / fair);
            peak_bounded = fmax(peak_bounded, (double)bounded[j] / fair);
            worst = fmax(worst, (double)bounded[j] / cap);
        }
        if (s->json) {
            fprintf(o, "%s{\"name\":", j ? "," : "");
            cli_json_string(o, surv.ms.m[j].name);
            fprintf(o,
                    ",\"before\":%" PRIu64 ",\"plain\":%" PRIu64
                    ",\"bounded_before\":%" PRIu64 ",\"bounded\":%" PRIu64
                    ",\"cap\":%.0f}",
                    init->count[i], plain[i], bbefore[i], bounded[j], cap);
        } else {
            char a[40], b[40];
            snprintf(a, sizeof(a), "%" PRIu64 " +%" PRIu64 " -> %" PRIu64,
                     init->count[i], plain[i] - init->count[i], plain[i]);
            snprintf(b, sizeof(b), "%" PRIu64 " +%" PRIu64 " -> %" PRIu64,
                     bbefore[i], bounded[j] - bbefore[i], bounded[j]);
            fprintf(o, "  %-*s | %-26s | %-26s | %7.0f\n", w, surv.ms.m[j].name,
                    a, b, cap);
        }
        j++;
    }
    if (s->json) {
        fprintf(o,
                "],\"peak_to_mean_plain\":%.6g,"
                "\"peak_to_mean_bounded\":%.6g}",
                peak_plain, peak_bounded);
    } else {
        fprintf(o,
                "  survivors' peak/mean: %.3f plain, %.3f bounded; bounded "
                "peak/cap %.3f (never above 1)\n\n",
                peak_plain, peak_bounded, worst);
    }
    rc = 0;
    goto out;
oom:
    cli_error(CMD, "out of memory");
out:
    free(plain);
    free(load);
    free(bounded);
    free(bbefore);
    free(bowner);
    step_free(&surv);
    return rc;
}

static int
apply_op(struct step *next, const struct step *prev, const struct sim_op *op)
{
    if (cli_members_copy(&next->ms, &prev->ms) != 0)
        return -1;
    long at = cli_members_find(&next->ms, op->name);
    switch (op->kind) {
    case OP_ADD:
        return cli_members_add(&next->ms, op->name, op->weight);
    case OP_REMOVE:
        cli_members_remove(&next->ms, (size_t)at);
        return 0;
    default:
        next->ms.m[at].weight = op->weight;
        return 0;
    }
}

static int
run(struct sim *s)
{
    struct step prev = {0}, cur = {0};
    struct chash_config eff;
    char *buf = NULL;
    size_t buflen = 0;
    int rc = CLI_EXIT_FAIL;

    s->out = s->json ? open_memstream(&buf, &buflen) : stdout;
    if (s->out == NULL) {
        cli_error(CMD, "out of memory");
        return CLI_EXIT_FAIL;
    }
    if (cli_members_copy(&cur.ms, &s->r.ms) != 0 || step_build(s, &cur) != 0)
        goto out;
    /* the ring as built: nginx reports the crc32a it always uses */
    chash_ring_config(cur.ring, &eff);
    if (s->json) {
        fprintf(s->out, "{");
        if (s->r.config != NULL) {
            fprintf(s->out, "\"config\":");
            cli_json_string(s->out, s->r.config);
            fprintf(s->out, ",\"pool\":");
            cli_json_string(s->out, s->r.pool);
            fputc(',', s->out);
        }
        fprintf(s->out,
                "\"algo\":\"%s\",\"hash\":\"%s\",\"points\":%" PRIu32
                ",\"keys\":%" PRIu64 ",\"steps\":[",
                chash_algo_name(eff.algo), chash_hash_name(eff.hash),
                eff.points_per_weight, s->nkeys);
        json_step(s, &cur, "init", NULL, true);
        fputc('}', s->out);
    } else {
        char what[128];

        cli_ring_describe(cur.ring, what, sizeof(what));
        fprintf(s->out, "chash sim: ");
        if (s->r.config != NULL)
            fprintf(s->out, "pool %s of %s, ", s->r.pool, s->r.config);
        fprintf(s->out, "%s, %" PRIu64 " %s\n\n", what, s->nkeys,
                s->clients ? "clients" : "keys");
        text_step(s, &cur, "init", NULL, NULL);
    }
    for (size_t i = 0; i < s->nops; i++) {
        struct migration mg;
        step_free(&prev);
        prev = cur;
        memset(&cur, 0, sizeof(cur));
        if (apply_op(&cur, &prev, &s->ops[i]) != 0) {
            cli_error(CMD, "out of memory");
            goto out;
        }
        if (step_build(s, &cur) != 0 ||
            migrate(s, &prev, &cur, &s->ops[i], &mg) != 0)
            goto out;
        if (s->json)
            json_step(s, &cur, s->ops[i].text, &mg, false);
        else
            text_step(s, &cur, s->ops[i].text, s->ops[i].name, &mg);
        if (s->clients)
            client_changes(s, &prev, &cur);
        if (s->json)
            fputc('}', s->out);
    }
    if (s->json)
        fputc(']', s->out);
    if (s->clients)
        client_mapping(s, &cur);
    if (s->fail != NULL) {
        /* the fail view is about the initial membership */
        struct step init = {0};
        if (cli_members_copy(&init.ms, &s->r.ms) != 0 ||
            step_build(s, &init) != 0 || fail_view(s, &init) != 0) {
            step_free(&init);
            goto out;
        }
        step_free(&init);
    }
    if (s->json)
        fputs("}\n", s->out);
    rc = CLI_EXIT_OK;
out:
    step_free(&prev);
    step_free(&cur);
    if (s->json) {
        fclose(s->out);
        if (rc == CLI_EXIT_OK)
            fwrite(buf, 1, buflen, stdout);
        free(buf);
    }
    return rc;
}

/* `chash sim`: options, then the steps in order, then the output. Long
 * (about 150 lines) because it is the command's whole getopt loop and
 * its checks, read top to bottom as the man page lists them. */
int
cmd_sim(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"members", required_argument, NULL, 'm'},
        {"algo", required_argument, NULL, 'a'},
        {"hash", required_argument, NULL, 'H'},
        {"points", required_argument, NULL, 'p'},
        {"table-size", required_argument, NULL, 't'},
        {"keys", required_argument, NULL, 'k'},
        {"key-prefix", required_argument, NULL, 'P'},
        {"seed", required_argument, NULL, 's'},
        {"ops", required_argument, NULL, 'o'},
        {"fail", required_argument, NULL, 'f'},
        {"factor", required_argument, NULL, 'F'},
        {"clients", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"config", required_argument, NULL, CLI_OPT_CONFIG},
        {"pool", required_argument, NULL, CLI_OPT_POOL},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct sim s = {0};
    const char *ops = NULL;
    bool keys_given = false, prefix_given = false, factor_given = false;
    bool default_members;
    int c, ropt, rc = CLI_EXIT_USAGE;

    s.nkeys = 10000;
    s.prefix = "data_key_";
    s.factor = 1.25;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'k':
            if (cli_parse_u64(CMD, "--keys", optarg, 1, 50000000, &s.nkeys) !=
                0)
                goto usage;
            keys_given = true;
            break;
        case 'P':
            s.prefix = optarg;
            prefix_given = true;
            break;
        case 's':
            if (cli_parse_u64(CMD, "--seed", optarg, 0, UINT64_MAX, &s.seed) !=
                0)
                goto usage;
            s.seeded = true;
            break;
        case 'o':
            ops = optarg;
            break;
        case 'f':
            s.fail = optarg;
            break;
        case 'F':
            if (cli_parse_double(CMD, "--factor", optarg, 1.0, 1000.0,
                                 &s.factor) != 0)
                goto usage;
            factor_given = true;
            break;
        case 'c':
            if (cli_parse_u64(CMD, "--clients", optarg, 1, 1u << 24,
                              &s.nkeys) != 0)
                goto usage;
            s.clients = true;
            break;
        case 'j':
            s.json = true;
            break;
        case 'h':
            fputs(usage_text, stdout);
            rc = CLI_EXIT_OK;
            goto out;
        default:
            ropt = cli_ring_option(CMD, c, optarg, &s.r);
            if (ropt < 0)
                goto usage;
            if (ropt > 0)
                break;
            rc = cli_bad_option(CMD, usage_text, argv, c);
            goto out;
        }
    }
    if (optind < argc) {
        rc = cli_usage_error(CMD, usage_text, "unexpected argument '%s'",
                             argv[optind]);
        goto out;
    }
    if (s.clients && keys_given) {
        rc = cli_usage_error(CMD, usage_text,
                             "--clients and --keys both set the key count");
        goto out;
    }
    if (s.clients && prefix_given) {
        rc = cli_usage_error(CMD, usage_text,
                             "--key-prefix does not go with --clients (the "
                             "keys are client addresses)");
        goto out;
    }
    if (factor_given && s.fail == NULL) {
        rc = cli_usage_error(CMD, usage_text, "--factor goes with --fail");
        goto out;
    }
    rc = cli_ring_setup(CMD, usage_text, &s.r, false);
    if (rc != CLI_EXIT_OK)
        goto out;
    rc = CLI_EXIT_USAGE;
    /* The pool's own balance_factor is what chashd bounds loads with. */
    if (!factor_given && s.r.balance_factor > 0)
        s.factor = s.r.balance_factor;
    default_members = s.r.ms.n == 0 && s.r.config == NULL;
    if (default_members && (cli_members_add(&s.r.ms, "Server-A", 1) != 0 ||
                            cli_members_add(&s.r.ms, "Server-B", 1) != 0 ||
                            cli_members_add(&s.r.ms, "Server-C", 1) != 0)) {
        cli_error(CMD, "out of memory");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    if (s.fail != NULL) {
        if (cli_members_find(&s.r.ms, s.fail) < 0) {
            rc = cli_usage_error(CMD, usage_text,
                                 "--fail %s: not one of the initial members",
                                 s.fail);
            goto out;
        }
        if (s.r.ms.n < 2) {
            rc = cli_usage_error(CMD, usage_text,
                                 "--fail needs at least two members");
            goto out;
        }
    }
    /* The default history plays the textbook case on the default
     * members: add a fourth, remove one, add another. --fail alone shows
     * only the initial membership and the failure. */
    if (ops == NULL && s.fail == NULL && default_members)
        ops = "+Server-D,-Server-B,+Server-E";
    if (ops != NULL && parse_ops(&s, ops) != 0)
        goto usage;
    rc = run(&s);
    goto out;
usage:
    fputs(usage_text, stderr);
    rc = CLI_EXIT_USAGE;
out:
    ops_free(&s);
    cli_members_free(&s.r.ms);
    free(s.hash);
    for (size_t i = 0; i < s.nnames; i++)
        free(s.names[i]);
    free(s.names);
    return rc;
}
