/* etcd_session.c -- module etcd: the session thread. It keeps this
 * instance's lease (grant, keepalive, revoke at a clean stop), puts the
 * instance record under it, and runs the admin API's writes (etcd_write.c
 * queues them); answers go back to the control thread as messages.
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd_int.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "model/fence.h"

#define PUBLISH_GAP_MS 20 /* instance records: at most one put per gap */

/* The session thread's state (its thread only). */
struct session {
    struct etcd_http eh;
    int64_t lease; /* 0: none (yet, or lost) */
    uint64_t next_ka, last_put, backoff;
    char *record;      /* the instance record to put (owned), NULL: none yet */
    bool dirty;        /* <record> is not in etcd yet */
    bool refused_said; /* etcd refused a grant or put: logged */
    char key[512];     /* the instance record's key */
    char err[256];
};

/* Run admin write <wr> under <lease> (0: none yet); its answer into <wr>. */
static void
session_write(struct etcd_http *eh, struct etcd_write *wr, int64_t lease)
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
    if (etcd_http_post(eh, "/v3/kv/txn", wr->txn, &out, &st, err,
                       sizeof(err)) != 0) {
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
        wr->rev = (uint64_t)etcd_jint(etcd_jpath(out, "header", "revision"));
    }
    json_decref(out);
}

/* Take the next admin write (NULL: none, or a keepalive is due first)
 * and the instance record to publish, if a new one is there. */
static struct etcd_write *
session_take(struct session *s, uint64_t now)
{
    struct etcd_write *wr;

    /* the admin API's writes first: an operator waits; but not
     * before a keepalive that is due (a stream of writes must not
     * let the lease lapse: copy pools fence themselves then) */
    pthread_mutex_lock(&etcd_shared.mu);
    wr = s->lease != 0 && now >= s->next_ka ? NULL : etcd_shared.writes;
    if (wr != NULL) {
        etcd_shared.writes = wr->next;
        if (etcd_shared.writes == NULL)
            etcd_shared.wtail = &etcd_shared.writes;
    }
    if (etcd_shared.publish != NULL) {
        free(s->record);
        s->record = etcd_shared.publish;
        etcd_shared.publish = NULL;
        s->dirty = true;
    }
    pthread_mutex_unlock(&etcd_shared.mu);
    return wr;
}

/* A new lease. 0, or -1 (backed off: the loop starts over). */
static int
session_grant(struct session *s, uint64_t now)
{
    uint64_t sent = clock_ms();
    json_t *rq, *out = NULL;
    long st;

    rq = json_pack("{s:I}", "TTL",
                   (json_int_t)((etcd_cfg.lease_ttl_ms + 999) / 1000));
    if (etcd_http_post(&s->eh, "/v3/lease/grant", rq, &out, &st, s->err,
                       sizeof(s->err)) == 0 &&
        etcd_jint(json_object_get(out, "ID")) != 0) {
        s->lease = etcd_jint(json_object_get(out, "ID"));
        etcd_fence_lease(sent, etcd_jint(json_object_get(out, "TTL")));
        pthread_mutex_lock(&etcd_shared.mu);
        /* back once its record is seen under this lease */
        if (fence_is_rejoining())
            etcd_fence_state.rejoin_lease = s->lease;
        pthread_mutex_unlock(&etcd_shared.mu);
        s->refused_said = false;
        s->next_ka = now + etcd_cfg.lease_ttl_ms / 4;
        s->dirty = s->record != NULL;
        s->backoff = ETCD_BACKOFF_MIN_MS;
        json_decref(out);
        json_decref(rq);
        return 0;
    }
    /* no answer: the watch is likely dead too; an answer
     * that refuses (permissions): said once */
    if (st == 0)
        etcd_kick_watch();
    else if (!s->refused_said)
        log_warn("etcd: cannot grant the lease of instance %s: "
                 "%s",
                 etcd_cfg.instance, s->err);
    s->refused_said |= st != 0;
    json_decref(out);
    json_decref(rq);
    etcd_backoff(&s->backoff);
    return -1;
}

/* Renew the lease (a keepalive is due). A lease that is gone is dropped:
 * the next turn grants a new one. */
static void
session_keepalive(struct session *s, uint64_t now)
{
    uint64_t sent = clock_ms();
    json_t *rq = json_pack("{s:I}", "ID", (json_int_t)s->lease), *out = NULL;
    long st;

    /* a one-shot POST works as a unary call: its one result
     * line parses as one object */
    if (etcd_http_post(&s->eh, "/v3/lease/keepalive", rq, &out, &st, s->err,
                       sizeof(s->err)) != 0) {
        if (st == 0)
            etcd_kick_watch(); /* etcd is gone: so is the watch */
        s->next_ka = now + ETCD_BACKOFF_MAX_MS / 4;
    } else if (etcd_jint(etcd_jpath(out, "result", "TTL")) <= 0) {
        log_warn("etcd: lease %" PRId64 " of instance %s is gone: "
                 "granting a new one",
                 s->lease, etcd_cfg.instance);
        s->lease = 0;
        etcd_fence_rejoin();
    } else {
        etcd_fence_lease(sent, etcd_jint(etcd_jpath(out, "result", "TTL")));
        s->next_ka = now + etcd_cfg.lease_ttl_ms / 4;
    }
    json_decref(out);
    json_decref(rq);
}

/* Put the instance record under the lease. */
static void
session_publish(struct session *s)
{
    json_t *rq, *out = NULL;
    long st;

    rq = json_pack("{s:o,s:o,s:I}", "key", etcd_jb64(s->key), "value",
                   etcd_jb64(s->record), "lease", (json_int_t)s->lease);
    if (etcd_http_post(&s->eh, "/v3/kv/put", rq, &out, &st, s->err,
                       sizeof(s->err)) == 0) {
        s->dirty = false;
        s->refused_said = false;
    } else if (st == 404) {
        s->lease = 0; /* "requested lease not found": etcd wiped */
        etcd_fence_rejoin();
    } else {
        if (st == 0)
            etcd_kick_watch();
        else if (!s->refused_said)
            log_warn("etcd: cannot publish instance %s: %s", etcd_cfg.instance,
                     s->err);
        s->refused_said |= st != 0;
        etcd_sleep_ms(s->backoff);
    }
    s->last_put = clock_ms();
    json_decref(out);
    json_decref(rq);
}

/* Sleep until the next keepalive, put, or work. */
static void
session_wait(struct session *s, uint64_t now)
{
    uint64_t wait = s->next_ka > now ? s->next_ka - now : 0;

    if (s->dirty && s->last_put + PUBLISH_GAP_MS > now &&
        s->last_put + PUBLISH_GAP_MS - now < wait)
        wait = s->last_put + PUBLISH_GAP_MS - now;
    pthread_mutex_lock(&etcd_shared.mu);
    if (etcd_shared.writes == NULL && etcd_shared.publish == NULL &&
        !atomic_load(&etcd_shared.stop) && wait > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)(wait / 1000);
        ts.tv_nsec += (long)(wait % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&etcd_shared.cond, &etcd_shared.mu, &ts);
    }
    pthread_mutex_unlock(&etcd_shared.mu);
}

void *
etcd_session_main(void *arg)
{
    struct session s = {.backoff = ETCD_BACKOFF_MIN_MS};

    (void)arg;
    if (etcd_http_init(&s.eh) != 0)
        return NULL;
    snprintf(s.key, sizeof(s.key), "%s/instances/%s", etcd_cfg.prefix,
             etcd_cfg.instance);
    while (!atomic_load(&etcd_shared.stop)) {
        uint64_t now = clock_ms();
        struct etcd_write *wr = session_take(&s, now);

        if (wr != NULL) {
            session_write(&s.eh, wr, s.lease);
            etcd_post(&wr->answer);
            continue;
        }
        if (etcd_cfg.username != NULL && s.eh.token[0] == '\0' &&
            etcd_http_auth(&s.eh, s.err, sizeof(s.err)) != 0) {
            etcd_backoff(&s.backoff); /* the watcher says why */
            continue;
        }
        if (s.lease == 0 && session_grant(&s, now) != 0)
            continue;
        if (now >= s.next_ka) {
            session_keepalive(&s, now);
            if (s.lease == 0)
                continue;
        }
        if (s.dirty && s.record != NULL && now >= s.last_put + PUBLISH_GAP_MS) {
            session_publish(&s);
            continue;
        }
        session_wait(&s, now);
    }
    /* a clean stop: our record goes at once, not after the TTL */
    if (s.lease != 0) {
        json_t *rq = json_pack("{s:I}", "ID", (json_int_t)s.lease);
        json_t *out = NULL;
        long st;
        s.eh.last = true;
        etcd_http_post(&s.eh, "/v3/lease/revoke", rq, &out, &st, s.err,
                       sizeof(s.err));
        json_decref(out);
        json_decref(rq);
    }
    free(s.record);
    etcd_http_deinit(&s.eh);
    return NULL;
}
