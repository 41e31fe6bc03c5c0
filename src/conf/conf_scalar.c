/* conf_scalar.c -- one value of a config: whole numbers, durations, sizes,
 * booleans, strings and enum names, parsed strictly (no rounding, no
 * wrap-around), and the setters the key tables use to store them.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/conf_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

/* The largest size a key may give (conf_set_size). */
#define MAX_SIZE (4ULL * 1024 * 1024 * 1024)
/* A unit-less duration below this, on one of chashd's own keys, is most
 * likely seconds written without the "s". */
#define WARN_PLAIN_MS 1000

/* ------------------------------------------------------------------ */
/* Numbers and durations                                              */

/* Parse all of <s> as a decimal unsigned number; 0 or -1. */
int
conf_parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    if (*s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

/*
 * Durations: a number with an optional fraction and a unit (ms, s, m, h),
 * or a plain integer of milliseconds as twemproxy writes `timeout: 400`.
 * The value is computed in integers so "1.5s" is exactly 1500; a result
 * that is not a whole number of milliseconds ("1.0005s") is refused rather
 * than rounded, as is anything above UINT32_MAX ms.
 */
int
conf_parse_duration(const char *s, uint32_t *ms)
{
    uint64_t whole = 0, frac = 0, scale = 1, unit = 1, v;
    const char *p = s;
    int digits = 0;

    if (s == NULL || ms == NULL)
        return -1;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (whole > UINT32_MAX)
            return -1;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        p++;
        for (; *p >= '0' && *p <= '9'; p++, digits++) {
            if (scale >= 1000000000)
                return -1;
            frac = frac * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
        if (scale == 1)
            return -1; /* "1." */
    }
    if (digits == 0)
        return -1;
    if (strcmp(p, "ms") == 0)
        unit = 1;
    else if (strcmp(p, "s") == 0)
        unit = 1000;
    else if (strcmp(p, "m") == 0)
        unit = 60 * 1000;
    else if (strcmp(p, "h") == 0)
        unit = 3600 * 1000;
    else if (*p == '\0' && scale == 1)
        unit = 1; /* plain milliseconds, twemproxy style */
    else
        return -1;
    if (whole > UINT32_MAX || (frac * unit) % scale != 0)
        return -1;
    v = whole * unit + frac * unit / scale;
    if (v > UINT32_MAX)
        return -1;
    *ms = (uint32_t)v;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Setters                                                            */

/* The text of a scalar <node>, or NULL after a message. */
const char *
conf_scalar(struct conf_loading *ld, const struct conf_key *key,
            yaml_node_t *node)
{
    const char *v;

    if (node->type != YAML_SCALAR_NODE) {
        conf_fail(ld, node, "'%s' takes a single value, not %s", key->name,
                  conf_node_kind(node));
        return NULL;
    }
    v = (const char *)node->data.scalar.value;
    if (node->data.scalar.length == 0) {
        conf_fail(ld, node, "'%s' has no value", key->name);
        return NULL;
    }
    if (strlen(v) != node->data.scalar.length) {
        conf_fail(ld, node, "'%s' contains a NUL byte", key->name);
        return NULL;
    }
    return v;
}

int
conf_set_u32(struct conf_loading *ld, const struct conf_key *key,
             yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);
    uint64_t n;

    if (v == NULL)
        return -1;
    if (conf_parse_u64(v, &n) != 0)
        return conf_fail(ld, node, "'%s' must be a whole number, not '%s'",
                         key->name, v);
    if (n < key->min || n > key->max)
        return conf_fail(ld, node,
                         "'%s' is out of range: %s is not between %u "
                         "and %u",
                         key->name, v, key->min, key->max);
    *FIELD(base, key, uint32_t) = (uint32_t)n;
    return 0;
}

/*
 * A size in bytes: a whole number, or one with k, m, g (or kb, mb, gb; any
 * case; powers of 1024, as Redis reads its sizes): "512mb", "64k". At
 * least <key->min>, at most MAX_SIZE.
 */
int
conf_set_size(struct conf_loading *ld, const struct conf_key *key,
              yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node), *u;
    char digits[32];
    uint64_t n, mul = 1;
    size_t nd;

    if (v == NULL)
        return -1;
    for (u = v; *u >= '0' && *u <= '9'; u++)
        ;
    nd = (size_t)(u - v);
    if (nd == 0 || nd >= sizeof(digits))
        goto bad;
    memcpy(digits, v, nd);
    digits[nd] = '\0';
    if (strcasecmp(u, "") == 0 || strcasecmp(u, "b") == 0)
        mul = 1;
    else if (strcasecmp(u, "k") == 0 || strcasecmp(u, "kb") == 0)
        mul = 1024;
    else if (strcasecmp(u, "m") == 0 || strcasecmp(u, "mb") == 0)
        mul = 1024 * 1024;
    else if (strcasecmp(u, "g") == 0 || strcasecmp(u, "gb") == 0)
        mul = 1024 * 1024 * 1024;
    else
        goto bad;
    if (conf_parse_u64(digits, &n) != 0 || n > MAX_SIZE / mul)
        goto bad;
    n *= mul;
    if (n < key->min)
        return conf_fail(ld, node,
                         "'%s' is too small: %s is less than %u bytes",
                         key->name, v, key->min);
    if (key->max != 0 && n > key->max)
        return conf_fail(ld, node,
                         "'%s' is too large: %s is more than %u bytes",
                         key->name, v, key->max);
    *FIELD(base, key, uint64_t) = n;
    return 0;
bad:
    return conf_fail(ld, node,
                     "'%s' must be a size: bytes, or a number with k, m or g "
                     "(512mb), up to 4g, not '%s'",
                     key->name, v);
}

int
conf_set_int(struct conf_loading *ld, const struct conf_key *key,
             yaml_node_t *node, void *base)
{
    uint32_t v;
    struct conf_key k = *key;

    k.offset = 0;
    if (conf_set_u32(ld, &k, node, &v) != 0)
        return -1;
    *FIELD(base, key, int) = (int)v;
    return 0;
}

int
conf_set_ms(struct conf_loading *ld, const struct conf_key *key,
            yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);
    uint32_t ms;

    if (v == NULL)
        return -1;
    if (conf_parse_duration(v, &ms) != 0)
        return conf_fail(ld, node,
                         "'%s' must be a duration (500ms, 2s, 1m, 1h, "
                         "or plain milliseconds), not '%s'",
                         key->name, v);
    if (ms < key->min || ms > key->max)
        return conf_fail(ld, node,
                         "'%s' is out of range: %s is not between %ums "
                         "and %ums",
                         key->name, v, key->min, key->max);
    *FIELD(base, key, uint32_t) = ms;
    /* twemproxy's keys are plain milliseconds by definition; ours take
     * units, and "slow_start: 30" is far more likely 30 s forgotten than
     * a 30 ms ramp. Read as twemproxy would, but say so. */
    if (!key->twemproxy && ms > 0 && ms < WARN_PLAIN_MS &&
        v[strspn(v, "0123456789")] == '\0')
        return conf_warn_at(ld, conf_node_line(node),
                            "'%s: %s' has no unit and is read as %u "
                            "milliseconds (write %ss for seconds)",
                            key->name, v, ms, v);
    return 0;
}

int
conf_parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};

    for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

int
conf_set_bool(struct conf_loading *ld, const struct conf_key *key,
              yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);

    if (v == NULL)
        return -1;
    if (conf_parse_bool(v, FIELD(base, key, bool)) != 0)
        return conf_fail(ld, node, "'%s' must be true or false, not '%s'",
                         key->name, v);
    return 0;
}

int
conf_set_string(struct conf_loading *ld, const struct conf_key *key,
                yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);
    char **field = FIELD(base, key, char *);

    if (v == NULL)
        return -1;
    free(*field);
    *field = strdup(v);
    if (*field == NULL)
        return conf_fail(ld, node, "out of memory");
    return 0;
}

int
conf_set_enum(struct conf_loading *ld, const struct conf_key *key,
              yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);
    char valid[512];

    if (v == NULL)
        return -1;
    for (int i = 0; key->names[i] != NULL; i++) {
        if (strcmp(v, key->names[i]) == 0) {
            *FIELD(base, key, int) = i;
            return 0;
        }
    }
    conf_join_names(valid, sizeof(valid), key->names);
    return conf_fail(ld, node, "unknown %s '%s' (valid: %s)", key->name, v,
                     valid);
}
