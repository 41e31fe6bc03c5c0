# test_redis_compat.py -- a nutcracker.yml with redis pools, one per
# twemproxy hash function (ketama, unequal weights, named and unnamed
# servers, one on port 11211, hash tags), run by the REAL nutcracker and by
# chashd on the very same file in front of the very same redis-servers:
# thousands of keys written through each (flushed in between), and which
# server holds every key compared key for key. `chash lookup --config` on
# the file must agree with nutcracker too (that part runs today).
# SPDX-License-Identifier: BSD-2-Clause
import os
import subprocess

from conftest import CHASH, CHASHD, free_port, wait_for
from redis_util import (ChashdRedis, Nutcracker, RedisServer, Resp,
                        Simple, flush_all, need_chashd_redis, placement,
                        port_is_free, spread_keys, start_redis_on_free_host)

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


def pool_keys(pool):
    """The keys written through <pool>: plain ones of varied shapes, and
    tagged ones ("{t7}" groups). Prefixed by the pool, so the pools'
    keys never meet on a server."""
    keys = ["%s:user:%d:%x" % (pool, i, (i * 2654435761) & 0xffffffff)
            for i in range(NPLAIN)]
    keys += ["%s:k%d" % (pool, i) for i in range(100)]
    for t in range(NTAGS):
        keys += ["%s:obj{t%d}:%s" % (pool, t, f)
                 for f in ("a", "b", "cart", "x{y}")]
    return keys


def tag_groups(pool):
    return [["%s:obj{t%d}:%s" % (pool, t, f)
             for f in ("a", "b", "cart", "x{y}")] for t in range(NTAGS)]


def twemproxy_name(srv):
    """The name twemproxy hashes for an unnamed server: host:port, or the
    host alone when the port is 11211 (libmemcached's rule)."""
    return srv.host if srv.port == 11211 else srv.addr


class Cluster:
    """Four redis-servers and the nutcracker.yml naming them: weights
    1, 2, 1, 3; the first and last named, the second unnamed, the third
    unnamed on port 11211 (of some 127.0.0.x)."""

    def __init__(self, procs):
        self.procs = procs
        self.servers = [RedisServer(procs), RedisServer(procs),
                        start_redis_on_free_host(procs, 11211),
                        RedisServer(procs)]
        self.weights = [1, 2, 1, 3]
        self.labels = ["cache-1", None, None, "cache-4"]
        # what `chash lookup` prints for each server: its ketama name
        self.member = {}
        for srv, label in zip(self.servers, self.labels):
            self.member[label or twemproxy_name(srv)] = srv.addr
        self.pools = {}
        text = []
        for h in TW_HASHES:
            pool = "p_" + h
            port = free_port()
            self.pools[pool] = port
            text += ["%s:" % pool, "  listen: 127.0.0.1:%d" % port,
                     "  hash: %s" % h, "  distribution: ketama",
                     "  redis: true", "  timeout: 2000",
                     "  server_connections: 1", "  preconnect: true",
                     "  auto_eject_hosts: false"]
            if h in TAGGED:
                text.append('  hash_tag: "{}"')
            text.append("  servers:")
            for srv, w, label in zip(self.servers, self.weights,
                                     self.labels):
                text.append("    - %s:%d%s" % (srv.addr, w,
                                              " " + label if label else ""))
        self.text = "\n".join(text) + "\n"
        self.conf = os.path.join(str(procs.tmp), "nutcracker.yml")
        with open(self.conf, "w") as f:
            f.write(self.text)

    def write_all(self, ports):
        """Write every pool's keys through the proxy listening on
        ports[pool]: half with pipelined SETs, half with MSETs of 10 keys
        (split by the proxy). The value is the key, so a server holding a
        key under another key's name would show."""
        for pool, port in ports.items():
            keys = pool_keys(pool)
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

    def lookup(self):
        """{key: server addr} from `chash lookup --config` on the file."""
        out = {}
        for pool in self.pools:
            got = spread_keys(self.conf, pool, pool_keys(pool), CHASH)
            for k, m in got.items():
                assert m in self.member, "lookup names %r" % m
                out[k] = self.member[m]
        return out


def run_nutcracker(procs, cluster):
    nc = Nutcracker(procs, cluster.text, name="nutcracker")
    flush_all(cluster.servers)
    cluster.write_all(cluster.pools)
    where = cluster.where()
    procs_kill(nc)
    return where


def procs_kill(proxy):
    proxy.proc.kill()
    proxy.proc.wait(timeout=5)


def check_complete(cluster, where):
    """Every key written is on exactly one server; every pool put keys on
    every server (so the comparison covered each); a hash tag's keys share
    a server in the pools with hash_tag."""
    expected = set()
    for pool in cluster.pools:
        expected.update(pool_keys(pool))
    assert set(where) == expected, (
        "%d keys missing, %d extra" % (len(expected - set(where)),
                                       len(set(where) - expected)))
    for pool in cluster.pools:
        used = {where[k] for k in pool_keys(pool)}
        if pool[2:] in NARROW:
            # one server, or two in the ~1% of runs where a point of the
            # ring (ports are random) falls below 32768 itself
            assert len(used) <= 2, (pool, used)
        else:
            assert used == {s.addr for s in cluster.servers}, (pool, used)
        if pool[2:] in TAGGED:
            for group in tag_groups(pool):
                assert len({where[k] for k in group}) == 1, group


def diff(a, b, what_a, what_b):
    wrong = sorted(k for k in a if a[k] != b.get(k))
    if not wrong:
        return ""
    k = wrong[0]
    return "%d of %d keys differ, e.g. %s: %s %s, %s %s" % (
        len(wrong), len(a), k, what_a, a[k], what_b, b.get(k))


def test_nutcracker_places_as_chash_lookup_config(procs):
    """The nutcracker.yml as nutcracker runs it, against the ring chash
    builds from the same file: every key of every pool (12 hashes) on
    the server `chash lookup --config` names."""
    cluster = Cluster(procs)
    where = run_nutcracker(procs, cluster)
    check_complete(cluster, where)
    msg = diff(where, cluster.lookup(), "nutcracker", "chash lookup")
    assert not msg, msg


def test_unequal_weights_show_in_placement(procs):
    """The weights 1:2:1:3 are not ignored by either side: in the md5 pool
    the weight-3 server holds clearly more keys than a weight-1 one."""
    cluster = Cluster(procs)
    lk = spread_keys(cluster.conf, "p_md5", pool_keys("p_md5"), CHASH)
    count = {m: 0 for m in cluster.member}
    for m in lk.values():
        count[m] += 1
    assert count["cache-4"] > 2 * count["cache-1"], count


def wait_admin_port_free():
    """An unchanged nutcracker.yml has no `global:`, so chashd opens its
    admin API on the default 127.0.0.1:8404; another suite's chashd may
    hold it for a moment."""
    wait_for(lambda: port_is_free(8404), timeout=30,
             what="127.0.0.1:8404 (chashd's default admin) to be free")


def test_chashd_places_every_key_as_nutcracker(procs):
    """The same file, unchanged, started by nutcracker and then by chashd
    on the same servers: every key of every pool lands on the same
    server through both."""
    need_chashd_redis()
    cluster = Cluster(procs)
    by_nc = run_nutcracker(procs, cluster)
    check_complete(cluster, by_nc)

    flush_all(cluster.servers)
    wait_admin_port_free()
    cd = ChashdRedis(procs, cluster.text, name="chashd-nutcracker-yml")
    with open(cd.conf) as f:
        assert f.read() == cluster.text
    cluster.write_all(cluster.pools)
    by_chashd = cluster.where()
    check_complete(cluster, by_chashd)
    msg = diff(by_nc, by_chashd, "nutcracker", "chashd")
    assert not msg, msg

    # and reads through chashd find every key where it was written
    for pool, port in cluster.pools.items():
        keys = pool_keys(pool)[::7]
        with Resp(port) as c:
            got = c.pipeline([("GET", k) for k in keys])
        assert got == [k.encode() for k in keys], pool


def test_chashd_check_accepts_the_file(procs):
    """`chashd -t` on the unchanged nutcracker.yml passes."""
    need_chashd_redis()
    cluster = Cluster(procs)
    r = subprocess.run([CHASHD, "-t", "-c", cluster.conf],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "configuration OK" in r.stdout
    # the file really is nutcracker's
    nc = Nutcracker(procs, cluster.text, name="nutcracker-check")
    procs_kill(nc)
