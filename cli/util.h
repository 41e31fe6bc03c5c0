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
int cli_parse_u64(const char *cmd, const char *opt, const char *s,
                  uint64_t min, uint64_t max, uint64_t *out);
int cli_parse_u32(const char *cmd, const char *opt, const char *s,
                  uint32_t min, uint32_t max, uint32_t *out);
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
    size_t n;
    size_t cap;
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

/* The ring options every ring-building subcommand takes, with the same
 * short codes in their getopt tables: 'm' --members, 'a' --algo, 'H'
 * --hash, 'p' --points, 't' --table-size. Returns 1 when <opt> was one of
 * them and is stored in <cfg>/<ms>, 0 when <opt> is not a ring option, -1
 * after printing what is wrong with <arg>. */
int cli_ring_option(const char *cmd, int opt, const char *arg,
                    struct chash_config *cfg, struct cli_members *ms);

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
