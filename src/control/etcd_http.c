/* etcd_http.c -- module etcd: HTTP to etcd's JSON gateway (libcurl,
 * blocking, on the etcd threads), the watch stream's framing, and the JSON
 * pieces its requests are made of (keys, base64, operations).
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd_int.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "conf/etcd_codec.h"

/* ---- the JSON of etcd's gateway ------------------------------------------ */

/* An int64 of etcd's JSON: a string (always, from the gateway) or a
 * number; 0 when absent. */
int64_t
etcd_jint(const json_t *j)
{
    if (json_is_integer(j))
        return (int64_t)json_integer_value(j);
    if (json_is_string(j))
        return strtoll(json_string_value(j), NULL, 10);
    return 0;
}

/* Member <b> of member <a> of <j> (<b> NULL: <a> itself). */
json_t *
etcd_jpath(const json_t *j, const char *a, const char *b)
{
    j = json_object_get(j, a);
    return b != NULL ? json_object_get(j, b) : (json_t *)j;
}

/* A base64 string of <s> as a JSON string (steals nothing). */
json_t *
etcd_jb64(const char *s)
{
    char *e = etcd_b64_encode(s, strlen(s));
    json_t *j = e ? json_string(e) : NULL;

    free(e);
    return j;
}

/* <s> with its last byte raised by one: the range end of prefix <s>. */
json_t *
etcd_jb64_end(const char *s)
{
    size_t n = strlen(s);
    char *t = strdup(s);
    json_t *j;

    if (t == NULL || n == 0) {
        free(t);
        return NULL;
    }
    t[n - 1] = (char)(t[n - 1] + 1); /* prefixes end in '/': no overflow */
    j = etcd_jb64(t);
    free(t);
    return j;
}

/* The key of member <name> of <pool>. */
void
etcd_member_key(char *buf, size_t len, const char *pool, const char *name)
{
    snprintf(buf, len, "%s/pools/%s/members/%s", etcd_cfg.prefix, pool, name);
}

/* The key <rest> of <pool>: "migration", "copier", "barrier/...". */
void
etcd_pool_key(char *buf, size_t len, const char *pool, const char *rest)
{
    snprintf(buf, len, "%s/pools/%s/%s", etcd_cfg.prefix, pool, rest);
}

/* The txn operations: a put of <value> at <key>, a delete of <key> (with
 * <prefix>: of every key under it). */
json_t *
etcd_put_op(const char *key, const char *value)
{
    return json_pack("{s:{s:o,s:o}}", "request_put", "key", etcd_jb64(key),
                     "value", etcd_jb64(value));
}

json_t *
etcd_delete_op(const char *key, bool prefix)
{
    return prefix ? json_pack("{s:{s:o,s:o}}", "request_delete_range", "key",
                              etcd_jb64(key), "range_end", etcd_jb64_end(key))
                  : json_pack("{s:{s:o}}", "request_delete_range", "key",
                              etcd_jb64(key));
}

/* ---- HTTP to etcd (libcurl, blocking, on the etcd threads) --------------- */

void
etcd_sleep_ms(uint64_t ms)
{
    uint64_t end = clock_ms() + ms;

    while (!atomic_load(&etcd_shared.stop) && clock_ms() < end) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
}

void
etcd_backoff(uint64_t *backoff)
{
    etcd_sleep_ms(*backoff);
    *backoff =
        *backoff * 2 > ETCD_BACKOFF_MAX_MS ? ETCD_BACKOFF_MAX_MS : *backoff * 2;
}

static size_t
http_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct etcd_http *eh = userp;
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
http_progress(void *p, curl_off_t dt, curl_off_t dn, curl_off_t ut,
              curl_off_t un)
{
    struct etcd_http *eh = p;

    (void)dt, (void)dn, (void)ut, (void)un;
    if (atomic_load(&etcd_shared.stop) && !eh->last)
        return 1;
    if (eh->watch && atomic_load(&etcd_shared.kick))
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
    pthread_mutex_lock(&etcd_shared.mu);
    etcd_shared.watch_fd = fd;
    pthread_mutex_unlock(&etcd_shared.mu);
    return fd;
}

static int
watch_close(void *arg, curl_socket_t fd)
{
    (void)arg;
    pthread_mutex_lock(&etcd_shared.mu);
    if (etcd_shared.watch_fd == fd)
        etcd_shared.watch_fd = -1;
    close(fd);
    pthread_mutex_unlock(&etcd_shared.mu);
    return 0;
}

/* End the watch stream now (the watcher reconnects, or stops). */
void
etcd_kick_watch(void)
{
    atomic_store(&etcd_shared.kick, true);
    pthread_mutex_lock(&etcd_shared.mu);
    if (etcd_shared.watch_fd >= 0)
        shutdown(etcd_shared.watch_fd, SHUT_RDWR);
    pthread_mutex_unlock(&etcd_shared.mu);
}

int
etcd_http_init(struct etcd_http *eh)
{
    memset(eh, 0, sizeof(*eh));
    eh->h = curl_easy_init();
    return eh->h != NULL ? 0 : -1;
}

void
etcd_http_deinit(struct etcd_http *eh)
{
    if (eh->h != NULL)
        curl_easy_cleanup(eh->h);
    free(eh->buf);
    memset(eh, 0, sizeof(*eh));
}

/* etcd auth: a token from /v3/auth/authenticate. 0 or -1. */
int
etcd_http_auth(struct etcd_http *eh, char *err, size_t errlen)
{
    json_t *rq, *out = NULL;
    long st = 0;
    int rc;

    eh->token[0] = '\0';
    rq = json_pack("{s:s,s:s}", "name", etcd_cfg.username, "password",
                   etcd_cfg.password);
    if (rq == NULL)
        return -1;
    rc =
        etcd_http_post(eh, "/v3/auth/authenticate", rq, &out, &st, err, errlen);
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
struct curl_slist *
etcd_http_setup(struct etcd_http *eh, const char *path, const char *body,
                char *url, size_t urllen)
{
    struct curl_slist *hdr = NULL;
    char auth[600];

    snprintf(url, urllen, "%s%s", etcd_cfg.endpoints[eh->ep], path);
    curl_easy_reset(eh->h);
    curl_easy_setopt(eh->h, CURLOPT_URL, url);
    curl_easy_setopt(eh->h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(eh->h, CURLOPT_WRITEFUNCTION, http_write);
    curl_easy_setopt(eh->h, CURLOPT_WRITEDATA, eh);
    curl_easy_setopt(eh->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(eh->h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(eh->h, CURLOPT_XFERINFOFUNCTION, http_progress);
    curl_easy_setopt(eh->h, CURLOPT_XFERINFODATA, eh);
    curl_easy_setopt(eh->h, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)etcd_cfg.timeout_ms);
    curl_easy_setopt(eh->h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(eh->h, CURLOPT_TCP_KEEPIDLE, 2L);
    curl_easy_setopt(eh->h, CURLOPT_TCP_KEEPINTVL, 1L);
    curl_easy_setopt(eh->h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!eh->watch)
        curl_easy_setopt(eh->h, CURLOPT_TIMEOUT_MS, (long)etcd_cfg.timeout_ms);
    if (eh->watch) {
        curl_easy_setopt(eh->h, CURLOPT_OPENSOCKETFUNCTION, watch_open);
        curl_easy_setopt(eh->h, CURLOPT_CLOSESOCKETFUNCTION, watch_close);
        curl_easy_setopt(eh->h, CURLOPT_FORBID_REUSE, 1L);
    }
    if (etcd_cfg.ca_file != NULL)
        curl_easy_setopt(eh->h, CURLOPT_CAINFO, etcd_cfg.ca_file);
    if (etcd_cfg.cert_file != NULL) {
        curl_easy_setopt(eh->h, CURLOPT_SSLCERT, etcd_cfg.cert_file);
        curl_easy_setopt(eh->h, CURLOPT_SSLKEY, etcd_cfg.key_file);
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
int
etcd_http_post(struct etcd_http *eh, const char *path, json_t *body,
               json_t **out, long *status, char *err, size_t errlen)
{
    char *text = json_dumps(body, JSON_COMPACT);
    int rc = -1;

    *status = 0;
    *out = NULL;
    if (text == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t tries = 0; tries < etcd_cfg.nendpoints; tries++) {
        char url[512];
        struct curl_slist *hdr =
            etcd_http_setup(eh, path, text, url, sizeof(url));
        CURLcode cc;

        eh->len = eh->done = 0;
        cc = curl_easy_perform(eh->h);
        curl_slist_free_all(hdr);
        if (cc != CURLE_OK) {
            snprintf(err, errlen, "%s: %s", etcd_cfg.endpoints[eh->ep],
                     curl_easy_strerror(cc));
            eh->ep = (eh->ep + 1) % etcd_cfg.nendpoints;
            if (atomic_load(&etcd_shared.stop) && !eh->last)
                break;
            continue;
        }
        curl_easy_getinfo(eh->h, CURLINFO_RESPONSE_CODE, status);
        *out = json_loadb(eh->buf ? eh->buf : "", eh->len, 0, NULL);
        if (*status == 200 && *out != NULL) {
            rc = 0;
            break;
        }
        snprintf(err, errlen, "%s%s: HTTP %ld: %s", etcd_cfg.endpoints[eh->ep],
                 path, *status,
                 json_string_value(json_object_get(*out, "error"))
                     ? json_string_value(json_object_get(*out, "error"))
                     : "(no message)");
        if (*status == 401 && etcd_cfg.username != NULL &&
            strcmp(path, "/v3/auth/authenticate") != 0 &&
            etcd_http_auth(eh, err, errlen) == 0) {
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
