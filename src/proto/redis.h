/* redis.h -- mode redis: RESP2 requests (multibulk and inline) and
 * replies, the command table of Redis 7.0 with each command's class and
 * key positions, error replies and the health probe. Pure functions only:
 * the request engine (src/request.c) does the I/O.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROTO_REDIS_H
#define CHASHD_PROTO_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

extern const struct proto proto_redis;

/*
 * How chashd serves a command (struct redis_command.kind):
 *
 *   REDIS_KEY          one routing key, at args[first]; any other keys it
 *                      names must share its member (first..last by step,
 *                      as REDIS_SAME) -- e.g. GET, SET, HSET, EXPIRE
 *   REDIS_SPLIT_KEYS   every argument from 1 is a key: split into one
 *                      fragment per member, replies merged -- MGET (values
 *                      in the client's key order), DEL, UNLINK, TOUCH,
 *                      EXISTS (integers summed)
 *   REDIS_SPLIT_KV     key value pairs from 1: split, one +OK -- MSET
 *   REDIS_SAME         several keys (first..last by step; last < 0 counts
 *                      from the end, as Redis' COMMAND INFO) that must map
 *                      to one member, else refused with -CROSSSERVER --
 *                      SUNIONSTORE, SINTER, RPOPLPUSH, LMOVE, SMOVE, RENAME,
 *                      COPY, PFMERGE, MSETNX, ...
 *   REDIS_NUMKEYS      the key count is argument <first> and the keys
 *                      follow it (EVAL, EVALSHA, FCALL, FCALL_RO, ZUNION...,
 *                      SINTERCARD...): as REDIS_SAME; 0 keys -> refused
 *   REDIS_LOCAL        answered by chashd -- PING, ECHO, QUIT, SELECT,
 *                      AUTH, HELLO, COMMAND, CLIENT (SETNAME, GETNAME,
 *                      ID; the engine refuses other subcommands), INFO
 *                      (the engine adds the members' keyspace)
 *   REDIS_FANOUT       every member -- SCAN (member in the cursor),
 *                      RANDOMKEY, DBSIZE; with REDIS_ADMIN (FLUSHDB,
 *                      FLUSHALL, KEYS) only when the pool allows it
 *   REDIS_REFUSED      answered with an error, the connection and the
 *                      pipeline kept -- MULTI/EXEC, pub/sub, blocking
 *                      commands, server administration
 */
enum redis_kind {
    REDIS_KEY,
    REDIS_SPLIT_KEYS,
    REDIS_SPLIT_KV,
    REDIS_SAME,
    REDIS_NUMKEYS,
    REDIS_LOCAL,
    REDIS_FANOUT,
    REDIS_REFUSED
};

/* struct redis_command.flags */
enum redis_command_flag {
    REDIS_WRITE = 1u << 0, /* changes data (replication, migration care) */
    REDIS_ADMIN = 1u << 1  /* fan-out only with allow_fanout_admin */
};

struct redis_command {
    const char *name; /* lower case, as COMMAND reports it */
    int arity;        /* Redis': > 0 exact, < 0 at least -arity, with the
                         command name counted */
    int kind;         /* enum redis_kind */
    int first;        /* REDIS_KEY/SAME: first key; NUMKEYS: the count's
                         position */
    int last;         /* last key (< 0: from the end) */
    int step;         /* between keys (2 for key value pairs) */
    unsigned flags;   /* enum redis_command_flag */
};

/* The entry of proto_request.command <index> (NULL when out of range). */
const struct redis_command *redis_command_at(int index);

/* The index of command <name> (<len> bytes, any case), or -1. */
int redis_command_find(const char *name, size_t len);

/* Commands in the table (for COMMAND COUNT and the tests). */
size_t redis_command_count(void);

/*
 * The elements of the complete array reply at <buf> (<len> bytes), each
 * as the span of its whole RESP encoding, into <out> (<cap> entries):
 * returns how many there are (may exceed <cap>: call again with more), or
 * -1 when <buf> is not a complete array reply (a nil array is 0
 * elements). For merging MGET fragments in the client's key order.
 */
long redis_reply_elements(const char *buf, size_t len, struct proto_span *out,
                          size_t cap);

/* The value of the integer reply (":<n>\r\n") at <buf>: 0, or -1 when it
 * is not one. For summing DEL, UNLINK, TOUCH and EXISTS fragments. */
int redis_reply_integer(const char *buf, size_t len, long long *value);

#endif /* CHASHD_PROTO_REDIS_H */
