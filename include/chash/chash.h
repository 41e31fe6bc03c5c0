/* chash.h -- the one public header of libchash: consistent-hashing rings,
 * tables and lookups with exact share and migration accounting.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASH_CHASH_H
#define CHASH_CHASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHASH_VERSION_MAJOR 0
#define CHASH_VERSION_MINOR 1
#define CHASH_VERSION_PATCH 0
#define CHASH_VERSION_STRING "0.1.0"

#if defined(__GNUC__) && !defined(CHASH_STATIC)
#define CHASH_EXTERN __attribute__((visibility("default")))
#else
#define CHASH_EXTERN
#endif

/*
 * Errors. Every function that can fail returns 0 or one of these negated
 * (-CHASH_EINVAL). chash_strerror() turns either sign into a sentence.
 * The library never prints, never aborts and keeps no global error state.
 */
#define CHASH_ERRORS(X)                                                        \
    X(EINVAL, 1, "invalid argument")                                           \
    X(ENOMEM, 2, "out of memory")                                              \
    X(EEMPTY, 3, "no member owns any part of the hash space")                  \
    X(EDUPNAME, 4, "two members have the same name")                           \
    X(ENONAME, 5, "a member has a NULL or empty name")                         \
    X(EWEIGHT, 6, "a member's weight gives too many points")                   \
    X(ERAMP, 7, "a member's ramp is outside [0,1]")                            \
    X(EALGO, 8, "unknown algorithm")                                           \
    X(EHASH, 9, "unknown hash function")                                       \
    X(ETABLE, 10, "table size is not a prime larger than the members")         \
    X(EMISMATCH, 11, "the two rings use different algorithms or hashes")       \
    X(ETOOMANY, 12, "too many members for this algorithm")                     \
    X(ENOTSUP, 13, "not supported by this algorithm")

enum chash_error {
#define CHASH_ERR_ENUM(name, num, text) CHASH_##name = num,
    CHASH_ERRORS(CHASH_ERR_ENUM)
#undef CHASH_ERR_ENUM
};

/* Algorithms. The names in comments are the config and CLI names. */
enum chash_algo {
    CHASH_ALGO_RING = 0, /* "ring": weighted ring, xxh3 placement, O(1) index */
    CHASH_ALGO_MAGLEV,   /* "maglev": Eisenbud et al. lookup table */
    CHASH_ALGO_RENDEZVOUS, /* "rendezvous": weighted highest random weight */
    CHASH_ALGO_JUMP,       /* "jump": Lamping-Veach, array order is identity */
    CHASH_ALGO_KETAMA,     /* "ketama": twemproxy/libmemcached continuum */
    CHASH_ALGO_NGINX,      /* "nginx": nginx `hash $key consistent` */
    CHASH_ALGO_COUNT
};

/*
 * Key hash functions. Each yields a 64-bit value; the 32-bit ones are
 * marked (32) and their value is below 2^32. The twemproxy names keep
 * twemproxy's exact meaning, quirks included, so a nutcracker.yml hashes
 * every key as nutcracker does. chash_hash_bits() tells the width.
 */
enum chash_hash {
    CHASH_HASH_XXH3 = 0,   /* "xxh3": XXH3-64, seed 0 (default) */
    CHASH_HASH_MURMUR3,    /* "murmur3": MurmurHash3 x64_128, seed 0, h1^h2 */
    CHASH_HASH_MURMUR3_32, /* "murmur3_32": MurmurHash3 x86_32, seed 0 (32) */
    CHASH_HASH_FNV1A_64,   /* "fnv1a64": true 64-bit FNV-1a */
    CHASH_HASH_MD5,        /* "md5": first 4 digest bytes, LE (32) */
    CHASH_HASH_CRC32,      /* "crc32a": standard CRC-32, zlib (32) */
    /* twemproxy / libmemcached (libhashkit) functions, all (32) */
    CHASH_HASH_ONE_AT_A_TIME, /* "one_at_a_time" */
    CHASH_HASH_CRC16,         /* "crc16": XMODEM table, not masked */
    CHASH_HASH_CRC32_15,      /* "crc32": 15-bit Cache::Memcached value */
    CHASH_HASH_FNV1_64,       /* "fnv1_64": low 32 bits */
    CHASH_HASH_FNV1A_64_TW,   /* "fnv1a_64": twemproxy's, 32-bit arithmetic */
    CHASH_HASH_FNV1_32,       /* "fnv1_32" */
    CHASH_HASH_FNV1A_32,      /* "fnv1a_32" */
    CHASH_HASH_HSIEH,         /* "hsieh": SuperFastHash, initial 0 */
    CHASH_HASH_MURMUR,  /* "murmur": MurmurHash2-32, seed 0xdeadbeef*len */
    CHASH_HASH_JENKINS, /* "jenkins": lookup3 hashlittle, initval 13 */
    CHASH_HASH_COUNT
};

/* One member of a ring. The array given to chash_ring_create is copied. */
struct chash_member {
    const char *name; /* identity: placement depends on the name only,
                         never on the member's position in the array */
    uint32_t weight;  /* relative capacity; 0 = present, owns nothing */
    double ramp;      /* slow-start fraction in [0,1]; 1 = full share */
};

/* Ring parameters. A zero-initialised struct means all defaults. */
struct chash_config {
    int algo;                   /* enum chash_algo; default CHASH_ALGO_RING */
    int hash;                   /* enum chash_hash; default CHASH_HASH_XXH3 */
    uint32_t points_per_weight; /* ring: points per unit of weight (160) */
    uint32_t table_size;        /* maglev: prime table size (65537) */
};

#define CHASH_DEFAULT_POINTS 160
#define CHASH_DEFAULT_TABLE_SIZE 65537
#define CHASH_MAX_MEMBER_POINTS 1000000

/* An opaque ring: immutable once built; any number of threads may call
 * the lookup, share and diff functions on it at once. */
struct chash_ring;

/*
 * Build a ring from <members>[0..<n>). <cfg> may be NULL for defaults.
 * The member array and the names are copied; the caller keeps ownership.
 * On success *<out> holds the ring (free it with chash_ring_destroy) and 0
 * is returned. Refuses: NULL <out> or <members> with n > 0 (-CHASH_EINVAL),
 * unknown algo or hash (-CHASH_EALGO, -CHASH_EHASH), a NULL or empty name
 * (-CHASH_ENONAME), a repeated name (-CHASH_EDUPNAME), a ramp that is not a
 * number in [0,1] (-CHASH_ERAMP), more than CHASH_MAX_MEMBER_POINTS points
 * for one member (-CHASH_EWEIGHT), no member owning anything, n == 0
 * included (-CHASH_EEMPTY), and the algorithm's own limits (maglev table
 * size: -CHASH_ETABLE; jump weights other than 0/1: -CHASH_EWEIGHT).
 * The same membership (names, weights, ramps) gives the same ring in any
 * array order; lookups return indexes into the array given here.
 */
CHASH_EXTERN int chash_ring_create(const struct chash_config *cfg,
                                   const struct chash_member *members, size_t n,
                                   struct chash_ring **out);

/* Free <ring>; NULL is accepted. After the call <ring> is invalid. */
CHASH_EXTERN void chash_ring_destroy(struct chash_ring *ring);

/* Hash <key> of <len> bytes with the ring's key hash, as the ring's
 * lookups expect it. For the ring, maglev, rendezvous and jump the value
 * is spread over 64 bits (a 32-bit hash h becomes h<<32|h); for ketama and
 * nginx it is the native 32-bit value. */
CHASH_EXTERN uint64_t chash_ring_hash(const struct chash_ring *ring,
                                      const void *key, size_t len);

/* The member owning <hash>: an index into the members array given at
 * create. Cannot fail on a built ring. */
CHASH_EXTERN size_t chash_ring_lookup(const struct chash_ring *ring,
                                      uint64_t hash);

/* chash_ring_lookup() for <n> hashes at once: out[i] is the owner of
 * hashes[i]. For the continuum algorithms (ring, ketama, nginx) the loop
 * prefetches the index and the points a few keys ahead, so the cache
 * misses of many lookups overlap: about a third faster per key than single
 * lookups on a ring larger than the CPU's cache. Use it to shard a batch
 * of keys (a multi-get, a bulk load). Cannot fail; <n> may be 0. */
CHASH_EXTERN void chash_ring_lookup_batch(const struct chash_ring *ring,
                                          const uint64_t *hashes, size_t *out,
                                          size_t n);

/* Up to <n> DISTINCT owning members for <hash>, in preference order
 * (replica placement and failover order), written to <out>. The first is
 * chash_ring_lookup(). Returns how many were written: min(n, members that
 * own something). */
CHASH_EXTERN size_t chash_ring_lookup_n(const struct chash_ring *ring,
                                        uint64_t hash, size_t *out, size_t n);

/*
 * Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam):
 * the first member in preference order whose <load> + 1 stays within
 * ceil(<factor> * (<total_load> + 1) * w_i / W), w_i being the member's
 * effective weight (its owned points, so ramps count) and W their sum.
 * <load> is indexed like the members array; <total_load> is its sum over
 * owning members. A <factor> below 1 is taken as 1. If no member fits
 * (only possible when <total_load> is not the sum of <load>), the first
 * in preference order is returned.
 */
CHASH_EXTERN size_t chash_ring_lookup_bounded(const struct chash_ring *ring,
                                              uint64_t hash,
                                              const uint64_t *load,
                                              uint64_t total_load,
                                              double factor);

/* The fraction of the hash space <member> owns: exact from arcs (ring,
 * ketama, nginx) or table entries (maglev); w_i/W in closed form for
 * rendezvous and jump. 0 for an index out of range. */
CHASH_EXTERN double chash_ring_share(const struct chash_ring *ring,
                                     size_t member);

/*
 * Set *<moved> to the fraction of the hash space whose owner, by name,
 * differs between <from> and <to>. Exact for ring, ketama, nginx (merge of
 * the sorted points) and maglev (table entries); for rendezvous and jump,
 * measured on 2^20 evenly spaced hashes (chash_ring_diff_exact() says
 * which). Refuses rings of different algorithm or hash (-CHASH_EMISMATCH).
 */
CHASH_EXTERN int chash_ring_diff(const struct chash_ring *from,
                                 const struct chash_ring *to, double *moved);

/* One flow of a migration: <fraction> of the hash space moves from member
 * <from> of the old ring to member <to> of the new one (indexes into each
 * ring's members array). */
struct chash_flow {
    size_t from;
    size_t to;
    double fraction;
};

/*
 * The migration between two rings as flows between named owners, largest
 * first; only owners that differ by name are listed. Writes up to <cap>
 * flows to <out> (may be NULL when <cap> is 0) and sets *<nflows> to how
 * many exist. Same exactness and refusals as chash_ring_diff(); also
 * -CHASH_ENOMEM.
 */
CHASH_EXTERN int chash_ring_flows(const struct chash_ring *from,
                                  const struct chash_ring *to,
                                  struct chash_flow *out, size_t cap,
                                  size_t *nflows);

/* 1 when chash_ring_diff() is exact for this ring's algorithm, else 0.
 * For maglev the diff is exact only between tables of the same size; two
 * different sizes are compared on the 2^20 sampled hashes. */
CHASH_EXTERN int chash_ring_diff_exact(const struct chash_ring *ring);

/* Introspection. Indexes are those of the members array given at create. */
CHASH_EXTERN size_t chash_ring_members(const struct chash_ring *ring);
CHASH_EXTERN const char *chash_ring_member_name(const struct chash_ring *ring,
                                                size_t member);
/* Points (or table entries) the member owns after weight and ramp. */
CHASH_EXTERN size_t chash_ring_member_points(const struct chash_ring *ring,
                                             size_t member);
/* Total points or table entries. */
CHASH_EXTERN size_t chash_ring_points(const struct chash_ring *ring);
/* Bytes of memory the ring holds (structures and names). */
CHASH_EXTERN size_t chash_ring_memory(const struct chash_ring *ring);
/* A 64-bit checksum of the placement (positions and owner names): equal
 * for rings that map every hash to the same named owner. */
CHASH_EXTERN uint64_t chash_ring_checksum(const struct chash_ring *ring);
CHASH_EXTERN void chash_ring_config(const struct chash_ring *ring,
                                    struct chash_config *cfg);

/*
 * The part of <key> (<len> bytes) that is hashed under a twemproxy /
 * Redis Cluster hash tag <tag> (two characters, e.g. "{}"): the bytes
 * between the first <tag>[0] and the first <tag>[1] after it, when there
 * is at least one; otherwise the whole key. Sets *<off> to where the part
 * starts and returns its length. A <tag> of NULL or "" hashes the whole
 * key. Pure; cannot fail. "user:{42}:a" -> "42"; "foo{}{bar}" -> the
 * whole key; "foo{{bar}}zap" -> "{bar".
 */
CHASH_EXTERN size_t chash_key_tag(const void *key, size_t len, const char *tag,
                                  size_t *off);

/*
 * How many points (ring, ketama, nginx) or table entries (maglev)
 * chash_ring_create() would build for <members>[0..<n>) at full ramp,
 * counted without building (a caller bounds a ring's size before paying
 * for it). Rendezvous and jump hold no points: <n>. Exact for ring, ketama
 * and maglev; an upper bound for nginx, which drops colliding points. A
 * member over CHASH_MAX_MEMBER_POINTS (which create refuses) counts at
 * that cap. 0 for an invalid <cfg>. Pure; cannot fail.
 */
CHASH_EXTERN uint64_t
chash_ring_points_needed(const struct chash_config *cfg,
                         const struct chash_member *members, size_t n);

/*
 * Zones: zone-then-member placement (doc/internals/placement.md, "Zones").
 * A key's hash picks a zone on a ring of the zones, then a member on that
 * zone's ring of its members; both are ordinary rings of one config built
 * from names alone, so each level keeps the flat ring's properties: the
 * same membership gives the same placement in any array order, and a
 * change at one level moves only the keys it must at that level (a member
 * change moves keys within its zone, plus, when the zone's weight is the
 * sum of its members' and so changes too, the keys the zone ring moves).
 * Replicas (chash_zring_lookup_n) go to distinct zones first. Shares (and
 * the diffs of chash_ring_create_zoned's rings) are exact for ring, ketama
 * and nginx, measured on 2^20 hashes for maglev and rendezvous
 * (chash_zring_diff_exact); jump is refused
 * (-CHASH_ENOTSUP: a zone's weight is a sum, jump takes 0 or 1).
 * The flat API above is unchanged: a pool without zones places as before.
 */
struct chash_zmember {
    const char *name; /* unique across all zones */
    const char *zone; /* non-empty */
    uint32_t weight;
    double ramp;
};

/* A zone's weight when it is not the sum of its members' weights. */
struct chash_zone_weight {
    const char *zone;
    uint32_t weight;
};

struct chash_zring;

/* Build a zoned placement of <members>[0..<n>) (copied). <weights>
 * (<nweights>, may be 0) override zones' weights; a zone's default is the
 * sum of its members' weights, and its ramp their ramps weighted. Same
 * refusals as chash_ring_create, plus -CHASH_EINVAL for an empty zone
 * name or a weight for a zone without members, and -CHASH_ENOTSUP for
 * jump. Lookups return indexes into <members>. */
CHASH_EXTERN int chash_zring_create(const struct chash_config *cfg,
                                    const struct chash_zmember *members,
                                    size_t n,
                                    const struct chash_zone_weight *weights,
                                    size_t nweights, struct chash_zring **out);
CHASH_EXTERN void chash_zring_destroy(struct chash_zring *z);
/* The key hash both levels use (chash_ring_hash of the config). */
CHASH_EXTERN uint64_t chash_zring_hash(const struct chash_zring *z,
                                       const void *key, size_t len);
/* The member owning <hash>; cannot fail on a built zring. */
CHASH_EXTERN size_t chash_zring_lookup(const struct chash_zring *z,
                                       uint64_t hash);
/* The zone owning <hash> (an index into the zones, sorted by name). */
CHASH_EXTERN size_t chash_zring_lookup_zone(const struct chash_zring *z,
                                            uint64_t hash);
/* Up to <n> distinct members for <hash>: one in each zone in the key's
 * zone order first (n replicas in n distinct zones when there are n),
 * then each zone's next member, round by round. How many were written. */
CHASH_EXTERN size_t chash_zring_lookup_n(const struct chash_zring *z,
                                         uint64_t hash, size_t *out, size_t n);
CHASH_EXTERN double chash_zring_share(const struct chash_zring *z,
                                      size_t member);
CHASH_EXTERN size_t chash_zring_zones(const struct chash_zring *z);
CHASH_EXTERN const char *chash_zring_zone_name(const struct chash_zring *z,
                                               size_t zone);
CHASH_EXTERN size_t chash_zring_zone_of(const struct chash_zring *z,
                                        size_t member);
CHASH_EXTERN double chash_zring_zone_share(const struct chash_zring *z,
                                           size_t zone);
CHASH_EXTERN size_t chash_zring_members(const struct chash_zring *z);
CHASH_EXTERN const char *chash_zring_member_name(const struct chash_zring *z,
                                                 size_t member);
CHASH_EXTERN uint64_t chash_zring_checksum(const struct chash_zring *z);
CHASH_EXTERN int chash_zring_diff_exact(const struct chash_zring *z);
/*
 * The same zoned placement as an ordinary ring: every chash_ring_* function
 * works on it (lookups at the flat ring's speed, lookup_n zone-aware,
 * share, diff and flows -- also against a flat ring of the same algorithm
 * and hash --, checksum, introspection), so code written for rings takes
 * zones unchanged. Same arguments and refusals as chash_zring_create.
 */
CHASH_EXTERN int
chash_ring_create_zoned(const struct chash_config *cfg,
                        const struct chash_zmember *members, size_t n,
                        const struct chash_zone_weight *weights,
                        size_t nweights, struct chash_ring **out);

/* Hash functions by id: chash_hash() returns 0 for an unknown id. */
CHASH_EXTERN uint64_t chash_hash(int hash, const void *key, size_t len);
CHASH_EXTERN int chash_hash_bits(int hash);         /* 32, 64, or 0 */
CHASH_EXTERN const char *chash_hash_name(int hash); /* NULL if unknown */
/* The id for a config name, or -CHASH_EHASH. */
CHASH_EXTERN int chash_hash_from_name(const char *name);

CHASH_EXTERN const char *chash_algo_name(int algo); /* NULL if unknown */
/* The id for a config name, or -CHASH_EALGO. */
CHASH_EXTERN int chash_algo_from_name(const char *name);

/* A sentence for an error code (either sign); never NULL. */
CHASH_EXTERN const char *chash_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* CHASH_CHASH_H */
