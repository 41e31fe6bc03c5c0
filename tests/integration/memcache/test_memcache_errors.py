# test_memcache_errors.py -- what chashd answers in a memcache pool when
# things go wrong, on real memcacheds: a member that refuses connections
# (SERVER_ERROR Connection refused for its keys only), a member slower
# than `timeout` (SIGSTOP: SERVER_ERROR Connection timed out, the client
# connection goes on and no late reply is matched to a later request), a
# multi-get with a failed fragment (that one error line for the whole
# reply), unknown commands (ERROR, the connection stays), the binary
# protocol (refused with a CLIENT_ERROR line, then closed), flush_all
# (refused unless allow_fanout_admin, then every member flushed), quit
# after the earlier replies, garbage from one client that another never
# notices, a member's administration commands kept from the members, a
# member that closes mid-request (SERVER_ERROR Connection reset by peer),
# and health_check type memcache taking a hung member down.
# SPDX-License-Identifier: BSD-2-Clause
import contextlib
import os
import random
import socket
import struct
import threading
import time

import pytest

from admin_util import Api
from base_util import free_port, wait_for
from mc_util import (GLOBAL, ChashdMemcache, KeysByMember, MemcachedServer,
                     mc_pool, need_chashd_memcache, sigcont, sigstop)

POOL = "err"
REFUSED = b"SERVER_ERROR Connection refused\r\n"
TIMED_OUT = b"SERVER_ERROR Connection timed out\r\n"


@contextlib.contextmanager
def stub_member(handle):
    """A TCP listener on a free port of 127.0.0.1 that hands every
    connection it accepts to <handle>(sock) (an OSError in it is ignored)
    and then closes it, one at a time in a thread; yields the port, and
    stops the thread (bounded) and the listener on leaving."""
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind(("127.0.0.1", 0))
    lsn.listen(64)
    lsn.settimeout(0.1)
    stop_flag = threading.Event()

    def serve():
        while not stop_flag.is_set():
            try:
                s, _ = lsn.accept()
            except OSError:
                continue
            try:
                handle(s)
            except OSError:
                pass
            finally:
                s.close()

    t = threading.Thread(target=serve)
    t.start()
    try:
        yield lsn.getsockname()[1]
    finally:
        stop_flag.set()
        t.join(timeout=5)
        lsn.close()


class Env:
    """Three memcacheds named err-1..err-3 (ketama, murmur) and keys by
    owner, from `chash lookup --config` on the pool."""

    def __init__(self, procs):
        self.procs = procs
        self.servers = [MemcachedServer(procs) for _ in range(3)]
        conf = os.path.join(str(procs.tmp), "ring.yml")
        with open(conf, "w") as f:
            f.write(self.pool_text(free_port()))
        self.keys = KeysByMember(conf, POOL)
        assert self.keys.members == ["err-1", "err-2", "err-3"]

    def pool_text(self, port, **opts):
        base = dict(hash="murmur", distribution="ketama", timeout=2000,
                    server_connections=1, auto_eject_hosts="false")
        base.update(opts)
        return mc_pool(POOL, port, self.servers, **base)

    def chashd(self, admin=None, **opts):
        need_chashd_memcache()
        glob = GLOBAL if admin is None else (
            "global:\n  admin: 127.0.0.1:%d\n  workers: 2\n" % admin)
        return ChashdMemcache(self.procs,
                              glob + self.pool_text(free_port(), **opts))

    def on(self, m, n=1):
        return [self.keys.on(m) for _ in range(n)]


@pytest.fixture
def env(procs):
    return Env(procs)


def set_keys(c, keys):
    c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(k),
                                                  k.encode()) for k in keys))
    assert [c.unit() for _ in keys] == [b"STORED\r\n"] * len(keys)


def value_of(k):
    return [b"VALUE %s 0 %d\r\n%s\r\n" % (k.encode(), len(k), k.encode()),
            b"END\r\n"]


stop = sigstop
cont = sigcont


# --------------------------------------------------------- refused member --

def test_refused_member_only_its_keys(env):
    """The member err-2 killed: every request routed to it gets
    SERVER_ERROR Connection refused (get, set, mg, incr, delete); the
    other members' keys keep being served on the same connection, in
    order; a multi-get with one of its keys is that one line for the
    whole reply. Started again on its port, it serves again."""
    cd = env.chashd()
    a, b, dead = env.on(0, 3), env.on(2, 3), env.on(1, 3)
    with cd.client() as c:
        set_keys(c, a + b + dead)
        env.servers[1].stop()
        assert c.call(b"get %s\r\n" % dead[0].encode()) == REFUSED
        for cmd in (b"set %s 0 0 1\r\nx\r\n", b"mg %s v\r\n",
                    b"incr %s 1\r\n", b"delete %s\r\n", b"gets %s\r\n",
                    b"touch %s 10\r\n", b"ms %s 1\r\nx\r\n"):
            assert c.call(cmd % dead[1].encode()) == REFUSED, cmd
        # the others, interleaved with the dead member's, in order
        c.send(b"get %s\r\nget %s\r\nget %s\r\nmg %s v\r\n" % (
            a[0].encode(), dead[0].encode(), b[0].encode(), a[1].encode()))
        assert c.get_reply() == value_of(a[0])
        assert c.get_reply() == [REFUSED]
        assert c.get_reply() == value_of(b[0])
        assert c.unit() == b"VA %d\r\n%s\r\n" % (len(a[1]), a[1].encode())
        # a multi-get with one fragment failed: that line alone
        c.send(b"get %s %s %s %s\r\n" % (a[0].encode(), b[0].encode(),
                                         dead[2].encode(), a[2].encode()))
        assert c.get_reply() == [REFUSED]
        c.send(b"gets %s %s\r\n" % (dead[0].encode(), b[1].encode()))
        assert c.get_reply() == [REFUSED]
        # without the dead member's keys the multi-get is whole
        c.send(b"get %s %s\r\n" % (b[2].encode(), a[2].encode()))
        assert c.get_reply() == value_of(b[2])[:1] + value_of(a[2])
        env.servers[1].start()

        def served():
            r = c.call(b"set %s 0 0 1\r\nz\r\n" % dead[0].encode())
            return r == b"STORED\r\n"
        wait_for(served, timeout=10, interval=0.2,
                 what="the restarted member to be served again")
        assert c.call(b"mg %s v\r\n" % dead[0].encode()) == b"VA 1\r\nz\r\n"
    assert cd.alive()


# ------------------------------------------------------- timed-out member --

def test_slow_member_times_out_and_the_connection_goes_on(env):
    """timeout: 1000 and err-2 stopped (SIGSTOP): its request gets
    SERVER_ERROR Connection timed out after about the timeout, while
    another client is served by the other members at once; on the same
    connection the others' keys are served after it, in order, and a
    multi-get touching the stopped member is that one line. Once it runs
    again, its keys read their OWN values: no late reply is matched to a
    later request."""
    cd = env.chashd(timeout=1000)
    fast, slow = env.on(0, 3), env.on(1, 6)
    slow_srv = env.servers[1]
    with cd.client(timeout=10) as c, cd.client(timeout=10) as other:
        set_keys(c, fast + slow)
        stop(slow_srv)
        try:
            t0 = time.monotonic()
            c.send(b"get %s\r\n" % slow[0].encode())
            other.send(b"get %s\r\n" % fast[0].encode())
            assert other.get_reply() == value_of(fast[0])
            assert time.monotonic() - t0 < 0.6, "the other client waited"
            assert c.read_available(0.05) == b"", "an early reply"
            assert c.unit() == TIMED_OUT
            took = time.monotonic() - t0
            assert 0.8 < took < 4.0, took
            c.send(b"mg %s v\r\nget %s\r\nget %s %s\r\n" % (
                slow[1].encode(), fast[1].encode(), fast[2].encode(),
                slow[2].encode()))
            assert c.unit() == TIMED_OUT
            assert c.get_reply() == value_of(fast[1])
            assert c.get_reply() == [TIMED_OUT]
        finally:
            cont(slow_srv)
        # the member answers the requests it held; none of that may reach
        # this client as the reply to what it asks now
        assert slow_srv.call(b"version\r\n").startswith(b"VERSION")
        c.send(b"".join(b"get %s\r\n" % k.encode() for k in slow))
        for k in slow:
            assert c.get_reply() == value_of(k), k
        c.send(b"get %s\r\n" % " ".join(slow + fast).encode())
        want = [value_of(k)[0] for k in slow + fast] + [b"END\r\n"]
        assert c.get_reply() == want
    assert cd.alive()


def test_quit_waits_for_a_slow_reply(env):
    """`get <slow key>` then `quit` in one write, the member stopped for a
    moment: the value comes first, then the close -- quit does not cut
    the reply still on its way."""
    cd = env.chashd(timeout=3000)
    slow = env.on(1)[0]
    with cd.client(timeout=10) as c:
        set_keys(c, [slow])
        stop(env.servers[1])
        try:
            c.send(b"get %s\r\nquit\r\nget %s\r\n" % (slow.encode(),
                                                      slow.encode()))
            time.sleep(0.3)
        finally:
            cont(env.servers[1])
        assert c.get_reply() == value_of(slow)
        assert c.peer_closed(timeout=3)


# ------------------------------------------------- commands chashd refuses --

def test_unknown_command_keeps_the_connection(env):
    """Unknown and wrongly-cased commands: ERROR each, the connection
    stays, the next request is served."""
    cd = env.chashd()
    k = env.on(2)[0]
    with cd.client() as c:
        set_keys(c, [k])
        for cmd in (b"foo\r\n", b"foo bar baz\r\n", b"GET %s\r\n" % k.encode(),
                    b"Set x 0 0 1\r\n", b"flush_al\r\n", b"stat\r\n",
                    b"mz a\r\n", b"\x01\x02\x03\r\n"):
            assert c.call(cmd) == b"ERROR\r\n", cmd
        c.send(b"get %s\r\n" % k.encode())
        assert c.get_reply() == value_of(k)
    assert cd.alive()


def test_member_administration_refused_and_kept_from_members(env):
    """A member's own administration commands (shutdown, slabs,
    lru_crawler, watch, cache_memlimit) get a SERVER_ERROR line from
    chashd and never reach a member: after `shutdown` every member still
    runs, and the connection goes on."""
    cd = env.chashd()
    k = env.on(1)[0]
    with cd.client() as c:
        set_keys(c, [k])
        for cmd in (b"shutdown\r\n", b"shutdown graceful\r\n",
                    b"slabs reassign 1 2\r\n", b"lru_crawler metadump all\r\n",
                    b"watch\r\n", b"cache_memlimit 10\r\n"):
            r = c.call(cmd)
            assert r.startswith(b"SERVER_ERROR") and r.endswith(b"\r\n"), \
                (cmd, r)
        c.send(b"get %s\r\n" % k.encode())
        assert c.get_reply() == value_of(k)
    for srv in env.servers:
        assert srv.proc.poll() is None, srv.addr
        assert srv.call(b"version\r\n").startswith(b"VERSION ")


def test_member_that_closes_mid_request(procs):
    """A member that reads a request and closes without answering: the
    client gets SERVER_ERROR Connection reset by peer for it (not a hang,
    not a close of its own connection), and the next request is served
    by the real member next to it."""
    need_chashd_memcache()
    real = MemcachedServer(procs)

    def read_then_close(s):
        s.settimeout(2)
        s.recv(4096)

    with stub_member(read_then_close) as closer_port:
        port = free_port()
        text = GLOBAL + ("shut:\n  listen: 127.0.0.1:%d\n  hash: murmur\n"
                         "  distribution: ketama\n  timeout: 2000\n"
                         "  auto_eject_hosts: false\n  servers:\n"
                         "    - %s:1 real\n    - 127.0.0.1:%d:1 closer\n"
                         % (port, real.addr, closer_port))
        cd = ChashdMemcache(procs, text)
        keys = KeysByMember(cd.conf, "shut")
        k_real, k_closer = keys.by_member["real"][0], \
            keys.by_member["closer"][0]
        with cd.client() as c:
            assert c.call(b"get %s\r\n" % k_closer.encode()) == \
                b"SERVER_ERROR Connection reset by peer\r\n"
            set_keys(c, [k_real])
            c.send(b"get %s\r\n" % k_real.encode())
            assert c.get_reply() == value_of(k_real)
        assert cd.alive()


def binary_get(key):
    """A binary-protocol GET request (magic 0x80, opcode 0x00)."""
    return struct.pack(">BBHBBHIIQ", 0x80, 0x00, len(key), 0, 0, 0,
                       len(key), 0xdeadbeef, 0) + key


def test_binary_protocol_refused(env):
    """A connection whose first byte is 0x80 (the binary protocol) gets
    one CLIENT_ERROR line naming the binary protocol, then the close --
    while memcached itself would answer it (binary packet 0x81). A text
    client meanwhile is served."""
    cd = env.chashd()
    k = env.on(0)[0]
    direct = env.servers[0]
    with direct.client() as d:
        d.send(binary_get(b"nokey"))
        assert d.exact(1) == b"\x81"
    with cd.client() as text:
        set_keys(text, [k])
        with cd.client() as c:
            c.send(binary_get(k.encode()))
            line = c.line()
            assert line.startswith(b"CLIENT_ERROR") and line.endswith(
                b"\r\n"), line
            assert b"binary" in line.lower(), line
            assert c.peer_closed(timeout=3)
        text.send(b"get %s\r\n" % k.encode())
        assert text.get_reply() == value_of(k)
    assert cd.alive()


def test_flush_all_refused_by_default(env):
    """Without allow_fanout_admin, flush_all (plain, with a delay, with
    noreply) is refused with a SERVER_ERROR naming allow_fanout_admin, and
    no member is flushed."""
    cd = env.chashd()
    keys = [env.keys.on(m) for m in (0, 1, 2)]
    with cd.client() as c:
        set_keys(c, keys)
        for cmd in (b"flush_all\r\n", b"flush_all 0\r\n"):
            r = c.call_mn(cmd)
            assert r.startswith(b"SERVER_ERROR") and r.endswith(b"\r\n") \
                and r.count(b"\r\n") == 1, (cmd, r)
            assert b"allow_fanout_admin" in r, r
        r = c.call_mn(b"flush_all noreply\r\n")
        assert r == b"" or (r.startswith(b"SERVER_ERROR") and
                            b"allow_fanout_admin" in r), r
    for srv, k in zip(env.servers, keys):
        assert srv.holds([k]) == {k}, srv.addr


def test_flush_all_when_allowed(env):
    """allow_fanout_admin: true -- flush_all answers OK once every member
    is flushed (each member's keys gone when the OK arrives); flush_all
    noreply answers nothing and flushes too."""
    cd = env.chashd(allow_fanout_admin="true")
    keys = [env.keys.on(m) for m in (0, 1, 2, 0, 1, 2)]
    with cd.client() as c:
        set_keys(c, keys)
        assert c.call(b"flush_all\r\n") == b"OK\r\n"
        assert all(not s.keys() for s in env.servers)
        c.send(b"get %s\r\n" % " ".join(keys).encode())
        assert c.get_reply() == [b"END\r\n"]
        set_keys(c, keys)
        assert c.call_mn(b"flush_all noreply\r\n") == b""
        wait_for(lambda: all(not s.keys() for s in env.servers), timeout=3,
                 what="every member flushed by flush_all noreply")


# ---------------------------------------------------------------- garbage --

def garbage(rnd):
    """One piece of hostile input, deterministic from <rnd>."""
    kind = rnd.randrange(10)
    if kind == 0:
        return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 3000)))
    if kind == 1:
        return b"get " + b"x" * rnd.randint(300, 70000)    # no line end
    if kind == 2:
        return b"set k 0 0 %d\r\n" % rnd.choice(
            [2 ** 31, 2 ** 32 + 5, 99999999999, 10 ** 7]) + b"abc"
    if kind == 3:
        return b"\r\n" * rnd.randint(1, 5000)
    if kind == 4:
        return b"get " + b" ".join(b"k%d" % i
                                   for i in range(rnd.randint(1, 20000))) \
            + b"\r\n"
    if kind == 5:
        return b"\x00" * rnd.randint(1, 5000) + b"\r\n"
    if kind == 6:
        return b"ms k %d b q I T-1 O%s\r\n" % (rnd.randint(0, 99),
                                                b"9" * 100) + b"y" * 50
    if kind == 7:
        return b"set k 0 0 5\r\nab"                       # cut short
    if kind == 8:
        return b"mg " + b"=" * rnd.randint(1, 400) + b" b v k\r\n"
    return b"\x80" + bytes(rnd.getrandbits(8) for _ in range(60))


def test_garbage_from_one_client_never_reaches_another(env):
    """One client sends 120 pieces of garbage (random bytes, lines with no
    end, absurd lengths, cut values, binary headers, key storms), each on
    a fresh connection, read and closed; meanwhile another client runs
    400 set/get rounds over every member and every reply is right.
    chashd is alive after, and a new client is served."""
    cd = env.chashd()
    keys = [env.keys.on(m % 3) for m in range(12)]
    errors = []
    done = threading.Event()

    def good_client():
        try:
            with cd.client(timeout=10) as c:
                for i in range(400):
                    k = keys[i % len(keys)]
                    v = b"%d-%s" % (i, k.encode())
                    c.send(b"set %s 0 0 %d\r\n%s\r\nget %s\r\n"
                           % (k.encode(), len(v), v, k.encode()))
                    r = [c.unit()] + c.get_reply()
                    want = [b"STORED\r\n", b"VALUE %s 0 %d\r\n%s\r\n"
                            % (k.encode(), len(v), v), b"END\r\n"]
                    if r != want:
                        errors.append((i, r[:3]))
                        return
        except Exception as e:     # reported by the main thread
            errors.append(repr(e))
        finally:
            done.set()

    t = threading.Thread(target=good_client)
    t.start()
    rnd = random.Random(1234)
    try:
        for _ in range(120):
            piece = garbage(rnd)
            try:
                with cd.client(timeout=2) as bad:
                    bad.send(piece)
                    bad.read_available(0.02)
            except OSError:
                pass
            if done.is_set():
                break
    finally:
        t.join(timeout=60)
    assert not t.is_alive(), "the good client did not finish"
    assert not errors, errors
    assert cd.alive(), cd.log()
    with cd.client() as c:
        c.send(b"get %s\r\n" % keys[0].encode())
        assert c.get_reply()[-1] == b"END\r\n"


def test_line_without_end_is_bounded(env):
    """A client that sends a megabyte with no line end is cut off (chashd
    does not buffer it without bound), and chashd goes on serving."""
    cd = env.chashd()
    with cd.client(timeout=2) as c:
        sent = 0
        try:
            while sent < (4 << 20):
                c.send(b"z" * 65536)
                sent += 65536
        except OSError:
            pass
        try:
            rest = c.read_available(3)
        except OSError:
            rest = b""
        assert c.eof or sent < (4 << 20), \
            "chashd took %d bytes of one line and kept the connection" % sent
        assert rest == b"" or rest.startswith((b"CLIENT_ERROR",
                                               b"SERVER_ERROR")), rest[:80]
    with cd.client() as c:
        assert c.call(b"mn\r\n") == b"MN\r\n"
    assert cd.alive()


# ------------------------------------------------------------ health check --

def states(api):
    return {n: m["state"] for n, m in api.members(POOL).items()}


def test_health_memcache_sees_a_hung_member(env):
    """health_check type memcache (probe: version): a stopped member
    (SIGSTOP) still accepts TCP connections but answers nothing, so it
    goes down in the admin API; after SIGCONT it comes back up. The
    others stay up throughout."""
    admin = free_port()
    cd = env.chashd(admin=admin, health_check="{ type: memcache, interval: "
                    "200ms, timeout: 300ms, rise: 1, fall: 1 }")
    api = Api(admin)
    wait_for(lambda: can_reach(admin), timeout=5, what="admin API")
    wait_for(lambda: set(states(api).values()) == {"up"}, timeout=5,
             what="every member up")
    hung = env.servers[1]
    stop(hung)
    try:
        wait_for(lambda: states(api)["err-2"] == "down", timeout=5,
                 what="the stopped member down")
        assert states(api)["err-1"] == states(api)["err-3"] == "up"
    finally:
        cont(hung)
    wait_for(lambda: states(api)["err-2"] == "up", timeout=5,
             what="the member back up after SIGCONT")
    assert cd.alive()


def test_health_memcache_sees_a_non_memcached(procs):
    """health_check type memcache against a member that accepts TCP but
    speaks no memcache (it closes at once): down, while a tcp check
    would call it up; the real memcached next to it stays up."""
    need_chashd_memcache()
    real = MemcachedServer(procs)

    def hello_and_close(s):
        s.sendall(b"HELLO\r\n")

    with stub_member(hello_and_close) as liar_port:
        admin = free_port()
        port = free_port()
        text = ("global:\n  admin: 127.0.0.1:%d\n  workers: 1\n" % admin
                + "liar:\n  listen: 127.0.0.1:%d\n" % port
                + "  health_check: { type: memcache, interval: 200ms, "
                  "timeout: 300ms, rise: 1, fall: 1 }\n"
                + "  servers:\n    - %s:1 real\n    - 127.0.0.1:%d:1 liar\n"
                % (real.addr, liar_port))
        ChashdMemcache(procs, text)
        api = Api(admin)
        wait_for(lambda: can_reach(admin), timeout=5, what="admin API")

        def st():
            return {n: m["state"] for n, m in api.members("liar").items()}
        wait_for(lambda: st() == {"real": "up", "liar": "down"}, timeout=5,
                 what="the non-memcached member down, the real one up")


def can_reach(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
