/* redis.c -- mode redis: RESP2 requests (multibulk and inline) parsed into
 * their routing keys, RESP2 replies measured (and large values streamed),
 * the command table of Redis 7.0, error replies and the health probe.
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * Every function here is pure: it reads the caller's bytes, writes the
 * caller's structs, keeps nothing between calls. The parsers are
 * therefore restartable the simple way -- the engine calls again from the
 * start of the message with more bytes -- and every prefix of a message
 * gives PROTO_AGAIN until the message is whole, then the same answer as
 * the whole message (the unit tests feed every request byte by byte to
 * prove it). A protocol error is reported as soon as a prefix cannot
 * start any valid message, so a client cannot make chashd buffer bytes it
 * will refuse anyway.
 *
 * Why re-parse instead of keeping a parse state: a request is small (its
 * head is a few dozen bytes; a large value streams, see PROTO_STREAM_MIN)
 * and a pipelined buffer holds many whole requests, so nearly every call
 * parses a request once. The cost shows only for a large request that is
 * not streamed (MSET of many values) or a large array reply: each call
 * walks the element headers again, never the payloads, which are skipped
 * by their declared lengths.
 *
 * What is Redis' behaviour and what is ours:
 * - framing follows Redis 7.0's networking.c: strict lengths (no '+', no
 *   leading zero), `*0` and `*-1` requests are skipped without a reply,
 *   an inline line is split as sdssplitargs() splits it, and the error
 *   texts are Redis' "Protocol error: ..." texts. We are stricter where
 *   Redis is lax and a proxy cannot be: a length line must end in CRLF
 *   (Redis only looks for the CR), a bulk must be followed by CRLF (Redis
 *   skips two bytes unseen), and a request has at most 1,048,576 arguments
 *   (Redis 7.0 takes up to INT_MAX).
 * - a wrong number of arguments, an unknown command or a command chashd
 *   does not serve is not a protocol error: the request is consumed and
 *   refused (PROTO_REQ_REFUSED) with the text Redis itself would send, and
 *   the connection and its pipeline go on.
 * - replies are what a Redis member sends to a RESP2 client: + - : $ *,
 *   nested. RESP3 types never reach us (HELLO is answered by chashd).
 */
#include "proto/redis.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "conf/conf.h"

/* Redis' own limits, and ours where it has none a proxy can live with. */
#define REDIS_ARGS_MAX (1024 * 1024)   /* arguments in one request */
#define REDIS_INLINE_MAX (64 * 1024)   /* PROTO_INLINE_MAX_SIZE: one line */
#define REDIS_NUMLINE_MAX 22           /* "-9223372036854775808\r\n" */
#define REDIS_REPLY_DEPTH 64           /* nested arrays in a reply */
#define REDIS_REPLY_ELEMENTS INT32_MAX /* elements of one array reply */
#define REDIS_NAME_MAX 32              /* longer than any command name */

/*
 * How the parser finds the keys of a command beyond its first..last range
 * (Redis' "movablekeys" commands and the containers of subcommands). The
 * table's first/last/step stay Redis' own legacy range, so COMMAND INFO
 * and the table agree; these say what else the parser reads.
 */
enum redis_keys {
    RK_NONE,         /* first..last by step, nothing else */
    RK_NUMKEYS,      /* count at <first>, the keys follow (ZUNION, LMPOP) */
    RK_SCRIPT,       /* the same, for scripts and functions (EVAL, FCALL) */
    RK_DEST_NUMKEYS, /* key 1 (destination), count at 2, keys from 3
                        (ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE) */
    RK_SORT,         /* key 1, and the key after the last STORE */
    RK_GEORADIUS,    /* key 1, and the key after every STORE/STOREDIST
                        from argument 6 */
    RK_GEOBYMEMBER,  /* the same from argument 5 */
    RK_STREAMS,      /* the keys are the first half of what follows
                        STREAMS (XREAD, XREADGROUP); BLOCK is refused */
    RK_COPY,         /* keys 1 and 2; the DB option is refused */
    RK_SUBCOMMAND    /* a container: argument 1 names a subcommand that
                        has its own arity and key (OBJECT, MEMORY, ...) */
};

/*
 * A table entry: the public part, and what only the parser needs. The
 * error texts are built at compile time from the name, so a refusal
 * carries Redis' exact words without a buffer to print into.
 */
struct redis_entry {
    struct redis_command cmd;
    uint8_t namelen;
    uint8_t keys;            /* enum redis_keys */
    const char *arity_err;   /* Redis' "wrong number of arguments" text */
    const char *refused_err; /* why chashd does not serve it */
};

#define CMD(n, ar, kind, f, l, s, fl, rk)                                      \
    {                                                                          \
        {n, ar, REDIS_##kind, f, l, s, fl}, sizeof(n) - 1, RK_##rk,            \
            "wrong number of arguments for '" n "' command",                   \
            "unsupported command '" n "'"                                      \
    }
#define W REDIS_WRITE
#define A REDIS_ADMIN
#define V REDIS_VOLATILE

/*
 * The commands of Redis 7.0 (redis-server 7.0.15's COMMAND), sorted by
 * name for the binary search in redis_command_find(). Arity, the key
 * range first/last/step and the write flag are Redis' own;
 * tests/integration/redis/test_redis_table.py checks every entry against a live
 * redis-server, and the key positions the parser derives against its
 * COMMAND GETKEYS. The kind is chashd's decision:
 *
 * - REDIS_KEY: one routing key; any other key the command names (SORT ...
 *   STORE, GEORADIUS ... STORE) must share its member. LOLWUT names no
 *   key (first 0): any member answers it, as twemproxy does.
 * - containers with key-bearing subcommands are REDIS_KEY with the key at
 *   2, the position of every key-bearing subcommand's key: OBJECT
 *   (ENCODING FREQ IDLETIME REFCOUNT), MEMORY (USAGE), XINFO (STREAM
 *   GROUPS CONSUMERS), XGROUP (CREATE SETID DESTROY CREATECONSUMER
 *   DELCONSUMER). Their HELP goes to any member; MEMORY's server-wide
 *   subcommands (DOCTOR STATS MALLOC-STATS PURGE) are refused: one
 *   member's figures would pass for the pool's. See redis_subs[].
 * - REDIS_SAME: several keys on one member (checked by the engine):
 *   the set and sorted-set algebra with a destination, RENAME(NX), SMOVE,
 *   RPOPLPUSH, LMOVE, LCS, COPY (its DB option is refused, as MOVE is),
 *   BITOP (keys from 2), PFCOUNT and PFMERGE, MSETNX (atomic, so never
 *   split), GEOSEARCHSTORE, ZRANGESTORE, and XREAD/XREADGROUP without
 *   BLOCK (the keys follow STREAMS).
 * - REDIS_NUMKEYS: EVAL, EVALSHA, their _RO forms, FCALL, FCALL_RO (count
 *   at 2), ZUNION ZINTER ZDIFF ZINTERCARD SINTERCARD LMPOP ZMPOP (count
 *   at 1): <first> is the count's position, <last> is unused.
 * - REDIS_LOCAL: the connection's own commands, answered by chashd:
 *   PING ECHO QUIT SELECT AUTH HELLO RESET COMMAND CLIENT INFO TIME.
 * - REDIS_FANOUT: SCAN RANDOMKEY DBSIZE; KEYS FLUSHDB FLUSHALL also
 *   REDIS_ADMIN (a whole-keyspace walk or wipe is the operator's call).
 * - REDIS_REFUSED, with "unsupported command '<name>'":
 *   transactions (MULTI EXEC DISCARD WATCH UNWATCH: a transaction cannot
 *   span members, and the member connections are shared; the engine
 *   answers these five itself, refusing a MULTI block whole -- nothing
 *   in it runs -- in redis_mode.c, so the kind only says that no member
 *   ever sees them); pub/sub, the
 *   sharded forms included (SPUBLISH SSUBSCRIBE SUNSUBSCRIBE have a key,
 *   but a subscribed connection is no longer a request/reply one);
 *   blocking commands (BLPOP BRPOP BRPOPLPUSH BLMOVE BLMPOP BZPOPMIN
 *   BZPOPMAX BZMPOP, WAIT): a blocked request would stall every client
 *   pipelined behind it on the shared member connection; MOVE, SWAPDB
 *   (chashd does not route between databases); MIGRATE,
 *   RESTORE-ASKING, ASKING, READONLY, READWRITE, CLUSTER (cluster
 *   plumbing); SCRIPT, FUNCTION (they change every member: a later
 *   fan-out); and server administration (CONFIG DEBUG SHUTDOWN SAVE
 *   BGSAVE BGREWRITEAOF LASTSAVE SLOWLOG LATENCY MODULE ACL MONITOR SYNC
 *   PSYNC REPLCONF REPLICAOF SLAVEOF FAILOVER ROLE PFDEBUG PFSELFTEST).
 *
 * REDIS_WRITE follows Redis' "write" flag, with one exception: EVAL,
 * EVALSHA and FCALL are marked although Redis leaves the decision to the
 * script's own flags, which a proxy cannot see; replication and the
 * migration gate must assume a script writes. Their _RO forms are not.
 */
/* clang-format off */
static const struct redis_entry redis_table[] = {
    CMD("acl",                    -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("append",                  3, KEY,        1,  1, 1, W,    NONE),
    CMD("asking",                  1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("auth",                   -2, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("bgrewriteaof",            1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("bgsave",                 -1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("bitcount",               -2, KEY,        1,  1, 1, 0,    NONE),
    CMD("bitfield",               -2, KEY,        1,  1, 1, W,    NONE),
    CMD("bitfield_ro",            -2, KEY,        1,  1, 1, 0,    NONE),
    CMD("bitop",                  -4, SAME,       2, -1, 1, W,    NONE),
    CMD("bitpos",                 -3, KEY,        1,  1, 1, 0,    NONE),
    CMD("blmove",                  6, REFUSED,    1,  2, 1, W,    NONE),
    CMD("blmpop",                 -5, REFUSED,    0,  0, 0, W,    NONE),
    CMD("blpop",                  -3, REFUSED,    1, -2, 1, W,    NONE),
    CMD("brpop",                  -3, REFUSED,    1, -2, 1, W,    NONE),
    CMD("brpoplpush",              4, REFUSED,    1,  2, 1, W,    NONE),
    CMD("bzmpop",                 -5, REFUSED,    0,  0, 0, W,    NONE),
    CMD("bzpopmax",               -3, REFUSED,    1, -2, 1, W,    NONE),
    CMD("bzpopmin",               -3, REFUSED,    1, -2, 1, W,    NONE),
    CMD("client",                 -2, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("cluster",                -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("command",                -1, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("config",                 -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("copy",                   -3, SAME,       1,  2, 1, W,    COPY),
    CMD("dbsize",                  1, FANOUT,     0,  0, 0, 0,    NONE),
    CMD("debug",                  -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("decr",                    2, KEY,        1,  1, 1, W,    NONE),
    CMD("decrby",                  3, KEY,        1,  1, 1, W,    NONE),
    CMD("del",                    -2, SPLIT_KEYS,  1, -1, 1, W,    NONE),
    CMD("discard",                 1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("dump",                    2, KEY,        1,  1, 1, V,    NONE),
    CMD("echo",                    2, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("eval",                   -3, NUMKEYS,    2,  0, 1, W,    SCRIPT),
    CMD("eval_ro",                -3, NUMKEYS,    2,  0, 1, 0,    SCRIPT),
    CMD("evalsha",                -3, NUMKEYS,    2,  0, 1, W,    SCRIPT),
    CMD("evalsha_ro",             -3, NUMKEYS,    2,  0, 1, 0,    SCRIPT),
    CMD("exec",                    1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("exists",                 -2, SPLIT_KEYS,  1, -1, 1, 0,    NONE),
    CMD("expire",                 -3, KEY,        1,  1, 1, W,    NONE),
    CMD("expireat",               -3, KEY,        1,  1, 1, W,    NONE),
    CMD("expiretime",              2, KEY,        1,  1, 1, V,    NONE),
    CMD("failover",               -1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("fcall",                  -3, NUMKEYS,    2,  0, 1, W,    SCRIPT),
    CMD("fcall_ro",               -3, NUMKEYS,    2,  0, 1, 0,    SCRIPT),
    CMD("flushall",               -1, FANOUT,     0,  0, 0, W | A, NONE),
    CMD("flushdb",                -1, FANOUT,     0,  0, 0, W | A, NONE),
    CMD("function",               -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("geoadd",                 -5, KEY,        1,  1, 1, W,    NONE),
    CMD("geodist",                -4, KEY,        1,  1, 1, 0,    NONE),
    CMD("geohash",                -2, KEY,        1,  1, 1, 0,    NONE),
    CMD("geopos",                 -2, KEY,        1,  1, 1, 0,    NONE),
    CMD("georadius",              -6, KEY,        1,  1, 1, W,    GEORADIUS),
    CMD("georadius_ro",           -6, KEY,        1,  1, 1, 0,    NONE),
    CMD("georadiusbymember",      -5, KEY,        1,  1, 1, W,    GEOBYMEMBER),
    CMD("georadiusbymember_ro",   -5, KEY,        1,  1, 1, 0,    NONE),
    CMD("geosearch",              -7, KEY,        1,  1, 1, 0,    NONE),
    CMD("geosearchstore",         -8, SAME,       1,  2, 1, W,    NONE),
    CMD("get",                     2, KEY,        1,  1, 1, 0,    NONE),
    CMD("getbit",                  3, KEY,        1,  1, 1, 0,    NONE),
    CMD("getdel",                  2, KEY,        1,  1, 1, W,    NONE),
    CMD("getex",                  -2, KEY,        1,  1, 1, W,    NONE),
    CMD("getrange",                4, KEY,        1,  1, 1, 0,    NONE),
    CMD("getset",                  3, KEY,        1,  1, 1, W,    NONE),
    CMD("hdel",                   -3, KEY,        1,  1, 1, W,    NONE),
    CMD("hello",                  -1, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("hexists",                 3, KEY,        1,  1, 1, 0,    NONE),
    CMD("hget",                    3, KEY,        1,  1, 1, 0,    NONE),
    CMD("hgetall",                 2, KEY,        1,  1, 1, 0,    NONE),
    CMD("hincrby",                 4, KEY,        1,  1, 1, W,    NONE),
    CMD("hincrbyfloat",            4, KEY,        1,  1, 1, W,    NONE),
    CMD("hkeys",                   2, KEY,        1,  1, 1, 0,    NONE),
    CMD("hlen",                    2, KEY,        1,  1, 1, 0,    NONE),
    CMD("hmget",                  -3, KEY,        1,  1, 1, 0,    NONE),
    CMD("hmset",                  -4, KEY,        1,  1, 1, W,    NONE),
    CMD("hrandfield",             -2, KEY,        1,  1, 1, V,    NONE),
    CMD("hscan",                  -3, KEY,        1,  1, 1, V,    NONE),
    CMD("hset",                   -4, KEY,        1,  1, 1, W,    NONE),
    CMD("hsetnx",                  4, KEY,        1,  1, 1, W,    NONE),
    CMD("hstrlen",                 3, KEY,        1,  1, 1, 0,    NONE),
    CMD("hvals",                   2, KEY,        1,  1, 1, 0,    NONE),
    CMD("incr",                    2, KEY,        1,  1, 1, W,    NONE),
    CMD("incrby",                  3, KEY,        1,  1, 1, W,    NONE),
    CMD("incrbyfloat",             3, KEY,        1,  1, 1, W,    NONE),
    CMD("info",                   -1, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("keys",                    2, FANOUT,     0,  0, 0, A,    NONE),
    CMD("lastsave",                1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("latency",                -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("lcs",                    -3, SAME,       1,  2, 1, 0,    NONE),
    CMD("lindex",                  3, KEY,        1,  1, 1, 0,    NONE),
    CMD("linsert",                 5, KEY,        1,  1, 1, W,    NONE),
    CMD("llen",                    2, KEY,        1,  1, 1, 0,    NONE),
    CMD("lmove",                   5, SAME,       1,  2, 1, W,    NONE),
    CMD("lmpop",                  -4, NUMKEYS,    1,  0, 1, W,    NUMKEYS),
    CMD("lolwut",                 -1, KEY,        0,  0, 0, 0,    NONE),
    CMD("lpop",                   -2, KEY,        1,  1, 1, W,    NONE),
    CMD("lpos",                   -3, KEY,        1,  1, 1, 0,    NONE),
    CMD("lpush",                  -3, KEY,        1,  1, 1, W,    NONE),
    CMD("lpushx",                 -3, KEY,        1,  1, 1, W,    NONE),
    CMD("lrange",                  4, KEY,        1,  1, 1, 0,    NONE),
    CMD("lrem",                    4, KEY,        1,  1, 1, W,    NONE),
    CMD("lset",                    4, KEY,        1,  1, 1, W,    NONE),
    CMD("ltrim",                   4, KEY,        1,  1, 1, W,    NONE),
    CMD("memory",                 -2, KEY,        2,  2, 1, V,    SUBCOMMAND),
    CMD("mget",                   -2, SPLIT_KEYS,  1, -1, 1, 0,    NONE),
    CMD("migrate",                -6, REFUSED,    3,  3, 1, W,    NONE),
    CMD("module",                 -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("monitor",                 1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("move",                    3, REFUSED,    1,  1, 1, W,    NONE),
    CMD("mset",                   -3, SPLIT_KV,   1, -1, 2, W,    NONE),
    CMD("msetnx",                 -3, SAME,       1, -1, 2, W,    NONE),
    CMD("multi",                   1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("object",                 -2, KEY,        2,  2, 1, V,    SUBCOMMAND),
    CMD("persist",                 2, KEY,        1,  1, 1, W,    NONE),
    CMD("pexpire",                -3, KEY,        1,  1, 1, W,    NONE),
    CMD("pexpireat",              -3, KEY,        1,  1, 1, W,    NONE),
    CMD("pexpiretime",             2, KEY,        1,  1, 1, V,    NONE),
    CMD("pfadd",                  -2, KEY,        1,  1, 1, W,    NONE),
    CMD("pfcount",                -2, SAME,       1, -1, 1, 0,    NONE),
    CMD("pfdebug",                 3, REFUSED,    2,  2, 1, W,    NONE),
    CMD("pfmerge",                -2, SAME,       1, -1, 1, W,    NONE),
    CMD("pfselftest",              1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("ping",                   -1, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("psetex",                  4, KEY,        1,  1, 1, W,    NONE),
    CMD("psubscribe",             -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("psync",                  -3, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("pttl",                    2, KEY,        1,  1, 1, V,    NONE),
    CMD("publish",                 3, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("pubsub",                 -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("punsubscribe",           -1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("quit",                   -1, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("randomkey",               1, FANOUT,     0,  0, 0, 0,    NONE),
    CMD("readonly",                1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("readwrite",               1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("rename",                  3, SAME,       1,  2, 1, W,    NONE),
    CMD("renamenx",                3, SAME,       1,  2, 1, W,    NONE),
    CMD("replconf",               -1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("replicaof",               3, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("reset",                   1, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("restore",                -4, KEY,        1,  1, 1, W,    NONE),
    CMD("restore-asking",         -4, REFUSED,    1,  1, 1, W,    NONE),
    CMD("role",                    1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("rpop",                   -2, KEY,        1,  1, 1, W,    NONE),
    CMD("rpoplpush",               3, SAME,       1,  2, 1, W,    NONE),
    CMD("rpush",                  -3, KEY,        1,  1, 1, W,    NONE),
    CMD("rpushx",                 -3, KEY,        1,  1, 1, W,    NONE),
    CMD("sadd",                   -3, KEY,        1,  1, 1, W,    NONE),
    CMD("save",                    1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("scan",                   -2, FANOUT,     0,  0, 0, 0,    NONE),
    CMD("scard",                   2, KEY,        1,  1, 1, 0,    NONE),
    CMD("script",                 -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("sdiff",                  -2, SAME,       1, -1, 1, 0,    NONE),
    CMD("sdiffstore",             -3, SAME,       1, -1, 1, W,    NONE),
    CMD("select",                  2, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("set",                    -3, KEY,        1,  1, 1, W,    NONE),
    CMD("setbit",                  4, KEY,        1,  1, 1, W,    NONE),
    CMD("setex",                   4, KEY,        1,  1, 1, W,    NONE),
    CMD("setnx",                   3, KEY,        1,  1, 1, W,    NONE),
    CMD("setrange",                4, KEY,        1,  1, 1, W,    NONE),
    CMD("shutdown",               -1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("sinter",                 -2, SAME,       1, -1, 1, 0,    NONE),
    CMD("sintercard",             -3, NUMKEYS,    1,  0, 1, 0,    NUMKEYS),
    CMD("sinterstore",            -3, SAME,       1, -1, 1, W,    NONE),
    CMD("sismember",               3, KEY,        1,  1, 1, 0,    NONE),
    CMD("slaveof",                 3, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("slowlog",                -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("smembers",                2, KEY,        1,  1, 1, 0,    NONE),
    CMD("smismember",             -3, KEY,        1,  1, 1, 0,    NONE),
    CMD("smove",                   4, SAME,       1,  2, 1, W,    NONE),
    CMD("sort",                   -2, KEY,        1,  1, 1, W,    SORT),
    CMD("sort_ro",                -2, KEY,        1,  1, 1, 0,    NONE),
    CMD("spop",                   -2, KEY,        1,  1, 1, W,    NONE),
    CMD("spublish",                3, REFUSED,    1,  1, 1, 0,    NONE),
    CMD("srandmember",            -2, KEY,        1,  1, 1, V,    NONE),
    CMD("srem",                   -3, KEY,        1,  1, 1, W,    NONE),
    CMD("sscan",                  -3, KEY,        1,  1, 1, V,    NONE),
    CMD("ssubscribe",             -2, REFUSED,    1, -1, 1, 0,    NONE),
    CMD("strlen",                  2, KEY,        1,  1, 1, 0,    NONE),
    CMD("subscribe",              -2, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("substr",                  4, KEY,        1,  1, 1, 0,    NONE),
    CMD("sunion",                 -2, SAME,       1, -1, 1, 0,    NONE),
    CMD("sunionstore",            -3, SAME,       1, -1, 1, W,    NONE),
    CMD("sunsubscribe",           -1, REFUSED,    1, -1, 1, 0,    NONE),
    CMD("swapdb",                  3, REFUSED,    0,  0, 0, W,    NONE),
    CMD("sync",                    1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("time",                    1, LOCAL,      0,  0, 0, 0,    NONE),
    CMD("touch",                  -2, SPLIT_KEYS,  1, -1, 1, 0,    NONE),
    CMD("ttl",                     2, KEY,        1,  1, 1, V,    NONE),
    CMD("type",                    2, KEY,        1,  1, 1, 0,    NONE),
    CMD("unlink",                 -2, SPLIT_KEYS,  1, -1, 1, W,    NONE),
    CMD("unsubscribe",            -1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("unwatch",                 1, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("wait",                    3, REFUSED,    0,  0, 0, 0,    NONE),
    CMD("watch",                  -2, REFUSED,    1, -1, 1, 0,    NONE),
    CMD("xack",                   -4, KEY,        1,  1, 1, W,    NONE),
    CMD("xadd",                   -5, KEY,        1,  1, 1, W,    NONE),
    CMD("xautoclaim",             -6, KEY,        1,  1, 1, W,    NONE),
    CMD("xclaim",                 -6, KEY,        1,  1, 1, W,    NONE),
    CMD("xdel",                   -3, KEY,        1,  1, 1, W,    NONE),
    CMD("xgroup",                 -2, KEY,        2,  2, 1, 0,    SUBCOMMAND),
    CMD("xinfo",                  -2, KEY,        2,  2, 1, 0,    SUBCOMMAND),
    CMD("xlen",                    2, KEY,        1,  1, 1, 0,    NONE),
    CMD("xpending",               -3, KEY,        1,  1, 1, 0,    NONE),
    CMD("xrange",                 -4, KEY,        1,  1, 1, 0,    NONE),
    CMD("xread",                  -4, SAME,       0,  0, 0, 0,    STREAMS),
    CMD("xreadgroup",             -7, SAME,       0,  0, 0, W,    STREAMS),
    CMD("xrevrange",              -4, KEY,        1,  1, 1, 0,    NONE),
    CMD("xsetid",                 -3, KEY,        1,  1, 1, W,    NONE),
    CMD("xtrim",                  -4, KEY,        1,  1, 1, W,    NONE),
    CMD("zadd",                   -4, KEY,        1,  1, 1, W,    NONE),
    CMD("zcard",                   2, KEY,        1,  1, 1, 0,    NONE),
    CMD("zcount",                  4, KEY,        1,  1, 1, 0,    NONE),
    CMD("zdiff",                  -3, NUMKEYS,    1,  0, 1, 0,    NUMKEYS),
    CMD("zdiffstore",             -4, SAME,       1,  1, 1, W,    DEST_NUMKEYS),
    CMD("zincrby",                 4, KEY,        1,  1, 1, W,    NONE),
    CMD("zinter",                 -3, NUMKEYS,    1,  0, 1, 0,    NUMKEYS),
    CMD("zintercard",             -3, NUMKEYS,    1,  0, 1, 0,    NUMKEYS),
    CMD("zinterstore",            -4, SAME,       1,  1, 1, W,    DEST_NUMKEYS),
    CMD("zlexcount",               4, KEY,        1,  1, 1, 0,    NONE),
    CMD("zmpop",                  -4, NUMKEYS,    1,  0, 1, W,    NUMKEYS),
    CMD("zmscore",                -3, KEY,        1,  1, 1, 0,    NONE),
    CMD("zpopmax",                -2, KEY,        1,  1, 1, W,    NONE),
    CMD("zpopmin",                -2, KEY,        1,  1, 1, W,    NONE),
    CMD("zrandmember",            -2, KEY,        1,  1, 1, V,    NONE),
    CMD("zrange",                 -4, KEY,        1,  1, 1, 0,    NONE),
    CMD("zrangebylex",            -4, KEY,        1,  1, 1, 0,    NONE),
    CMD("zrangebyscore",          -4, KEY,        1,  1, 1, 0,    NONE),
    CMD("zrangestore",            -5, SAME,       1,  2, 1, W,    NONE),
    CMD("zrank",                   3, KEY,        1,  1, 1, 0,    NONE),
    CMD("zrem",                   -3, KEY,        1,  1, 1, W,    NONE),
    CMD("zremrangebylex",          4, KEY,        1,  1, 1, W,    NONE),
    CMD("zremrangebyrank",         4, KEY,        1,  1, 1, W,    NONE),
    CMD("zremrangebyscore",        4, KEY,        1,  1, 1, W,    NONE),
    CMD("zrevrange",              -4, KEY,        1,  1, 1, 0,    NONE),
    CMD("zrevrangebylex",         -4, KEY,        1,  1, 1, 0,    NONE),
    CMD("zrevrangebyscore",       -4, KEY,        1,  1, 1, 0,    NONE),
    CMD("zrevrank",                3, KEY,        1,  1, 1, 0,    NONE),
    CMD("zscan",                  -3, KEY,        1,  1, 1, V,    NONE),
    CMD("zscore",                  3, KEY,        1,  1, 1, 0,    NONE),
    CMD("zunion",                 -3, NUMKEYS,    1,  0, 1, 0,    NUMKEYS),
    CMD("zunionstore",            -4, SAME,       1,  1, 1, W,    DEST_NUMKEYS),
};
/* clang-format on */
#undef W
#undef A
#undef V
#undef CMD

/*
 * The subcommands of the containers the table marks RK_SUBCOMMAND, with
 * Redis' arity (the container's name counted) and where each goes: its
 * key at argument 2, any member (HELP, the same text everywhere), or
 * refused. A subcommand not listed is refused as Redis refuses it.
 */
enum redis_sub_route {
    SUB_KEY,    /* the key is argument 2 */
    SUB_ANY,    /* no key: any member answers */
    SUB_REFUSED /* server-wide figures of one member: not served */
};

struct redis_sub {
    const char *container; /* the table's name */
    const char *name;      /* lower case */
    uint8_t namelen;
    int8_t arity;
    uint8_t route;  /* enum redis_sub_route */
    unsigned flags; /* REDIS_WRITE */
    const char *arity_err;
    const char *refused_err;
};

#define SUB(c, n, ar, route, fl)                                               \
    {                                                                          \
        c, n, sizeof(n) - 1, ar, SUB_##route, fl,                              \
            "wrong number of arguments for '" c "|" n "' command",             \
            "unsupported command '" c "|" n "'"                                \
    }
#define W REDIS_WRITE

/* clang-format off */
static const struct redis_sub redis_subs[] = {
    SUB("memory", "doctor",          2, REFUSED, 0),
    SUB("memory", "help",            2, ANY,     0),
    SUB("memory", "malloc-stats",    2, REFUSED, 0),
    SUB("memory", "purge",           2, REFUSED, 0),
    SUB("memory", "stats",           2, REFUSED, 0),
    SUB("memory", "usage",          -3, KEY,     0),
    SUB("object", "encoding",        3, KEY,     0),
    SUB("object", "freq",            3, KEY,     0),
    SUB("object", "help",            2, ANY,     0),
    SUB("object", "idletime",        3, KEY,     0),
    SUB("object", "refcount",        3, KEY,     0),
    SUB("xgroup", "create",         -5, KEY,     W),
    SUB("xgroup", "createconsumer",  5, KEY,     W),
    SUB("xgroup", "delconsumer",     5, KEY,     W),
    SUB("xgroup", "destroy",         4, KEY,     W),
    SUB("xgroup", "help",            2, ANY,     0),
    SUB("xgroup", "setid",          -5, KEY,     W),
    SUB("xinfo",  "consumers",       4, KEY,     0),
    SUB("xinfo",  "groups",          3, KEY,     0),
    SUB("xinfo",  "help",            2, ANY,     0),
    SUB("xinfo",  "stream",         -3, KEY,     0),
};

/* Redis says "unknown subcommand '<name>'. Try OBJECT HELP."; the name
 * cannot be in a static text, the advice can. */
static const struct {
    const char *container;
    const char *err;
} redis_unknown_sub[] = {
    {"memory", "unknown subcommand. Try MEMORY HELP."},
    {"object", "unknown subcommand. Try OBJECT HELP."},
    {"xgroup", "unknown subcommand. Try XGROUP HELP."},
    {"xinfo",  "unknown subcommand. Try XINFO HELP."},
};
/* clang-format on */
#undef W
#undef SUB

/*
 * Redis' "Protocol error: expected '$', got 'x'" for each byte x, built at
 * compile time so that a parser with no buffer of its own can still name
 * the byte it found (a NUL byte ends the text early). E16 repeats E.
 */
#define E(c)                                                                   \
    {                                                                          \
        'P', 'r', 'o', 't', 'o', 'c', 'o', 'l', ' ', 'e', 'r', 'r', 'o', 'r',  \
            ':', ' ', 'e', 'x', 'p', 'e', 'c', 't', 'e', 'd', ' ', '\'', '$',  \
            '\'', ',', ' ', 'g', 'o', 't', ' ', '\'', (char)(c), '\'', '\0'    \
    }
#define E16(h)                                                                 \
    E(h + 0), E(h + 1), E(h + 2), E(h + 3), E(h + 4), E(h + 5), E(h + 6),      \
        E(h + 7), E(h + 8), E(h + 9), E(h + 10), E(h + 11), E(h + 12),         \
        E(h + 13), E(h + 14), E(h + 15)
static const char redis_expected_dollar[256][38] = {
    E16(0x00), E16(0x10), E16(0x20), E16(0x30), E16(0x40), E16(0x50),
    E16(0x60), E16(0x70), E16(0x80), E16(0x90), E16(0xa0), E16(0xb0),
    E16(0xc0), E16(0xd0), E16(0xe0), E16(0xf0)};
#undef E16
#undef E

/* ---- the command table ------------------------------------------------- */

static char
lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* <s> (<len> bytes, any case) equals the lower-case <name> (<namelen>). */
static bool
name_equal(const char *s, size_t len, const char *name, size_t namelen)
{
    size_t i;

    if (len != namelen)
        return false;
    for (i = 0; i < len; i++)
        if (lower(s[i]) != name[i])
            return false;
    return true;
}

const struct redis_command *
redis_command_at(int index)
{
    if (index < 0 || (size_t)index >= redis_command_count())
        return NULL;
    return &redis_table[index].cmd;
}

size_t
redis_command_count(void)
{
    return sizeof(redis_table) / sizeof(redis_table[0]);
}

/*
 * Binary search on the lower-cased name. A name longer than any command
 * is unknown without a look at the table, so the copy is bounded and the
 * search never reads past <len>.
 */
int
redis_command_find(const char *name, size_t len)
{
    char low[REDIS_NAME_MAX];
    size_t lo = 0, hi = redis_command_count(), i;

    if (len == 0 || len > sizeof(low))
        return -1;
    for (i = 0; i < len; i++)
        low[i] = lower(name[i]);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct redis_entry *e = &redis_table[mid];
        size_t n = len < e->namelen ? len : e->namelen;
        int c = memcmp(low, e->cmd.name, n);

        if (c == 0)
            c = len < e->namelen ? -1 : len > e->namelen;
        if (c == 0)
            return (int)mid;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

static bool
arity_ok(int arity, size_t nargs)
{
    if (arity >= 0)
        return nargs == (size_t)arity;
    return nargs >= (size_t)-arity;
}

/* ---- numbers ------------------------------------------------------------ */

/*
 * <s> (<n> bytes) as a 64-bit integer, exactly as Redis' string2ll()
 * accepts it: an optional '-', then digits without a leading zero ("0"
 * itself excepted), nothing else, no overflow.
 */
static bool
parse_ll(const char *s, size_t n, int64_t *value)
{
    uint64_t v = 0;
    bool neg = false;
    size_t i;

    if (n == 1 && s[0] == '0') {
        *value = 0;
        return true;
    }
    if (n > 0 && s[0] == '-') {
        neg = true;
        s++;
        n--;
    }
    if (n == 0 || n > 19 || s[0] < '1' || s[0] > '9')
        return false;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0'); /* 19 digits cannot wrap */
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1)
            return false;
        *value = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX)
            return false;
        *value = (int64_t)v;
    }
    return true;
}

/*
 * The number on the line that starts at <pos> (just after its type byte:
 * '*', '$' or ':') and ends in CRLF; <end> is the offset after the CRLF.
 * PROTO_AGAIN until the CRLF is in, PROTO_FATAL as soon as a byte cannot
 * belong to such a line (not only once its CR arrives), so garbage is
 * refused before it is buffered.
 */
static int
read_number(const char *buf, size_t len, size_t pos, int64_t *value,
            size_t *end)
{
    size_t i;

    for (i = pos; i < len && buf[i] != '\r'; i++) {
        if ((buf[i] < '0' || buf[i] > '9') && buf[i] != '-')
            return PROTO_FATAL;
        if (i - pos >= REDIS_NUMLINE_MAX - 2)
            return PROTO_FATAL;
    }
    if (i + 1 >= len)
        return PROTO_AGAIN; /* no CR yet, or its LF still to come */
    if (buf[i + 1] != '\n' || !parse_ll(buf + pos, i - pos, value))
        return PROTO_FATAL;
    *end = i + 2;
    return PROTO_OK;
}

/* Decimal digits of <n>. */
static size_t
ndigits(size_t n)
{
    size_t d = 1;

    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

/* Write "<type><n>\r\n" at <out>; returns its length. */
static size_t
put_header(char *out, char type, size_t n)
{
    size_t d = ndigits(n), i;

    out[0] = type;
    for (i = d; i > 0; i--) {
        out[i] = (char)('0' + n % 10);
        n /= 10;
    }
    out[d + 1] = '\r';
    out[d + 2] = '\n';
    return d + 3;
}

/* ---- requests: outcomes ------------------------------------------------- */

/* A framing error: the stream cannot be followed past it. */
static int
fatal(struct proto_request *rq, const char *why)
{
    rq->head = 0;
    rq->body = 0;
    rq->nkeys = 0;
    rq->err = why;
    return PROTO_FATAL;
}

/*
 * A whole, well-framed request chashd answers with an error: it is
 * consumed (rq->head stays the whole request) and the connection goes on.
 * Returns PROTO_OK, the status of a refused request.
 */
static int
refuse(struct proto_request *rq, const char *why)
{
    rq->flags = (rq->flags & PROTO_REQ_INLINE) | PROTO_REQ_REFUSED;
    rq->nkeys = 0;
    rq->err = why;
    return PROTO_OK;
}

/* `*0`, `*-1` and an empty inline line: Redis reads them and answers
 * nothing. Consumed, no command, no reply. */
static int
skip(struct proto_request *rq, size_t head)
{
    rq->head = head;
    rq->flags |= PROTO_REQ_LOCAL | PROTO_REQ_NOREPLY;
    return PROTO_OK;
}

/* ---- requests: keys ----------------------------------------------------- */

/* Argument <i> is a key: noted when there is room, counted always. */
static void
add_key(struct proto_request *rq, size_t i)
{
    if (rq->nkeys < rq->keycap)
        rq->keys[rq->nkeys] = rq->args[i];
    rq->nkeys++;
}

static void
add_range(struct proto_request *rq, size_t first, size_t last, size_t step)
{
    size_t i;

    for (i = first; i <= last && i < rq->nargs; i += step)
        add_key(rq, i);
}

static bool
arg_is(const char *base, const struct proto_request *rq, size_t i,
       const char *lname)
{
    return name_equal(base + rq->args[i].off, rq->args[i].len, lname,
                      strlen(lname));
}

/*
 * The key count at argument <at>, the keys right after it. Redis' own
 * texts for a bad count; a count of 0 is refused even where Redis takes
 * it (EVAL "..." 0): a request without a key cannot be routed to the
 * member that holds the data the script may touch.
 */
static int
numkeys(const char *base, struct proto_request *rq, size_t at, bool script)
{
    const struct proto_span *a = &rq->args[at];
    int64_t n;

    if (!parse_ll(base + a->off, a->len, &n))
        return refuse(rq, "value is not an integer or out of range");
    if (n < 0)
        return refuse(rq, "Number of keys can't be negative");
    if (n == 0)
        return refuse(rq, script ? "numkeys 0 cannot be routed: chashd "
                                   "sends a script to the member of its keys"
                                 : "numkeys should be greater than 0");
    if ((uint64_t)n > rq->nargs - at - 1)
        return refuse(rq,
                      "Number of keys can't be greater than number of args");
    add_range(rq, at + 1, at + (size_t)n, 1);
    return PROTO_OK;
}

/* SORT: key 1, and the destination after the last STORE, skipping the
 * arguments of LIMIT, GET and BY as Redis' sortGetKeys() does (a
 * destination named "get" is taken as Redis takes it). */
static void
sort_keys(const char *base, struct proto_request *rq)
{
    size_t i, store = 0;

    add_key(rq, 1);
    for (i = 2; i < rq->nargs; i++) {
        if (arg_is(base, rq, i, "limit"))
            i += 2;
        else if (arg_is(base, rq, i, "store") && i + 1 < rq->nargs)
            store = i + 1;
        else if (arg_is(base, rq, i, "get") || arg_is(base, rq, i, "by"))
            i += 1;
    }
    if (store != 0)
        add_key(rq, store);
}

/*
 * GEORADIUS(BYMEMBER): key 1, and the key after every STORE or STOREDIST
 * from argument <from>. Redis stores into the last one given but its
 * COMMAND GETKEYS names the first of each: taking them all keeps every
 * key the command may write on the first key's member.
 */
static void
geo_keys(const char *base, struct proto_request *rq, size_t from)
{
    size_t i;

    add_key(rq, 1);
    for (i = from; i + 1 < rq->nargs; i++) {
        if (arg_is(base, rq, i, "store") || arg_is(base, rq, i, "storedist")) {
            add_key(rq, i + 1);
            i++;
        }
    }
}

/*
 * XREAD/XREADGROUP: the options, then STREAMS k1 .. kn id1 .. idn. BLOCK
 * is refused (a blocked read would hold the member connection other
 * clients' requests are pipelined on); without it the read returns at
 * once and is served like any multi-key read.
 */
static int
stream_keys(const char *base, struct proto_request *rq, bool group)
{
    size_t i, rest;

    for (i = 1; i < rq->nargs; i++) {
        if (arg_is(base, rq, i, "block"))
            return refuse(rq, "XREAD and XREADGROUP with BLOCK are not "
                              "supported: chashd does not block members");
        if (arg_is(base, rq, i, "count"))
            i++;
        else if (arg_is(base, rq, i, "group"))
            i += 2;
        else if (arg_is(base, rq, i, "noack"))
            continue;
        else if (arg_is(base, rq, i, "streams"))
            break;
        else
            return refuse(rq, "syntax error");
    }
    if (i >= rq->nargs)
        return refuse(rq, "syntax error");
    rest = rq->nargs - i - 1;
    if (rest == 0 || rest % 2 != 0)
        return refuse(rq, group ? "Unbalanced 'xreadgroup' list of streams: "
                                  "for each stream key an ID or '>' must be "
                                  "specified."
                                : "Unbalanced 'xread' list of streams: for "
                                  "each stream key an ID or '$' must be "
                                  "specified.");
    add_range(rq, i + 1, i + rest / 2, 1);
    return PROTO_OK;
}

/* A container's subcommand (argument 1): its own arity, key and flags. */
static int
sub_keys(const char *base, struct proto_request *rq,
         const struct redis_entry *e)
{
    const struct proto_span *a = &rq->args[1];
    const struct redis_sub *s;
    size_t i;

    for (i = 0; i < sizeof(redis_subs) / sizeof(redis_subs[0]); i++) {
        s = &redis_subs[i];
        if (strcmp(s->container, e->cmd.name) != 0 ||
            !name_equal(base + a->off, a->len, s->name, s->namelen))
            continue;
        if (!arity_ok(s->arity, rq->nargs))
            return refuse(rq, s->arity_err);
        if (s->route == SUB_REFUSED)
            return refuse(rq, s->refused_err);
        if (s->flags & REDIS_WRITE)
            rq->flags |= PROTO_REQ_WRITE;
        if (s->route == SUB_KEY)
            add_key(rq, 2);
        return PROTO_OK;
    }
    for (i = 0; i < sizeof(redis_unknown_sub) / sizeof(redis_unknown_sub[0]);
         i++)
        if (strcmp(redis_unknown_sub[i].container, e->cmd.name) == 0)
            return refuse(rq, redis_unknown_sub[i].err);
    return refuse(rq, "unknown subcommand");
}

/* The keys of a REDIS_KEY, REDIS_SAME or REDIS_NUMKEYS command. */
static int
find_keys(const char *base, struct proto_request *rq,
          const struct redis_entry *e)
{
    const struct redis_command *c = &e->cmd;
    size_t last, i;

    switch (e->keys) {
    case RK_NUMKEYS:
    case RK_SCRIPT:
        return numkeys(base, rq, (size_t)c->first, e->keys == RK_SCRIPT);
    case RK_DEST_NUMKEYS:
        add_key(rq, 1);
        return numkeys(base, rq, 2, false);
    case RK_SORT:
        sort_keys(base, rq);
        return PROTO_OK;
    case RK_GEORADIUS:
        geo_keys(base, rq, 6);
        return PROTO_OK;
    case RK_GEOBYMEMBER:
        geo_keys(base, rq, 5);
        return PROTO_OK;
    case RK_STREAMS:
        return stream_keys(base, rq, strcmp(c->name, "xreadgroup") == 0);
    case RK_SUBCOMMAND:
        return sub_keys(base, rq, e);
    case RK_COPY:
        for (i = 3; i < rq->nargs; i++)
            if (arg_is(base, rq, i, "db"))
                return refuse(rq, "COPY with DB is not supported: chashd "
                                  "does not route between databases");
        break;
    default:
        break;
    }
    if (c->first == 0) /* LOLWUT: no key, any member */
        return PROTO_OK;
    last = c->last < 0 ? rq->nargs - (size_t)-c->last : (size_t)c->last;
    /* MSETNX's pairs: an odd count is Redis' arity error too */
    if (c->step == 2 && (rq->nargs - (size_t)c->first) % 2 != 0)
        return refuse(rq, e->arity_err);
    /* a step of 0 would never end: the table has none (a unit test
     * checks it), and 1 is the only sane reading of one */
    add_range(rq, (size_t)c->first, last, c->step > 0 ? (size_t)c->step : 1);
    return PROTO_OK;
}

/*
 * Redis closes a connection that sends "POST" or "Host:" as a command: an
 * HTTP request smuggled to it by a browser (cross-protocol scripting).
 * chashd does the same.
 */
static bool
is_http(const char *s, size_t len)
{
    return name_equal(s, len, "post", 4) || name_equal(s, len, "host:", 5);
}

/*
 * The command, flags and keys of a request whose <rq->nargs> arguments
 * are all in rq->args (their bytes at <base> + off; a streamed last
 * argument is never read). PROTO_OK (served or refused) or PROTO_KEYS.
 */
static int
classify(const char *base, struct proto_request *rq)
{
    const struct proto_span *a = &rq->args[0];
    const struct redis_entry *e;
    int index, st;

    index = redis_command_find(base + a->off, a->len);
    rq->command = index;
    if (index < 0) {
        if (is_http(base + a->off, a->len))
            return fatal(rq, "Protocol error: possible SECURITY ATTACK "
                             "detected (POST or Host: command)");
        return refuse(rq, "unknown command");
    }
    e = &redis_table[index];
    if (!arity_ok(e->cmd.arity, rq->nargs))
        return refuse(rq, e->arity_err);
    if (e->cmd.flags & REDIS_WRITE)
        rq->flags |= PROTO_REQ_WRITE;
    switch (e->cmd.kind) {
    case REDIS_LOCAL:
        rq->flags |= PROTO_REQ_LOCAL;
        if (strcmp(e->cmd.name, "quit") == 0)
            rq->flags |= PROTO_REQ_QUIT;
        return PROTO_OK;
    case REDIS_FANOUT:
        rq->flags |= PROTO_REQ_FANOUT;
        return PROTO_OK;
    case REDIS_REFUSED:
        return refuse(rq, e->refused_err);
    case REDIS_SPLIT_KEYS:
        rq->flags |= PROTO_REQ_SPLIT;
        add_range(rq, 1, rq->nargs - 1, 1);
        break;
    case REDIS_SPLIT_KV:
        if ((rq->nargs - 1) % 2 != 0)
            return refuse(rq, e->arity_err);
        rq->flags |= PROTO_REQ_SPLIT;
        add_range(rq, 1, rq->nargs - 1, 2);
        break;
    default: /* REDIS_KEY, REDIS_SAME, REDIS_NUMKEYS */
        st = find_keys(base, rq, e);
        if (st != PROTO_OK || (rq->flags & PROTO_REQ_REFUSED))
            return st;
        break;
    }
    if (rq->nkeys > rq->keycap)
        return PROTO_KEYS;
    if (rq->nkeys == 0)
        rq->flags |= PROTO_REQ_NOKEY;
    else if (rq->nkeys > 1 && !(rq->flags & PROTO_REQ_SPLIT))
        rq->flags |= PROTO_REQ_SAME;
    else if (rq->nkeys == 1 &&
             !(rq->flags & (PROTO_REQ_SPLIT | PROTO_REQ_INLINE)))
        rq->flags |= PROTO_REQ_PLAIN; /* (an inline one is re-encoded) */
    return PROTO_OK;
}

/* ---- requests: multibulk ------------------------------------------------ */

/*
 * Whether the last argument (<count> arguments, the command name at
 * <name>) may stream: the command has one key at a fixed position before
 * it, and the right arity, so the head alone routes the request and a
 * large value is forwarded as it arrives rather than held whole.
 */
static bool
streamable(const char *buf, struct proto_span name, size_t count)
{
    const struct redis_entry *e;
    int index;
    size_t last;

    index = redis_command_find(buf + name.off, name.len);
    if (index < 0)
        return false;
    e = &redis_table[index];
    if (e->cmd.kind != REDIS_KEY || e->keys != RK_NONE || e->cmd.first == 0 ||
        !arity_ok(e->cmd.arity, count))
        return false;
    last = e->cmd.last < 0 ? count - (size_t)-e->cmd.last : (size_t)e->cmd.last;
    return last < count - 1;
}

static int
parse_multibulk(const char *buf, size_t len, struct proto_request *rq)
{
    struct proto_span name = {0, 0};
    int64_t count, blen;
    size_t pos, end, i;
    int st;

    st = read_number(buf, len, 1, &count, &end);
    if (st == PROTO_AGAIN)
        return PROTO_AGAIN;
    if (st != PROTO_OK || count > REDIS_ARGS_MAX)
        return fatal(rq, "Protocol error: invalid multibulk length");
    if (count <= 0)
        return skip(rq, end);
    pos = end;
    i = 0;
    if (rq->progress != NULL && rq->progress->done > 0 &&
        rq->progress->done < (size_t)count && rq->progress->pos <= len) {
        /* arguments 0 .. done-1 were verified (and stored) by the calls
         * that said PROTO_AGAIN before */
        pos = rq->progress->pos;
        i = rq->progress->done;
        name = rq->progress->arg;
    }
    for (; i < (size_t)count; i++) {
        if (pos >= len)
            goto again;
        if (buf[pos] != '$')
            return fatal(rq, redis_expected_dollar[(unsigned char)buf[pos]]);
        st = read_number(buf, len, pos + 1, &blen, &end);
        if (st == PROTO_AGAIN)
            goto again;
        if (st != PROTO_OK || blen < 0)
            return fatal(rq, "Protocol error: invalid bulk length");
        /* the size is refused as soon as it is declared */
        if (rq->max != 0 && (uint64_t)end + (uint64_t)blen + 2 > rq->max)
            return fatal(rq, "Protocol error: request too large");
        if (i == 0)
            name = (struct proto_span){end, (size_t)blen};
        if (i > 0 && i == (size_t)count - 1 && blen >= PROTO_STREAM_MIN &&
            !rq->whole && streamable(buf, name, (size_t)count)) {
            rq->nargs = (size_t)count;
            if (rq->nargs > rq->argcap) {
                rq->nkeys = rq->nargs;
                return PROTO_KEYS;
            }
            rq->args[i] = (struct proto_span){end, (size_t)blen};
            rq->head = end;
            rq->body = (uint64_t)blen + 2;
            return classify(buf, rq);
        }
        if ((uint64_t)blen + 2 > len - end)
            goto again;
        if (buf[end + blen] != '\r' || buf[end + blen + 1] != '\n')
            return fatal(rq, "Protocol error: missing CRLF after bulk data");
        if (i < rq->argcap)
            rq->args[i] = (struct proto_span){end, (size_t)blen};
        pos = end + (size_t)blen + 2;
    }
    rq->nargs = (size_t)count;
    rq->head = pos;
    if (rq->nargs > rq->argcap) {
        rq->nkeys = rq->nargs; /* an upper bound until the args fit */
        return PROTO_KEYS;
    }
    return classify(buf, rq);
again:
    if (rq->progress != NULL) {
        rq->progress->pos = pos;
        rq->progress->done = i;
        rq->progress->arg = name;
    }
    return PROTO_AGAIN;
}

/* ---- requests: inline --------------------------------------------------- */

/* isspace() in the C locale, which sdssplitargs() skips between args. */
static bool
is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
           c == '\r';
}

static int
hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = lower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/*
 * The next argument of the inline line <p> (<n> bytes, no line end, no
 * NUL), from *<pos>, split as Redis' sdssplitargs() splits it: blanks
 * between arguments; "double quotes" with \n \r \t \b \a \xHH and \<any>
 * escapes; 'single quotes' with \' only; a closing quote must be followed
 * by a blank or the end; a quote may open inside an argument (a"b c" is
 * `ab c`). Returns 1 with the argument's length in *<arglen> (its bytes
 * in <out> unless NULL), 0 at the end of the line, -1 for unbalanced
 * quotes. at() gives '\0' past the end, as Redis' C string has there.
 */
#define at(j) ((j) < n ? p[j] : '\0')
static int
inline_arg(const char *p, size_t n, size_t *pos, char *out, size_t *arglen)
{
    size_t i = *pos, k = 0;
    bool inq = false, insq = false, done = false;
    char c;

    while (i < n && is_blank(p[i]))
        i++;
    if (i == n) {
        *pos = i;
        return 0;
    }
    while (!done) {
        bool emit = true;

        c = at(i);
        if (inq) {
            if (c == '\\' && at(i + 1) == 'x' && hex_value(at(i + 2)) >= 0 &&
                hex_value(at(i + 3)) >= 0) {
                c = (char)(hex_value(at(i + 2)) * 16 + hex_value(at(i + 3)));
                i += 3;
            } else if (c == '\\' && at(i + 1) != '\0') {
                i++;
                switch (p[i]) {
                case 'n':
                    c = '\n';
                    break;
                case 'r':
                    c = '\r';
                    break;
                case 't':
                    c = '\t';
                    break;
                case 'b':
                    c = '\b';
                    break;
                case 'a':
                    c = '\a';
                    break;
                default:
                    c = p[i];
                    break;
                }
            } else if (c == '"') {
                if (at(i + 1) != '\0' && !is_blank(at(i + 1)))
                    return -1;
                done = true;
                emit = false;
            } else if (c == '\0') {
                return -1; /* the line ended inside the quotes */
            }
        } else if (insq) {
            if (c == '\\' && at(i + 1) == '\'') {
                i++;
                c = '\'';
            } else if (c == '\'') {
                if (at(i + 1) != '\0' && !is_blank(at(i + 1)))
                    return -1;
                done = true;
                emit = false;
            } else if (c == '\0') {
                return -1;
            }
        } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t' ||
                   c == '\0') {
            done = true;
            emit = false;
        } else if (c == '"') {
            inq = true;
            emit = false;
        } else if (c == '\'') {
            insq = true;
            emit = false;
        }
        if (emit) {
            if (out != NULL)
                out[k] = c;
            k++;
        }
        /* past this byte, unless it is the end (an unquoted argument may
         * end there; a quoted one returned above) */
        if (at(i) != '\0')
            i++;
    }
    *pos = i;
    *arglen = k;
    return 1;
}
#undef at

/*
 * An inline (telnet) request: one line ending in "\n" or "\r\n", split
 * as Redis splits it and re-encoded as a multibulk into rq->scratch, so
 * the engine forwards one form only. A line longer than 64 KiB is
 * refused as Redis refuses it; an empty line is skipped.
 */
static int
parse_inline(const char *buf, size_t len, struct proto_request *rq)
{
    const char *nl, *nul;
    size_t linelen, pos, n, arglen, need, w, i;
    int st;

    /* The size limit is checked first, with or without the line end, so
     * that every prefix of a line names the same error. */
    nl = memchr(buf, '\n', len < REDIS_INLINE_MAX ? len : REDIS_INLINE_MAX);
    if (rq->max != 0 && (nl != NULL ? (size_t)(nl - buf) + 1 : len) > rq->max)
        return fatal(rq, "Protocol error: request too large");
    if (nl == NULL)
        return len >= REDIS_INLINE_MAX
                   ? fatal(rq, "Protocol error: too big inline request")
                   : PROTO_AGAIN;
    rq->flags = PROTO_REQ_INLINE;
    rq->head = (size_t)(nl - buf) + 1;
    linelen = (size_t)(nl - buf);
    if (linelen > 0 && buf[linelen - 1] == '\r')
        linelen--;
    /* Redis splits a C string: a NUL ends the line */
    nul = memchr(buf, '\0', linelen);
    if (nul != NULL)
        linelen = (size_t)(nul - buf);

    /* first pass: how many arguments, how long, how much scratch */
    for (pos = 0, n = 0, need = 0;
         (st = inline_arg(buf, linelen, &pos, NULL, &arglen)) == 1; n++) {
        if (n < rq->argcap)
            rq->args[n].len = arglen;
        need += 1 + ndigits(arglen) + 2 + arglen + 2;
    }
    if (st < 0)
        return fatal(rq, "Protocol error: unbalanced quotes in request");
    if (n == 0)
        return skip(rq, rq->head);
    rq->nargs = n;
    rq->scratchlen = need + 1 + ndigits(n) + 2;
    if (n > rq->argcap || rq->scratchlen > rq->scratchcap) {
        rq->nkeys = n;
        return PROTO_KEYS;
    }

    /* second pass: the multibulk, each argument's span into scratch */
    w = put_header(rq->scratch, '*', n);
    for (pos = 0, i = 0; i < n; i++) {
        w += put_header(rq->scratch + w, '$', rq->args[i].len);
        rq->args[i].off = w;
        inline_arg(buf, linelen, &pos, rq->scratch + w, &arglen);
        w += arglen;
        rq->scratch[w++] = '\r';
        rq->scratch[w++] = '\n';
    }
    return classify(rq->scratch, rq);
}

static int
redis_parse_request(const char *buf, size_t len, struct proto_request *rq)
{
    proto_request_reset(rq);
    if (len == 0)
        return PROTO_AGAIN;
    if (buf[0] == '*')
        return parse_multibulk(buf, len, rq);
    return parse_inline(buf, len, rq);
}

/* ---- replies ------------------------------------------------------------ */

/* A simple string or error line from <pos>: PROTO_OK with <end> after its
 * CRLF. A lone CR or LF cannot be in it (RESP2 has no escape for them). */
static int
read_line(const char *buf, size_t len, size_t pos, size_t *end)
{
    const char *cr = memchr(buf + pos, '\r', len - pos);
    size_t stop = cr != NULL ? (size_t)(cr - buf) : len;

    if (memchr(buf + pos, '\n', stop - pos) != NULL)
        return PROTO_FATAL;
    if (cr == NULL || stop + 1 >= len)
        return PROTO_AGAIN;
    if (buf[stop + 1] != '\n')
        return PROTO_FATAL;
    *end = stop + 2;
    return PROTO_OK;
}

/*
 * The RESP2 value at the start of <buf>: PROTO_OK with its length in
 * *<vlen>, PROTO_AGAIN while it is incomplete, PROTO_FATAL when it is not
 * RESP2. With <stream>, a top-level bulk of PROTO_STREAM_MIN bytes or more
 * is complete once its header is in: *<vlen> is the header, *<body> the
 * value and its CRLF (0 otherwise).
 *
 * Arrays are walked with an explicit stack of the elements still due at
 * each depth, at most REDIS_REPLY_DEPTH deep: whatever answers in a
 * member's place cannot make us recurse, and a declared count costs
 * nothing until its elements arrive.
 */
static int
resp_value(const char *buf, size_t len, bool stream, uint64_t *vlen,
           uint64_t *body)
{
    int64_t left[REDIS_REPLY_DEPTH];
    size_t pos = 0, end = 0;
    int depth = 0, st;
    int64_t n;

    *body = 0;
    for (;;) {
        if (pos >= len)
            return PROTO_AGAIN;
        switch (buf[pos]) {
        case '+':
        case '-':
            st = read_line(buf, len, pos + 1, &end);
            if (st != PROTO_OK)
                return st;
            break;
        case ':':
            st = read_number(buf, len, pos + 1, &n, &end);
            if (st != PROTO_OK)
                return st;
            break;
        case '$':
            st = read_number(buf, len, pos + 1, &n, &end);
            if (st != PROTO_OK)
                return st;
            if (n == -1) /* nil */
                break;
            if (n < 0)
                return PROTO_FATAL;
            if (stream && depth == 0 && n >= PROTO_STREAM_MIN) {
                *vlen = end;
                *body = (uint64_t)n + 2;
                return PROTO_OK;
            }
            if ((uint64_t)n + 2 > len - end)
                return PROTO_AGAIN;
            if (buf[end + n] != '\r' || buf[end + n + 1] != '\n')
                return PROTO_FATAL;
            end += (size_t)n + 2;
            break;
        case '*':
            st = read_number(buf, len, pos + 1, &n, &end);
            if (st != PROTO_OK)
                return st;
            if (n == -1 || n == 0) /* nil or empty: a whole value */
                break;
            if (n < 0 || n > REDIS_REPLY_ELEMENTS || depth == REDIS_REPLY_DEPTH)
                return PROTO_FATAL;
            left[depth++] = n;
            pos = end;
            continue;
        default:
            return PROTO_FATAL;
        }
        pos = end;
        /* a whole value: it may be the last element of enclosing arrays */
        while (depth > 0 && --left[depth - 1] == 0)
            depth--;
        if (depth == 0) {
            *vlen = pos;
            return PROTO_OK;
        }
    }
}

/*
 * Errors that say the member cannot serve at all, whatever the request:
 * twemproxy's redis_failure() list (-LOADING, -OOM, -BUSY), and
 * -MASTERDOWN (a replica cut from its master that refuses to serve stale
 * data), which is the same condition. -BUSYKEY, -READONLY, -MISCONF and
 * the like are answers about one request or one kind of request.
 */
static bool
is_member_failure(const char *buf, size_t len)
{
    static const char *const codes[] = {"LOADING", "OOM", "BUSY", "MASTERDOWN"};
    size_t i, n;

    for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        n = strlen(codes[i]);
        if (len > n + 1 && memcmp(buf + 1, codes[i], n) == 0 &&
            (buf[n + 1] == ' ' || buf[n + 1] == '\r'))
            return true;
    }
    return false;
}

static int
redis_parse_reply(const char *buf, size_t len, const struct proto_request *rq,
                  struct proto_reply *rp)
{
    int st;

    (void)rq; /* RESP2 replies describe themselves */
    rp->len = 0;
    rp->body = 0;
    rp->error = false;
    rp->member_failure = false;
    st = resp_value(buf, len, true, &rp->len, &rp->body);
    if (st != PROTO_OK) {
        rp->len = 0;
        rp->body = 0;
        return st;
    }
    if (buf[0] == '-') {
        rp->error = true;
        rp->member_failure = is_member_failure(buf, (size_t)rp->len);
    }
    return PROTO_OK;
}

long
redis_reply_elements(const char *buf, size_t len, struct proto_span *out,
                     size_t cap)
{
    uint64_t vlen, body;
    size_t pos;
    int64_t n, i;

    if (len == 0 || buf[0] != '*' ||
        read_number(buf, len, 1, &n, &pos) != PROTO_OK)
        return -1;
    if (n == -1)
        return 0;
    if (n < 0 || n > REDIS_REPLY_ELEMENTS)
        return -1;
    for (i = 0; i < n; i++) {
        if (resp_value(buf + pos, len - pos, false, &vlen, &body) != PROTO_OK)
            return -1;
        if ((uint64_t)i < cap)
            out[i] = (struct proto_span){pos, (size_t)vlen};
        pos += (size_t)vlen;
    }
    return (long)n;
}

/* A two-word command, <name> <arg> (<n> bytes), at <out>: its bytes, or 0
 * when it does not fit in <room>. */
static size_t
put_command2(char *out, size_t room, const char *name, const char *arg,
             size_t n)
{
    size_t nl = strlen(name), w;

    if (4 + ndigits(nl) + 5 + nl + ndigits(n) + 5 + n > room)
        return 0;
    w = put_header(out, '*', 2);
    w += put_header(out + w, '$', nl);
    memcpy(out + w, name, nl);
    w += nl;
    out[w++] = '\r';
    out[w++] = '\n';
    w += put_header(out + w, '$', n);
    memcpy(out + w, arg, n);
    w += n;
    out[w++] = '\r';
    out[w++] = '\n';
    return w;
}

int
redis_prelude(char *out, size_t cap, const char *auth, int db,
              unsigned *replies)
{
    size_t n = 0, k;

    *replies = 0;
    if (auth != NULL) {
        k = put_command2(out, cap, "AUTH", auth, strlen(auth));
        if (k == 0)
            return -1;
        n = k;
        (*replies)++;
    }
    if (db > 0) {
        char num[3 + sizeof(int) * 3];
        size_t d = ndigits((size_t)db), v = (size_t)db;

        for (size_t i = d; i > 0; i--, v /= 10)
            num[i - 1] = (char)('0' + v % 10);
        k = put_command2(out + n, cap - n, "SELECT", num, d);
        if (k == 0)
            return -1;
        n += k;
        (*replies)++;
    }
    return (int)n;
}

int
redis_reply_integer(const char *buf, size_t len, long long *value)
{
    int64_t n;
    size_t end;

    if (len == 0 || buf[0] != ':' ||
        read_number(buf, len, 1, &n, &end) != PROTO_OK)
        return -1;
    *value = n;
    return 0;
}

/* ---- error replies and the probe ---------------------------------------- */

/*
 * Whether <msg> starts with an error code: three or more capitals and a
 * blank ("CROSSSERVER Keys ...", "ERR ...", "NOAUTH ..."), as Redis'
 * replies do; such a message is sent as is after the '-'.
 */
static bool
has_code(const char *msg)
{
    size_t i = 0;

    while (msg[i] >= 'A' && msg[i] <= 'Z')
        i++;
    return i >= 3 && msg[i] == ' ';
}

static const struct proto_error_texts redis_errors = {
    .lead = "-",
    .kinds = {"ERR Connection refused", "ERR Connection timed out",
              "ERR Connection reset by peer", "ERR no member available"},
    .request = "ERR invalid request",
    .request_prefix = "ERR ",
    .has_code = has_code,
};

static size_t
redis_error_reply(char *out, size_t cap, int kind, const char *msg)
{
    return proto_error_reply(&redis_errors, out, cap, kind, msg);
}

static const char redis_ping[] = "*1\r\n$4\r\nPING\r\n";

/* 1 for +PONG, 0 for a prefix of it, -1 for anything else: -LOADING,
 * -NOAUTH, -MASTERDOWN or a stranger all mean "do not send keys here". */
static int
redis_probe_reply(const char *buf, size_t len)
{
    static const char pong[] = "+PONG\r\n";
    size_t n = sizeof(pong) - 1;

    if (len < n)
        return len == 0 || memcmp(buf, pong, len) == 0 ? 0 : -1;
    return memcmp(buf, pong, n) == 0 ? 1 : -1;
}

const struct proto proto_redis = {
    .name = "redis",
    .mode = CONF_MODE_REDIS,
    .parse_request = redis_parse_request,
    .parse_reply = redis_parse_reply,
    .error_reply = redis_error_reply,
    .probe = redis_ping,
    .probe_len = sizeof(redis_ping) - 1,
    .probe_reply = redis_probe_reply,
};
