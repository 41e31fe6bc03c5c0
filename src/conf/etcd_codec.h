/* etcd_codec.h -- the pure parts of talking to etcd (etcd.c): base64 as
 * etcd's JSON gateway writes it, chash's key layout under the prefix, and
 * member records (doc/etcd.md). No I/O, no global state: any thread, and a
 * libFuzzer target (tests/fuzz/fuzz_etcd.c).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_ETCD_CODEC_H
#define CHASHD_ETCD_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Standard padded base64 of <n> bytes, NUL-terminated; NULL when out of
 * memory. */
char *etcd_b64_encode(const void *data, size_t n);
/* Decode standard padded base64 <s> into a new NUL-terminated buffer of
 * *<n> bytes (plus the NUL); NULL when <s> is not that (a wrong length, a
 * character outside the alphabet, padding inside, bits left over by the
 * padding that are not zero) or out of memory. */
char *etcd_b64_decode(const char *s, size_t *n);

/* A pool, member or instance name as a key part: 1 to 63 letters,
 * digits, '.', '_', ':' or '-' (no '/': prefix ranges cannot collide). */
bool etcd_name_ok(const char *s);
/* A numeric "a.b.c.d:port", "[v6]:port", or "/unix/path" (no DNS). */
bool etcd_address_ok(const char *a);

/*
 * A key below "<prefix>/", given without it: "pools/<pool>/members/<m>"
 * cuts <rel> and points *<pool> and *<member> into it, returning
 * ETCD_KEY_MEMBER; "instances/<id>" points *<member> at the id,
 * returning ETCD_KEY_INSTANCE; a pool's migration keys (doc/etcd.md)
 * "pools/<pool>/migration", "pools/<pool>/copier" and
 * "pools/<pool>/barrier/<epoch>.<stage>/<id>" point *<member> at what
 * follows "<pool>/" and return ETCD_KEY_MIGRATION; anything else is
 * ETCD_KEY_OTHER (ignored).
 */
enum etcd_key {
    ETCD_KEY_OTHER,
    ETCD_KEY_MEMBER,
    ETCD_KEY_INSTANCE,
    ETCD_KEY_MIGRATION
};
int etcd_key_split(char *rel, char **pool, char **member);

/* A member record: {"address": ..., "weight": 1, "state": "up",
 * "since": <Unix ms>}. */
enum etcd_state { ETCD_STATE_UP, ETCD_STATE_DRAIN, ETCD_STATE_MAINT };
struct etcd_record {
    char address[128];
    uint32_t weight; /* 1 .. 1000000, default 1 */
    int state;       /* enum etcd_state, default up */
    uint64_t since;  /* 0: not given */
};
/* Parse member <name>'s record <value> (<len> bytes): NULL, or why it is
 * not one (the member is then absent, on every instance alike). */
const char *etcd_record_parse(const char *name, const char *value, size_t len,
                              struct etcd_record *r);

#endif /* CHASHD_ETCD_CODEC_H */
