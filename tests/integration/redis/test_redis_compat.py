# test_redis_compat.py -- a nutcracker.yml with redis pools, one per
# twemproxy hash function (ketama, unequal weights, named and unnamed
# servers, one on port 11211, hash tags), run by the REAL nutcracker and by
# chashd on the very same file in front of the very same redis-servers:
# thousands of keys written through each (flushed in between), and which
# server holds every key compared key for key. `chash lookup --config` on
# the file must agree with nutcracker too (that part runs today).
# SPDX-License-Identifier: BSD-2-Clause
from compat_util import (Cluster, check_chashd_places_as_nutcracker,
                         check_file_is_nutcrackers,
                         check_nutcracker_places_as_lookup,
                         check_weights_show)
from redis_util import (ChashdRedis, RedisServer, Resp, Simple,
                        need_chashd_redis, placement,
                        start_redis_on_free_host)

# Every hash function twemproxy has (nc_hashkit.h), all of which chash
# implements with twemproxy's exact results (lib/hash.c).
TW_HASHES = ["one_at_a_time", "md5", "crc16", "crc32", "crc32a", "fnv1_64",
             "fnv1a_64", "fnv1_32", "fnv1a_32", "hsieh", "murmur", "jenkins"]

# twemproxy's "crc32" is Cache::Memcached's: the top 15 bits of CRC-32, so
# every key hashes below 32768 and ketama (points over 2^32) sends every
# key to the one server owning the ring's start. Both sides must still
# agree on which.
NARROW = {"crc32"}

# Pools with hash_tag: every other one, so both rules are checked.
TAGGED = set(TW_HASHES[::2])

NPLAIN = 1500      # plain keys per pool
NTAGS = 60         # tags per pool, 4 keys each


class RedisCluster(Cluster):
    """Four redis-servers and the nutcracker.yml naming them (Cluster):
    a ketama pool "p_<hash>" per hash function."""

    def __init__(self, procs):
        servers = [RedisServer(procs), RedisServer(procs),
                   start_redis_on_free_host(procs, 11211),
                   RedisServer(procs)]
        super().__init__(procs, servers,
                         [("p_" + h, "ketama", h, h in TAGGED)
                          for h in TW_HASHES],
                         NPLAIN, NTAGS, redis=True,
                         narrow={"p_" + h for h in NARROW})

    def write_all(self):
        """Write every pool's keys through the proxy listening on its
        port: half with pipelined SETs, half with MSETs of 10 keys (split
        by the proxy). The value is the key, so a server holding a key
        under another key's name would show."""
        for pool, port in self.pools.items():
            keys = self.keys(pool)
            half = len(keys) // 2
            with Resp(port) as c:
                for i in range(0, half, 500):
                    part = keys[i:min(i + 500, half)]
                    r = c.pipeline([("SET", k, k) for k in part])
                    assert r == [Simple("OK")] * len(part), (pool, r[:3])
                cmds = []
                for i in range(half, len(keys), 10):
                    args = ["MSET"]
                    for k in keys[i:i + 10]:
                        args += [k, k]
                    cmds.append(tuple(args))
                r = c.pipeline(cmds)
                assert r == [Simple("OK")] * len(cmds), (pool, r[:3])

    def where(self):
        """{key: server addr}, and every value equal to its key."""
        w = placement(self.servers)
        for srv in self.servers:
            with srv.client() as c:
                keys = [k for k, a in w.items() if a == srv.addr]
                vals = []
                for i in range(0, len(keys), 1000):
                    vals += c.pipeline([("GET", k) for k in keys[i:i + 1000]])
                bad = [k for k, v in zip(keys, vals) if v != k.encode()]
                assert not bad, "%s holds %r = %r" % (srv.addr, bad[0],
                                                      vals[0])
        return w


def test_nutcracker_places_as_chash_lookup_config(procs):
    """The nutcracker.yml as nutcracker runs it, against the ring chash
    builds from the same file: every key of every pool (12 hashes) on
    the server `chash lookup --config` names."""
    check_nutcracker_places_as_lookup(RedisCluster(procs))


def test_unequal_weights_show_in_placement(procs):
    """The weights 1:2:1:3 are not ignored by either side: in the md5 pool
    the weight-3 server holds clearly more keys than a weight-1 one."""
    check_weights_show(RedisCluster(procs), "p_md5")


def test_chashd_places_every_key_as_nutcracker(procs):
    """The same file, unchanged, started by nutcracker and then by chashd
    on the same servers: every key of every pool lands on the same
    server through both."""
    need_chashd_redis()
    cluster = RedisCluster(procs)
    check_chashd_places_as_nutcracker(cluster, ChashdRedis)

    # and reads through chashd find every key where it was written
    for pool, port in cluster.pools.items():
        keys = cluster.keys(pool)[::7]
        with Resp(port) as c:
            got = c.pipeline([("GET", k) for k in keys])
        assert got == [k.encode() for k in keys], pool


def test_chashd_check_accepts_the_file(procs):
    """`chashd -t` on the unchanged nutcracker.yml passes."""
    need_chashd_redis()
    check_file_is_nutcrackers(RedisCluster(procs))
