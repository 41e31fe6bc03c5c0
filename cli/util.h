/* util.h -- what the chash subcommands share: usage errors, number and
 * name parsing with "valid names are: ..." messages, member lists, the
 * deterministic key generator and JSON string output.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASH_CLI_UTIL_H
#define CHASH_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "chash/chash.h"
#include "conf/ring.h"

/* Exit statuses shared by every subcommand (see cli.h). */
#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

/* Print "chash <cmd>: <fmt...>", then <usage>, to stderr; returns
 * CLI_EXIT_USAGE so callers can `return cli_usage_error(...)`. */
int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Print "chash <cmd>: <fmt...>" to stderr (a runtime failure). */
void cli_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The message for getopt_long's '?' or ':' result (opterr is 0 in every
 * subcommand so the messages are ours). Returns CLI_EXIT_USAGE. */
int cli_bad_option(const char *cmd, const char *usage, char **argv, int c);

/* Parse an unsigned decimal <s> into [min, max]; on failure print what is
 * wrong, naming <opt>, and return -1. */
int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t min,
                  uint64_t max, uint64_t *out);
int cli_parse_u32(const char *cmd, const char *opt, const char *s, uint32_t min,
                  uint32_t max, uint32_t *out);
/* A finite double in [min, max]. */
int cli_parse_double(const char *cmd, const char *opt, const char *s,
                     double min, double max, double *out);

/* Algorithm and hash by name, or -1 after printing the valid names. */
int cli_parse_algo(const char *cmd, const char *s);
int cli_parse_hash(const char *cmd, const char *s);

/* Bits of the value chash_ring_hash() gives for <algo>: 32 for the
 * 32-bit continua (ketama, nginx), else 64. Lookups take hashes in
 * [0, 2^bits). */
int cli_hash_space_bits(int algo);

/*
 * A membership parsed from "name[=weight],..." (the weight split at the
 * LAST '=', so "127.0.0.1:6381=2" is name 127.0.0.1:6381, weight 2).
 * <m> is ready for chash_ring_create (ramp 1); the names are owned here.
 */
struct cli_members {
    struct chash_member *m;
    char **zones; /* [cap] each member's zone (zoned), or NULL */
    size_t n;
    size_t cap;
    bool zoned; /* a pool with zone_policy: hierarchical (--config) */
    struct ring_zone_weight zw[RING_ZONE_WEIGHTS_MAX]; /* its zone_weights */
    size_t nzw;
};

/* Parse <list> into <ms> (zero-initialised or emptied). 0, or -1 after
 * printing what is wrong (empty name, bad weight, repeated name). */
int cli_members_parse(const char *cmd, const char *list,
                      struct cli_members *ms);
/* Append a copy of <name>; 0 or -1 (out of memory). */
int cli_members_add(struct cli_members *ms, const char *name, uint32_t weight);
/* Index of <name>, or -1. */
long cli_members_find(const struct cli_members *ms, const char *name);
/* Remove the member at <idx>, keeping the order of the others. */
void cli_members_remove(struct cli_members *ms, size_t idx);
/* A deep copy of <src> into <dst>; 0 or -1. */
int cli_members_copy(struct cli_members *dst, const struct cli_members *src);
void cli_members_free(struct cli_members *ms);

/* getopt codes of --config and --pool, beyond any short option letter. */
#define CLI_OPT_CONFIG 0x100
#define CLI_OPT_POOL 0x101

/*
 * The ring a subcommand works on (sim, lookup, plot): given on the command
 * line (--members, --algo, --hash, --points, --table-size) or taken from a
 * pool of a chashd config (--config FILE --pool NAME), loaded with the
 * daemon's own loader (src/conf/conf.h) so the ring is the one chashd builds.
 * Zero-initialise, feed every option to cli_ring_option(), then call
 * cli_ring_setup() once; free with cli_ring_deinit().
 */
struct cli_ring {
    struct chash_config cfg; /* algorithm, hash, points, table size */
    struct cli_members ms;   /* the members, in the order given */
    const char *config;      /* --config FILE (ref in argv), or NULL */
    const char *pool;        /* --pool NAME (ref in argv), or NULL */
    const char *given;       /* the first ring option given on the command
                                line ("--members" ...), or NULL */
    bool points_given;       /* --points was given */
    bool table_given;        /* --table-size was given */
    char tag[3];             /* the pool's hash_tag in redis and memcache
                                modes (twemproxy's), else "" */
    double balance_factor;   /* the pool's, 0 when off or no --config */
};

/* The ring options, with the same getopt codes in every subcommand: 'm'
 * --members, 'a' --algo, 'H' --hash, 'p' --points, 't' --table-size,
 * CLI_OPT_CONFIG --config, CLI_OPT_POOL --pool. Returns 1 when <opt> was
 * one of them and is stored in <r>, 0 when <opt> is not a ring option, -1
 * after printing what is wrong with <arg>. */
int cli_ring_option(const char *cmd, int opt, const char *arg,
                    struct cli_ring *r);

/*
 * After the options: refuse what does not go together (--config without
 * --pool, a ring option beside --config, --points for an algorithm without
 * ring points, --table-size for one without a table), then load the pool
 * when --config was given. With <need_members> a missing --members is an
 * error too. Returns CLI_EXIT_OK, CLI_EXIT_USAGE after printing what is
 * wrong and <usage> (a bad config file is bad input too, as for `chashd
 * -t`), or CLI_EXIT_FAIL after printing why the pool cannot be used (its
 * distribution is not consistent hashing).
 */
int cli_ring_setup(const char *cmd, const char *usage, struct cli_ring *r,
                   bool need_members);

/* "algorithm ring, hash xxh3, 160 points per weight": how <ring> was
 * built, its hash as the library uses it (nginx always hashes with
 * crc32a) and its points where the algorithm has a per-weight count. */
void cli_ring_describe(const struct chash_ring *ring, char *buf, size_t len);

void cli_ring_deinit(struct cli_ring *r);

/* Build a ring, printing chash_strerror() on failure (then returns the
 * negative library code). */
int cli_ring_create(const char *cmd, const struct chash_config *cfg,
                    const struct cli_members *ms, struct chash_ring **out);

/* splitmix64: a small, well-mixed, seedable generator for the bench's
 * random hashes and sim --seed's random keys. */
uint64_t cli_splitmix64(uint64_t *state);

/* Seconds from a monotonic clock. */
double cli_now(void);

/* Write <s> as a JSON string literal (quotes and escapes) to <f>. */
void cli_json_string(FILE *f, const char *s);

#endif /* CHASH_CLI_UTIL_H */
