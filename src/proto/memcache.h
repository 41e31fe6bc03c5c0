/* memcache.h -- the memcached text and meta protocols as pure functions:
 * a request line (and its value) parsed into its command, its key(s) and
 * its words, checked the way memcached 1.6 checks it where a mistake
 * would make a member read a value as commands; a member's reply parsed
 * into its length (VALUE blocks up to END, VA with its data, one line)
 * and refused (PROTO_FATAL) when it is not a memcached reply, or not one
 * its request can have (proto_request.command given); the error replies
 * chashd writes in place of a member's.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROTO_MEMCACHE_H
#define CHASHD_PROTO_MEMCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

extern const struct proto proto_memcache;

/* The commands, as proto_request.command. */
enum mc_command {
    MC_GET,
    MC_GETS,
    MC_GAT,
    MC_GATS,
    MC_SET,
    MC_ADD,
    MC_REPLACE,
    MC_APPEND,
    MC_PREPEND,
    MC_CAS,
    MC_DELETE,
    MC_INCR,
    MC_DECR,
    MC_TOUCH,
    MC_MG, /* meta get */
    MC_MS, /* meta set */
    MC_MD, /* meta delete */
    MC_MA, /* meta arithmetic */
    MC_ME, /* meta debug */
    MC_MN, /* meta no-op: the end of a quiet pipeline */
    MC_VERSION,
    MC_VERBOSITY,
    MC_STATS,
    MC_FLUSH_ALL,
    MC_QUIT,
    MC_MEMBER_ADMIN, /* shutdown, slabs, lru_crawler...: a member's own */
    MC_COMMAND_COUNT
};

/* The longest key memcached stores (its KEY_MAX_LENGTH). */
#define MC_KEY_MAX 250

/* Default item_size_max: memcached's default largest item (-I 1m). */
#define MC_ITEM_SIZE_MAX (1024 * 1024)

/* The longest request line other than a retrieval's (whose keys may be
 * many): memcached's own 2048 would do; some room for long meta flags. */
#define MC_LINE_MAX 8192

/* Whether <command> is one of the meta commands (mg ms md ma me mn). */
bool mc_is_meta(int command);

/* Whether the reply (or line) at <buf> is an error: ERROR, CLIENT_ERROR
 * or SERVER_ERROR. */
bool mc_reply_is_error(const char *buf, size_t len);

/* Whether <command> is a retrieval (get gets gat gats): its reply is
 * VALUE blocks and END, split and merged over members. */
bool mc_is_retrieval(int command);

/*
 * Decode the base64 key <in> (<len> bytes) into <out> (<cap> bytes, at
 * least len * 3 / 4). Returns the decoded length, or -1 when <in> is not
 * base64 (its length not a multiple of 4, a foreign byte, bad padding).
 */
/* <len> bytes at <in> base64-encoded into <out> (room for
 * (len + 2) / 3 * 4 bytes): the length written. */
size_t mc_base64_encode(const void *in, size_t len, char *out);

long mc_base64_decode(const char *in, size_t len, unsigned char *out,
                      size_t cap);

/*
 * The first VALUE block of a retrieval reply at <buf> (<len> bytes): its
 * key's span (from <buf>) and the whole block's length. 1 found, 0 at
 * END (or the end of <buf>), -1 malformed.
 */
int mc_value_block(const char *buf, size_t len, struct proto_span *key,
                   size_t *block);

#endif /* CHASHD_PROTO_MEMCACHE_H */
