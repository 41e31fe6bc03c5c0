/* etcd_codec.c -- see etcd_codec.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/etcd_codec.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static const char b64chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *
etcd_b64_encode(const void *data, size_t n)
{
    const unsigned char *s = data;
    char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;

    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        *o++ = b64chars[v >> 18 & 63];
        *o++ = b64chars[v >> 12 & 63];
        *o++ = i + 1 < n ? b64chars[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? b64chars[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int
b64_value(char c)
{
    const char *p = c ? strchr(b64chars, c) : NULL;

    return p ? (int)(p - b64chars) : -1;
}

char *
etcd_b64_decode(const char *s, size_t *n)
{
    size_t len = strlen(s), k = 0;
    char *out;

    if (len % 4 != 0)
        return NULL;
    out = malloc(len / 4 * 3 + 1);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len, p2 = s[i + 2] == '=', p3 = s[i + 3] == '=';
        int a = b64_value(s[i]), b = b64_value(s[i + 1]);
        int c = p2 ? 0 : b64_value(s[i + 2]);
        int d = p3 ? 0 : b64_value(s[i + 3]);

        /* canonical only: the bits a pad leaves over are zero (etcd
         * writes nothing else; one text per value) */
        if (a < 0 || b < 0 || c < 0 || d < 0 || ((p2 || p3) && !last) ||
            (p2 && !p3) || (p2 && (b & 15) != 0) || (p3 && (c & 3) != 0)) {
            free(out);
            return NULL;
        }
        out[k++] = (char)(a << 2 | b >> 4);
        if (!p2)
            out[k++] = (char)((b & 15) << 4 | c >> 2);
        if (!p3)
            out[k++] = (char)((c & 3) << 6 | d);
    }
    out[k] = '\0';
    *n = k;
    return out;
}

bool
etcd_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 63)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && strchr("._:-", *s) == NULL)
            return false;
    return true;
}

bool
etcd_address_ok(const char *a)
{
    char host[INET6_ADDRSTRLEN + 2];
    unsigned char buf[sizeof(struct in6_addr)];
    const char *colon;
    size_t n;
    char *end;
    long port;

    if (a[0] == '/')
        return strlen(a) < 100 && strcspn(a, " \t\r\n") == strlen(a);
    colon = strrchr(a, ':');
    if (colon == NULL || colon[1] < '0' || colon[1] > '9')
        return false;
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535)
        return false;
    if (a[0] == '[') {
        if (colon - a < 3 || colon[-1] != ']')
            return false;
        n = (size_t)(colon - a - 2);
        if (n >= sizeof(host))
            return false;
        memcpy(host, a + 1, n);
        host[n] = '\0';
        return inet_pton(AF_INET6, host, buf) == 1;
    }
    n = (size_t)(colon - a);
    if (n >= sizeof(host))
        return false;
    memcpy(host, a, n);
    host[n] = '\0';
    return inet_pton(AF_INET, host, buf) == 1;
}

/* "barrier/<epoch>.<stage>/<id>": digits, a dot, a digit, a name. */
static bool
barrier_key(const char *s)
{
    size_t d = 0;

    if (strncmp(s, "barrier/", 8) != 0)
        return false;
    s += 8;
    while (s[d] >= '0' && s[d] <= '9')
        d++;
    if (d == 0 || d > 20 || s[d] != '.' || s[d + 1] < '0' || s[d + 1] > '9' ||
        s[d + 2] != '/')
        return false;
    return etcd_name_ok(s + d + 3);
}

int
etcd_key_split(char *rel, char **pool, char **member)
{
    char *slash;

    if (strncmp(rel, "pools/", 6) == 0) {
        *pool = rel + 6;
        slash = strchr(*pool, '/');
        if (slash == NULL || slash == *pool)
            return ETCD_KEY_OTHER;
        if (strcmp(slash, "/migration") == 0 || strcmp(slash, "/copier") == 0 ||
            barrier_key(slash + 1)) {
            *slash = '\0';
            *member = slash + 1;
            return ETCD_KEY_MIGRATION;
        }
        if (strncmp(slash, "/members/", 9) != 0)
            return ETCD_KEY_OTHER;
        *slash = '\0';
        *member = slash + 9;
        return **pool && **member && strchr(*member, '/') == NULL
                   ? ETCD_KEY_MEMBER
                   : ETCD_KEY_OTHER;
    }
    if (strncmp(rel, "instances/", 10) == 0) {
        *member = rel + 10;
        return **member && strchr(*member, '/') == NULL ? ETCD_KEY_INSTANCE
                                                        : ETCD_KEY_OTHER;
    }
    return ETCD_KEY_OTHER;
}

const char *
etcd_record_parse(const char *name, const char *value, size_t len,
                  struct etcd_record *r)
{
    static const char *const states[] = {"up", "drain", "maint"};
    json_t *j, *v;
    const char *why = NULL;

    memset(r, 0, sizeof(*r));
    r->weight = 1;
    if (!etcd_name_ok(name))
        return "bad member name: use 1 to 63 letters, digits, '.', '_', ':' "
               "or '-'";
    j = json_loadb(value, len, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(j)) {
        why = "not a JSON object";
        goto out;
    }
    v = json_object_get(j, "address");
    if (!json_is_string(v) || json_string_length(v) >= sizeof(r->address) ||
        strlen(json_string_value(v)) != json_string_length(v) ||
        !etcd_address_ok(json_string_value(v))) {
        why = "\"address\" must be a numeric host:port, [v6]:port or /path";
        goto out;
    }
    strcpy(r->address, json_string_value(v));
    if ((v = json_object_get(j, "weight")) != NULL) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > 1000000) {
            why = "\"weight\" must be an integer from 1 to 1000000";
            goto out;
        }
        r->weight = (uint32_t)json_integer_value(v);
    }
    if ((v = json_object_get(j, "state")) != NULL) {
        size_t i = 0;
        while (i < 3 && (!json_is_string(v) ||
                         strcmp(json_string_value(v), states[i]) != 0))
            i++;
        if (i == 3) {
            why = "\"state\" must be up, drain or maint";
            goto out;
        }
        r->state = (int)i;
    }
    if ((v = json_object_get(j, "since")) != NULL) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            why = "\"since\" must be Unix milliseconds";
            goto out;
        }
        r->since = (uint64_t)json_integer_value(v);
    }
out:
    json_decref(j);
    return why;
}
