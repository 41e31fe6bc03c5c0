# test_hot.py -- the hottest keys of a pool (doc/hot.md): real
# redis-servers and memcached behind chashd, a load where one key takes
# about a third of the requests among thousands of keys seen once; the
# admin API (/api/pools/{pool}/hot), `chash ctl hot` and /metrics must
# name that key, and only keys that stand out, with the member that holds
# it (checked on the members themselves) and that member's load ratio
# above its share; a pool with `hot_keys: off` shows none. Every load
# loop and wait is bounded.
# SPDX-License-Identifier: BSD-2-Clause
import subprocess
import time

from admin_util import CHASH, Api
from base_util import free_port
from mc_util import MemcachedServer, chashd_memcache, mc_pool  # noqa: F401
from redis_util import (RedisServer, Simple, chashd_redis,  # noqa: F401
                        pool_yaml)


def redis_conf(aport, port, servers, **opts):
    return ("global:\n  admin: 127.0.0.1:%d\n  workers: 2\n" % aport +
            pool_yaml("store", port, servers, True, ["  mode: redis"],
                      **opts))


def redis_store(procs, chashd_redis, n=3, **opts):
    """<n> redis-servers in pool `store` of a chashd with the admin API:
    (servers, admin port, chashd, Api, client)."""
    servers = [RedisServer(procs) for _ in range(n)]
    aport, port = free_port(), free_port()
    d = chashd_redis(redis_conf(aport, port, servers, **opts))
    return servers, aport, d, Api(aport), d.client()


def hot_of(api, pool):
    return api.ok("GET", "/api/pools/%s/hot" % pool)


def load_until(send, api, pool, want, seconds=12.0):
    """Run <send>(i) in a loop until GET hot satisfies <want> (bounded);
    returns the last answer."""
    deadline = time.monotonic() + seconds
    i = 0
    last = None
    while time.monotonic() < deadline:
        for _ in range(200):
            send(i)
            i += 1
        last = hot_of(api, pool)
        if want(last):
            return last
    raise AssertionError("the hot key never showed: %s" % last)


def test_redis_hot_key_named_with_its_member_and_load(procs, chashd_redis):
    servers, aport, d, api, c = redis_store(procs, chashd_redis)
    assert c.call("SET", "hot:1", "x") == Simple("OK")
    holder = [i for i, s in enumerate(servers)
              if s.call("EXISTS", "hot:1") == 1]
    assert len(holder) == 1
    holder = "store-%d" % (holder[0] + 1)

    def send(i):
        # one request in three is the hot key; the others each once
        if i % 3 == 0:
            c.call("GET", "hot:1")
        else:
            c.call("GET", "cold:%d" % i)

    j = load_until(send, api, "store",
                   lambda j: j["keys"] and j["keys_per_s"] > 0)
    top = j["keys"][0]
    assert top["key"] == "hot:1", j
    assert top["member"] == holder, (top, holder)
    assert 0.2 < top["fraction"] < 0.5, top
    assert top["rate_min"] > 0 and top["rate"] >= top["rate_min"], top
    # cold keys (each seen once) do not stand out
    assert [k["key"] for k in j["keys"]] == ["hot:1"], j["keys"]
    # the holder gets about 1/3 + 2/3 * its share: above its share
    j = load_until(send, api, "store",
                   lambda j: all(m["requests_per_s"] > 0
                                 for m in j["members"]))
    mem = {m["name"]: m for m in j["members"]}
    assert set(mem) == {"store-1", "store-2", "store-3"}, mem
    assert mem[holder]["load_ratio"] > 1.3, mem
    assert all(m["load_ratio"] < 1.0 for n, m in mem.items()
               if n != holder), mem
    assert abs(sum(m["share"] for m in mem.values()) - 1.0) < 1e-6
    # the CLI's table and the metrics say the same
    out = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d" % aport,
                          "hot", "store"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 0, out.stderr
    assert any(line.split()[:1] == ["hot:1"] and line.split()[-1] == holder
               for line in out.stdout.splitlines()), out.stdout
    st, text, _ = api.call("GET", "/metrics")
    assert st == 200
    assert 'chashd_hot_key_requests_per_second{pool="store",key="hot:1"}' \
        in text, text[-2000:]
    assert 'chashd_member_load_ratio{pool="store",member="%s"}' % holder \
        in text


def test_memcache_hot_key_and_binary_keys_shown_escaped(procs,
                                                         chashd_memcache):
    servers = [MemcachedServer(procs) for _ in range(2)]
    aport, port = free_port(), free_port()
    d = chashd_memcache("global:\n  admin: 127.0.0.1:%d\n  workers: 1\n"
                        % aport + mc_pool("cache", port, servers))
    api = Api(aport)
    c = d.client()
    assert c.call(b"set hot\xe9k 0 0 1\r\nx\r\n") == b"STORED\r\n"

    def send(i):
        c.send(b"get hot\xe9k\r\n" if i % 2 == 0 else b"get cold%d\r\n" % i)
        c.get_reply()

    j = load_until(send, api, "cache", lambda j: j["keys"])
    assert j["keys"][0]["key"] == "hot\\xe9k", j
    assert j["keys"][0]["bytes"] == 5
    assert 0.35 < j["keys"][0]["fraction"] < 0.65, j


def test_hot_keys_off_counts_nothing(procs, chashd_redis):
    servers, aport, d, api, c = redis_store(procs, chashd_redis, n=2,
                                            hot_keys="off")
    deadline = time.monotonic() + 3.5   # more than a window
    while time.monotonic() < deadline:
        c.call("GET", "hot:1")
    j = hot_of(api, "store")
    assert j["hot_keys"] == "off" and j["keys"] == [], j
    # members are still measured
    j = load_until(lambda i: c.call("GET", "hot:1"), api, "store",
                   lambda j: any(m["requests_per_s"] > 0
                                 for m in j["members"]))
    assert j["keys"] == [], j


def gets_per_server(servers):
    """cmdstat_get calls of each redis-server since its last RESETSTAT."""
    out = []
    for s in servers:
        info = s.call("INFO", "commandstats").decode()
        calls = 0
        for line in info.splitlines():
            if line.startswith("cmdstat_get:"):
                calls = int(line.split("calls=")[1].split(",")[0])
        out.append(calls)
    return out


def spread_run(procs, chashd_redis, mode):
    """3 members, replicas 3, write_quorum 3, read_policy primary and
    hot_keys <mode>: 3000 GETs of one hot key once the pool has seen it
    hot; the GETs each member served, and what every GET read after a
    second write."""
    servers = [RedisServer(procs) for _ in range(3)]
    aport, port = free_port(), free_port()
    d = chashd_redis(redis_conf(aport, port, servers, replicas=3,
                                write_quorum=3, read_policy="primary",
                                hot_keys=mode, hot_key_threshold=50))
    api = Api(aport)
    c = d.client()
    assert c.call("SET", "hot:1", "v1") == Simple("OK")
    assert [s.call("GET", "hot:1") for s in servers] == [b"v1"] * 3
    j = load_until(lambda i: c.call("GET", "hot:1"), api, "store",
                   lambda j: j["keys"] and j["keys"][0]["key"] == "hot:1" and
                   (mode != "spread" or j["keys"][0]["spread"]))
    assert j["keys"][0]["spread"] == (mode == "spread"), j
    for s in servers:
        assert s.call("CONFIG", "RESETSTAT") == Simple("OK")
    got = [c.call("GET", "hot:1") for _ in range(3000)]
    assert got == [b"v1"] * 3000
    served = gets_per_server(servers)
    # reads stay right: a write acknowledged by all three is what every
    # later read returns, whichever member answers it
    assert c.call("SET", "hot:1", "v2") == Simple("OK")
    after = {c.call("GET", "hot:1") for _ in range(300)}
    return served, after


def test_spread_sends_a_hot_keys_reads_to_every_replica(procs, chashd_redis):
    served, after = spread_run(procs, chashd_redis, "spread")
    assert sum(served) == 3000, served
    assert all(n >= 600 for n in served), served   # about 1000 each
    assert after == {b"v2"}, after


def test_track_alone_reads_a_hot_key_from_its_primary(procs, chashd_redis):
    served, after = spread_run(procs, chashd_redis, "track")
    assert sorted(served) == [0, 0, 3000], served
    assert after == {b"v2"}, after


def test_spread_needs_replicas(tmp_path):
    from base_util import CHASHD
    conf = tmp_path / "c.yml"
    conf.write_text("store:\n  listen: 127.0.0.1:%d\n  mode: redis\n"
                    "  hot_keys: spread\n  servers: [127.0.0.1:7001:1]\n"
                    % free_port())
    r = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode != 0
    assert "'hot_keys: spread'" in r.stderr and "replicas" in r.stderr, \
        r.stderr


def rebalance(api, target=None):
    q = "" if target is None else "?target=%s" % target
    return api.call("GET", "/api/pools/store/rebalance" + q)


def test_rebalance_proposes_weights_off_the_hot_member_and_applies_them(
        procs, chashd_redis):
    """A hot key (a third of the load) on one member: the proposal takes
    weight off that member, predicts a lower worst load ratio, carries the
    exact migration report, and changes nothing; `chash ctl rebalance`
    without --dry-run applies exactly the proposed weights."""
    servers, aport, d, api, c = redis_store(procs, chashd_redis)
    assert c.call("SET", "hot:1", "x") == Simple("OK")
    holder = "store-%d" % (1 + [s.call("EXISTS", "hot:1")
                                for s in servers].index(1))

    def send(i):
        c.call("GET", "hot:1" if i % 3 == 0 else "cold:%d" % i)

    # measured first: a proposal needs the members' rates
    load_until(send, api, "store", lambda j: j["keys"] and all(
        m["requests_per_s"] > 0 for m in j["members"]))
    st, j, _ = rebalance(api, 1.2)
    assert st == 200, j
    assert j["worst_ratio"] > 1.3, j
    mem = {m["name"]: m for m in j["members"]}
    assert max(mem, key=lambda n: mem[n]["load_ratio"]) == holder, j
    # weights x10 (room to move), the holder's reduced
    assert mem[holder]["new_weight"] < 10, j
    assert j["predicted_worst_ratio"] < j["worst_ratio"], j
    rep = j["report"]
    assert rep["dry_run"] is True and rep["applied"] is False, rep
    assert rep["moved"] > 0 and rep["flows"], rep
    assert any(f["from"] == holder for f in rep["flows"]), rep
    assert {n: m["weight"] for n, m in api.members("store").items()} == \
        {"store-1": 1, "store-2": 1, "store-3": 1}
    # applied by the CLI, member by member
    want = {n: m["new_weight"] for n, m in mem.items()}
    for i in range(600):
        send(i)
    out = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d" % aport,
                          "rebalance", "store", "--target", "1.2"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    got = {n: m["weight"] for n, m in api.members("store").items()}
    assert got[holder] < 10 and got != {"store-1": 1, "store-2": 1,
                                        "store-3": 1}, (got, want, out.stdout)


def test_rebalance_with_an_even_load_changes_nothing(procs, chashd_redis):
    servers, aport, d, api, c = redis_store(procs, chashd_redis)
    st, j, _ = rebalance(api)
    assert st == 409 and "no request measured" in j["error"], j
    load_until(lambda i: c.call("GET", "k:%d" % i), api, "store",
               lambda j: all(m["requests_per_s"] > 0 for m in j["members"]))
    st, j, _ = rebalance(api, 1.5)
    assert st == 200, j
    assert j["worst_ratio"] < 1.5 and j["meets_target"] is True, j
    assert all(m["new_weight"] == m["weight"] for m in j["members"]), j
    assert "report" not in j
    for bad in ("0.5", "x", "1000"):
        st, e, _ = rebalance(api, bad)
        assert st == 400 and "target" in e["error"], (bad, e)
