/* admin_parse.c -- the admin API's pure parts (admin.h): paths split and
 * matched, query values and bodies checked, the Content-Type and the
 * token compared. No connection, no pool, no global state: the handlers
 * and tests/fuzz/fuzz_admin.c run the same code.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "api/admin.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "base/text.h"
#include "control/membership.h"
#include "model/state.h"

/* ---- argument checks ----------------------------------------------------- */

/*
 * Everything here is pure: it reads its arguments and writes its
 * outputs, and knows nothing of libmicrohttpd or the pools, so the
 * handlers and tests/fuzz/fuzz_admin.c run the same code. A refusal is
 * the text of the 400 the handler sends.
 */

int
admin_flag(const char *v)
{
    static const char *const yes[] = {"", "1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};

    if (v == NULL)
        return 0;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (strcasecmp(v, yes[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        if (strcasecmp(v, no[i]) == 0)
            return 0;
    return -1;
}

int
admin_count_arg(const char *s, unsigned long max, unsigned long *out)
{
    unsigned long v;
    char *end;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < 1 ||
        v > max)
        return -1;
    *out = v;
    return 0;
}

int
admin_target_arg(const char *s, double *out)
{
    double v;
    char *end;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || end == s || !(v >= 1.0) || v > 100)
        return -1;
    *out = v;
    return 0;
}

static void __attribute__((format(printf, 3, 4)))
seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* <body> (<len> bytes) as a JSON object, or NULL with why in <err>. */
static json_t *
body_object(const char *body, size_t len, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *j;

    if (len == 0) {
        seterr(err, errlen, "a JSON object body is required");
        return NULL;
    }
    j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL) {
        seterr(err, errlen, "malformed JSON at line %d column %d: %s",
               jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        seterr(err, errlen, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

/* Refuse keys of <j> outside <allowed> (NULL-terminated). */
static const char *
unknown_key(json_t *j, const char *const *allowed)
{
    const char *key;
    json_t *v;

    json_object_foreach(j, key, v)
    {
        bool ok = false;

        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = strcmp(key, allowed[i]) == 0;
        if (!ok)
            return key;
    }
    return NULL;
}

/* A JSON string without a NUL inside (a C string holds all of it). */
static bool
c_string(const json_t *v)
{
    return json_is_string(v) &&
           strlen(json_string_value(v)) == json_string_length(v);
}

/*
 * The "weight" of a member change, when <v> gives one: an integer (its
 * range is the membership module's to check). False with why in <err> on
 * a bad type.
 */
static bool
weight_arg(const json_t *v, struct membership_request *mr, char *err,
           size_t errlen)
{
    if (v == NULL)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > MEMBERSHIP_MAX_WEIGHT) {
        seterr(err, errlen, "\"weight\" must be an integer in [0, %d]",
               MEMBERSHIP_MAX_WEIGHT);
        return false;
    }
    mr->has_weight = true;
    mr->weight = (uint32_t)json_integer_value(v);
    return true;
}

/*
 * The "force" of a change, when <j> gives one: true or false. False with
 * why in <err> on another type.
 */
static bool
force_arg(const json_t *j, bool *force, char *err, size_t errlen)
{
    const json_t *v = json_object_get(j, "force");

    if (v == NULL)
        return true;
    if (!json_is_boolean(v)) {
        seterr(err, errlen, "\"force\" must be true or false");
        return false;
    }
    *force = json_is_true(v);
    return true;
}

json_t *
admin_member_add_body(const char *body, size_t len,
                      struct membership_request *mr, char *err, size_t errlen)
{
    static const char *const allowed[] = {"name",  "address", "weight",
                                          "force", "zone",    NULL};
    json_t *j, *jname, *jaddr, *jz;
    const char *bad;

    *mr = (struct membership_request){.op = MEMBERSHIP_ADD};
    j = body_object(body, len, err, errlen);
    if (j == NULL)
        return NULL;
    if ((bad = unknown_key(j, allowed)) != NULL) {
        seterr(err, errlen,
               "unknown field \"%s\" (a member is {\"name\", "
               "\"address\", \"weight\", \"zone\", "
               "\"force\"})",
               bad);
        goto fail;
    }
    if (!force_arg(j, &mr->force, err, errlen))
        goto fail;
    jname = json_object_get(j, "name");
    jaddr = json_object_get(j, "address");
    if (jaddr == NULL || !c_string(jaddr) || json_string_length(jaddr) == 0) {
        seterr(err, errlen,
               "\"address\" must be a non-empty string "
               "(host:port, [v6]:port or /unix/path)");
        goto fail;
    }
    if (jname != NULL &&
        (!c_string(jname) || !text_name_ok(json_string_value(jname)))) {
        seterr(err, errlen,
               "\"name\" must be a string of 1 to %d printable "
               "characters without spaces or '/'",
               TEXT_NAME_MAX);
        goto fail;
    }
    if (!weight_arg(json_object_get(j, "weight"), mr, err, errlen))
        goto fail;
    jz = json_object_get(j, "zone");
    if (jz != NULL) {
        if (!c_string(jz)) {
            seterr(err, errlen, "\"zone\" must be a string");
            goto fail;
        }
        mr->zone = json_string_value(jz);
    }
    mr->name = jname ? json_string_value(jname) : NULL;
    mr->address = json_string_value(jaddr);
    return j;
fail:
    json_decref(j);
    *mr = (struct membership_request){.op = MEMBERSHIP_ADD};
    return NULL;
}

json_t *
admin_member_patch_body(const char *body, size_t len,
                        struct membership_request *mr, char *err, size_t errlen)
{
    static const char *const allowed[] = {"weight", "state", "force", NULL};
    json_t *j, *jst;
    const char *bad;

    *mr = (struct membership_request){.op = MEMBERSHIP_UPDATE};
    j = body_object(body, len, err, errlen);
    if (j == NULL)
        return NULL;
    if ((bad = unknown_key(j, allowed)) != NULL) {
        seterr(err, errlen,
               "unknown field \"%s\" (a member change is "
               "{\"weight\", \"state\", \"force\"})",
               bad);
        goto fail;
    }
    if (!force_arg(j, &mr->force, err, errlen))
        goto fail;
    if (!weight_arg(json_object_get(j, "weight"), mr, err, errlen))
        goto fail;
    jst = json_object_get(j, "state");
    if (jst != NULL) {
        const char *st = json_string_value(jst);

        /* "drain" is the verb; "draining" is how the state reads back. */
        if (st != NULL && strcmp(st, "draining") == 0)
            st = "drain";
        mr->has_admin = true;
        mr->admin = state_admin_from_name(st);
        if (mr->admin < 0) {
            seterr(err, errlen,
                   "\"state\" must be \"up\", \"drain\" or "
                   "\"maint\"");
            goto fail;
        }
    }
    return j;
fail:
    json_decref(j);
    *mr = (struct membership_request){.op = MEMBERSHIP_UPDATE};
    return NULL;
}

json_t *
admin_delete_body(const char *body, size_t len, bool *force, char *err,
                  size_t errlen)
{
    static const char *const allowed[] = {"force", NULL};
    json_t *j;
    const char *bad;

    *force = false;
    if (len == 0)
        return json_object();
    j = body_object(body, len, err, errlen);
    if (j == NULL)
        return NULL;
    if ((bad = unknown_key(j, allowed)) != NULL) {
        seterr(err, errlen,
               "unknown field \"%s\" (the body of a DELETE is "
               "{\"force\": true}, or none)",
               bad);
        json_decref(j);
        return NULL;
    }
    if (!force_arg(j, force, err, errlen)) {
        json_decref(j);
        *force = false;
        return NULL;
    }
    return j;
}

json_t *
admin_changes_body(const char *body, size_t len,
                   struct membership_batch_op *ops, size_t *n, char *err,
                   size_t errlen)
{
    static const char *const top[] = {"changes", "force", NULL};
    static const char *const allowed[] = {"op",     "name",  "address",
                                          "weight", "state", NULL};
    json_t *j, *list, *e;
    size_t i;

    *n = 0;
    j = body_object(body, len, err, errlen);
    if (j == NULL)
        return NULL;
    list = json_object_get(j, "changes");
    if (json_object_get(j, "force") != NULL &&
        !json_is_boolean(json_object_get(j, "force"))) {
        seterr(err, errlen, "\"force\" must be true or false");
        goto fail;
    }
    if (unknown_key(j, top) != NULL || !json_is_array(list) ||
        json_array_size(list) == 0 || json_array_size(list) > ADMIN_BATCH_MAX) {
        seterr(err, errlen,
               "the body is {\"changes\": [...], \"force\": true or "
               "false (optional)} with 1 to %d "
               "changes like {\"op\": \"add\", \"name\", "
               "\"address\", \"weight\"}, {\"op\": "
               "\"remove\", \"name\"} or {\"op\": \"update\", "
               "\"name\", \"weight\", \"state\"}",
               ADMIN_BATCH_MAX);
        goto fail;
    }
    memset(ops, 0, ADMIN_BATCH_MAX * sizeof(*ops));
    json_array_foreach(list, i, e)
    {
        const char *op = json_string_value(json_object_get(e, "op"));
        json_t *jn = json_object_get(e, "name"),
               *ja = json_object_get(e, "address");
        json_t *jw = json_object_get(e, "weight"),
               *js = json_object_get(e, "state");
        const char *why = NULL;

        if (!json_is_object(e))
            why = "is not an object";
        else if (unknown_key(e, allowed) != NULL)
            why = "has an unknown field (valid: op, name, address, weight, "
                  "state)";
        else if (op == NULL ||
                 (strcmp(op, "add") != 0 && strcmp(op, "remove") != 0 &&
                  strcmp(op, "update") != 0))
            why = "needs \"op\": add, remove or update";
        else if (!c_string(jn) || !text_name_ok(json_string_value(jn)))
            why = "needs a \"name\" without spaces or '/'";
        else if (strcmp(op, "add") == 0 && !c_string(ja))
            why = "(add) needs an \"address\"";
        else if (strcmp(op, "add") != 0 && ja != NULL)
            why = "gives an \"address\": only add takes one";
        else if (jw != NULL &&
                 (!json_is_integer(jw) || json_integer_value(jw) < 1 ||
                  json_integer_value(jw) > MEMBERSHIP_MAX_WEIGHT))
            why = "has a \"weight\" that is not an integer from 1 to 1000000";
        else if (js != NULL &&
                 (strcmp(op, "update") != 0 ||
                  state_admin_from_name(json_string_value(js)) < 0))
            why = "has a bad \"state\" (update only: up, drain or maint)";
        if (why != NULL) {
            seterr(err, errlen, "change %zu %s", i + 1, why);
            goto fail;
        }
        ops[i].op = op[0] == 'a'   ? MEMBERSHIP_ADD
                    : op[0] == 'r' ? MEMBERSHIP_REMOVE
                                   : MEMBERSHIP_UPDATE;
        ops[i].name = json_string_value(jn);
        ops[i].address = json_string_value(ja);
        ops[i].has_weight = jw != NULL;
        ops[i].weight = jw ? (uint32_t)json_integer_value(jw) : 0;
        ops[i].has_admin = js != NULL;
        ops[i].admin = js ? state_admin_from_name(json_string_value(js)) : 0;
    }
    *n = json_array_size(list);
    return j;
fail:
    json_decref(j);
    *n = 0;
    return NULL;
}

/* ---- paths, headers ----------------------------------------------------- */

bool
admin_json_media_type(const char *ct)
{
    static const char mt[] = "application/json";

    if (ct == NULL)
        return false;
    ct += strspn(ct, " \t");
    if (strncasecmp(ct, mt, sizeof(mt) - 1) != 0)
        return false;
    ct += sizeof(mt) - 1;
    ct += strspn(ct, " \t");
    return *ct == '\0' || *ct == ';';
}

int
admin_split_path(const char *url, char *buf, size_t buflen, char **seg, int max)
{
    int n = 0;
    char *p;

    if (snprintf(buf, buflen, "%s", url) >= (int)buflen)
        return -1;
    p = buf;
    if (*p == '/')
        p++;
    if (*p == '\0')
        return 0;
    while (p != NULL) {
        char *slash = strchr(p, '/');

        if (slash != NULL)
            *slash = '\0';
        if (*p == '\0' || n == max)
            return -1;
        seg[n++] = p;
        p = slash ? slash + 1 : NULL;
    }
    return n;
}

const char *
admin_member_path(const char *url, char *pool, size_t poollen)
{
    static const char pre[] = "/api/pools/", mid[] = "/members/";
    const char *ps = url + sizeof(pre) - 1, *pe;

    if (strncmp(url, pre, sizeof(pre) - 1) != 0 ||
        (pe = strchr(ps, '/')) == NULL || pe == ps ||
        strncmp(pe, mid, sizeof(mid) - 1) != 0 || pe[sizeof(mid) - 1] == '\0' ||
        (size_t)(pe - ps) >= poollen)
        return NULL;
    snprintf(pool, poollen, "%.*s", (int)(pe - ps), ps);
    return pe + sizeof(mid) - 1;
}

bool
admin_state_path(const char *url, char *pool, size_t poollen, const char **name)
{
    static const char pre[] = "/api/state/pools/", mid[] = "/members/";
    const char *ps = url + sizeof(pre) - 1, *pe;

    *name = NULL;
    if (strncmp(url, pre, sizeof(pre) - 1) != 0 || *ps == '\0')
        return false;
    pe = strchr(ps, '/');
    if (pe == NULL)
        pe = ps + strlen(ps);
    else if (strncmp(pe, mid, sizeof(mid) - 1) != 0 ||
             pe[sizeof(mid) - 1] == '\0')
        return false;
    /* "/api/state/pools//members/x" names no pool (it was looked up as
     * pool "" and, for a GET, answered 405 instead of 404) */
    if (pe == ps || (size_t)(pe - ps) >= poollen)
        return false;
    snprintf(pool, poollen, "%.*s", (int)(pe - ps), ps);
    if (*pe != '\0')
        *name = pe + sizeof(mid) - 1;
    return true;
}

bool
admin_token_ok(const char *want, const char *given)
{
    size_t gl, tl = strlen(want);
    unsigned char diff = 0;

    /* The scheme is case-insensitive and may be followed by several
     * spaces (RFC 7235 2.1): "bearer <token>" from a client is valid. */
    if (given == NULL || strncasecmp(given, "Bearer ", 7) != 0)
        return false;
    given += 7;
    given += strspn(given, " ");
    gl = strlen(given);
    for (size_t i = 0; i < tl; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)given[i < gl ? i : 0];
    return diff == 0 && gl == tl;
}

size_t
admin_authority_host(const char *s)
{
    size_t n;

    if (s[0] == '[') {
        const char *e = strchr(s, ']');

        if (e == NULL)
            return 0;
        n = (size_t)(e - s) + 1;
    } else {
        n = strcspn(s, ":");
    }
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || strchr("/?#@\\", s[i]) != NULL)
            return 0;
    if (n == 0 || s[n] == '\0')
        return n;
    if (s[n] != ':' || s[n + 1] == '\0' ||
        strspn(s + n + 1, "0123456789") != strlen(s + n + 1))
        return 0;
    return n;
}
