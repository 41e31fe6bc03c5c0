# test_memcache_compat.py -- chashd as a drop-in for nutcracker in front
# of memcached: one nutcracker.yml with memcache pools (no `redis:` key:
# twemproxy's rule), four memcacheds with unequal weights, named and
# unnamed servers, one unnamed on port 11211 (whose ketama name is the
# host alone), and pools on ketama+fnv1a_64, ketama+md5, modula+crc32,
# ketama+one_at_a_time and a hash_tag "{}" pool. Thousands of keys are
# written through the REAL nutcracker, which member holds each is asked of
# the members themselves; then everything is flushed, nutcracker stopped,
# chashd started on the SAME unchanged file and the same keys written
# again: every key must sit on the same member. `chash lookup --config`
# on the file must agree with nutcracker too (that part needs no memcache
# mode in chashd).
# SPDX-License-Identifier: BSD-2-Clause
import os
import subprocess

from conftest import CHASHD, wait_for
from mc_util import (ChashdMemcache, Mc, MemcachedServer, Nutcracker,
                     flush_all, lookup, need_chashd_memcache, placement,
                     port_is_free, start_memcached_on_free_host)
from conftest import free_port

# (pool, distribution, hash, hash_tag)
POOLS = [("p_ketama_fnv1a_64", "ketama", "fnv1a_64", False),
         ("p_ketama_md5", "ketama", "md5", False),
         ("p_ketama_crc32a", "ketama", "crc32a", False),
         ("p_ketama_one_at_a_time", "ketama", "one_at_a_time", False),
         ("p_tag_murmur", "ketama", "murmur", True)]
TAGGED = {p for p, _, _, t in POOLS if t}

NPLAIN = 1800      # plain keys per pool
NTAGS = 50         # tags per pool, 4 keys each


def pool_keys(pool):
    """The keys written through <pool>: plain ones of varied shapes and
    lengths, and in every pool keys with braces (tags only where the pool
    has hash_tag). Prefixed by the pool, so pools never share a key."""
    keys = ["%s:user:%d:%x" % (pool, i, (i * 2654435761) & 0xffffffff)
            for i in range(NPLAIN)]
    keys += ["%s:k%d" % (pool, i) for i in range(100)]
    keys += ["%s:%s" % (pool, "x" * (i * 7 % 200)) + str(i)
             for i in range(20)]
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
    """Four memcacheds and the nutcracker.yml naming them: weights 1, 2,
    1, 3; the first and last named, the second unnamed, the third unnamed
    on port 11211 of some 127.0.0.x."""

    def __init__(self, procs):
        self.procs = procs
        self.servers = [MemcachedServer(procs), MemcachedServer(procs),
                        start_memcached_on_free_host(procs, 11211),
                        MemcachedServer(procs)]
        self.weights = [1, 2, 1, 3]
        self.labels = ["cache-1", None, None, "cache-4"]
        self.member = {}      # the name `chash lookup` prints -> addr
        for srv, label in zip(self.servers, self.labels):
            self.member[label or twemproxy_name(srv)] = srv.addr
        self.pools = {}
        text = []
        for pool, dist, h, tagged in POOLS:
            port = free_port()
            self.pools[pool] = port
            text += ["%s:" % pool, "  listen: 127.0.0.1:%d" % port,
                     "  hash: %s" % h, "  distribution: %s" % dist,
                     "  timeout: 2000", "  server_connections: 1",
                     "  preconnect: true", "  auto_eject_hosts: false"]
            if tagged:
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

    def write_all(self):
        """Every pool's keys through the proxy, 400 sets per write, the
        value being the key (a member holding a key under another key's
        name would show)."""
        for pool, port in self.pools.items():
            keys = pool_keys(pool)
            with Mc(port, timeout=10) as c:
                for i in range(0, len(keys), 400):
                    part = keys[i:i + 400]
                    c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n"
                                    % (k.encode(), len(k), k.encode())
                                    for k in part))
                    got = [c.unit() for _ in part]
                    assert got == [b"STORED\r\n"] * len(part), \
                        (pool, [g for g in got if g != b"STORED\r\n"][:3])

    def read_all(self, step=40):
        """Every pool's keys read back through the proxy with multi-gets
        of <step> keys: each value is its key, in the key order asked."""
        for pool, port in self.pools.items():
            keys = pool_keys(pool)
            with Mc(port, timeout=10) as c:
                for i in range(0, len(keys), step):
                    part = keys[i:i + step]
                    c.send(b"get %s\r\n" % " ".join(part).encode())
                    units = c.get_reply()
                    want = [b"VALUE %s 0 %d\r\n%s\r\n" % (
                        k.encode(), len(k), k.encode()) for k in part]
                    assert units == want + [b"END\r\n"], \
                        (pool, i, units[:2], len(units))

    def where(self):
        """{key: member addr} of every pool's keys, asked of the members."""
        keys = [k for pool in self.pools for k in pool_keys(pool)]
        return placement(self.servers, keys)

    def lookup(self):
        """{key: member addr} from `chash lookup --config` on the file."""
        out = {}
        for pool in self.pools:
            for k, m in lookup(self.conf, pool, pool_keys(pool)).items():
                assert m in self.member, "lookup names %r" % m
                out[k] = self.member[m]
        return out


def kill(proxy):
    proxy.proc.kill()
    proxy.proc.wait(timeout=5)


def run_nutcracker(procs, cluster):
    nc = Nutcracker(procs, cluster.text, name="nutcracker")
    flush_all(cluster.servers)
    cluster.write_all()
    where = cluster.where()
    cluster.read_all()
    kill(nc)
    return where


def check_complete(cluster, where):
    """Every key written is on exactly one member; every pool put keys on
    every member (so the comparison covered each); a tag's keys share a
    member in the pools with hash_tag."""
    expected = {k for pool in cluster.pools for k in pool_keys(pool)}
    assert set(where) == expected, (
        "%d keys missing, %d extra" % (len(expected - set(where)),
                                       len(set(where) - expected)))
    for pool in cluster.pools:
        used = {where[k] for k in pool_keys(pool)}
        assert used == {s.addr for s in cluster.servers}, (pool, used)
        if pool in TAGGED:
            for group in tag_groups(pool):
                assert len({where[k] for k in group}) == 1, group


def diff(a, b, what_a, what_b):
    wrong = sorted(k for k in a if a[k] != b.get(k))
    if not wrong:
        return ""
    k = wrong[0]
    pools = sorted({w.split(":")[0] for w in wrong})
    return "%d of %d keys differ (pools %s), e.g. %s: %s %s, %s %s" % (
        len(wrong), len(a), pools, k, what_a, a[k], what_b, b.get(k))


def test_nutcracker_places_as_chash_lookup_config(procs):
    """The nutcracker.yml as nutcracker runs it, against the ring chash
    builds from the same file: every key of every pool on the member
    `chash lookup --config` names (weights, names, the 11211 rule, hash
    tags)."""
    cluster = Cluster(procs)
    where = run_nutcracker(procs, cluster)
    check_complete(cluster, where)
    msg = diff(where, cluster.lookup(), "nutcracker", "chash lookup")
    assert not msg, msg


def test_unequal_weights_show_in_placement(procs):
    """The weights 1:2:1:3 are not ignored: in the md5 pool the weight-3
    member holds clearly more keys than a weight-1 one."""
    cluster = Cluster(procs)
    lk = lookup(cluster.conf, "p_ketama_md5", pool_keys("p_ketama_md5"))
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
    """The same file, unchanged, run by nutcracker and then by chashd in
    front of the same memcacheds: every key of every pool lands on the
    same member through both, and multi-gets through chashd return every
    value in order."""
    need_chashd_memcache()
    cluster = Cluster(procs)
    by_nc = run_nutcracker(procs, cluster)
    check_complete(cluster, by_nc)

    flush_all(cluster.servers)
    assert all(not s.keys() for s in cluster.servers)
    wait_admin_port_free()
    cd = ChashdMemcache(procs, cluster.text, name="chashd-nutcracker-yml")
    with open(cd.conf) as f:
        assert f.read() == cluster.text
    cluster.write_all()
    by_chashd = cluster.where()
    check_complete(cluster, by_chashd)
    msg = diff(by_nc, by_chashd, "nutcracker", "chashd")
    assert not msg, msg
    cluster.read_all(step=97)
    assert cd.alive()


def test_chashd_check_accepts_the_file(procs):
    """`chashd -t` on the unchanged nutcracker.yml passes, and nutcracker
    itself takes the file (it is really nutcracker's)."""
    need_chashd_memcache()
    cluster = Cluster(procs)
    r = subprocess.run([CHASHD, "-t", "-c", cluster.conf],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "configuration OK" in r.stdout
    kill(Nutcracker(procs, cluster.text, name="nutcracker-check"))
