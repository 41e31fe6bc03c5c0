# compat_util.py -- what the redis and memcache compat tests share
# (test_redis_compat.py, test_memcache_compat.py): a nutcracker.yml over
# four servers (weights 1:2:1:3, named and unnamed, one unnamed on port
# 11211), the keys written through each of its pools, where `chash lookup
# --config` puts them, a run of the real nutcracker on the file and then
# of chashd on the same file unchanged, and the checks on a placement
# (complete, tags together) and between two (key for key). What is
# protocol-specific -- writing the keys through a proxy, asking the
# servers where they are -- is a Cluster subclass's write_all() and
# where() in each test file.
# SPDX-License-Identifier: BSD-2-Clause
import os
import subprocess

from base_util import CHASH, CHASHD, free_port, wait_for
from redis_util import Nutcracker, flush_all, port_is_free, spread_keys

TAG_FIELDS = ("a", "b", "cart", "x{y}")


def pool_keys(pool, nplain, ntags, nlong=0):
    """The keys written through <pool>: <nplain> plain ones of varied
    shapes, 100 short ones, <nlong> of lengths up to 200, and <ntags> tag
    groups ("{t7}", tag_groups). Prefixed by the pool, so the pools' keys
    never meet on a server."""
    keys = ["%s:user:%d:%x" % (pool, i, (i * 2654435761) & 0xffffffff)
            for i in range(nplain)]
    keys += ["%s:k%d" % (pool, i) for i in range(100)]
    keys += ["%s:%s" % (pool, "x" * (i * 7 % 200)) + str(i)
             for i in range(nlong)]
    for group in tag_groups(pool, ntags):
        keys += group
    return keys


def tag_groups(pool, ntags):
    """The keys of <pool> that share a hash tag, a list per tag."""
    return [["%s:obj{t%d}:%s" % (pool, t, f) for f in TAG_FIELDS]
            for t in range(ntags)]


def twemproxy_name(srv):
    """The name twemproxy hashes for an unnamed server: host:port, or the
    host alone when the port is 11211 (libmemcached's rule)."""
    return srv.host if srv.port == 11211 else srv.addr


class Cluster:
    """Four servers (<servers>, started by the subclass; the third on port
    11211 of some 127.0.0.x) and the nutcracker.yml naming them: weights
    1, 2, 1, 3; the first and last named, the second and third unnamed.
    <pools>: [(pool, distribution, hash, hash_tag)], each pool's keys
    pool_keys(pool, nplain, ntags, nlong); <redis>: the pools say `redis:
    true`; <narrow>: the pools whose hash sends (nearly) every key to one
    server. A subclass writes the keys (write_all()) and asks the servers
    where they are ({key: addr}, where())."""

    def __init__(self, procs, servers, pools, nplain, ntags, nlong=0,
                 redis=False, narrow=()):
        self.procs = procs
        self.servers = servers
        self.weights = [1, 2, 1, 3]
        self.labels = ["cache-1", None, None, "cache-4"]
        self.nplain, self.ntags, self.nlong = nplain, ntags, nlong
        self.tagged = {p for p, _, _, tagged in pools if tagged}
        self.narrow = set(narrow)
        self.member = {}      # the name `chash lookup` prints -> addr
        for srv, label in zip(self.servers, self.labels):
            self.member[label or twemproxy_name(srv)] = srv.addr
        self.pools = {}       # pool -> its listen port
        text = []
        for pool, dist, h, tagged in pools:
            port = free_port()
            self.pools[pool] = port
            text += ["%s:" % pool, "  listen: 127.0.0.1:%d" % port,
                     "  hash: %s" % h, "  distribution: %s" % dist]
            if redis:
                text.append("  redis: true")
            text += ["  timeout: 2000", "  server_connections: 1",
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

    def keys(self, pool):
        return pool_keys(pool, self.nplain, self.ntags, self.nlong)

    def tag_groups(self, pool):
        return tag_groups(pool, self.ntags)

    def lookup(self):
        """{key: server addr} from `chash lookup --config` on the file."""
        out = {}
        for pool in self.pools:
            got = spread_keys(self.conf, pool, self.keys(pool), CHASH)
            for k, m in got.items():
                assert m in self.member, "lookup names %r" % m
                out[k] = self.member[m]
        return out


def kill(proxy):
    proxy.proc.kill()
    proxy.proc.wait(timeout=5)


def run_nutcracker(cluster, read_back=None):
    """{key: server addr} after the real nutcracker on the file wrote
    every pool's keys to the flushed servers; read_back(), if given, runs
    while nutcracker is still up."""
    nc = Nutcracker(cluster.procs, cluster.text, name="nutcracker")
    flush_all(cluster.servers)
    cluster.write_all()
    where = cluster.where()
    if read_back:
        read_back()
    kill(nc)
    return where


def check_complete(cluster, where):
    """Every key written is on exactly one server; every pool put keys on
    every server (so the comparison covered each); a hash tag's keys share
    a server in the pools with hash_tag."""
    expected = {k for pool in cluster.pools for k in cluster.keys(pool)}
    assert set(where) == expected, (
        "%d keys missing, %d extra" % (len(expected - set(where)),
                                       len(set(where) - expected)))
    for pool in cluster.pools:
        used = {where[k] for k in cluster.keys(pool)}
        if pool in cluster.narrow:
            # one server, or two in the ~1% of runs where a point of the
            # ring (ports are random) falls below 32768 itself
            assert len(used) <= 2, (pool, used)
        else:
            assert used == {s.addr for s in cluster.servers}, (pool, used)
        if pool in cluster.tagged:
            for group in cluster.tag_groups(pool):
                assert len({where[k] for k in group}) == 1, group


def diff(a, b, what_a, what_b):
    """"" when every key of <a> is on the same server in <b>; else how
    many differ, in which pools, and one of them."""
    wrong = sorted(k for k in a if a[k] != b.get(k))
    if not wrong:
        return ""
    k = wrong[0]
    pools = sorted({w.split(":")[0] for w in wrong})
    return "%d of %d keys differ (pools %s), e.g. %s: %s %s, %s %s" % (
        len(wrong), len(a), pools, k, what_a, a[k], what_b, b.get(k))


def check_nutcracker_places_as_lookup(cluster, read_back=None):
    """The file as nutcracker runs it, against the ring chash builds from
    it: every key of every pool on the server `chash lookup --config`
    names."""
    where = run_nutcracker(cluster, read_back)
    check_complete(cluster, where)
    msg = diff(where, cluster.lookup(), "nutcracker", "chash lookup")
    assert not msg, msg


def check_weights_show(cluster, pool):
    """The weights 1:2:1:3 are not ignored: in <pool>, by `chash lookup
    --config`, the weight-3 server holds clearly more keys than the
    weight-1 one."""
    lk = spread_keys(cluster.conf, pool, cluster.keys(pool), CHASH)
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


def check_chashd_places_as_nutcracker(cluster, chashd_class,
                                      read_back=None):
    """The file run by nutcracker, then (servers flushed) by chashd
    (<chashd_class>: ChashdRedis, ChashdMemcache) on the file unchanged:
    every key of every pool lands on the same server through both. The
    running chashd is returned."""
    by_nc = run_nutcracker(cluster, read_back)
    check_complete(cluster, by_nc)

    flush_all(cluster.servers)
    assert all(not s.keys() for s in cluster.servers)
    wait_admin_port_free()
    cd = chashd_class(cluster.procs, cluster.text,
                      name="chashd-nutcracker-yml")
    with open(cd.conf) as f:
        assert f.read() == cluster.text
    cluster.write_all()
    by_chashd = cluster.where()
    check_complete(cluster, by_chashd)
    msg = diff(by_nc, by_chashd, "nutcracker", "chashd")
    assert not msg, msg
    return cd


def check_file_is_nutcrackers(cluster):
    """`chashd -t` on the unchanged nutcracker.yml passes, and nutcracker
    itself takes the file (it is really nutcracker's)."""
    r = subprocess.run([CHASHD, "-t", "-c", cluster.conf],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "configuration OK" in r.stdout
    kill(Nutcracker(cluster.procs, cluster.text, name="nutcracker-check"))
