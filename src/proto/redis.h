/* redis.h -- mode redis: RESP2 requests (multibulk and inline) and
 * replies, the command table of Redis 7.0 with each command's class and
 * key positions, error replies and the health probe. Pure functions only:
 * the request engine (src/data/request*.c) does the I/O.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROTO_REDIS_H
#define CHASHD_PROTO_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

extern const struct proto proto_redis;

/*
 * How chashd serves a command (struct redis_command.kind):
 *
 *   REDIS_KEY          one routing key, at args[first]; any other keys it
 *                      names must share its member (first..last by step,
 *                      as REDIS_SAME) -- e.g. GET, SET, HSET, EXPIRE.
 *                      first 0: no key at all, any member (LOLWUT). The
 *                      containers OBJECT, MEMORY, XINFO and XGROUP are
 *                      REDIS_KEY with the key at 2; the parser checks the
 *                      subcommand (HELP: any member; MEMORY STATS and
 *                      the other server-wide ones: refused)
 *   REDIS_SPLIT_KEYS   every argument from 1 is a key: split into one
 *                      fragment per member, replies merged -- MGET (values
 *                      in the client's key order), DEL, UNLINK, TOUCH,
 *                      EXISTS (integers summed)
 *   REDIS_SPLIT_KV     key value pairs from 1: split, one +OK -- MSET
 *   REDIS_SAME         several keys (first..last by step; last < 0 counts
 *                      from the end, as Redis' COMMAND INFO) that must map
 *                      to one member, else refused with -CROSSSERVER --
 *                      SUNIONSTORE, SINTER, RPOPLPUSH, LMOVE, SMOVE, RENAME,
 *                      COPY, PFMERGE, MSETNX, XREAD without BLOCK, ...
 *   REDIS_NUMKEYS      the key count is argument <first> and the keys
 *                      follow it (EVAL, EVALSHA, FCALL, FCALL_RO, ZUNION...,
 *                      SINTERCARD...): as REDIS_SAME; 0 keys -> refused;
 *                      <last> is unused (0)
 *   REDIS_LOCAL        answered by chashd -- PING, ECHO, QUIT, SELECT,
 *                      AUTH, HELLO, RESET, COMMAND, CLIENT (SETNAME,
 *                      GETNAME, ID; the engine refuses other subcommands),
 *                      INFO (the engine adds the members' keyspace), TIME
 *   REDIS_FANOUT       every member -- SCAN (member in the cursor),
 *                      RANDOMKEY, DBSIZE; with REDIS_ADMIN (FLUSHDB,
 *                      FLUSHALL, KEYS) only when the pool allows it
 *   REDIS_REFUSED      answered with an error, the connection and the
 *                      pipeline kept -- MULTI/EXEC (the engine refuses a
 *                      MULTI block whole: redis_mode.c), pub/sub,
 *                      blocking commands, server administration
 *
 * first/last/step are Redis' own key range (COMMAND INFO), except for
 * REDIS_NUMKEYS (the count's position) and the containers (their
 * subcommands' key). Some commands name keys outside that range --
 * SORT ... STORE, GEORADIUS ... STORE/STOREDIST, ZUNIONSTORE's sources
 * (count at 2), XREAD ... STREAMS: parse_request finds them. Route by
 * proto_request.keys, never by the table. The full list of decisions is
 * the comment above the table in redis.c.
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
    REDIS_WRITE = 1u << 0,   /* changes data (replication, migration care) */
    REDIS_ADMIN = 1u << 1,   /* fan-out only with allow_fanout_admin */
    REDIS_VOLATILE = 1u << 2 /* the reply differs by member (TTL, random
                                picks, scan cursors): a replicated read is
                                answered by one member */
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

/* The index of command <name> (<len> bytes, any case), or -1. Reads at
 * most <len> bytes; a binary search on a sorted table. */
int redis_command_find(const char *name, size_t len);

/* Commands in the table (for COMMAND COUNT and the tests). */
size_t redis_command_count(void);

/*
 * proto_redis.parse_request, beyond proto.h's contract:
 *
 * - PROTO_OK: a whole request (or, streamed, its head). rq->command is
 *   the table index (-1 when unknown), rq->args every argument, rq->keys
 *   the routing keys in order (MSET: the keys only), rq->flags:
 *     LOCAL (QUIT also QUIT), FANOUT, SPLIT (every SPLIT_* request, even
 *     with one key), SAME (more than one key that must share a member),
 *     NOKEY (a key-routed command with no key: any member), WRITE (from
 *     the table, or the subcommand for XGROUP), INLINE, REFUSED.
 *   A REFUSED request is well framed and consumed (head = all of it):
 *   answer "-ERR <rq->err>" (proto_redis.error_reply with
 *   PROTO_ERR_REQUEST) and go on. rq->err is Redis' own text where Redis
 *   has one ("wrong number of arguments for 'get' command"), else
 *   "unknown command" or "unsupported command '<name>'" and the like;
 *   rq->command still names a known command.
 * - PROTO_OK with rq->nargs == 0 and flags LOCAL|NOREPLY: `*0\r\n`,
 *   `*-1\r\n` or an empty inline line, which Redis reads and never
 *   answers. Consume rq->head bytes, send nothing.
 * - Streaming: a REDIS_KEY command whose last argument is not a key and
 *   declares PROTO_STREAM_MIN bytes or more returns as soon as the
 *   argument's "$<len>\r\n" is in: rq->head ends there, rq->body =
 *   <len> + 2, args[nargs - 1] = {head, len}. Otherwise head is the whole
 *   request and body 0.
 * - Inline requests (PROTO_REQ_INLINE): rq->head is the line (with its
 *   "\n" or "\r\n") to consume from <buf>; the request re-encoded as a
 *   multibulk is rq->scratch[0, rq->scratchlen), and every span in
 *   rq->args and rq->keys is an offset into rq->scratch, not <buf>.
 * - PROTO_KEYS: a caller's array is too small; nothing is consumed. Grow
 *   rq->args to rq->nargs, rq->keys to rq->nkeys and rq->scratch to
 *   rq->scratchlen (each only if short), then call again. nkeys is never
 *   more than nargs, and is exactly nargs until the arguments fit (the
 *   keys cannot be found before): grow keys to nargs to need one round.
 *   PROTO_KEYS comes only once the request (or its streamed head) is
 *   whole, so growth follows bytes received, not a declared count.
 * - PROTO_FATAL: malformed framing; rq->err is Redis' text ("Protocol
 *   error: invalid multibulk length", "... invalid bulk length",
 *   "... expected '$', got 'x'", "... unbalanced quotes in request",
 *   "... too big inline request"), or ours: "Protocol error: missing CRLF
 *   after bulk data", "Protocol error: request too large" (more than
 *   rq->max bytes declared, decided as soon as a length says so; rq->max
 *   0 means no limit), and POST/Host: commands (Redis closes on them).
 *   Answer the error, then close. PROTO_INVALID is never returned.
 *
 * proto_redis.parse_reply: <rq> is not used (may be NULL); rp->error for
 * a top-level '-' reply, rp->member_failure for -LOADING, -OOM, -BUSY and
 * -MASTERDOWN. PROTO_FATAL for anything not RESP2, a length out of range,
 * arrays nested deeper than 64 or declaring more than 2^31 - 1 elements.
 */

/*
 * The elements of the complete array reply at <buf> (<len> bytes), each
 * as the span of its whole RESP encoding, into <out> (<cap> entries):
 * returns how many there are (may exceed <cap>: call again with more), or
 * -1 when <buf> does not start with a complete array reply (a nil array
 * is 0 elements). Bytes after the array are not looked at. For merging
 * MGET fragments in the client's key order.
 */
long redis_reply_elements(const char *buf, size_t len, struct proto_span *out,
                          size_t cap);

/* The value of the integer reply (":<n>\r\n") at <buf>: 0, or -1 when it
 * is not one. For summing DEL, UNLINK, TOUCH and EXISTS fragments. */
int redis_reply_integer(const char *buf, size_t len, long long *value);

/*
 * What a fresh connection to a member says first: AUTH <auth> (when not
 * NULL), then SELECT <db> (when not 0), into <out> (<cap> bytes), with
 * the count of replies they produce in <replies>. Returns the bytes (0:
 * nothing to say), or -1 when they do not fit. For member connections
 * and health probes alike.
 */
int redis_prelude(char *out, size_t cap, const char *auth, int db,
                  unsigned *replies);

/*
 * proto_redis.error_reply texts (one line, CR and LF in <msg> made blanks,
 * cut to fit <cap>, always ending "\r\n"; 0 when <cap> < 3):
 *   PROTO_ERR_REFUSED    "-ERR Connection refused"      (twemproxy's)
 *   PROTO_ERR_TIMEOUT    "-ERR Connection timed out"    (twemproxy's)
 *   PROTO_ERR_CLOSED     "-ERR Connection reset by peer"
 *   PROTO_ERR_NO_MEMBER  "-ERR no member available"
 *   these four add ": <msg>" when <msg> is given (pass NULL for
 *   twemproxy's exact text);
 *   PROTO_ERR_REQUEST    "-ERR <msg>", or "-<msg>" when <msg> starts with
 *                        an error code (3+ capitals and a blank:
 *                        "CROSSSERVER Keys ..."); "-ERR invalid request"
 *                        without <msg>.
 * proto_redis.probe is PING; probe_reply: "+PONG\r\n" 1, a prefix of it
 * 0, anything else -1 (-LOADING, -NOAUTH: unhealthy).
 */

#endif /* CHASHD_PROTO_REDIS_H */
