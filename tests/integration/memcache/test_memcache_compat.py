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
from compat_util import (Cluster, check_chashd_places_as_nutcracker,
                         check_file_is_nutcrackers,
                         check_nutcracker_places_as_lookup,
                         check_weights_show)
from mc_util import (ChashdMemcache, Mc, MemcachedServer,
                     need_chashd_memcache, placement,
                     start_memcached_on_free_host)

# (pool, distribution, hash, hash_tag)
POOLS = [("p_ketama_fnv1a_64", "ketama", "fnv1a_64", False),
         ("p_ketama_md5", "ketama", "md5", False),
         ("p_ketama_crc32a", "ketama", "crc32a", False),
         ("p_ketama_one_at_a_time", "ketama", "one_at_a_time", False),
         ("p_tag_murmur", "ketama", "murmur", True)]

NPLAIN = 1800      # plain keys per pool
NTAGS = 50         # tags per pool, 4 keys each
NLONG = 20         # keys of lengths up to 200 per pool


class McCluster(Cluster):
    """Four memcacheds and the nutcracker.yml naming them (Cluster), with
    the POOLS; every pool's keys include braces (tags only where the pool
    has hash_tag)."""

    def __init__(self, procs):
        servers = [MemcachedServer(procs), MemcachedServer(procs),
                   start_memcached_on_free_host(procs, 11211),
                   MemcachedServer(procs)]
        super().__init__(procs, servers, POOLS, NPLAIN, NTAGS, NLONG)

    def write_all(self):
        """Every pool's keys through the proxy, 400 sets per write, the
        value being the key (a member holding a key under another key's
        name would show)."""
        for pool, port in self.pools.items():
            keys = self.keys(pool)
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
            keys = self.keys(pool)
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
        keys = [k for pool in self.pools for k in self.keys(pool)]
        return placement(self.servers, keys)


def test_nutcracker_places_as_chash_lookup_config(procs):
    """The nutcracker.yml as nutcracker runs it, against the ring chash
    builds from the same file: every key of every pool on the member
    `chash lookup --config` names (weights, names, the 11211 rule, hash
    tags); multi-gets through nutcracker return every value in order."""
    cluster = McCluster(procs)
    check_nutcracker_places_as_lookup(cluster, cluster.read_all)


def test_unequal_weights_show_in_placement(procs):
    """The weights 1:2:1:3 are not ignored: in the md5 pool the weight-3
    member holds clearly more keys than a weight-1 one."""
    check_weights_show(McCluster(procs), "p_ketama_md5")


def test_chashd_places_every_key_as_nutcracker(procs):
    """The same file, unchanged, run by nutcracker and then by chashd in
    front of the same memcacheds: every key of every pool lands on the
    same member through both, and multi-gets through chashd return every
    value in order."""
    need_chashd_memcache()
    cluster = McCluster(procs)
    cd = check_chashd_places_as_nutcracker(cluster, ChashdMemcache,
                                           cluster.read_all)
    cluster.read_all(step=97)
    assert cd.alive()


def test_chashd_check_accepts_the_file(procs):
    """`chashd -t` on the unchanged nutcracker.yml passes, and nutcracker
    itself takes the file (it is really nutcracker's)."""
    need_chashd_memcache()
    check_file_is_nutcrackers(McCluster(procs))
