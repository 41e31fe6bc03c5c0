# test_memcache_batch.py -- gets batched on a member connection: the gets
# (and gets) that reach one member's connection in the same turn of a
# worker's loop go to the member as ONE line ("get a b c"), and its one
# reply is split back, each client getting exactly its own keys' values,
# in its order, with its own END. Checked on real memcacheds: what the
# member saw (memcached -vv logs each command line), and, under many
# concurrent clients pipelining gets, gets, multi-key gets, duplicate and
# missing keys, sets of their own keys and mn, every reply byte for byte.
# SPDX-License-Identifier: BSD-2-Clause
import random
import re
import threading

from base_util import free_port, wait_for
from mc_util import GLOBAL, ChashdMemcache, MemcachedServer, Mc, mc_pool

CAS = re.compile(rb"^(VALUE \S+ \d+ \d+) \d+\r$", re.M)


def reply(c):
    """One reply: a line, or VALUE blocks up to END, as bytes."""
    return b"".join(c.get_reply())


def test_gets_in_one_write_ride_on_one_line(procs):
    srv = MemcachedServer(procs, extra=["-vv"])
    port = free_port()
    ChashdMemcache(procs, GLOBAL.replace("workers: 2", "workers: 1") +
                   mc_pool("b", port, [srv], timeout=2000))
    with Mc(port) as c:
        assert c.call(b"set a 0 0 1\r\nx\r\n") == b"STORED\r\n"
        c.send(b"get a\r\nget nope\r\nget a nope a\r\ngets a\r\nget a\r\n"
               b"set b 0 0 1\r\ny\r\nget b\r\nget a b\r\n")
        assert reply(c) == b"VALUE a 0 1\r\nx\r\nEND\r\n"
        assert reply(c) == b"END\r\n"
        assert reply(c) == (b"VALUE a 0 1\r\nx\r\nVALUE a 0 1\r\nx\r\n"
                            b"END\r\n")
        assert reply(c).startswith(b"VALUE a 0 1 ")   # gets: its own line
        assert reply(c) == b"VALUE a 0 1\r\nx\r\nEND\r\n"
        assert reply(c) == b"STORED\r\n"
        assert reply(c) == b"VALUE b 0 1\r\ny\r\nEND\r\n"
        assert reply(c) == (b"VALUE a 0 1\r\nx\r\nVALUE b 0 1\r\ny\r\n"
                            b"END\r\n")

    def lines():
        return re.findall(r"^<\d+ ((?:get|gets|set) [^\r\n]*)$", srv.log(),
                          re.M)
    wait_for(lambda: len(lines()) >= 6, what="memcached's log")
    # a get never rides past a set (order on the connection is kept), and
    # gets only with gets
    assert lines() == ["set a 0 0 1", "get a nope a nope a", "gets a",
                       "get a", "set b 0 0 1", "get b a b"], lines()


def test_many_clients_pipelining_gets_get_exactly_theirs(procs):
    servers = [MemcachedServer(procs) for _ in range(3)]
    port = free_port()
    d = ChashdMemcache(procs, GLOBAL + mc_pool("m", port, servers,
                                               timeout=5000,
                                               hash="murmur"))
    keys = ["shared:%d" % i for i in range(120)]
    value = {k: ("v-%s-" % k * 3).encode() for k in keys[::3]}  # 2/3 miss
    with Mc(port) as c:
        c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v), v)
                        for k, v in value.items()))
        for _ in value:
            assert c.unit() == b"STORED\r\n"
    errors = []

    def expect(cmd, ks, own):
        out = b""
        for k in ks:
            v = own.get(k, value.get(k))
            if v is not None:
                out += b"VALUE %s 0 %d%s\r\n%s\r\n" % (
                    k.encode(), len(v), b" CAS" if cmd == "gets" else b"", v)
        return out + b"END\r\n"

    def client(seed):
        rnd = random.Random(seed)
        own = {}
        try:
            with Mc(port, timeout=10) as c:
                for it in range(25):
                    reqs, exp = [], []
                    for _ in range(rnd.randint(1, 30)):
                        roll = rnd.random()
                        if roll < 0.05:
                            reqs.append(b"mn\r\n")
                            exp.append(b"MN\r\n")
                            continue
                        if roll < 0.15:
                            # a set of its own key, read back later in
                            # the same pipeline
                            k = "own:%d:%d" % (seed, rnd.randint(0, 5))
                            v = ("%d-%d" % (it, rnd.randint(0, 99))).encode()
                            reqs.append(b"set %s 0 0 %d\r\n%s\r\n"
                                        % (k.encode(), len(v), v))
                            exp.append(b"STORED\r\n")
                            own[k] = v
                            continue
                        cmd = rnd.choice(["get", "get", "gets"])
                        ks = [rnd.choice(keys + list(own))
                              for _ in range(rnd.choice([1, 1, 1, 2, 4]))]
                        reqs.append(("%s %s\r\n" % (cmd, " ".join(ks)))
                                    .encode())
                        exp.append(expect(cmd, ks, own))
                    c.send(b"".join(reqs))
                    for i, want in enumerate(exp):
                        got = CAS.sub(rb"\1 CAS\r", reply(c))
                        if got != want:
                            errors.append((seed, it, reqs[i], got, want))
                            return
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append((seed, repr(e)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert not errors, errors[:2]
    assert d.alive(), d.log()
