/* fuzz_admin.c -- libFuzzer driver for the admin API's request handling:
 * any bytes are an HTTP request to chashd's admin port. Its URL goes
 * through the control-byte check and the path splitters the router uses,
 * its query values through the flag and number checks, its headers
 * through the Host, Content-Type and token checks, and its body through
 * the three change parsers (member add, member patch, a changes batch),
 * all of them src/admin.c's own functions. A refusal always carries a
 * message that can be sent as JSON; what is accepted keeps its limits
 * (names that are valid member names, weights and counts in range, no
 * control byte reaching a handler) and parses the same again from its
 * own JSON.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <microhttpd.h>

#include "api/admin.h"
#include "control/membership.h"
#include "model/state.h"
#include "base/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TOKEN "s3cret-token"

/* A piece of the input as a C string, as libmicrohttpd hands them over:
 * a NUL inside ends it. */
static char *
piece(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);

    if (s == NULL)
        abort();
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* A refusal's text is answered as {"error": text} once scrubbed
 * (respond_error): it must be there, and jansson must take it. */
static void
check_message(const char *msg, size_t cap)
{
    char copy[1024];
    json_t *j;

    if (msg[0] == '\0' || strnlen(msg, cap) == cap)
        abort();
    snprintf(copy, sizeof(copy), "%s", msg);
    text_utf8_scrub(copy);
    j = json_string(copy);
    if (j == NULL)
        abort();
    json_decref(j);
}

/* A name that passed: a member name as the config allows, valid UTF-8
 * (printable ASCII in fact), within TEXT_NAME_MAX. */
static void
check_name(const char *name)
{
    size_t n = strlen(name);

    if (!text_name_ok(name) || n == 0 || n > TEXT_NAME_MAX ||
        strchr(name, '/') != NULL || text_has_control(name, n))
        abort();
    for (size_t i = 0; i < n;) {
        size_t k = text_utf8_len((const unsigned char *)name + i, n - i);

        if (k == 0)
            abort();
        i += k;
    }
}

static bool
same(const char *a, const char *b)
{
    return (a == NULL && b == NULL) ||
           (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* ---- the path ------------------------------------------------------------ */

/* <url>, decoded, as the router sees it. */
static void
check_path(const char *url)
{
    static const char mpre[] = "/api/pools/", spre[] = "/api/state/pools/";
    char buf[2048], rebuilt[2048], pool[256], msg[512];
    const char *name, *p;
    char *seg[6];
    size_t len = strlen(url), parts = 0;
    int n = admin_split_path(url, buf, sizeof(buf), seg, 6);

    /* the segments: after one leading '/', the parts between slashes */
    p = url[0] == '/' ? url + 1 : url;
    for (const char *q = p; *q != '\0'; q++)
        parts += *q == '/';
    if (n < -1 || n > 6)
        abort();
    if (n >= 0) {
        /* none empty, none with '/', and put back together they are the
         * path */
        size_t at = 0;

        rebuilt[0] = '\0';
        for (int i = 0; i < n; i++) {
            if (seg[i] < buf || seg[i] >= buf + sizeof(buf) ||
                seg[i][0] == '\0' || strchr(seg[i], '/') != NULL)
                abort();
            at += (size_t)snprintf(rebuilt + at, sizeof(rebuilt) - at, "%s%s",
                                   i > 0 ? "/" : "", seg[i]);
        }
        if (strcmp(rebuilt, p) != 0)
            abort();
    } else if (len < sizeof(buf) - 1) {
        /* refused: an empty segment or more than 6 */
        size_t pl = strlen(p);

        if (pl == 0 || (p[0] != '/' && p[pl - 1] != '/' &&
                        strstr(p, "//") == NULL && parts + 1 <= 6))
            abort();
    }

    name = admin_member_path(url, pool, sizeof(pool));
    if (name != NULL) {
        size_t pl = strlen(pool);

        if (pl == 0 || pl >= sizeof(pool) || strchr(pool, '/') != NULL ||
            name[0] == '\0' || strncmp(url, mpre, sizeof(mpre) - 1) != 0 ||
            strncmp(url + sizeof(mpre) - 1, pool, pl) != 0 ||
            strncmp(url + sizeof(mpre) - 1 + pl, "/members/", 9) != 0 ||
            name != url + sizeof(mpre) - 1 + pl + 9)
            abort();
    }
    /* what the segments address, the member path addresses alike */
    if (n == 5 && strcmp(seg[0], "api") == 0 && strcmp(seg[1], "pools") == 0 &&
        strcmp(seg[3], "members") == 0 && strlen(seg[2]) < sizeof(pool) &&
        url[0] == '/' &&
        (name == NULL || strcmp(pool, seg[2]) != 0 ||
         strcmp(name, seg[4]) != 0))
        abort();

    if (admin_state_path(url, pool, sizeof(pool), &name)) {
        size_t pl = strlen(pool);
        const char *after = url + sizeof(spre) - 1 + pl;

        if (pl == 0 || strchr(pool, '/') != NULL ||
            strncmp(url, spre, sizeof(spre) - 1) != 0 ||
            strncmp(url + sizeof(spre) - 1, pool, pl) != 0)
            abort();
        if (name == NULL && after[0] != '\0')
            abort();
        if (name != NULL && (name != after + 9 || name[0] == '\0' ||
                             strncmp(after, "/members/", 9) != 0))
            abort();
    } else if (name != NULL) {
        abort();
    }

    /* the 404 that echoes the path can always be sent */
    snprintf(msg, sizeof(msg), "no such path: %s", url);
    check_message(msg, sizeof(msg));
}

/* ---- the query ----------------------------------------------------------- */

/* A query value as the handlers read it: a flag (dry_run, now), a count
 * (replicas, segments), a rebalance target. */
static void
check_value(const char *v)
{
    char upper[64];
    unsigned long count = 0;
    double target = 0;
    int f = admin_flag(v);
    size_t n = strlen(v);

    if (f < -1 || f > 1 || (f != -1 && n > 5))
        abort();
    if (n < sizeof(upper)) {
        for (size_t i = 0; i <= n; i++)
            upper[i] = (char)((v[i] >= 'a' && v[i] <= 'z') ? v[i] - 32 : v[i]);
        if (admin_flag(upper) != f)
            abort(); /* flags take any case */
    }
    if (admin_count_arg(v, 64, &count) == 0 &&
        (count < 1 || count > 64 || strchr(v, '-') != NULL))
        abort();
    if (admin_count_arg(v, 65536, &count) == 0 && (count < 1 || count > 65536))
        abort();
    if (admin_target_arg(v, &target) == 0 &&
        (isnan(target) || target < 1.0 || target > 100))
        abort();
}

/* The query after '?': split at '&' and '=', '+' as a space, each part
 * percent-decoded by libmicrohttpd's own decoder (as it hands the values
 * to MHD_lookup_connection_value). Whether a control byte shows up in a
 * key or value must agree with text_url_control's scan of the raw URL. */
static bool
check_query(const char *query)
{
    char *q = strdup(query), *save = NULL, *arg;
    bool control = false;

    if (q == NULL)
        abort();
    for (arg = strtok_r(q, "&", &save); arg != NULL;
         arg = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(arg, '='), *v = NULL;
        size_t kn, vn = 0;

        if (eq != NULL) {
            *eq = '\0';
            v = eq + 1;
        }
        for (char *c = arg; *c; c++)
            if (*c == '+')
                *c = ' ';
        kn = MHD_http_unescape(arg);
        control = control || text_has_control(arg, kn);
        if (v != NULL) {
            for (char *c = v; *c; c++)
                if (*c == '+')
                    *c = ' ';
            vn = MHD_http_unescape(v);
            control = control || text_has_control(v, vn);
            if (!text_has_control(v, vn))
                check_value(v);
        }
    }
    free(q);
    return control;
}

/* The request target as sent: refused at once when it decodes to a
 * control byte (the 400 of admit()), else routed. */
static void
check_target(const char *raw)
{
    bool in_query = false, qcontrol = false;
    char *path = strdup(raw), *query;
    int control = text_url_control(raw, &in_query);
    size_t plen;

    if (path == NULL)
        abort();
    if (control >= 0 && control >= 0x20 && control != 0x7f)
        abort(); /* what it reports is a control byte */
    query = strchr(path, '?');
    if (query != NULL)
        *query++ = '\0';
    plen = MHD_http_unescape(path);
    if (query != NULL)
        qcontrol = check_query(query);
    /* the scan agrees with the decoder: no control byte gets past it,
     * and it says which part holds the first */
    if (control < 0 && (text_has_control(path, plen) || qcontrol))
        abort();
    if (control >= 0 && !in_query && !text_has_control(path, plen))
        abort();
    if (control >= 0 && in_query && !qcontrol)
        abort();
    if (control < 0)
        check_path(path);
    free(path);
}

/* ---- headers ------------------------------------------------------------- */

static void
check_header(const char *name, const char *v)
{
    if (strcasecmp(name, "Host") == 0) {
        size_t n = admin_authority_host(v);

        if (n > strlen(v))
            abort();
        if (n > 0) {
            for (size_t i = 0; i < n; i++)
                if (v[i] <= ' ' || v[i] > '~' || strchr("/?#@\\", v[i]))
                    abort();
            if (v[n] != '\0' &&
                (v[n] != ':' || v[n + 1] == '\0' ||
                 strspn(v + n + 1, "0123456789") != strlen(v + n + 1)))
                abort();
        }
    } else if (strcasecmp(name, "Content-Type") == 0) {
        if (admin_json_media_type(v) &&
            strncasecmp(v + strspn(v, " \t"), "application/json", 16) != 0)
            abort();
    } else if (strcasecmp(name, "Authorization") == 0) {
        size_t n = strlen(v), tl = strlen(TOKEN);
        char *again;

        if (admin_token_ok(TOKEN, v) &&
            (strncasecmp(v, "Bearer ", 7) != 0 || n < 7 + tl ||
             strcmp(v + n - tl, TOKEN) != 0))
            abort();
        /* the value as a token, sent as it should be: taken, and with
         * one byte more: refused */
        if (v[0] != ' ') {
            again = malloc(n + 9);
            if (again == NULL)
                abort();
            snprintf(again, n + 9, "bEaReR %s", v);
            if (!admin_token_ok(v, again))
                abort();
            snprintf(again, n + 9, "Bearer %sx", v);
            if (admin_token_ok(v, again))
                abort();
            free(again);
        }
    }
}

/* ---- bodies -------------------------------------------------------------- */

static void
check_member(const struct membership_request *mr, int op)
{
    if (mr->op != op || mr->now)
        abort();
    if (mr->has_weight && mr->weight > MEMBERSHIP_MAX_WEIGHT)
        abort();
    if (!mr->has_weight && mr->weight != 0)
        abort();
    if (op == MEMBERSHIP_ADD) {
        if (mr->address == NULL || mr->address[0] == '\0' || mr->has_admin)
            abort();
        if (mr->name != NULL)
            check_name(mr->name);
    } else {
        if (mr->name != NULL || mr->address != NULL || mr->zone != NULL ||
            mr->force)
            abort();
        if (mr->has_admin &&
            (mr->admin < 0 || state_admin_name(mr->admin) == NULL))
            abort();
    }
}

static bool
same_member(const struct membership_request *a,
            const struct membership_request *b)
{
    return a->op == b->op && same(a->name, b->name) &&
           same(a->address, b->address) && same(a->zone, b->zone) &&
           a->has_weight == b->has_weight && a->weight == b->weight &&
           a->has_admin == b->has_admin && a->admin == b->admin &&
           a->force == b->force;
}

static void
check_ops(const struct membership_batch_op *ops, size_t n)
{
    if (n < 1 || n > ADMIN_BATCH_MAX)
        abort();
    for (size_t i = 0; i < n; i++) {
        const struct membership_batch_op *o = &ops[i];

        if (o->op != MEMBERSHIP_ADD && o->op != MEMBERSHIP_REMOVE &&
            o->op != MEMBERSHIP_UPDATE)
            abort();
        check_name(o->name);
        if ((o->op == MEMBERSHIP_ADD) != (o->address != NULL))
            abort();
        if (o->has_weight &&
            (o->weight < 1 || o->weight > MEMBERSHIP_MAX_WEIGHT))
            abort();
        if (o->has_admin &&
            (o->op != MEMBERSHIP_UPDATE || state_admin_name(o->admin) == NULL))
            abort();
    }
}

static bool
same_ops(const struct membership_batch_op *a,
         const struct membership_batch_op *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].op != b[i].op || !same(a[i].name, b[i].name) ||
            !same(a[i].address, b[i].address) ||
            a[i].has_weight != b[i].has_weight || a[i].weight != b[i].weight ||
            a[i].has_admin != b[i].has_admin || a[i].admin != b[i].admin)
            return false;
    return true;
}

/* <j> (a body that was taken) as JSON text again. */
static char *
dump(const json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);

    if (text == NULL)
        abort();
    return text;
}

/* A member body for <parse> (the add or the patch parser, of op <op>):
 * refused with a message and nothing filled in, or taken whole, and its
 * JSON text again is taken alike. */
typedef json_t *member_parse_fn(const char *body, size_t len,
                                struct membership_request *mr, char *err,
                                size_t errlen);

static void
check_member_body(member_parse_fn *parse, int op, const char *body, size_t len)
{
    struct membership_request mr, again;
    char err[512], err2[512], *text;
    json_t *j, *j2;

    err[0] = '\0';
    j = parse(body, len, &mr, err, sizeof(err));
    if (j == NULL) {
        check_message(err, sizeof(err));
        if (mr.op != op ||
            (op == MEMBERSHIP_ADD
                 ? mr.name || mr.address || mr.zone || mr.has_weight || mr.force
                 : mr.has_weight || mr.has_admin))
            abort(); /* nothing filled in */
        return;
    }
    check_member(&mr, op);
    text = dump(j);
    j2 = parse(text, strlen(text), &again, err2, sizeof(err2));
    if (j2 == NULL || !same_member(&mr, &again))
        abort();
    json_decref(j2);
    free(text);
    json_decref(j);
}

static void
check_body(const char *body, size_t len)
{
    static struct membership_batch_op ops[ADMIN_BATCH_MAX],
        again_ops[ADMIN_BATCH_MAX];
    char err[512], err2[512];
    json_t *j, *j2;
    size_t n, n2;
    char *text;

    /* POST .../members, PATCH .../members/{name} */
    check_member_body(admin_member_add_body, MEMBERSHIP_ADD, body, len);
    check_member_body(admin_member_patch_body, MEMBERSHIP_UPDATE, body, len);

    /* POST .../changes */
    err[0] = '\0';
    n = 99;
    j = admin_changes_body(body, len, ops, &n, err, sizeof(err));
    if (j == NULL) {
        check_message(err, sizeof(err));
        if (n != 0)
            abort();
    } else {
        check_ops(ops, n);
        text = dump(j);
        j2 = admin_changes_body(text, strlen(text), again_ops, &n2, err2,
                                sizeof(err2));
        if (j2 == NULL || n2 != n || !same_ops(ops, again_ops, n))
            abort();
        json_decref(j2);
        free(text);
        json_decref(j);
    }
}

/* ---- the request --------------------------------------------------------- */

/* The end of the line at <p> (its LF, or <end>). */
static const uint8_t *
line_end(const uint8_t *p, const uint8_t *end)
{
    const uint8_t *lf = memchr(p, '\n', (size_t)(end - p));

    return lf != NULL ? lf : end;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data, *end = data + size, *le, *sp1, *sp2;
    char *target;

    /* "METHOD TARGET VERSION": the target between the first two spaces
     * (the whole line when there are none) */
    le = line_end(p, end);
    sp1 = memchr(p, ' ', (size_t)(le - p));
    sp2 = sp1 != NULL ? memchr(sp1 + 1, ' ', (size_t)(le - sp1 - 1)) : NULL;
    if (sp1 == NULL)
        target = piece(p, (size_t)(le - p));
    else
        target = piece(sp1 + 1, (size_t)((sp2 ? sp2 : le) - sp1 - 1));
    check_target(target);
    free(target);

    /* "Name: value" lines up to an empty one; the rest is the body */
    p = le < end ? le + 1 : end;
    while (p < end) {
        const uint8_t *colon, *vend;
        char *name, *value;

        le = line_end(p, end);
        vend = le > p && le[-1] == '\r' ? le - 1 : le;
        if (vend == p) {
            p = le < end ? le + 1 : end;
            break;
        }
        colon = memchr(p, ':', (size_t)(vend - p));
        if (colon != NULL) {
            const uint8_t *v = colon + 1;

            while (v < vend && (*v == ' ' || *v == '\t'))
                v++;
            name = piece(p, (size_t)(colon - p));
            value = piece(v, (size_t)(vend - v));
            check_header(name, value);
            free(name);
            free(value);
        }
        p = le < end ? le + 1 : end;
    }
    check_body((const char *)p, (size_t)(end - p));
    return 0;
}
