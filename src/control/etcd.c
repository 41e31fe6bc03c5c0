/* etcd.c -- pools whose members come from etcd: see etcd.h and
 * doc/etcd.md. Facts about etcd 3.4's JSON gateway that this file relies
 * on (base64 keys and values, int64 as strings, omitted zero fields, the
 * watch stream's framing, the resume rule, compaction and wipe detection)
 * are in doc/etcd.md's "Talking to etcd".
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/clock.h"
#include "conf/conf.h"
#include "loop/control.h"
#include "conf/etcd_codec.h"
#include "base/log.h"
#include "control/membership.h"
#include "control/migration.h"
#include "model/fence.h"
#include "model/pool.h"
#include "model/state.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define PUBLISH_GAP_MS 20    /* instance records: at most one put per gap */
#define IGNORED_KEPT 64      /* malformed records listed in /api/cluster */
#define TXN_OPS_MAX 128      /* etcd's --max-txn-ops default */
#define WRITE_APPLY_MS 10000 /* an admin write waits so long to be applied */

/* ---- small helpers ------------------------------------------------------ */

/* An int64 of etcd's JSON: a string (always, from the gateway) or a
 * number; 0 when absent. */
static int64_t
jint(const json_t *j)
{
    if (json_is_integer(j))
        return (int64_t)json_integer_value(j);
    if (json_is_string(j))
        return strtoll(json_string_value(j), NULL, 10);
    return 0;
}

static json_t *
jpath(const json_t *j, const char *a, const char *b)
{
    j = json_object_get(j, a);
    return b != NULL ? json_object_get(j, b) : (json_t *)j;
}

/* A base64 string of <s> as a JSON string (steals nothing). */
static json_t *
jb64(const char *s)
{
    char *e = etcd_b64_encode(s, strlen(s));
    json_t *j = e ? json_string(e) : NULL;

    free(e);
    return j;
}

/* <s> with its last byte raised by one: the range end of prefix <s>. */
static json_t *
jb64_end(const char *s)
{
    size_t n = strlen(s);
    char *t = strdup(s);
    json_t *j;

    if (t == NULL || n == 0) {
        free(t);
        return NULL;
    }
    t[n - 1] = (char)(t[n - 1] + 1); /* prefixes end in '/': no overflow */
    j = jb64(t);
    free(t);
    return j;
}

/* ---- the settings the threads use (immutable while they run) ------------ */

struct epool_seed {
    char *pool;
    json_t *members; /* {name: value text} the config's servers */
};

static struct {
    char **endpoints;
    size_t nendpoints;
    char *prefix; /* "/chash" */
    char *instance;
    uint32_t lease_ttl_ms, timeout_ms;
    char *username, *password, *ca_file, *cert_file, *key_file;
} cfg;

/* ---- messages to the control thread -------------------------------------- */

enum emsg_type {
    EMSG_POOLS,     /* records of pools (a list, or events) */
    EMSG_INSTANCES, /* the instance records */
    EMSG_STATUS,    /* link up/down, counters */
    EMSG_WRITTEN    /* an admin write's result */
};

struct emsg {
    struct emsg *next;
    int type;
    uint64_t rev; /* POOLS: the revision applied with it */
    bool list;    /* POOLS: a full list (every etcd pool in it) */
    json_t *data; /* POOLS: {pool: {member: [mod_rev, value]}};
                     INSTANCES: {id: value object} */
    json_t *revs; /* POOLS (events): {pool: the revision of its last event}:
                     a catch-up message spans revisions */
    /* STATUS */
    bool up;
    char state[32];
    char error[256];
    /* WRITTEN */
    struct ewrite *w;
};

/* An admin write, from the control thread to the session. */
struct ewrite {
    struct ewrite *next;
    json_t *txn; /* the /v3/kv/txn body */
    bool lease;  /* its puts go under the instance's lease */
    bool raw;    /* answered as soon as etcd answers (not once applied) */
    char pool[128];
    membership_remote_done_fn *done;
    void *arg;
    /* the answer */
    int status;
    uint64_t rev;
    char msg[320];
    uint64_t deadline_ms; /* written: answered by then, applied or not */
    struct emsg answer;   /* how the session hands the answer back: no
                             allocation that could fail on its side */
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct emsg *head, **tail;
    int efd;
    struct control_watch watch;
    /* session work */
    struct ewrite *writes, **wtail;
    char *publish; /* the instance record to put (owned), NULL: none */
    /* seeds (the watcher reads them under mu) */
    struct epool_seed *seeds;
    size_t nseeds;
    bool relist; /* the pools changed (reload): list again */
    atomic_bool stop;
    atomic_bool kick; /* session -> watcher: the link is dead, reconnect */
    pthread_t watcher, session;
    bool running;
    int watch_fd; /* the watch stream's socket, -1: none (under mu) */
} E = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .cond = PTHREAD_COND_INITIALIZER,
       .efd = -1,
       .watch_fd = -1};

/*
 * The fence of copy pools (doc/etcd.md, "Migration"). The other instances
 * wait for this one's barrier key only while its lease lives: once it may
 * have expired, they may run a migration without this instance, which
 * would still send moving keys to their old owners -- writes lost. So a
 * copy pool answers no key while
 *   - the lease may have expired: no renewal is known to reach past
 *     the fence's until (the send time of the last granted or renewed lease, plus
 *     its TTL, less a margin); the session's calls may block, so the
 *     workers compare the time themselves;
 *   - or the lease was lost and this instance is not back yet: a new
 *     lease (F.rejoin_lease), its record put under it and seen back by
 *     the watch -- under that lease: a record listed before a wipe of etcd
 *     cannot pass for it -- with every pool change before it published
 *     (then every migration it missed is in its snapshots, and every later
 *     one waits for its barrier).
 */
#define FENCE_MARGIN_MS 250 /* at most; a tenth of shorter leases */

static struct {
    int64_t rejoin_lease; /* under E.mu; the new lease, 0: none yet */
    bool said;            /* control thread: the fence is logged */
    uint64_t fences;      /* control thread: times it was raised */
} F;

/* The session: a lease of <ttl_s> seconds granted or renewed by a call
 * sent at <sent_ms>. */
static void
fence_lease(uint64_t sent_ms, int64_t ttl_s)
{
    uint64_t ttl = ttl_s > 0 ? (uint64_t)ttl_s * 1000u : cfg.lease_ttl_ms;

    /* etcd counts the TTL from when it took the call, after <sent_ms>,
     * and revokes later still (its expiry check runs every 500 ms); the
     * margin covers the workers' coarse clock and a slow clock here */
    fence_until(sent_ms + ttl -
                (ttl / 10 < FENCE_MARGIN_MS ? ttl / 10 : FENCE_MARGIN_MS));
}

/* The session: the lease is lost; fenced until this instance is back. */
static void
fence_rejoin(void)
{
    pthread_mutex_lock(&E.mu);
    F.rejoin_lease = 0;
    fence_rejoining(true);
    pthread_mutex_unlock(&E.mu);
}


static void
post(struct emsg *m)
{
    uint64_t one = 1;

    pthread_mutex_lock(&E.mu);
    m->next = NULL;
    *E.tail = m;
    E.tail = &m->next;
    pthread_mutex_unlock(&E.mu);
    if (write(E.efd, &one, sizeof(one)) < 0) {
        /* the counter is already non-zero: the loop will drain */
    }
}

static void __attribute__((format(printf, 3, 4)))
post_status(bool up, const char *state, const char *fmt, ...)
{
    struct emsg *m = calloc(1, sizeof(*m));
    va_list ap;

    if (m == NULL)
        return;
    m->type = EMSG_STATUS;
    m->up = up;
    snprintf(m->state, sizeof(m->state), "%s", state);
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(m->error, sizeof(m->error), fmt, ap);
        va_end(ap);
    }
    post(m);
}

/* ---- HTTP to etcd (libcurl, blocking, on the etcd threads) --------------- */

struct ehttp {
    CURL *h;
    size_t ep;       /* the endpoint in use */
    char token[512]; /* etcd auth token, "" without auth */
    /* the body of the answer */
    char *buf;
    size_t len, cap;
    /* watch streaming: called per complete line; nonzero stops */
    int (*line)(struct ehttp *eh, const char *s, size_t n, void *arg);
    void *arg;
    size_t done; /* bytes of buf handed to line() */
    bool watch;
    bool last; /* the revoke at a stop: runs although E.stop is set */
};

static size_t
ehttp_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct ehttp *eh = userp;
    size_t n = size * nmemb;

    if (eh->len + n + 1 > eh->cap) {
        size_t cap = eh->cap ? eh->cap : 4096;
        char *b;
        while (cap < eh->len + n + 1)
            cap *= 2;
        if (cap > (size_t)256 << 20)
            return 0; /* no etcd answer of ours is that large */
        b = realloc(eh->buf, cap);
        if (b == NULL)
            return 0;
        eh->buf = b;
        eh->cap = cap;
    }
    memcpy(eh->buf + eh->len, data, n);
    eh->len += n;
    eh->buf[eh->len] = '\0';
    if (eh->line != NULL) {
        /* one JSON object per '\n'; callbacks are not message aligned */
        char *nl;
        while ((nl = memchr(eh->buf + eh->done, '\n', eh->len - eh->done))) {
            size_t at = eh->done;
            eh->done = (size_t)(nl - eh->buf) + 1;
            if (eh->line(eh, eh->buf + at, (size_t)(nl - eh->buf) - at,
                         eh->arg) != 0)
                return 0;
        }
        if (eh->done == eh->len) {
            eh->len = eh->done = 0;
        } else if (eh->done > 65536) {
            memmove(eh->buf, eh->buf + eh->done, eh->len - eh->done);
            eh->len -= eh->done;
            eh->done = 0;
        }
    }
    return n;
}

static int
ehttp_progress(void *p, curl_off_t dt, curl_off_t dn, curl_off_t ut,
               curl_off_t un)
{
    struct ehttp *eh = p;

    (void)dt, (void)dn, (void)ut, (void)un;
    if (atomic_load(&E.stop) && !eh->last)
        return 1;
    if (eh->watch && atomic_load(&E.kick))
        return 1;
    return 0;
}

/* The watch's socket, known so that a stop or a kick can end the stream at
 * once (libcurl calls the progress function only once a second while a
 * stream is idle). */
static curl_socket_t
watch_open(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
    curl_socket_t fd =
        socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);

    (void)arg, (void)purpose;
    pthread_mutex_lock(&E.mu);
    E.watch_fd = fd;
    pthread_mutex_unlock(&E.mu);
    return fd;
}

static int
watch_close(void *arg, curl_socket_t fd)
{
    (void)arg;
    pthread_mutex_lock(&E.mu);
    if (E.watch_fd == fd)
        E.watch_fd = -1;
    close(fd);
    pthread_mutex_unlock(&E.mu);
    return 0;
}

/* End the watch stream now (the watcher reconnects, or stops). */
static void
kick_watch(void)
{
    atomic_store(&E.kick, true);
    pthread_mutex_lock(&E.mu);
    if (E.watch_fd >= 0)
        shutdown(E.watch_fd, SHUT_RDWR);
    pthread_mutex_unlock(&E.mu);
}

static int
ehttp_init(struct ehttp *eh)
{
    memset(eh, 0, sizeof(*eh));
    eh->h = curl_easy_init();
    return eh->h != NULL ? 0 : -1;
}

static void
ehttp_deinit(struct ehttp *eh)
{
    if (eh->h != NULL)
        curl_easy_cleanup(eh->h);
    free(eh->buf);
    memset(eh, 0, sizeof(*eh));
}

static int ehttp_post(struct ehttp *eh, const char *path, json_t *body,
                      json_t **out, long *status, char *err, size_t errlen);

/* etcd auth: a token from /v3/auth/authenticate. 0 or -1. */
static int
ehttp_auth(struct ehttp *eh, char *err, size_t errlen)
{
    json_t *rq, *out = NULL;
    long st = 0;
    int rc;

    eh->token[0] = '\0';
    rq = json_pack("{s:s,s:s}", "name", cfg.username, "password", cfg.password);
    if (rq == NULL)
        return -1;
    rc = ehttp_post(eh, "/v3/auth/authenticate", rq, &out, &st, err, errlen);
    json_decref(rq);
    if (rc == 0 && !json_is_string(json_object_get(out, "token"))) {
        snprintf(err, errlen, "etcd authentication gave no token");
        rc = -1;
    }
    if (rc == 0)
        snprintf(eh->token, sizeof(eh->token), "%s",
                 json_string_value(json_object_get(out, "token")));
    json_decref(out);
    return rc;
}

/* Set up <eh>'s handle for a POST of <body> to <path> on the current
 * endpoint. */
static struct curl_slist *
ehttp_setup(struct ehttp *eh, const char *path, const char *body, char *url,
            size_t urllen)
{
    struct curl_slist *hdr = NULL;
    char auth[600];

    snprintf(url, urllen, "%s%s", cfg.endpoints[eh->ep], path);
    curl_easy_reset(eh->h);
    curl_easy_setopt(eh->h, CURLOPT_URL, url);
    curl_easy_setopt(eh->h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(eh->h, CURLOPT_WRITEFUNCTION, ehttp_write);
    curl_easy_setopt(eh->h, CURLOPT_WRITEDATA, eh);
    curl_easy_setopt(eh->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(eh->h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(eh->h, CURLOPT_XFERINFOFUNCTION, ehttp_progress);
    curl_easy_setopt(eh->h, CURLOPT_XFERINFODATA, eh);
    curl_easy_setopt(eh->h, CURLOPT_CONNECTTIMEOUT_MS, (long)cfg.timeout_ms);
    curl_easy_setopt(eh->h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(eh->h, CURLOPT_TCP_KEEPIDLE, 2L);
    curl_easy_setopt(eh->h, CURLOPT_TCP_KEEPINTVL, 1L);
    curl_easy_setopt(eh->h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!eh->watch)
        curl_easy_setopt(eh->h, CURLOPT_TIMEOUT_MS, (long)cfg.timeout_ms);
    if (eh->watch) {
        curl_easy_setopt(eh->h, CURLOPT_OPENSOCKETFUNCTION, watch_open);
        curl_easy_setopt(eh->h, CURLOPT_CLOSESOCKETFUNCTION, watch_close);
        curl_easy_setopt(eh->h, CURLOPT_FORBID_REUSE, 1L);
    }
    if (cfg.ca_file != NULL)
        curl_easy_setopt(eh->h, CURLOPT_CAINFO, cfg.ca_file);
    if (cfg.cert_file != NULL) {
        curl_easy_setopt(eh->h, CURLOPT_SSLCERT, cfg.cert_file);
        curl_easy_setopt(eh->h, CURLOPT_SSLKEY, cfg.key_file);
    }
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    hdr = curl_slist_append(hdr, "Expect:");
    if (eh->token[0] != '\0') {
        snprintf(auth, sizeof(auth), "Authorization: %s", eh->token);
        hdr = curl_slist_append(hdr, auth);
    }
    curl_easy_setopt(eh->h, CURLOPT_HTTPHEADER, hdr);
    return hdr;
}

/*
 * POST <body> to <path>: the first endpoint that answers (the one that
 * answered last first). *<out> gets the parsed answer of a 200; any other
 * status is an error whose message is etcd's. 0, or -1 with <err>
 * (<status> 0 when no endpoint answered).
 */
static int
ehttp_post(struct ehttp *eh, const char *path, json_t *body, json_t **out,
           long *status, char *err, size_t errlen)
{
    char *text = json_dumps(body, JSON_COMPACT);
    int rc = -1;

    *status = 0;
    *out = NULL;
    if (text == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t tries = 0; tries < cfg.nendpoints; tries++) {
        char url[512];
        struct curl_slist *hdr = ehttp_setup(eh, path, text, url, sizeof(url));
        CURLcode cc;

        eh->len = eh->done = 0;
        cc = curl_easy_perform(eh->h);
        curl_slist_free_all(hdr);
        if (cc != CURLE_OK) {
            snprintf(err, errlen, "%s: %s", cfg.endpoints[eh->ep],
                     curl_easy_strerror(cc));
            eh->ep = (eh->ep + 1) % cfg.nendpoints;
            if (atomic_load(&E.stop) && !eh->last)
                break;
            continue;
        }
        curl_easy_getinfo(eh->h, CURLINFO_RESPONSE_CODE, status);
        *out = json_loadb(eh->buf ? eh->buf : "", eh->len, 0, NULL);
        if (*status == 200 && *out != NULL) {
            rc = 0;
            break;
        }
        snprintf(err, errlen, "%s%s: HTTP %ld: %s", cfg.endpoints[eh->ep], path,
                 *status,
                 json_string_value(json_object_get(*out, "error"))
                     ? json_string_value(json_object_get(*out, "error"))
                     : "(no message)");
        if (*status == 401 && cfg.username != NULL &&
            strcmp(path, "/v3/auth/authenticate") != 0 &&
            ehttp_auth(eh, err, errlen) == 0) {
            json_decref(*out);
            *out = NULL;
            continue; /* once more with a fresh token */
        }
        break; /* etcd answered: another endpoint would say the same */
    }
    if (rc != 0) {
        json_decref(*out);
        *out = NULL;
    }
    free(text);
    return rc;
}

/* ---- the watcher: list, seed, watch ---------------------------------------
 */

struct watcher {
    struct ehttp eh;
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

    pthread_mutex_lock(&E.mu);
    for (size_t i = 0; i < E.nseeds; i++)
        if (strcmp(E.seeds[i].pool, pool) == 0)
            yes = true;
    pthread_mutex_unlock(&E.mu);
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
    size_t klen, vlen = 0, plen = strlen(cfg.prefix);
    char *key = b64key ? etcd_b64_decode(b64key, &klen) : NULL;
    char *value = NULL, *pool, *member, meta[300];
    int kind;

    if (key == NULL || klen != strlen(key) || klen <= plen + 1 ||
        strncmp(key, cfg.prefix, plen) != 0 || key[plen] != '/')
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
        if (old != NULL && jint(json_array_get(old, 0)) >= mod_rev)
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
    struct emsg *m;
    const char *name;
    json_t *v;

    if (list || json_object_size(w->touched) > 0) {
        m = calloc(1, sizeof(*m));
        if (m != NULL) {
            m->type = EMSG_POOLS;
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
                        if (jint(json_array_get(rec, 0)) > newest)
                            newest = jint(json_array_get(rec, 0));
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
            post(m);
        }
    }
    if (list || w->inst_touched) {
        m = calloc(1, sizeof(*m));
        if (m != NULL) {
            m->type = EMSG_INSTANCES;
            m->data = json_deep_copy(w->instances);
            post(m);
        }
    }
    json_object_clear(w->touched);
    w->inst_touched = false;
}

/* The key of member <name> of <pool>. */
static void
member_key(char *buf, size_t len, const char *pool, const char *name)
{
    snprintf(buf, len, "%s/pools/%s/members/%s", cfg.prefix, pool, name);
}

/*
 * Seed pool <s> (no record under its prefix): its servers, in one txn that
 * only succeeds while the prefix is still empty (a compare over the
 * range: an empty range compares as create_revision 0). Pools of more
 * than 127 servers put the rest as create-if-absent, after.
 */
static void
watcher_seed(struct watcher *w, const struct epool_seed *s)
{
    char pfx[512], key[768], err[256];
    json_t *txn, *cmp, *ops, *out = NULL;
    const char *name;
    json_t *v;
    long st;
    size_t n = 0;
    int rc;

    snprintf(pfx, sizeof(pfx), "%s/pools/%s/members/", cfg.prefix, s->pool);
    cmp = json_pack("[{s:o,s:o,s:s,s:s,s:s}]", "key", jb64(pfx), "range_end",
                    jb64_end(pfx), "target", "CREATE", "result", "EQUAL",
                    "create_revision", "0");
    ops = json_array();
    json_object_foreach(s->members, name, v)
    {
        if (++n >= TXN_OPS_MAX)
            break;
        member_key(key, sizeof(key), s->pool, name);
        json_array_append_new(ops, json_pack("{s:{s:o,s:o}}", "request_put",
                                             "key", jb64(key), "value",
                                             jb64(json_string_value(v))));
    }
    txn = json_pack("{s:o,s:o}", "compare", cmp, "success", ops);
    rc = ehttp_post(&w->eh, "/v3/kv/txn", txn, &out, &st, err, sizeof(err));
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
             jint(jpath(out, "header", "revision")));
    json_decref(out);
    n = 0;
    json_object_foreach(s->members, name, v)
    {
        json_t *one;
        if (++n < TXN_OPS_MAX)
            continue;
        member_key(key, sizeof(key), s->pool, name);
        one = json_pack("{s:[{s:o,s:s,s:s,s:s}],s:[{s:{s:o,s:o}}]}", "compare",
                        "key", jb64(key), "target", "CREATE", "result", "EQUAL",
                        "create_revision", "0", "success", "request_put", "key",
                        jb64(key), "value", jb64(json_string_value(v)));
        if (ehttp_post(&w->eh, "/v3/kv/txn", one, &out, &st, err,
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

    snprintf(pfx, sizeof(pfx), "%s/", cfg.prefix);
    rq = json_pack("{s:o,s:o}", "key", jb64(pfx), "range_end", jb64_end(pfx));
    if (ehttp_post(&w->eh, "/v3/kv/range", rq, &out, &st, w->err,
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
                   jint(json_object_get(kv, "mod_revision")),
                   jint(json_object_get(kv, "create_revision")),
                   jint(json_object_get(kv, "lease")), false);
    }
    w->next_rev = jint(jpath(out, "header", "revision")) + 1;
    json_decref(out);

    /* seed the pools etcd holds nothing for */
    pthread_mutex_lock(&E.mu);
    E.relist = false;
    for (i = 0; i < E.nseeds; i++) {
        struct epool_seed s = E.seeds[i];
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
        pthread_mutex_unlock(&E.mu);
        if (s.pool != NULL)
            watcher_seed(w, &s);
        free(s.pool);
        json_decref(s.members);
        pthread_mutex_lock(&E.mu);
    }
    pthread_mutex_unlock(&E.mu);
    watcher_post(w, true, (uint64_t)(w->next_rev - 1));
    return 0;
}

/* One line of the watch stream. Nonzero ends the stream. */
static int
watcher_line(struct ehttp *eh, const char *s, size_t n, void *arg)
{
    struct watcher *w = arg;
    json_t *j = json_loadb(s, n, 0, NULL), *r, *evs;
    int64_t hrev;
    int stop = 0;

    (void)eh;
    if (j == NULL)
        return 0; /* an empty line */
    if (json_object_get(j, "error") != NULL) {
        const char *m = json_string_value(jpath(j, "error", "message"))
                            ? json_string_value(jpath(j, "error", "message"))
                            : json_string_value(json_object_get(j, "error"));
        snprintf(w->err, sizeof(w->err), "watch ended: %s", m ? m : "an error");
        json_decref(j);
        return 1;
    }
    r = json_object_get(j, "result");
    hrev = jint(jpath(r, "header", "revision"));
    if (json_is_true(json_object_get(r, "canceled")) ||
        json_object_get(r, "compact_revision") != NULL) {
        log_warn("etcd: the watch from revision %" PRId64 " was canceled "
                 "(compacted up to revision %" PRId64 "): listing again",
                 w->next_rev, jint(json_object_get(r, "compact_revision")));
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
            post_status(true, "watching", NULL);
            if (w->down_said)
                log_info("etcd: reachable again: watching %s/ from revision "
                         "%" PRId64,
                         cfg.prefix, w->next_rev);
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
            int64_t mr = jint(json_object_get(kv, "mod_revision"));

            watcher_kv(w, json_string_value(json_object_get(kv, "key")),
                       json_string_value(json_object_get(kv, "value")), mr,
                       jint(json_object_get(kv, "create_revision")),
                       jint(json_object_get(kv, "lease")),
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

    snprintf(pfx, sizeof(pfx), "%s/", cfg.prefix);
    rq = json_pack("{s:{s:o,s:o,s:I,s:b}}", "create_request", "key", jb64(pfx),
                   "range_end", jb64_end(pfx), "start_revision",
                   (json_int_t)w->next_rev, "progress_notify", 1);
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
    hdr = ehttp_setup(&w->eh, "/v3/watch", text, url, sizeof(url));
    cc = curl_easy_perform(w->eh.h);
    curl_slist_free_all(hdr);
    if (w->eh.len > w->eh.done) /* a last message without '\n' */
        watcher_line(&w->eh, w->eh.buf + w->eh.done, w->eh.len - w->eh.done, w);
    w->eh.watch = false;
    w->eh.line = NULL;
    if (cc != CURLE_OK && w->verdict == 0 && cc != CURLE_WRITE_ERROR &&
        cc != CURLE_ABORTED_BY_CALLBACK)
        snprintf(w->err, sizeof(w->err), "%s: %s", cfg.endpoints[w->eh.ep],
                 curl_easy_strerror(cc));
    else if (cc == CURLE_ABORTED_BY_CALLBACK && !atomic_load(&E.stop))
        snprintf(w->err, sizeof(w->err), "the lease keepalive failed");
    if (cc != CURLE_OK && cc != CURLE_WRITE_ERROR)
        w->eh.ep = (w->eh.ep + 1) % cfg.nendpoints;
    free(text);
}

static void
sleep_ms(uint64_t ms)
{
    uint64_t end = clock_ms() + ms;

    while (!atomic_load(&E.stop) && clock_ms() < end) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
}

static void *
watcher_main(void *arg)
{
    struct watcher w = {0};
    bool need_list = true;
    uint64_t backoff = BACKOFF_MIN_MS;
    bool auth_said = false; /* a failing authentication was logged */

    (void)arg;
    if (ehttp_init(&w.eh) != 0)
        return NULL;
    w.pools = json_object();
    w.instances = json_object();
    w.touched = json_object();
    while (!atomic_load(&E.stop)) {
        if (cfg.username != NULL && w.eh.token[0] == '\0' &&
            ehttp_auth(&w.eh, w.err, sizeof(w.err)) != 0) {
            post_status(false, "authenticating", "%s", w.err);
            if (!auth_said)
                log_warn("etcd: %s", w.err);
            auth_said = true;
            w.up = false;
            sleep_ms(backoff);
            backoff =
                backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            continue;
        }
        pthread_mutex_lock(&E.mu);
        if (E.relist)
            need_list = true;
        pthread_mutex_unlock(&E.mu);
        if (need_list) {
            if (watcher_list(&w) != 0) {
                post_status(false, "listing", "%s", w.err);
                if (!w.down_said)
                    log_warn("etcd: cannot list %s/ (%s): pools keep their "
                             "members (the config's servers until etcd "
                             "answers once); retrying",
                             cfg.prefix, w.err);
                w.down_said = true;
                w.up = false;
                sleep_ms(backoff);
                backoff =
                    backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
                continue;
            }
            auth_said = false;
            need_list = false;
            backoff = BACKOFF_MIN_MS;
            post_status(true, "listed", NULL);
            log_info("etcd: listed %s/ at revision %" PRId64, cfg.prefix,
                     w.next_rev - 1);
            w.down_said = false;
            w.up = true;
        }
        atomic_store(&E.kick, false);
        watcher_watch(&w);
        if (atomic_load(&E.stop))
            break;
        if (w.verdict == 1) {
            need_list = true;
            post_status(true, "relisting", NULL);
            continue;
        }
        if (w.created)
            backoff = BACKOFF_MIN_MS;
        post_status(false, "reconnecting", "%s", w.err);
        if (w.up)
            log_warn("etcd: the watch broke (%s): pools keep their members; "
                     "reconnecting from revision %" PRId64,
                     w.err, w.next_rev);
        w.down_said |= w.up;
        w.up = false;
        sleep_ms(backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    json_decref(w.pools);
    json_decref(w.instances);
    json_decref(w.touched);
    ehttp_deinit(&w.eh);
    return NULL;
}

/* ---- the session: lease, instance record, writes ---------------------------
 */

static void
session_write(struct ehttp *eh, struct ewrite *wr, int64_t lease)
{
    json_t *out = NULL, *op;
    long st;
    char err[256];
    size_t i;

    if (wr->lease && lease == 0) {
        wr->status = 503;
        snprintf(wr->msg, sizeof(wr->msg), "no lease from etcd yet");
        return;
    }
    json_array_foreach(json_object_get(wr->txn, "success"), i, op)
    {
        json_t *put = json_object_get(op, "request_put");
        if (wr->lease && put != NULL)
            json_object_set_new(put, "lease", json_integer(lease));
    }
    if (ehttp_post(eh, "/v3/kv/txn", wr->txn, &out, &st, err, sizeof(err)) !=
        0) {
        wr->status = st == 0 || st >= 500 ? 503 : 409;
        snprintf(wr->msg, sizeof(wr->msg), "etcd: %s", err);
    } else if (!json_is_true(json_object_get(out, "succeeded"))) {
        wr->status = 409;
        snprintf(
            wr->msg, sizeof(wr->msg),
            "the record in etcd changed meanwhile (or exists, or is gone): "
            "nothing was changed; read it and try again");
    } else {
        wr->status = 0;
        wr->rev = (uint64_t)jint(jpath(out, "header", "revision"));
    }
    json_decref(out);
}

static void *
session_main(void *arg)
{
    struct ehttp eh;
    int64_t lease = 0;
    uint64_t next_ka = 0, last_put = 0, backoff = BACKOFF_MIN_MS;
    char *record = NULL, err[256], key[512];
    bool dirty = false;
    bool refused_said = false; /* etcd refused a grant or put: logged */

    (void)arg;
    if (ehttp_init(&eh) != 0)
        return NULL;
    snprintf(key, sizeof(key), "%s/instances/%s", cfg.prefix, cfg.instance);
    while (!atomic_load(&E.stop)) {
        struct ewrite *wr;
        uint64_t now = clock_ms(), wait;
        json_t *rq, *out = NULL;
        long st;

        /* the admin API's writes first: an operator waits; but not
         * before a keepalive that is due (a stream of writes must not
         * let the lease lapse: copy pools fence themselves then) */
        pthread_mutex_lock(&E.mu);
        wr = lease != 0 && now >= next_ka ? NULL : E.writes;
        if (wr != NULL) {
            E.writes = wr->next;
            if (E.writes == NULL)
                E.wtail = &E.writes;
        }
        if (E.publish != NULL) {
            free(record);
            record = E.publish;
            E.publish = NULL;
            dirty = true;
        }
        pthread_mutex_unlock(&E.mu);
        if (wr != NULL) {
            session_write(&eh, wr, lease);
            post(&wr->answer);
            continue;
        }
        if (cfg.username != NULL && eh.token[0] == '\0' &&
            ehttp_auth(&eh, err, sizeof(err)) != 0) {
            sleep_ms(backoff); /* the watcher says why */
            backoff =
                backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            continue;
        }
        if (lease == 0) {
            uint64_t sent = clock_ms();

            rq = json_pack("{s:I}", "TTL",
                           (json_int_t)((cfg.lease_ttl_ms + 999) / 1000));
            if (ehttp_post(&eh, "/v3/lease/grant", rq, &out, &st, err,
                           sizeof(err)) == 0 &&
                jint(json_object_get(out, "ID")) != 0) {
                lease = jint(json_object_get(out, "ID"));
                fence_lease(sent, jint(json_object_get(out, "TTL")));
                pthread_mutex_lock(&E.mu);
                if (fence_is_rejoining())
                    F.rejoin_lease = lease; /* back once seen under it */
                pthread_mutex_unlock(&E.mu);
                refused_said = false;
                next_ka = now + cfg.lease_ttl_ms / 4;
                dirty = record != NULL;
                backoff = BACKOFF_MIN_MS;
            } else {
                /* no answer: the watch is likely dead too; an answer
                 * that refuses (permissions): said once */
                if (st == 0)
                    kick_watch();
                else if (!refused_said)
                    log_warn("etcd: cannot grant the lease of instance %s: "
                             "%s",
                             cfg.instance, err);
                refused_said |= st != 0;
                json_decref(out);
                json_decref(rq);
                sleep_ms(backoff);
                backoff =
                    backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
                continue;
            }
            json_decref(out);
            json_decref(rq);
            out = NULL;
        }
        if (now >= next_ka) {
            uint64_t sent = clock_ms();

            rq = json_pack("{s:I}", "ID", (json_int_t)lease);
            /* a one-shot POST works as a unary call: its one result
             * line parses as one object */
            if (ehttp_post(&eh, "/v3/lease/keepalive", rq, &out, &st, err,
                           sizeof(err)) != 0) {
                if (st == 0)
                    kick_watch(); /* etcd is gone: so is the watch */
                next_ka = now + BACKOFF_MAX_MS / 4;
            } else if (jint(jpath(out, "result", "TTL")) <= 0) {
                log_warn("etcd: lease %" PRId64 " of instance %s is gone: "
                         "granting a new one",
                         lease, cfg.instance);
                lease = 0;
                fence_rejoin();
            } else {
                fence_lease(sent, jint(jpath(out, "result", "TTL")));
                next_ka = now + cfg.lease_ttl_ms / 4;
            }
            json_decref(out);
            json_decref(rq);
            out = NULL;
            if (lease == 0)
                continue;
        }
        if (dirty && record != NULL && now >= last_put + PUBLISH_GAP_MS) {
            rq = json_pack("{s:o,s:o,s:I}", "key", jb64(key), "value",
                           jb64(record), "lease", (json_int_t)lease);
            if (ehttp_post(&eh, "/v3/kv/put", rq, &out, &st, err,
                           sizeof(err)) == 0) {
                dirty = false;
                refused_said = false;
            } else if (st == 404) {
                lease = 0; /* "requested lease not found": etcd wiped */
                fence_rejoin();
            } else {
                if (st == 0)
                    kick_watch();
                else if (!refused_said)
                    log_warn("etcd: cannot publish instance %s: %s",
                             cfg.instance, err);
                refused_said |= st != 0;
                sleep_ms(backoff);
            }
            last_put = clock_ms();
            json_decref(out);
            json_decref(rq);
            continue;
        }
        /* sleep until the next keepalive, put, or work */
        wait = next_ka > now ? next_ka - now : 0;
        if (dirty && last_put + PUBLISH_GAP_MS > now &&
            last_put + PUBLISH_GAP_MS - now < wait)
            wait = last_put + PUBLISH_GAP_MS - now;
        pthread_mutex_lock(&E.mu);
        if (E.writes == NULL && E.publish == NULL && !atomic_load(&E.stop) &&
            wait > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += (time_t)(wait / 1000);
            ts.tv_nsec += (long)(wait % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&E.cond, &E.mu, &ts);
        }
        pthread_mutex_unlock(&E.mu);
    }
    /* a clean stop: our record goes at once, not after the TTL */
    if (lease != 0) {
        json_t *rq = json_pack("{s:I}", "ID", (json_int_t)lease), *out = NULL;
        long st;
        eh.last = true;
        ehttp_post(&eh, "/v3/lease/revoke", rq, &out, &st, err, sizeof(err));
        json_decref(out);
        json_decref(rq);
    }
    free(record);
    ehttp_deinit(&eh);
    return NULL;
}

/* ---- the control thread's side ------------------------------------------- */

/* A malformed record, as listed in /api/cluster. */
struct ignored {
    char key[256];
    int64_t mod_rev;
    char why[160];
};

/* What the control thread knows of one etcd pool. */
struct cpool {
    char *name;
    json_t *records;   /* {member: [mod_rev, value]} as etcd has them */
    uint64_t checksum; /* of the ring input, once applied */
    uint64_t changed_rev;
    uint64_t changed_ms; /* wall time it was applied */
    uint64_t since_ms;   /* the newest `since` of the change, 0: none */
    bool kept;           /* etcd holds no valid record: members kept */
    bool listed;         /* etcd's records were applied at least once */
    /* migration: copy (migration.h, "one migration, several instances") */
    bool listening;        /* a copy pool listens once etcd is applied */
    uint64_t failed_epoch; /* a descriptor that could not be run (said) */
    uint64_t lock_ms;      /* the copier lock was last asked for */
    uint64_t ack_ms;       /* our barrier key was last put */
};

static struct {
    struct cpool *pools;
    size_t npools;
    json_t *instances; /* {id: [mod_rev, value]} */
    struct ignored ignored[IGNORED_KEPT];
    size_t nignored;
    bool up;
    char state[32];
    char error[300];
    uint64_t down_since_ms; /* wall; 0 while up */
    uint64_t lists, reconnects, events, ignored_total, writes;
    uint64_t applied_rev, applied_ms, started_ms;
    /* admin writes waiting for their revision to be applied */
    struct ewrite *waiting;
    unsigned pending_pubs; /* pools whose publication is awaited */
    uint64_t pending_rev;
    uint64_t reconcile_ms; /* migrations are looked at again then */
    etcd_listen_fn *listen;
} C;

static struct cpool *
cpool_find(const char *name)
{
    for (size_t i = 0; i < C.npools; i++)
        if (strcmp(C.pools[i].name, name) == 0)
            return &C.pools[i];
    return NULL;
}

bool
etcd_defers_listen(const struct pool *p)
{
    return p->cfg.members_from == CONF_MEMBERS_ETCD &&
           p->cfg.migration == CONF_MIGRATION_COPY;
}

bool
etcd_listening(const struct pool *p)
{
    const struct cpool *cp = cpool_find(p->name);

    return !E.running || cp == NULL || cp->listening;
}

void
etcd_set_listen(etcd_listen_fn *fn)
{
    C.listen = fn;
}

bool
etcd_pool(const struct pool *p)
{
    return E.running && p != NULL && p->cfg.members_from == CONF_MEMBERS_ETCD;
}

/* FNV-1a 64 */
static void
fnv(uint64_t *h, const void *data, size_t n)
{
    const unsigned char *s = data;

    for (size_t i = 0; i < n; i++) {
        *h ^= s[i];
        *h *= 1099511628211ull;
    }
}

static int
server_cmp(const void *a, const void *b)
{
    const struct server *const *x = a, *const *y = b;

    return strcmp((*x)->name, (*y)->name);
}

/* The checksum of <p>'s ring input (doc/etcd.md). */
static uint64_t
pool_checksum(const struct pool *p)
{
    uint64_t h = 14695981039346656037ull;
    struct server **v = calloc(p->nservers ? p->nservers : 1, sizeof(*v));
    size_t n = 0;
    char buf[64];

    if (v == NULL)
        return 0;
    snprintf(buf, sizeof(buf), "%d %d %u %u", p->cfg.distribution,
             p->cfg.ring.hash, p->cfg.ring.points_per_weight,
             p->cfg.ring.table_size);
    fnv(&h, buf, strlen(buf) + 1);
    for (size_t i = 0; i < p->nservers; i++)
        if (atomic_load(&p->servers[i]->state) != SERVER_REMOVED)
            v[n++] = p->servers[i];
    qsort(v, n, sizeof(*v), server_cmp);
    for (size_t i = 0; i < n; i++) {
        fnv(&h, v[i]->name, strlen(v[i]->name) + 1);
        fnv(&h, v[i]->addr.text, strlen(v[i]->addr.text) + 1);
        snprintf(buf, sizeof(buf), "%u %d", v[i]->weight, v[i]->admin);
        fnv(&h, buf, strlen(buf) + 1);
    }
    free(v);
    return h;
}

/* The instance record, published by the session thread. */
static void
publish(void)
{
    json_t *rec = json_pack(
        "{s:s,s:i,s:I,s:I,s:I}", "instance", cfg.instance, "pid", (int)getpid(),
        "started_ms", (json_int_t)C.started_ms, "applied_rev",
        (json_int_t)C.applied_rev, "applied_ms", (json_int_t)C.applied_ms);
    json_t *pools = json_object();
    char *text;

    for (size_t i = 0; i < C.npools; i++) {
        const struct cpool *cp = &C.pools[i];
        struct pool *p = pool_find(cp->name);
        char sum[24];

        if (p == NULL)
            continue;
        snprintf(sum, sizeof(sum), "%016" PRIx64, cp->checksum);
        json_object_set_new(pools, cp->name,
                            json_pack("{s:s,s:I,s:I,s:I,s:I}", "checksum", sum,
                                      "members", (json_int_t)p->nservers,
                                      "changed_rev",
                                      (json_int_t)cp->changed_rev, "changed_ms",
                                      (json_int_t)cp->changed_ms, "since_ms",
                                      (json_int_t)cp->since_ms));
    }
    json_object_set_new(rec, "pools", pools);
    text = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    if (text == NULL)
        return;
    pthread_mutex_lock(&E.mu);
    free(E.publish);
    E.publish = text;
    pthread_cond_signal(&E.cond);
    pthread_mutex_unlock(&E.mu);
}

/* Answer admin write <w> and free it. */
static void
write_answer(struct ewrite *w, int status, uint64_t rev, const char *msg)
{
    w->done(status, rev, msg, w->arg);
    json_decref(w->txn);
    free(w);
}

/* Answer the admin writes whose revision is applied. */
static void
writes_settle(void)
{
    struct ewrite **pp = &C.waiting;

    while (*pp != NULL) {
        struct ewrite *w = *pp;
        if (w->rev > C.applied_rev) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        write_answer(w, 0, w->rev, "");
    }
}

/* A lost lease is behind this instance once its record is seen back
 * under the new lease and every pool change before it is published (the
 * fence, above). */
static void
fence_check(void)
{
    json_t *me = json_object_get(C.instances, cfg.instance);

    if (!fence_is_rejoining() || C.pending_pubs > 0 || me == NULL)
        return;
    pthread_mutex_lock(&E.mu);
    if (F.rejoin_lease != 0 && jint(json_array_get(me, 2)) == F.rejoin_lease)
        fence_rejoining(false);
    pthread_mutex_unlock(&E.mu);
}

/* Whether a pool that copies keys takes its members from etcd here. */
static bool
fenced_pools(void)
{
    for (size_t i = 0; i < C.npools; i++) {
        struct pool *p = pool_find(C.pools[i].name);

        if (p != NULL && etcd_pool(p) &&
            p->cfg.migration == CONF_MIGRATION_COPY)
            return true;
    }
    return false;
}

/* The fence's log lines (once each way) and its count. */
static void
fence_tick(uint64_t now_ms)
{
    bool fenced = fence_up(now_ms) && fenced_pools();

    if (fenced && !F.said) {
        F.said = true;
        F.fences++;
        log_warn("etcd: instance %s %s: pools with migration: copy answer "
                 "every key with an error until it is registered again "
                 "(another instance may move keys without it)",
                 cfg.instance,
                 fence_is_rejoining()
                     ? "lost its lease"
                     : "could not renew its lease in time: it may have "
                       "expired");
    } else if (!fenced && F.said) {
        F.said = false;
        log_info("etcd: instance %s holds its lease and has applied etcd's "
                 "changes: pools with migration: copy serve again",
                 cfg.instance);
    }
}

static void
applied(uint64_t rev)
{
    if (rev > C.applied_rev)
        C.applied_rev = rev;
    C.applied_ms = clock_wall_ms();
    publish();
    writes_settle();
    fence_check();
}

static void
pool_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)p, (void)chg, (void)arg;
    if (C.pending_pubs > 0 && --C.pending_pubs == 0)
        applied(C.pending_rev);
}

static void
ignore(const char *pool, const char *member, int64_t mod_rev, const char *why)
{
    char key[256];

    snprintf(key, sizeof(key), "%s/pools/%s/members/%s", cfg.prefix, pool,
             member);
    for (size_t i = 0; i < C.nignored; i++)
        if (strcmp(C.ignored[i].key, key) == 0) {
            if (C.ignored[i].mod_rev == mod_rev)
                return; /* said already */
            C.ignored[i].mod_rev = mod_rev;
            snprintf(C.ignored[i].why, sizeof(C.ignored[i].why), "%s", why);
            goto log;
        }
    if (C.nignored < IGNORED_KEPT) {
        struct ignored *ig = &C.ignored[C.nignored++];
        snprintf(ig->key, sizeof(ig->key), "%s", key);
        ig->mod_rev = mod_rev;
        snprintf(ig->why, sizeof(ig->why), "%s", why);
    }
log:
    C.ignored_total++;
    log_warn("etcd: pool %s: member record %s (revision %" PRId64 ") is "
             "ignored: %s",
             pool, key, mod_rev, why);
}

static void
unignore(const char *pool, const char *member)
{
    char key[256];

    snprintf(key, sizeof(key), "%s/pools/%s/members/%s", cfg.prefix, pool,
             member);
    for (size_t i = 0; i < C.nignored; i++)
        if (strcmp(C.ignored[i].key, key) == 0) {
            C.ignored[i] = C.ignored[--C.nignored];
            return;
        }
}

/* One wanted member, from a valid record. */
struct want {
    const char *name;
    struct conf_server cs;
    int admin;
    uint64_t since_ms;
    uint64_t mod_rev;
};

/* Parse <value> into <w>; NULL, or why it is not a member record. */
static const char *
record_parse(const char *name, const char *value, struct want *w)
{
    struct etcd_record r;
    const char *why = etcd_record_parse(name, value ? value : "",
                                        value ? strlen(value) : 0, &r);
    char err[256];

    memset(w, 0, sizeof(*w));
    w->name = name;
    if (why != NULL)
        return why;
    if (conf_parse_addr(r.address, &w->cs.addr, err, sizeof(err)) != 0)
        return "\"address\" does not parse";
    w->cs.weight = r.weight;
    w->cs.name = (char *)name;
    w->admin = r.state == ETCD_STATE_DRAIN   ? STATE_ADMIN_DRAIN
               : r.state == ETCD_STATE_MAINT ? STATE_ADMIN_MAINT
                                             : STATE_ADMIN_UP;
    w->since_ms = r.since;
    return NULL;
}

static int
want_cmp(const void *a, const void *b)
{
    return strcmp(((const struct want *)a)->name,
                  ((const struct want *)b)->name);
}

static const struct want *
want_find(const struct want *v, size_t n, const char *name)
{
    struct want key = {.name = name};

    return n ? bsearch(&key, v, n, sizeof(*v), want_cmp) : NULL;
}

/*
 * Make pool <p> hold exactly the valid records of <recs>: removals first
 * (an address may pass from one name to another), then changes, then
 * additions; all in one control-loop step, so one snapshot holds them.
 * Returns whether anything changed.
 */
static bool
pool_sync(struct pool *p, struct cpool *cp, json_t *recs, uint64_t rev)
{
    size_t n = json_object_size(recs), nw = 0;
    struct want *w = calloc(n ? n : 1, sizeof(*w));
    struct membership_model *mm;
    const char *name;
    json_t *v;
    bool changed = false;
    uint64_t now = clock_wall_ms(), newest_since = 0;

    if (w == NULL)
        return false;
    json_object_foreach(recs, name, v)
    {
        const char *why;

        if (name[0] == '/')
            continue; /* a migration key */
        why =
            record_parse(name, json_string_value(json_array_get(v, 1)), &w[nw]);
        if (why != NULL) {
            ignore(p->name, name, jint(json_array_get(v, 0)), why);
            continue;
        }
        w[nw].mod_rev = (uint64_t)jint(json_array_get(v, 0));
        nw++;
    }
    qsort(w, nw, sizeof(*w), want_cmp);
    if (nw == 0) {
        if (!cp->kept)
            log_warn("etcd: pool %s: etcd holds no valid member record: it "
                     "keeps its %zu members",
                     p->name, p->nservers);
        cp->kept = true;
        free(w);
        return false;
    }
    cp->kept = false;
    mm = membership_model_take(p);
    /* removals, and members whose address changed (re-added below) */
    for (size_t i = p->nservers; i-- > 0;) {
        struct server *s = p->servers[i];
        const struct want *x = want_find(w, nw, s->name);

        if (x != NULL && conf_addr_equal(&s->addr, &x->cs.addr))
            continue;
        snprintf(s->reason, sizeof(s->reason), "removed in etcd");
        if (pool_member_remove(p, s->name) == 0)
            changed = true;
    }
    for (size_t i = 0; i < nw; i++) {
        struct server *s = pool_server_find(p, w[i].name);
        uint64_t age =
            w[i].since_ms && now > w[i].since_ms ? now - w[i].since_ms : 0;

        if (s == NULL) {
            if (pool_member_add(p, &w[i].cs) != 0) {
                ignore(p->name, w[i].name, (int64_t)w[i].mod_rev,
                       errno == EEXIST ? "its address is another member's"
                                       : strerror(errno));
                continue;
            }
            changed = true;
            if (w[i].admin != STATE_ADMIN_UP)
                pool_member_set_admin(p, w[i].name, w[i].admin);
            pool_member_ramp_age(p, w[i].name, age);
        } else {
            if (s->weight != w[i].cs.weight) {
                pool_member_set_weight(p, w[i].name, w[i].cs.weight);
                pool_member_ramp_age(p, w[i].name, age);
                changed = true;
            }
            if (s->admin != w[i].admin) {
                pool_member_set_admin(p, w[i].name, w[i].admin);
                changed = true;
            }
        }
        unignore(p->name, w[i].name); /* a member now, if it was not */
        /* the time stamp of this change: of the records it wrote */
        if (w[i].mod_rev == rev && w[i].since_ms > newest_since)
            newest_since = w[i].since_ms;
    }
    if (changed) {
        char verb[64];
        snprintf(verb, sizeof(verb), "etcd revision %" PRIu64, rev);
        membership_model_report(p, mm, verb);
        cp->changed_rev = rev;
        cp->changed_ms = now;
        cp->since_ms = newest_since;
    } else {
        membership_model_report(p, mm, "etcd"); /* frees; nothing to say */
    }
    for (size_t i = 0; i < nw; i++)
        conf_addr_deinit(&w[i].cs.addr);
    free(w);
    return changed;
}

static void
listen_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)chg, (void)arg;
    if (C.listen != NULL && !p->removed)
        C.listen(p);
}

static bool routes_pool(const char *value, const char *pool);

/* A copy pool starts listening once etcd's members are applied and this
 * instance's record, naming the pool, is seen back: from then on every
 * migration waits for this instance's barrier, and none it missed can
 * route a key here the old way (doc/etcd.md). */
static void
listen_check(void)
{
    json_t *me = json_object_get(C.instances, cfg.instance);

    for (size_t i = 0; i < C.npools; i++) {
        struct cpool *cp = &C.pools[i];
        struct pool *p = pool_find(cp->name);

        if (cp->listening || !cp->listed || p == NULL || !etcd_pool(p) ||
            p->cfg.migration != CONF_MIGRATION_COPY)
            continue;
        if (me == NULL ||
            !routes_pool(json_string_value(json_array_get(me, 1)), cp->name))
            continue;
        cp->listening = true;
        log_info("etcd: pool %s: its members are etcd's and instance %s is "
                 "registered: listening",
                 cp->name, cfg.instance);
        if (C.listen != NULL &&
            pool_on_published(p, listen_published, NULL) != 0)
            C.listen(p);
    }
}

/* ---- one migration, several instances (migration.h) --------------------
 *
 * <prefix>/pools/<pool>/migration   the descriptor (created with the
 *                                   change; its create revision numbers
 *                                   the migration; "stage" 2 once the
 *                                   first of two stages is done)
 * <prefix>/pools/<pool>/copier      the copier lock: {"instance", "epoch"}
 *                                   under the holder's lease
 * <prefix>/pools/<pool>/barrier/<epoch>.<stage>/<id>
 *                                   instance <id> drained that stage (under
 *                                   its lease)
 * The copier's last transaction deletes the descriptor, the lock, the
 * barrier keys and the leaving members at once.
 */

#define LOCK_AGAIN_MS 500 /* a free lock is asked for again after */
#define ACK_AGAIN_MS 1000 /* a barrier key not seen back is put again */

static bool
pool_copies_keys(const struct pool *p)
{
    return p->cfg.migration == CONF_MIGRATION_COPY;
}

static void
pool_key(char *buf, size_t len, const char *pool, const char *rest)
{
    snprintf(buf, len, "%s/pools/%s/%s", cfg.prefix, pool, rest);
}

/* Queue admin write <w> for the session. */
static void
write_queue(struct ewrite *w)
{
    w->answer.type = EMSG_WRITTEN;
    w->answer.w = w;
    pthread_mutex_lock(&E.mu);
    w->next = NULL;
    *E.wtail = w;
    E.wtail = &w->next;
    pthread_cond_signal(&E.cond);
    pthread_mutex_unlock(&E.mu);
}

/* What a migration write was (<arg>: a phrase) when etcd refused it. */
static void
mig_written(int status, uint64_t rev, const char *msg, void *arg)
{
    (void)rev;
    if (status != 0)
        log_warn("etcd: %s: %s", (const char *)arg, msg);
}

static void
lock_written(int status, uint64_t rev, const char *msg, void *arg)
{
    (void)rev, (void)arg;
    if (status != 0 && status != 409) /* 409: another instance has it */
        log_warn("etcd: the copier lock: %s", msg);
}

/* A transaction of our own (<cmps>, <ops>: taken), answered as soon as etcd
 * answers; <lease>: its puts go under our lease. */
static void
mig_txn(const char *pool, json_t *cmps, json_t *ops, bool lease,
        membership_remote_done_fn *done, void *arg)
{
    struct ewrite *w = calloc(1, sizeof(*w));

    if (w == NULL) {
        json_decref(cmps);
        json_decref(ops);
        done(503, 0, "out of memory", arg);
        return;
    }
    w->txn = json_pack("{s:o,s:o}", "compare", cmps, "success", ops);
    w->lease = lease;
    w->raw = true;
    snprintf(w->pool, sizeof(w->pool), "%s", pool);
    w->done = done;
    w->arg = arg;
    write_queue(w);
}

static json_t *
put_op(const char *key, const char *value)
{
    return json_pack("{s:{s:o,s:o}}", "request_put", "key", jb64(key), "value",
                     jb64(value));
}

static json_t *
delete_op(const char *key, bool prefix)
{
    return prefix ? json_pack("{s:{s:o,s:o}}", "request_delete_range", "key",
                              jb64(key), "range_end", jb64_end(key))
                  : json_pack("{s:{s:o}}", "request_delete_range", "key",
                              jb64(key));
}

/* The descriptor <cp> holds (parsed; NULL: none) and its epoch. */
static json_t *
desc_of(const struct cpool *cp, uint64_t *epoch)
{
    json_t *d = json_object_get(cp->records, "/migration");
    json_t *j;

    *epoch = d ? (uint64_t)jint(json_array_get(d, 2)) : 0;
    if (d == NULL)
        return NULL;
    j = json_loads(json_string_value(json_array_get(d, 1)), 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* A compare: the descriptor of <epoch> is still there. */
static json_t *
desc_compare(const char *pool, uint64_t epoch)
{
    char key[512];

    pool_key(key, sizeof(key), pool, "migration");
    return json_pack("[{s:o,s:s,s:s,s:I}]", "key", jb64(key), "target",
                     "CREATE", "result", "EQUAL", "create_revision",
                     (json_int_t)epoch);
}

/* migration_etcd_ops.drained: our barrier key for <epoch>.<stage>. */
static void
mig_drained(struct pool *p, uint64_t epoch, int stage)
{
    struct cpool *cp = cpool_find(p->name);
    char rest[160], key[512], value[160];

    if (cp == NULL)
        return;
    cp->ack_ms = clock_ms();
    snprintf(rest, sizeof(rest), "barrier/%" PRIu64 ".%d/%s", epoch, stage,
             cfg.instance);
    pool_key(key, sizeof(key), p->name, rest);
    snprintf(value, sizeof(value), "{\"instance\":\"%s\"}", cfg.instance);
    mig_txn(p->name, desc_compare(p->name, epoch),
            json_pack("[o]", put_op(key, value)), true, mig_written,
            "the migration barrier");
}

/* migration_etcd_ops.copied: the copiers are done with <stage>. */
static void
mig_copied(struct pool *p, uint64_t epoch, int stage)
{
    struct cpool *cp = cpool_find(p->name);
    uint64_t e;
    json_t *desc = cp ? desc_of(cp, &e) : NULL, *ops, *l;
    char key[512];
    size_t i;

    if (desc == NULL || e != epoch) {
        json_decref(desc);
        return; /* over already */
    }
    ops = json_array();
    if (stage == 1) {
        char *text;

        json_object_set_new(desc, "stage", json_integer(2));
        text = json_dumps(desc, JSON_COMPACT);
        pool_key(key, sizeof(key), p->name, "migration");
        json_array_append_new(ops, put_op(key, text ? text : "{}"));
        free(text);
        log_info("etcd: pool %s: migration %" PRIu64 ": first stage copied; "
                 "the second begins on every instance",
                 p->name, epoch);
        mig_txn(p->name, desc_compare(p->name, epoch), ops, false, mig_written,
                "the migration's second stage");
        json_decref(desc);
        return;
    }
    pool_key(key, sizeof(key), p->name, "migration");
    json_array_append_new(ops, delete_op(key, false));
    pool_key(key, sizeof(key), p->name, "copier");
    json_array_append_new(ops, delete_op(key, false));
    pool_key(key, sizeof(key), p->name, "barrier/");
    json_array_append_new(ops, delete_op(key, true));
    json_array_foreach(json_object_get(desc, "leaving"), i, l)
    {
        if (!json_is_string(l) || !etcd_name_ok(json_string_value(l)))
            continue;
        member_key(key, sizeof(key), p->name, json_string_value(l));
        json_array_append_new(ops, delete_op(key, false));
    }
    log_info("etcd: pool %s: migration %" PRIu64 " copied: ending it on every "
             "instance",
             p->name, epoch);
    mig_txn(p->name, desc_compare(p->name, epoch), ops, false, mig_written,
            "the migration's end");
    json_decref(desc);
}

static const struct migration_etcd_ops mig_ops = {mig_drained, mig_copied};

/* Whether every member the descriptor's old placement names is in <p>. */
static bool
old_members_here(const struct pool *p, const json_t *desc)
{
    size_t i;
    json_t *o;

    json_array_foreach(json_object_get(desc, "old"), i, o)
    {
        const char *n = json_string_value(json_object_get(o, "name"));
        if (n == NULL || pool_server_find(p, n) == NULL)
            return false;
    }
    return true;
}

/*
 * A copy pool's migration keys, before its members are applied: the
 * migration etcd no longer holds ends here; a new one begins now when
 * every old member is in the pool (then the snapshot that carries the
 * change carries its gates too), else in *<later> once the members are
 * applied (an instance that has not listed yet: it does not serve).
 * -1: the descriptor cannot be run; the pool keeps its members.
 */
static int
mig_before(struct pool *p, struct cpool *cp, json_t **later,
           uint64_t *later_epoch)
{
    int stage;
    bool waiting;
    uint64_t epoch, cur = migration_etcd_epoch(p, &stage, &waiting);
    json_t *desc = desc_of(cp, &epoch);
    char err[300];

    *later = NULL;
    if (cur != 0 && cur != epoch) {
        log_info("etcd: pool %s: migration %" PRIu64 " is %s in etcd", p->name,
                 cur, epoch ? "replaced" : "over");
        migration_etcd_end(p);
    }
    if (epoch == 0 || cur == epoch) {
        json_decref(desc);
        return 0;
    }
    if (cp->failed_epoch == epoch) {
        json_decref(desc);
        return -1;
    }
    if (desc == NULL) {
        snprintf(err, sizeof(err), "not a JSON object");
        goto bad;
    }
    if (!old_members_here(p, desc)) {
        *later = desc;
        *later_epoch = epoch;
        return 0;
    }
    if (migration_etcd_begin(p, desc, epoch, err, sizeof(err)) != 0)
        goto bad;
    json_decref(desc);
    return 0;
bad:
    cp->failed_epoch = epoch;
    log_error("etcd: pool %s: the migration in %s/pools/%s/migration "
              "(revision %" PRIu64 ") cannot run: %s; the pool keeps its "
              "members until it is fixed or deleted",
              p->name, cfg.prefix, p->name, epoch, err);
    json_decref(desc);
    return -1;
}

/* Whether instance record <value> (text) says it routes <pool>. */
static bool
routes_pool(const char *value, const char *pool)
{
    json_t *j = value ? json_loads(value, 0, NULL) : NULL;
    bool yes = json_object_get(json_object_get(j, "pools"), pool) != NULL;

    json_decref(j);
    return yes;
}

/* Whether every instance that routes <cp>'s pool (and this one) put its
 * barrier key of <epoch>.<stage>. */
static bool
barrier_passed(const struct cpool *cp, uint64_t epoch, int stage)
{
    const char *id;
    json_t *v;
    char k[200];

    snprintf(k, sizeof(k), "/barrier/%" PRIu64 ".%d/%s", epoch, stage,
             cfg.instance);
    if (json_object_get(cp->records, k) == NULL)
        return false;
    json_object_foreach(C.instances, id, v)
    {
        if (!routes_pool(json_string_value(json_array_get(v, 1)), cp->name))
            continue;
        snprintf(k, sizeof(k), "/barrier/%" PRIu64 ".%d/%s", epoch, stage, id);
        if (json_object_get(cp->records, k) == NULL)
            return false;
    }
    return true;
}

/* Bring <p>'s migration in line with etcd: its stage, who copies, the
 * barrier. */
static void
mig_reconcile(struct pool *p, struct cpool *cp)
{
    int stage;
    bool waiting;
    uint64_t e, epoch = migration_etcd_epoch(p, &stage, &waiting);
    json_t *desc, *lock, *lk;
    const char *holder = NULL;
    uint64_t now = clock_ms();
    char key[512], value[200];

    if (epoch == 0 || (desc = desc_of(cp, &e)) == NULL)
        return;
    if (e == epoch && json_integer_value(json_object_get(desc, "stage")) == 2 &&
        stage == 1) {
        migration_etcd_stage(p, 2);
        epoch = migration_etcd_epoch(p, &stage, &waiting);
    }
    json_decref(desc);
    if (e != epoch)
        return;
    lk = json_object_get(cp->records, "/copier");
    lock = lk ? json_loads(json_string_value(json_array_get(lk, 1)), 0, NULL)
              : NULL;
    holder = json_string_value(json_object_get(lock, "instance"));
    migration_etcd_copier(p, holder && strcmp(holder, cfg.instance) == 0,
                          holder);
    json_decref(lock);
    if (lk == NULL && now - cp->lock_ms >= LOCK_AGAIN_MS) {
        cp->lock_ms = now;
        pool_key(key, sizeof(key), p->name, "copier");
        snprintf(value, sizeof(value),
                 "{\"instance\":\"%s\",\"epoch\":%" PRIu64 "}", cfg.instance,
                 epoch);
        mig_txn(p->name,
                json_pack("[{s:o,s:s,s:s,s:s}]", "key", jb64(key), "target",
                          "CREATE", "result", "EQUAL", "create_revision", "0"),
                json_pack("[o]", put_op(key, value)), true, lock_written, NULL);
    }
    if (!waiting)
        return;
    if (barrier_passed(cp, epoch, stage)) {
        migration_etcd_pass(p);
        return;
    }
    snprintf(key, sizeof(key), "/barrier/%" PRIu64 ".%d/%s", epoch, stage,
             cfg.instance);
    if (json_object_get(cp->records, key) == NULL &&
        now - cp->ack_ms >= ACK_AGAIN_MS)
        mig_drained(p, epoch, stage);
}

/* Every copy pool's migration, again (instances came or went, a retry). */
static void
mig_reconcile_all(void)
{
    for (size_t i = 0; i < C.npools; i++) {
        struct pool *p = pool_find(C.pools[i].name);
        if (p != NULL && etcd_pool(p) && pool_copies_keys(p))
            mig_reconcile(p, &C.pools[i]);
    }
}

static void
warm_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)arg;
    if (chg != NULL)
        migration_start(p);
}

/*
 * Apply <recs> to pool <p> in one snapshot, with its migration: a copy
 * pool's as etcd describes it (mig_before), a warm-up pool's (memcache)
 * on this instance alone -- a cache's warm-up needs no agreement: each
 * instance reads a key's old member on a miss for the window. Returns
 * whether the members changed.
 */
static bool
pool_apply(struct pool *p, struct cpool *cp, json_t *recs, uint64_t rev)
{
    json_t *later = NULL;
    uint64_t later_epoch = 0;
    bool changed, warm = false;
    char err[300], change[64];

    pool_batch(p, true);
    if (pool_copies_keys(p) && mig_before(p, cp, &later, &later_epoch) != 0) {
        pool_batch(p, false);
        return false; /* said; the members are kept */
    }
    if (p->cfg.migration == CONF_MIGRATION_WARMUP &&
        atomic_load(&p->snap) != NULL) {
        snprintf(change, sizeof(change), "etcd revision %" PRIu64, rev);
        warm =
            migration_prepare(p, change, NULL, 0, 0, 0, err, sizeof(err)) == 0;
    }
    changed = pool_sync(p, cp, recs, rev);
    if (warm && !changed)
        migration_cancel(p);
    else if (warm && pool_on_published(p, warm_published, NULL) != 0)
        migration_start(p);
    if (later != NULL) {
        if (migration_etcd_begin(p, later, later_epoch, err, sizeof(err)) !=
            0) {
            cp->failed_epoch = later_epoch;
            log_error("etcd: pool %s: the migration of revision %" PRIu64
                      " cannot run: %s",
                      p->name, later_epoch, err);
        }
        json_decref(later);
    }
    pool_batch(p, false);
    return changed;
}

static void
on_pools(struct emsg *m)
{
    const char *name;
    json_t *recs;
    unsigned waits = 0;
    uint64_t rev;

    C.events++;
    if (m->list) {
        /* a list starts over: after a wipe the store's revisions are
         * lower than what was applied before */
        C.applied_rev = 0;
        C.pending_rev = 0;
    }
    json_object_foreach(m->data, name, recs)
    {
        struct cpool *cp = cpool_find(name);
        struct pool *p = pool_find(name);

        if (cp == NULL || p == NULL || !etcd_pool(p))
            continue;
        json_decref(cp->records);
        cp->records = json_incref(recs);
        cp->listed = true;
        /* the revision of this pool's change: of its last event, or in
         * a list of its newest record */
        rev = m->revs ? (uint64_t)jint(json_object_get(m->revs, name)) : 0;
        if (pool_apply(p, cp, recs, rev ? rev : m->rev) &&
            pool_on_published(p, pool_published, NULL) == 0)
            waits++;
        cp->checksum = pool_checksum(p);
    }
    mig_reconcile_all();
    listen_check();
    if (m->list)
        C.lists++;
    if (waits == 0 && C.pending_pubs == 0) {
        applied(m->rev);
        return;
    }
    C.pending_pubs += waits;
    if (m->rev > C.pending_rev)
        C.pending_rev = m->rev;
}

static void
on_status(struct emsg *m)
{
    if (m->up && !C.up)
        C.down_since_ms = 0;
    if (!m->up && (C.up || C.down_since_ms == 0)) {
        C.down_since_ms = clock_wall_ms();
        if (strcmp(m->state, "reconnecting") == 0)
            C.reconnects++;
    } else if (!m->up && strcmp(m->state, "reconnecting") == 0) {
        C.reconnects++;
    }
    C.up = m->up;
    snprintf(C.state, sizeof(C.state), "%s", m->state);
    if (m->error[0] != '\0')
        snprintf(C.error, sizeof(C.error), "%s", m->error);
}

static void
on_written(struct ewrite *w)
{
    if (w->status != 0 || w->raw) {
        write_answer(w, w->status, 0, w->msg);
        return;
    }
    C.writes++;
    w->deadline_ms = clock_ms() + WRITE_APPLY_MS;
    w->next = C.waiting;
    C.waiting = w;
    writes_settle();
}

/* A write etcd took whose revision this instance has not applied in
 * WRITE_APPLY_MS (its watch is down): answered, saying so. */
static void
writes_tick(uint64_t now_ms, void *arg)
{
    struct ewrite **pp = &C.waiting;

    (void)arg;
    fence_tick(now_ms);
    if (now_ms >= C.reconcile_ms) {
        C.reconcile_ms = now_ms + 200; /* retries of the migration writes */
        mig_reconcile_all();
    }
    while (*pp != NULL) {
        struct ewrite *w = *pp;
        char msg[320];

        if (now_ms < w->deadline_ms) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        snprintf(msg, sizeof(msg),
                 "written to etcd at revision %" PRIu64 ", but this instance "
                 "has not applied it within %d s (its watch: %s); the other "
                 "instances apply it from etcd",
                 w->rev, WRITE_APPLY_MS / 1000, C.state);
        write_answer(w, MEMBERSHIP_WRITTEN_NOT_APPLIED, w->rev, msg);
    }
}

static void
drain_cb(struct control_watch *watch, uint32_t events)
{
    uint64_t v;
    struct emsg *m;

    (void)watch, (void)events;
    if (read(E.efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        return;
    for (;;) {
        pthread_mutex_lock(&E.mu);
        m = E.head;
        if (m != NULL) {
            E.head = m->next;
            if (E.head == NULL)
                E.tail = &E.head;
        }
        pthread_mutex_unlock(&E.mu);
        if (m == NULL)
            break;
        switch (m->type) {
        case EMSG_POOLS:
            on_pools(m);
            break;
        case EMSG_INSTANCES:
            json_decref(C.instances);
            C.instances = json_incref(m->data);
            mig_reconcile_all(); /* a barrier may pass without them */
            listen_check();
            fence_check();
            break;
        case EMSG_STATUS:
            on_status(m);
            break;
        case EMSG_WRITTEN:
            on_written(m->w);
            continue; /* the message is the write's own */
        }
        json_decref(m->data);
        json_decref(m->revs);
        free(m);
    }
}

/* The value text of the config's server <cs> as a member record. */
static json_t *
seed_value(const struct conf_server *cs)
{
    json_t *r = json_pack("{s:s,s:I,s:s}", "address", cs->addr.text, "weight",
                          (json_int_t)cs->weight, "state", "up");
    char *t = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *s = t ? json_string(t) : NULL;

    free(t);
    json_decref(r);
    return s;
}

static void
seeds_free(struct epool_seed *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].pool);
        json_decref(v[i].members);
    }
    free(v);
}

/* The seeds of <conf>'s etcd pools, in place of the running ones. */
static void
seeds_set(const struct conf *conf)
{
    struct epool_seed *v = calloc(conf->npools ? conf->npools : 1, sizeof(*v));
    size_t n = 0;

    if (v == NULL)
        return;
    for (size_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        if (cp->members_from != CONF_MEMBERS_ETCD)
            continue;
        v[n].pool = strdup(cp->name);
        v[n].members = json_object();
        for (size_t k = 0; k < cp->nservers; k++)
            json_object_set_new(v[n].members, cp->servers[k].name,
                                seed_value(&cp->servers[k]));
        n++;
    }
    pthread_mutex_lock(&E.mu);
    seeds_free(E.seeds, E.nseeds);
    E.seeds = v;
    E.nseeds = n;
    pthread_mutex_unlock(&E.mu);
    /* the control side's pools */
    for (size_t i = 0; i < n; i++)
        if (cpool_find(v[i].pool) == NULL) {
            struct cpool *np =
                realloc(C.pools, (C.npools + 1) * sizeof(*C.pools));
            if (np == NULL)
                continue;
            C.pools = np;
            memset(&C.pools[C.npools], 0, sizeof(*C.pools));
            C.pools[C.npools].name = strdup(v[i].pool);
            C.pools[C.npools].records = json_object();
            C.npools++;
        }
}

static char *
dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static const struct membership_remote etcd_remote = {
    .owns = etcd_pool,
    .write = etcd_member_write,
};

int
etcd_start(const struct conf *conf, char *err, size_t errlen)
{
    bool any = false;

    for (size_t i = 0; i < conf->npools; i++)
        any |= conf->pools[i].members_from == CONF_MEMBERS_ETCD;
    if (!any || !conf->etcd.enabled)
        return 0;
    membership_set_remote(&etcd_remote);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        snprintf(err, errlen, "etcd: cannot initialise libcurl");
        return -1;
    }
    cfg.endpoints = calloc(conf->etcd.nendpoints, sizeof(char *));
    if (cfg.endpoints == NULL)
        goto nomem;
    for (size_t i = 0; i < conf->etcd.nendpoints; i++)
        if ((cfg.endpoints[cfg.nendpoints++] =
                 strdup(conf->etcd.endpoints[i])) == NULL)
            goto nomem;
    cfg.prefix = strdup(conf->etcd.prefix);
    cfg.instance = strdup(conf->etcd.instance);
    cfg.lease_ttl_ms = conf->etcd.lease_ttl_ms;
    cfg.timeout_ms = conf->etcd.timeout_ms;
    cfg.username = dup_or_null(conf->etcd.username);
    cfg.password = dup_or_null(conf->etcd.password);
    cfg.ca_file = dup_or_null(conf->etcd.ca_file);
    cfg.cert_file = dup_or_null(conf->etcd.cert_file);
    cfg.key_file = dup_or_null(conf->etcd.key_file);
    if (cfg.prefix == NULL || cfg.instance == NULL)
        goto nomem;
    E.tail = &E.head;
    E.wtail = &E.writes;
    E.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (E.efd < 0) {
        snprintf(err, errlen, "etcd: eventfd: %s", strerror(errno));
        return -1;
    }
    E.watch.fd = E.efd;
    E.watch.cb = drain_cb;
    if (control_watch_add(&E.watch, EPOLLIN) != 0) {
        snprintf(err, errlen, "etcd: %s", strerror(errno));
        return -1;
    }
    C.started_ms = clock_wall_ms();
    if (control_tick_add(writes_tick, NULL) != 0) {
        snprintf(err, errlen, "etcd: %s", strerror(errno));
        return -1;
    }
    snprintf(C.state, sizeof(C.state), "starting");
    migration_etcd_set(&mig_ops);
    seeds_set(conf);
    E.running = true;
    if (pthread_create(&E.watcher, NULL, watcher_main, NULL) != 0 ||
        pthread_create(&E.session, NULL, session_main, NULL) != 0) {
        snprintf(err, errlen, "etcd: cannot start its threads");
        E.running = false;
        return -1;
    }
    log_info("etcd: instance %s, %s/ on %s%s (lease %us)", cfg.instance,
             cfg.prefix, cfg.endpoints[0], cfg.nendpoints > 1 ? " ..." : "",
             (cfg.lease_ttl_ms + 999) / 1000);
    return 0;
nomem:
    snprintf(err, errlen, "etcd: out of memory");
    return -1;
}

void
etcd_conf_apply(struct conf *conf)
{
    if (!E.running)
        return;
    if (conf->etcd.enabled &&
        (strcmp(conf->etcd.prefix, cfg.prefix) != 0 ||
         strcmp(conf->etcd.instance, cfg.instance) != 0 ||
         conf->etcd.nendpoints != cfg.nendpoints ||
         strcmp(conf->etcd.endpoints[0], cfg.endpoints[0]) != 0))
        log_warn("reload: global.etcd changed: it takes effect at the next "
                 "start (still %s/ on %s as %s)",
                 cfg.prefix, cfg.endpoints[0], cfg.instance);
    seeds_set(conf);
    /* Pools that take their members from etcd keep the members etcd gave:
     * their servers in <conf> become those (the config's only seed). */
    for (size_t i = 0; i < conf->npools; i++) {
        struct conf_pool *cp = &conf->pools[i];
        struct pool *p = pool_find(cp->name);
        struct cpool *c = cpool_find(cp->name);

        if (cp->members_from != CONF_MEMBERS_ETCD || p == NULL ||
            p->cfg.members_from != CONF_MEMBERS_ETCD || c == NULL || !c->listed)
            continue;
        for (size_t k = 0; k < cp->nservers; k++)
            conf_server_deinit(&cp->servers[k]);
        cp->nservers = 0;
        for (size_t k = 0; k < p->nservers; k++) {
            struct server *s = p->servers[k];
            if (atomic_load(&s->state) == SERVER_REMOVED)
                continue;
            if (conf_pool_add_server(cp, s->name, s->addr.text, s->weight) != 0)
                log_warn("reload: pool %s: cannot keep member %s", cp->name,
                         s->name);
        }
    }
    pthread_mutex_lock(&E.mu);
    E.relist = true; /* a new etcd pool may need its records */
    pthread_mutex_unlock(&E.mu);
    kick_watch();
}

int
etcd_reload_check(const struct conf *conf, char *err, size_t errlen)
{
    for (size_t i = 0; i < conf->npools; i++)
        if (conf->pools[i].members_from == CONF_MEMBERS_ETCD && !E.running) {
            snprintf(err, errlen,
                     "%s:%d: pool '%s': members_from: etcd needs a restart "
                     "(etcd was not in use when chashd started)",
                     conf->file, conf->pools[i].line, conf->pools[i].name);
            return -1;
        }
    return 0;
}

void
etcd_stop(void)
{
    if (!E.running)
        return;
    atomic_store(&E.stop, true);
    kick_watch();
    pthread_mutex_lock(&E.mu);
    pthread_cond_broadcast(&E.cond);
    pthread_mutex_unlock(&E.mu);
    pthread_join(E.watcher, NULL);
    pthread_join(E.session, NULL);
    E.running = false;
    control_watch_del(&E.watch);
    close(E.efd);
    E.efd = -1;
    /* every admin write still out is answered: queued, written, or
     * waiting to be applied */
    while (E.head != NULL) {
        struct emsg *m = E.head;
        E.head = m->next;
        if (m->type == EMSG_WRITTEN) {
            write_answer(m->w, 503, 0, "chashd is stopping");
            continue; /* the message is the write's own */
        }
        json_decref(m->data);
        json_decref(m->revs);
        free(m);
    }
    while (E.writes != NULL) {
        struct ewrite *w = E.writes;
        E.writes = w->next;
        write_answer(w, 503, 0, "chashd is stopping");
    }
    while (C.waiting != NULL) {
        struct ewrite *w = C.waiting;
        C.waiting = w->next;
        write_answer(w, 503, 0, "chashd is stopping");
    }
    free(E.publish);
    seeds_free(E.seeds, E.nseeds);
    for (size_t i = 0; i < C.npools; i++) {
        free(C.pools[i].name);
        json_decref(C.pools[i].records);
    }
    free(C.pools);
    json_decref(C.instances);
    for (size_t i = 0; i < cfg.nendpoints; i++)
        free(cfg.endpoints[i]);
    free(cfg.endpoints);
    free(cfg.prefix);
    free(cfg.instance);
    free(cfg.username);
    free(cfg.password);
    free(cfg.ca_file);
    free(cfg.cert_file);
    free(cfg.key_file);
    curl_global_cleanup();
}

/* ---- admin writes -----------------------------------------------------------
 */

/* The compare and the operation of <o> into <cmps>, <ops>. 0, or an HTTP
 * status with <msg>. */
static int
write_op(struct cpool *cp, const char *pool, const struct membership_remote_op *o,
         json_t *cmps, json_t *ops, char *msg, size_t msglen)
{
    char key[768];
    json_t *cur = cp ? json_object_get(cp->records, o->name) : NULL;
    json_t *rec = NULL;
    char *text;

    if (!etcd_name_ok(o->name)) {
        snprintf(msg, msglen,
                 "member name \"%s\" cannot be an etcd key part: use 1 to 63 "
                 "letters, digits, '.', '_', ':' or '-'",
                 o->name);
        return 400;
    }
    if (o->op != 'a' && cur == NULL) {
        snprintf(msg, msglen, "no member record \"%s\" in etcd", o->name);
        return 404;
    }
    member_key(key, sizeof(key), pool, o->name);
    if (o->op == 'a') {
        rec = json_pack("{s:s,s:I,s:s,s:I}", "address", o->address, "weight",
                        (json_int_t)o->weight, "state", "up", "since",
                        (json_int_t)clock_wall_ms());
        json_array_append_new(cmps,
                              json_pack("{s:o,s:s,s:s,s:s}", "key", jb64(key),
                                        "target", "CREATE", "result", "EQUAL",
                                        "create_revision", "0"));
    } else {
        json_array_append_new(
            cmps, json_pack("{s:o,s:s,s:s,s:I}", "key", jb64(key), "target",
                            "MOD", "result", "EQUAL", "mod_revision",
                            (json_int_t)jint(json_array_get(cur, 0))));
        if (o->op == 'u') {
            rec =
                json_loads(json_string_value(json_array_get(cur, 1)), 0, NULL);
            if (!json_is_object(rec)) {
                json_decref(rec);
                snprintf(msg, msglen,
                         "the record of \"%s\" in etcd is not a member record",
                         o->name);
                return 409;
            }
            if (o->weight > 0)
                json_object_set_new(rec, "weight", json_integer(o->weight));
            if (o->state != NULL)
                json_object_set_new(rec, "state", json_string(o->state));
            json_object_set_new(rec, "since",
                                json_integer((json_int_t)clock_wall_ms()));
        }
    }
    if (rec == NULL) {
        json_array_append_new(
            ops,
            json_pack("{s:{s:o}}", "request_delete_range", "key", jb64(key)));
        return 0;
    }
    text = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    json_array_append_new(ops, json_pack("{s:{s:o,s:o}}", "request_put", "key",
                                         jb64(key), "value",
                                         jb64(text ? text : "{}")));
    free(text);
    return 0;
}

void
etcd_member_write(struct pool *p, const struct membership_remote_op *ops, size_t n,
                  const json_t *migration, membership_remote_done_fn *done, void *arg)
{
    struct cpool *cp = cpool_find(p->name);
    json_t *cmps, *jops;
    struct ewrite *w;
    char msg[320];

    if (!C.up && C.lists == 0) {
        done(503, 0, "etcd has not been reached yet: nothing was changed", arg);
        return;
    }
    if (n == 0 || n >= TXN_OPS_MAX) {
        snprintf(msg, sizeof(msg),
                 "a change is 1 to %d operations in one etcd transaction, "
                 "not %zu",
                 TXN_OPS_MAX - 1, n);
        done(400, 0, msg, arg);
        return;
    }
    cmps = json_array();
    jops = json_array();
    for (size_t i = 0; i < n; i++) {
        int st = write_op(cp, p->name, &ops[i], cmps, jops, msg, sizeof(msg));
        for (size_t k = 0; st == 0 && k < i; k++)
            if (strcmp(ops[k].name, ops[i].name) == 0) {
                snprintf(msg, sizeof(msg),
                         "member \"%s\" is named twice in one change",
                         ops[i].name);
                st = 400;
            }
        if (st != 0) {
            json_decref(cmps);
            json_decref(jops);
            done(st, 0, msg, arg);
            return;
        }
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        json_decref(cmps);
        json_decref(jops);
        done(503, 0, "out of memory", arg);
        return;
    }
    if (migration != NULL) {
        char key[512], *text = json_dumps(migration, JSON_COMPACT);

        pool_key(key, sizeof(key), p->name, "migration");
        json_array_append_new(cmps,
                              json_pack("{s:o,s:s,s:s,s:s}", "key", jb64(key),
                                        "target", "CREATE", "result", "EQUAL",
                                        "create_revision", "0"));
        json_array_append_new(jops, put_op(key, text ? text : "{}"));
        free(text);
    }
    w->txn = json_pack("{s:o,s:o}", "compare", cmps, "success", jops);
    snprintf(w->pool, sizeof(w->pool), "%s", p->name);
    w->done = done;
    w->arg = arg;
    write_queue(w);
}

/* ---- /api/cluster, metrics ---------------------------------------------- */

static json_t *
null_or_int(uint64_t v)
{
    return v ? json_integer((json_int_t)v) : json_null();
}

json_t *
etcd_cluster_json(void)
{
    json_t *r, *eps, *ign, *insts, *pools, *last;
    const char *id;
    json_t *v;
    bool agree = true;
    uint64_t newest = 0, first_ms = 0, last_ms = 0, since = 0;
    size_t reached = 0, n = 0;

    if (!E.running)
        return json_pack("{s:n,s:n,s:[],s:{},s:b,s:n}", "instance", "etcd",
                         "instances", "pools", "agree", 1, "last_change");
    eps = json_array();
    for (size_t i = 0; i < cfg.nendpoints; i++)
        json_array_append_new(eps, json_string(cfg.endpoints[i]));
    ign = json_array();
    for (size_t i = 0; i < C.nignored; i++)
        json_array_append_new(ign, json_pack("{s:s,s:I,s:s}", "key",
                                             C.ignored[i].key, "mod_revision",
                                             (json_int_t)C.ignored[i].mod_rev,
                                             "why", C.ignored[i].why));
    r = json_pack(
        "{s:s,s:{s:o,s:s,s:b,s:s,s:I,s:o,s:s?,s:I,s:I,s:I,s:I,s:I,s:o}}",
        "instance", cfg.instance, "etcd", "endpoints", eps, "prefix",
        cfg.prefix, "up", C.up, "state", C.state, "applied_rev",
        (json_int_t)C.applied_rev, "down_since_ms",
        null_or_int(C.down_since_ms), "last_error", C.error[0] ? C.error : NULL,
        "lists", (json_int_t)C.lists, "reconnects", (json_int_t)C.reconnects,
        "events", (json_int_t)C.events, "writes", (json_int_t)C.writes,
        "ignored_total", (json_int_t)C.ignored_total, "ignored", ign);
    /* the fence of copy pools: up now, and how often it was */
    json_object_set_new(
        json_object_get(r, "etcd"), "fenced",
        json_boolean(fence_up(clock_ms()) && fenced_pools()));
    json_object_set_new(json_object_get(r, "etcd"), "fences",
                        json_integer((json_int_t)F.fences));
    insts = json_array();
    pools = json_object();
    /* every live instance record, parsed */
    json_object_foreach(C.instances, id, v)
    {
        json_t *rec =
            json_loads(json_string_value(json_array_get(v, 1)), 0, NULL);
        json_t *ps;
        const char *pn;
        json_t *pv;

        if (!json_is_object(rec)) {
            json_decref(rec);
            continue;
        }
        json_object_set_new(rec, "self",
                            json_boolean(strcmp(id, cfg.instance) == 0));
        n++;
        ps = json_object_get(rec, "pools");
        json_object_foreach(ps, pn, pv)
        {
            json_t *agg = json_object_get(pools, pn);
            const char *sum =
                json_string_value(json_object_get(pv, "checksum"));
            uint64_t cr = (uint64_t)jint(json_object_get(pv, "changed_rev"));

            if (agg == NULL) {
                agg = json_pack("{s:b,s:s,s:i}", "agree", 1, "checksum",
                                sum ? sum : "", "instances", 0);
                json_object_set_new(pools, pn, agg);
            }
            json_object_set_new(
                agg, "instances",
                json_integer(
                    json_integer_value(json_object_get(agg, "instances")) + 1));
            if (sum == NULL || strcmp(sum, json_string_value(json_object_get(
                                               agg, "checksum"))) != 0) {
                json_object_set_new(agg, "agree", json_false());
                agree = false;
            }
            if (cr > newest)
                newest = cr;
        }
        json_array_append_new(insts, rec);
    }
    /* how far the newest change got, and how long it took */
    for (size_t i = 0; i < json_array_size(insts); i++) {
        json_t *rec = json_array_get(insts, i), *pv;
        const char *pn;
        bool has =
            (uint64_t)jint(json_object_get(rec, "applied_rev")) >= newest;

        reached += has;
        json_object_foreach(json_object_get(rec, "pools"), pn, pv)
        {
            uint64_t cr = (uint64_t)jint(json_object_get(pv, "changed_rev"));
            uint64_t cm = (uint64_t)jint(json_object_get(pv, "changed_ms"));
            uint64_t sm = (uint64_t)jint(json_object_get(pv, "since_ms"));
            if (cr != newest || newest == 0)
                continue;
            if (first_ms == 0 || cm < first_ms)
                first_ms = cm;
            if (cm > last_ms)
                last_ms = cm;
            if (sm > since)
                since = sm;
        }
    }
    if (newest > 0) {
        uint64_t from = since && since <= first_ms ? since : first_ms;
        last = json_pack("{s:I,s:i,s:i,s:f}", "revision", (json_int_t)newest,
                         "reached", (int)reached, "of", (int)n, "took_ms",
                         last_ms >= from ? (double)(last_ms - from) : 0.0);
    } else {
        last = json_null();
    }
    json_object_set_new(r, "instances", insts);
    json_object_set_new(r, "pools", pools);
    json_object_set_new(r, "agree", json_boolean(agree));
    json_object_set_new(r, "last_change", last);
    return r;
}

void
etcd_metrics(FILE *f)
{
    if (!E.running)
        return;
    fprintf(f,
            "# HELP chashd_etcd_up 1 while the watch on etcd runs, 0 while "
            "etcd cannot be reached (pools keep their members).\n"
            "# TYPE chashd_etcd_up gauge\nchashd_etcd_up %d\n",
            C.up ? 1 : 0);
    fprintf(f,
            "# HELP chashd_etcd_fenced 1 while pools with migration: copy "
            "answer no key: this instance's lease may have expired, or it "
            "is not registered again yet.\n"
            "# TYPE chashd_etcd_fenced gauge\nchashd_etcd_fenced %d\n"
            "# HELP chashd_etcd_fences_total Times the fence went up.\n"
            "# TYPE chashd_etcd_fences_total counter\n"
            "chashd_etcd_fences_total %" PRIu64 "\n",
            fence_up(clock_ms()) && fenced_pools() ? 1 : 0, F.fences);
    fprintf(f,
            "# HELP chashd_etcd_applied_revision The etcd revision this "
            "instance has applied.\n"
            "# TYPE chashd_etcd_applied_revision gauge\n"
            "chashd_etcd_applied_revision %" PRIu64 "\n",
            C.applied_rev);
    fprintf(f,
            "# HELP chashd_etcd_lists_total Full lists of the prefix (start, "
            "compaction, wipe).\n"
            "# TYPE chashd_etcd_lists_total counter\n"
            "chashd_etcd_lists_total %" PRIu64 "\n",
            C.lists);
    fprintf(f,
            "# HELP chashd_etcd_reconnects_total Watch streams that broke and "
            "were opened again.\n"
            "# TYPE chashd_etcd_reconnects_total counter\n"
            "chashd_etcd_reconnects_total %" PRIu64 "\n",
            C.reconnects);
    fprintf(f,
            "# HELP chashd_etcd_ignored_records Member records ignored as "
            "malformed (listed in /api/cluster).\n"
            "# TYPE chashd_etcd_ignored_records gauge\n"
            "chashd_etcd_ignored_records %zu\n",
            C.nignored);
}
