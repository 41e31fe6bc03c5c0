# test_migration_warmup.py -- the warm-up of a memcache pool (`migration:
# warmup`) as a user checks it, on real memcached processes behind chashd
# with its admin API: keys set through chashd on 3 members, a 4th added
# (admin API, or a reload); then each command on a key whose member
# changed is served as if the key had never moved (its value read off the
# old member and added to the new one with its flags and TTL: get, a
# multi-key get in key order, gets, gat, touch, incr, append, add,
# meta mg), a delete deletes it on the old member too (no later warm-up
# brings it back), a set wins over the old copy, keys_moved_by_traffic
# counts exactly the keys copied; the window ends (phase done, `last`),
# after which an untouched key is a miss (the documented limit); a second
# change ends a warm-up and starts another; `migration: off` (the
# default) moves nothing, which is what makes every check here fail on an
# engine without the warm-up. Owners before and after come from `chash
# lookup --config` on the ring files, checked against the API's lookup.
# Every process is started through the test's Procs (killed at
# teardown); every wait is bounded.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import signal
import time

import pytest

from admin_util import CHASH, Api
from base_util import free_port, wait_for
from mc_util import Mc, MemcachedServer, spread_keys
from redis_util import start_chashd

POOL = "cache"
TTL = 300          # the exptime of the keys set with one (s)
SLACK = 2          # memcached's clock ticks once a second


class Cache:
    """memcacheds m1..m<n> in pool `cache` of a chashd with the admin API
    (ketama/md5 on the member names), and <spares> more (m<n+1>..)
    started empty for adds. <migration>: the pool's `migration:` (None:
    left out, the default); <warmup>: `migration_warmup:`."""

    def __init__(self, procs, n=3, spares=1, migration="warmup",
                 warmup="60s"):
        self.procs = procs
        self.tmp = str(procs.tmp)
        self.servers = {}
        for i in range(n + spares):
            self.servers["m%d" % (i + 1)] = MemcachedServer(procs)
        self.members = ["m%d" % (i + 1) for i in range(n)]
        self.migration_mode = migration
        self.warmup = warmup
        self.port, self.aport = free_port(), free_port()
        self.conf = os.path.join(self.tmp, "chashd.yml")
        self.log_path = os.path.join(self.tmp, "chashd.log")
        self._rings = 0
        self.write_conf(self.members)
        self.api = Api(self.aport)
        self.proc = start_chashd(procs, self.conf, [self.port, self.aport])

    def pool_text(self, members, admin=True):
        g = ["global:",
             "  admin: %s" % ("127.0.0.1:%d" % self.aport if admin else "off"),
             "  workers: 2"]
        p = ["%s:" % POOL, "  listen: 127.0.0.1:%d" % self.port,
             "  hash: md5", "  distribution: ketama",
             "  auto_eject_hosts: false", "  timeout: 5000"]
        if self.migration_mode is not None:
            p.append("  migration: %s" % self.migration_mode)
            p.append("  migration_warmup: %s" % self.warmup)
        p.append("  servers:")
        for name in members:
            p.append("    - %s:1 %s" % (self.servers[name].addr, name))
        return "\n".join(g + p) + "\n"

    def write_conf(self, members):
        with open(self.conf, "w") as f:
            f.write(self.pool_text(members))

    def log(self, tail=4000):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-tail:]

    def client(self, timeout=5.0):
        return Mc(self.port, timeout=timeout)

    def owners(self, keys, members):
        """{key: member} in the ring of <members> (`chash lookup`)."""
        self._rings += 1
        path = os.path.join(self.tmp, "ring-%d.yml" % self._rings)
        with open(path, "w") as f:
            f.write(self.pool_text(members, admin=False))
        return spread_keys(path, POOL, list(keys), CHASH)

    def check_api_lookup(self, owners, keys):
        for k in keys:
            j = self.api.ok("GET", "/api/pools/%s/lookup?key=%s" % (POOL, k))
            got = [m["name"] for m in j["members"]]
            assert got == [owners[k]], "lookup %s: API %s, chash lookup %s" \
                % (k, got, owners[k])

    def add(self, name, force=False):
        body = {"name": name, "address": self.servers[name].addr}
        if force:   # migration off: the moved keys are out of reach
            body["force"] = True
        st, j, _ = self.api.call("POST", "/api/pools/%s/members" % POOL,
                                 body)
        assert st in (200, 201), "POST member %s -> %d %s" % (name, st, j)
        self.members.append(name)
        return j

    def migration(self):
        st, j, _ = self.api.get("/api/pools/%s/migration" % POOL)
        assert st == 200, "GET migration -> %d %s" % (st, j)
        return j

    def reload(self, members):
        """The config rewritten with <members>, SIGHUP, and wait for the
        log's verdict (which must be `reload: done`)."""
        def verdicts():
            return re.findall(r"reload: done|reload refused[^\n]*",
                              self.log(10 ** 7))
        n = len(verdicts())
        self.write_conf(members)
        self.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: len(verdicts()) > n, timeout=10,
                 what="the reload's verdict in the log")
        assert verdicts()[-1] == "reload: done", verdicts()[-1]
        self.members = list(members)


@pytest.fixture
def cache(procs):
    def make(**kw):
        return Cache(procs, **kw)
    return make


# ------------------------------------------------------------ helpers --

def value_of(k):
    return ("v-%s" % k).encode()


def flags_of(i):
    return 1 + i * 37 % 60000


def set_keys(c, keys, ttl_every=2, numeric=()):
    """Each key set through chashd: value v-<key> (or a number for the
    keys in <numeric>), flags flags_of(i), every <ttl_every>-th one with
    exptime TTL. Returns {key: (value, flags, exptime, set at)}."""
    out = {}
    data = b""
    for i, k in enumerate(keys):
        v = b"%d" % (1000 + i) if k in numeric else value_of(k)
        exp = TTL if i % ttl_every == 0 else 0
        data += b"set %s %d %d %d\r\n%s\r\n" % (k.encode(), flags_of(i), exp,
                                                len(v), v)
        out[k] = (v, flags_of(i), exp, time.monotonic())
    c.send(data)
    for k in keys:
        assert c.unit() == b"STORED\r\n", k
    return out


def meta(srv, key):
    """(value, flags, ttl) of <key> read directly off <srv> (`mg k v f
    t`), or None when it does not hold it."""
    u = srv.call(b"mg %s v f t\r\n" % key.encode())
    if u == b"EN\r\n":
        return None
    assert u.startswith(b"VA "), (srv.addr, key, u)
    head, data = u.split(b"\r\n", 1)
    fl = dict((w[:1], w[1:]) for w in head.split()[2:])
    return data[:-2], int(fl[b"f"]), int(fl[b"t"])


def ttl_ok(ttl, exp, set_at):
    """<ttl> as memcached reports it is the TTL of a key set with <exp>
    at <set_at> (monotonic), within memcached's clock tick."""
    if exp == 0:
        return ttl == -1
    want = exp - (time.monotonic() - set_at)
    return want - SLACK - 1 <= ttl <= want + SLACK


def get(c, keys, cmd=b"get"):
    """The VALUE units of one get-style command over <keys>, parsed:
    [(key, flags, data, cas or None)]."""
    c.send(b"%s %s\r\n" % (cmd, b" ".join(k.encode() for k in keys)))
    units = c.get_reply()
    assert units[-1] == b"END\r\n", (cmd, keys, units)
    out = []
    for u in units[:-1]:
        head, data = u.split(b"\r\n", 1)
        w = head.split()
        out.append((w[1].decode(), int(w[2]), data[:-2],
                    int(w[4]) if len(w) > 4 else None))
    return out


def split(cache, keys, before, after):
    """Owners of <keys> in the rings <before> (the ring now: a sample
    checked against the API's lookup) and <after>; the moving keys in
    key order, and the others."""
    old = cache.owners(keys, before)
    new = cache.owners(keys, after)
    cache.check_api_lookup(old, keys[:15])
    moving = [k for k in keys if old[k] != new[k]]
    still = [k for k in keys if old[k] == new[k]]
    return old, new, moving, still


def holders(cache, key):
    return [n for n, s in cache.servers.items() if meta(s, key) is not None]


# -------------------------------------------------------------- tests --

def test_add_warms_moved_keys_on_touch(cache):
    """m4 added to a 3-member warm-up pool (window 60 s): the add's report
    and GET .../migration say `warming`; then every reading or changing
    command on a moved key answers as if it had not moved, and leaves the
    key on m4 with its value, flags and TTL; keys never touched stay on
    their old member only; keys_moved_by_traffic counts the keys copied,
    once each."""
    ca = cache()
    keys = ["wk:%d" % i for i in range(400)]
    before = list(ca.members)
    old, new, moving, still = split(ca, keys, before, before + ["m4"])
    numeric = set(moving[40:44])
    with ca.client() as c:
        meta_set = set_keys(c, keys, numeric=numeric)
    # the set went where `chash lookup` says (the ring this test uses)
    for k in keys[:40]:
        assert holders(ca, k) == [old[k]], (k, old[k], holders(ca, k))
    assert len(moving) >= 60, "only %d of 400 keys move" % len(moving)

    rep = ca.add("m4")
    assert rep["migration"]["phase"] == "warming", rep
    epoch = rep["migration"]["epoch"]
    m = ca.migration()
    assert (m["migration"], m["phase"], m["active"], m["epoch"]) == \
        ("warmup", "warming", True, epoch), m
    assert 0 < m["warmup_left_s"] <= m["warmup_s"] == 60, m
    assert m["sources"] == [] and m["change"] == "add m4", m
    assert m["keys_moved_by_traffic"] == 0, m
    ca.check_api_lookup(new, moving[:10] + still[:10])
    m4 = ca.servers["m4"]
    assert m4.holds(keys) == set(), "m4 got keys before any request"

    copied = []      # the keys a request copied to m4, in order
    i_of = {k: i for i, k in enumerate(keys)}
    pick = iter([k for k in moving if k not in numeric])

    def take(n):
        return [next(pick) for _ in range(n)]

    def check_on_m4(k, value=None, ttl=None):
        got = meta(m4, k)
        v, fl, exp, at = meta_set[k]
        assert got is not None, "%s: not on m4 after the request" % k
        assert got[0] == (value if value is not None else v), (k, got)
        assert got[1] == fl, "%s: flags %d on m4, set with %d" % (k, got[1],
                                                                  fl)
        if ttl is None:
            assert ttl_ok(got[2], exp, at), \
                "%s: TTL %d on m4, set with exptime %d %.1f s ago" % (
                    k, got[2], exp, time.monotonic() - at)
        else:
            assert ttl - SLACK - 1 <= got[2] <= ttl, (k, got[2], ttl)

    with ca.client() as c:
        # get: the old member's value, flags; copied with its TTL
        for k in take(8):
            assert get(c, [k]) == [(k, flags_of(i_of[k]), value_of(k),
                                    None)], k
            check_on_m4(k)
            copied.append(k)
        # a second get of a copied key copies nothing
        assert get(c, copied[:2]) == [(k, flags_of(i_of[k]), value_of(k),
                                       None) for k in copied[:2]]
        # one get over moved and unmoved keys: every value, in key order
        mk = take(6)
        mixed = [x for pair in zip(mk, still[:6]) for x in pair]
        assert get(c, mixed) == [(k, flags_of(i_of[k]), value_of(k), None)
                                 for k in mixed], mixed
        for k in mk:
            check_on_m4(k)
        copied += mk
        # gets: the value, with a CAS unique that works on m4
        for k in take(3):
            got = get(c, [k], b"gets")
            assert [g[:3] for g in got] == [(k, flags_of(i_of[k]),
                                             value_of(k))], got
            assert got[0][3] is not None, got
            check_on_m4(k)
            copied.append(k)
            cas = got[0][3]
            assert c.call(b"cas %s 7 0 3 %d\r\nnew\r\n" % (k.encode(), cas)) \
                == b"STORED\r\n", k
            assert get(c, [k]) == [(k, 7, b"new", None)], k
        # gat: the value, and the new TTL on m4
        for k in take(2):
            assert get(c, [k], b"gat 500") == \
                [(k, flags_of(i_of[k]), value_of(k), None)], k
            check_on_m4(k, ttl=500)
            copied.append(k)
        # touch
        for k in take(2):
            assert c.call(b"touch %s 400\r\n" % k.encode()) == \
                b"TOUCHED\r\n", k
            check_on_m4(k, ttl=400)
            copied.append(k)
        # incr of a number set before the change
        for k in sorted(numeric)[:2]:
            n = int(meta_set[k][0])
            assert c.call(b"incr %s 5\r\n" % k.encode()) == \
                b"%d\r\n" % (n + 5), k
            check_on_m4(k, value=b"%d" % (n + 5))
            copied.append(k)
        # append
        for k in take(2):
            assert c.call(b"append %s 0 0 3\r\n+ap\r\n" % k.encode()) == \
                b"STORED\r\n", k
            assert get(c, [k]) == [(k, flags_of(i_of[k]),
                                    value_of(k) + b"+ap", None)], k
            check_on_m4(k, value=value_of(k) + b"+ap")
            copied.append(k)
        # add of a key the old member holds: it exists, NOT_STORED
        for k in take(2):
            assert c.call(b"add %s 0 0 1\r\nx\r\n" % k.encode()) == \
                b"NOT_STORED\r\n", k
            assert get(c, [k]) == [(k, flags_of(i_of[k]), value_of(k),
                                    None)], k
            check_on_m4(k)
            copied.append(k)
        # meta mg
        for k in take(2):
            v = value_of(k)
            assert c.call(b"mg %s v f\r\n" % k.encode()) == \
                b"VA %d f%d\r\n%s\r\n" % (len(v), flags_of(i_of[k]), v), k
            check_on_m4(k)
            copied.append(k)
        # set of a moving key: the new value wins over the old copy, and
        # nothing is copied (m4 has the key: the copy is never over it)
        k = next(pick)
        assert c.call(b"set %s 3 0 5\r\nfresh\r\n" % k.encode()) == \
            b"STORED\r\n"
        assert get(c, [k]) == [(k, 3, b"fresh", None)]
        assert meta(m4, k)[:2] == (b"fresh", 3)
        touched = set(copied) | {k}
        # unmoved keys read back as before, and none went to m4
        assert get(c, still[:20]) == [(x, flags_of(i_of[x]), value_of(x),
                                       None) for x in still[:20]]

    assert len(copied) == len(set(copied)), copied
    # m4 holds exactly the keys requests touched: nothing else was copied
    assert m4.holds(keys) == touched, \
        "m4 holds %d keys, requests touched %d: extra %s, missing %s" % (
            len(m4.holds(keys)), len(touched),
            sorted(m4.holds(keys) - touched)[:5],
            sorted(touched - m4.holds(keys))[:5])
    m = ca.migration()
    assert m["active"] is True and m["phase"] == "warming", m
    assert m["keys_moved_by_traffic"] == len(copied), \
        "keys_moved_by_traffic %d, requests copied %d keys" % (
            m["keys_moved_by_traffic"], len(copied))


def test_delete_during_warmup_is_not_undone(cache):
    """delete and md of moved keys (never touched before, and touched
    once) while m4 warms up: the key is deleted on its old member too, the
    reply is the one memcached gives for a key it holds, and a later get
    misses (no warm-up brings it back). Deleting copies nothing, so
    keys_moved_by_traffic stays at what the gets copied."""
    ca = cache()
    keys = ["dk:%d" % i for i in range(200)]
    before = list(ca.members)
    old, new, moving, still = split(ca, keys, before, before + ["m4"])
    assert len(moving) >= 12
    with ca.client() as c:
        set_keys(c, keys)
    ca.add("m4")
    m4 = ca.servers["m4"]
    cold_del, warm_del, cold_md = moving[0:3], moving[3:6], moving[6:9]
    replies = {}
    with ca.client() as c:
        for k in warm_del:
            assert get(c, [k])[0][2] == value_of(k), k
        assert m4.holds(warm_del) == set(warm_del)     # copied to m4
        assert m4.holds(cold_del + cold_md) == set()
        for k in cold_del + warm_del:
            replies[k] = c.call(b"delete %s\r\n" % k.encode())
        for k in cold_md:
            replies[k] = c.call(b"md %s\r\n" % k.encode())
        for k in cold_del + warm_del + cold_md:
            assert holders(ca, k) == [], \
                "%s deleted through chashd, still on %s" % (k, holders(ca, k))
            assert get(c, [k]) == [], "%s came back after its delete" % k
    m = ca.migration()
    problems = []
    wrong = {k: r for k, r in replies.items()
             if r != (b"HD\r\n" if k in cold_md else b"DELETED\r\n")}
    if wrong:
        problems.append("replies to deletes of keys the pool held (DELETED "
                        "/ HD wanted): %s" % wrong)
    if m["keys_moved_by_traffic"] != len(warm_del):
        problems.append("keys_moved_by_traffic %d after %d copies and %d "
                        "deletes" % (m["keys_moved_by_traffic"],
                                     len(warm_del), len(replies)))
    assert not problems, "\n".join(problems)


def test_warmup_window_ends(cache):
    """migration_warmup 3s: while it runs a moved key is a hit; once it
    ends GET .../migration says done, `active: false`, with `last` the
    warm-up (its count); then a moved key never touched is a miss (the
    documented limit) and the warmed ones are hits on m4."""
    ca = cache(warmup="3s")
    keys = ["ek:%d" % i for i in range(200)]
    before = list(ca.members)
    old, new, moving, still = split(ca, keys, before, before + ["m4"])
    assert len(moving) >= 10
    with ca.client() as c:
        set_keys(c, keys)
    t0 = time.monotonic()
    rep = ca.add("m4")
    epoch = rep["migration"]["epoch"]
    with ca.client() as c:
        warmed = moving[:4]
        assert get(c, warmed) == [(k, flags_of(keys.index(k)), value_of(k),
                                   None) for k in warmed]
    m = ca.migration()
    assert m["active"] is True and m["phase"] == "warming", m
    assert 0 < m["warmup_left_s"] <= 3, m

    def ended():
        j = ca.migration()
        return j if j["active"] is False else None
    m = wait_for(ended, timeout=8, interval=0.1, what="the warm-up to end")
    took = time.monotonic() - t0
    assert 2.5 <= took <= 6, "a 3 s warm-up ended after %.1f s" % took
    assert m["phase"] == "done", m
    last = m["last"]
    assert last and last["epoch"] == epoch and last["phase"] == "done", m
    assert last["keys_moved_by_traffic"] == len(warmed), last
    with ca.client() as c:
        assert get(c, moving[4:10]) == [], \
            "untouched moved keys still served after the warm-up"
        assert [g[0] for g in get(c, warmed)] == warmed
        assert [g[0] for g in get(c, still[:10])] == still[:10]


def test_second_change_ends_a_warmup_and_starts_another(cache):
    """While m4's warm-up runs, adding m5 is accepted (no 409): the first
    warm-up is over (`last`), a new one runs for the m5 change; a key the
    m5 change moves is warmed from its owner before it, a key only the m4
    change moved and nobody touched is no longer served."""
    ca = cache(spares=2)
    keys = ["sk:%d" % i for i in range(600)]
    r3 = list(ca.members)
    r4 = r3 + ["m4"]
    r5 = r4 + ["m5"]
    o3, o4, o5 = (ca.owners(keys, r) for r in (r3, r4, r5))
    only_first = [k for k in keys if o3[k] != o4[k] == o5[k]]
    second = [k for k in keys if o3[k] == o4[k] != o5[k]]
    assert len(only_first) >= 5 and len(second) >= 5
    with ca.client() as c:
        set_keys(c, keys)
    e1 = ca.add("m4")["migration"]["epoch"]
    with ca.client() as c:
        assert [g[0] for g in get(c, only_first[:2])] == only_first[:2]
    rep = ca.add("m5")
    assert rep["migration"]["phase"] == "warming", rep
    e2 = rep["migration"]["epoch"]
    assert e2 > e1, (e1, e2)
    m = ca.migration()
    assert (m["active"], m["phase"], m["epoch"], m["change"]) == \
        (True, "warming", e2, "add m5"), m
    assert m["last"] and m["last"]["epoch"] == e1 and \
        m["last"]["phase"] == "done", m
    assert m["last"]["keys_moved_by_traffic"] == 2, m["last"]
    with ca.client() as c:
        assert [g[0] for g in get(c, second[:5])] == second[:5]
        assert [g[0] for g in get(c, only_first[:2])] == only_first[:2]
        assert get(c, only_first[2:5]) == []
    assert ca.servers["m5"].holds(keys) == set(second[:5])
    assert ca.migration()["keys_moved_by_traffic"] == 5


def test_reload_adding_a_member_starts_a_warmup(cache):
    """A reload (SIGHUP) whose file adds m4 starts a warm-up: GET
    .../migration says warming, and moved keys are served and copied."""
    ca = cache()
    keys = ["rk:%d" % i for i in range(200)]
    before = list(ca.members)
    old, new, moving, still = split(ca, keys, before, before + ["m4"])
    with ca.client() as c:
        set_keys(c, keys)
    ca.reload(before + ["m4"])
    m = ca.migration()
    assert (m["migration"], m["active"], m["phase"]) == \
        ("warmup", True, "warming"), m
    assert m["warmup_left_s"] > 0, m
    ca.check_api_lookup(new, moving[:5])
    with ca.client() as c:
        assert get(c, moving[:6]) == [(k, flags_of(keys.index(k)),
                                       value_of(k), None)
                                      for k in moving[:6]]
    assert ca.servers["m4"].holds(keys) == set(moving[:6])
    assert ca.migration()["keys_moved_by_traffic"] == 6


def test_without_warmup_moved_keys_miss(cache):
    """The control: the same add on a pool without `migration:` (off, the
    default for memcache): GET .../migration says off, the moved keys are
    misses, the others hits. The tests above fail on such an engine."""
    ca = cache(migration=None)
    keys = ["ok:%d" % i for i in range(200)]
    before = list(ca.members)
    old, new, moving, still = split(ca, keys, before, before + ["m4"])
    with ca.client() as c:
        set_keys(c, keys)
    rep = ca.add("m4", force=True)
    assert not rep.get("migration"), rep
    m = ca.migration()
    assert (m["migration"], m["active"]) == ("off", False), m
    with ca.client() as c:
        assert get(c, moving[:10]) == []
        assert [g[0] for g in get(c, still[:10])] == still[:10]
