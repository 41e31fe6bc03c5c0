# test_memcache_incr_reply.py -- a memcache client never gets a reply that
# is not memcached's (issue 25, item 4: `incr ctr 4` answered with the
# request line itself). The cause: a connection to a member that is down
# can connect to itself (TCP's simultaneous open: a connect() to a local
# port nobody listens on, the kernel picking that very port as the
# source), and then every request written on it comes back as its reply.
# Here a member that echoes what it gets stands for that connection, byte
# for byte and every time; one test makes the kernel do it for real (a
# killed member on an even port of the ephemeral range). chashd must take
# an echoed line for what it is -- not a memcached reply: the connection
# is closed, the copy counted as failed (never toward write_quorum), and
# the client gets the real members' answer or an error.
# SPDX-License-Identifier: BSD-2-Clause
import random
import re
import socket
import socketserver
import struct
import subprocess
import threading

import pytest

from base_util import free_port, lookup_config, wait_for
from mc_util import GLOBAL, MemcachedServer, mc_pool
from mc_util import chashd_memcache  # noqa: F401 (a fixture)

INCR = b"incr ctr 4\r\n"


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            while True:
                data = self.request.recv(65536)
                if not data:
                    return
                self.request.sendall(data)
        except OSError:
            return


class EchoMember:
    """A "member" that sends back every byte it gets, as a connection
    that reached itself does."""

    def __init__(self):
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.addr = "127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def echo():
    e = EchoMember()
    yield e
    e.stop()


def start(chashd_memcache, members, names, **opts):
    opts.setdefault("timeout", 1000)
    return chashd_memcache(GLOBAL + mc_pool("cache", free_port(), members,
                                            names, **opts))


def key_led_by(cd, name, replicas):
    """A key whose replica set (<replicas> members) starts at <name>."""
    cands = ["ctr:%d" % i for i in range(400)]
    sets = lookup_config(cd.conf, "cache", cands, replicas=replicas)
    return next(k for k in cands if sets[k][0] == name)


def full_log(cd):
    with open(cd.log_path, errors="replace") as f:
        return f.read()


def is_number(line):
    return re.fullmatch(rb"\d+\r\n", line) is not None


def test_a_key_on_an_echoing_member_gets_an_error_not_its_request(
        chashd_memcache, echo, procs):
    """No replicas: the key's member echoes. Every request on it gets a
    SERVER_ERROR -- never its own line back -- and chashd logs the
    malformed reply; keys on the other member are served throughout."""
    real = MemcachedServer(procs)
    cd = start(chashd_memcache, [echo, real], ["echo", "m1"])
    k = key_led_by(cd, "echo", 1)
    other = key_led_by(cd, "m1", 1)
    with cd.client() as c:
        assert c.call(b"set %s 0 0 1\r\n5\r\n" % other.encode()) \
            == b"STORED\r\n"
        for req in (b"incr %s 4\r\n" % k.encode(),
                    b"set %s 0 0 1\r\n1\r\n" % k.encode(),
                    b"get %s\r\n" % k.encode(),
                    b"delete %s\r\n" % k.encode(),
                    b"touch %s 10\r\n" % k.encode()):
            got = c.call(req)
            assert got.startswith(b"SERVER_ERROR "), (req, got)
            assert c.call(b"incr %s 1\r\n" % other.encode()) in \
                (b"6\r\n", b"7\r\n", b"8\r\n", b"9\r\n", b"10\r\n")
    wait_for(lambda: "sent a malformed reply" in cd.log(),
             what="chashd's log naming the malformed reply")


def test_an_echo_never_counts_toward_the_write_quorum(chashd_memcache, echo,
                                                      procs):
    """replicas 2, write_quorum 2, the key's primary echoing: its copy
    is a failure, so the write is refused with the replication error
    (one real acknowledgement of two needed) -- never acknowledged, and
    never answered with the request line."""
    real = MemcachedServer(procs)
    cd = start(chashd_memcache, [echo, real], ["echo", "m1"], replicas=2,
               write_quorum=2)
    k = key_led_by(cd, "echo", 2).encode()
    refused = b"SERVER_ERROR replication: 1 of 2 members acknowledged " \
        b"(need 2)"
    with cd.client() as c:
        got = c.call(b"set %s 0 0 1\r\n0\r\n" % k)
        assert got.startswith(refused), got
        for _ in range(20):
            got = c.call(b"incr %s 4\r\n" % k)
            assert got.startswith(refused), got


def test_the_issue_s_pool_with_an_echoing_primary(chashd_memcache, echo,
                                                   procs):
    """The issue's pool (4 members, replicas 3, write_quorum 2,
    read_policy quorum, timeout 1 s, 2 workers) with the key's primary
    echoing, 10 clients incrementing the one key at once: every reply is
    a number (the two real members make the quorum), none is the
    request line."""
    reals = [MemcachedServer(procs) for _ in range(3)]
    cd = start(chashd_memcache, [echo] + reals, ["echo", "m1", "m2", "m3"],
               replicas=3, write_quorum=2, read_policy="quorum")
    k = key_led_by(cd, "echo", 3).encode()
    with cd.client() as c:
        assert c.call(b"set %s 0 0 1\r\n0\r\n" % k) == b"STORED\r\n"
    bad, counts, errors = [], [], []

    def client():
        n = 0
        try:
            with cd.client(timeout=10) as c:
                for _ in range(300):
                    got = c.call(b"incr %s 4\r\n" % k)
                    n += 1
                    if not is_number(got):
                        bad.append(got)
        except Exception as e:  # a reply that never came, a close
            errors.append(repr(e))
        counts.append(n)

    threads = [threading.Thread(target=client) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a client hangs"
    assert errors == []
    assert sum(counts) == 3000
    assert bad == [], "%d replies not a number, e.g. %r" % (len(bad),
                                                           bad[:3])


def even_free_port():
    """A free even port of the ephemeral range (where Linux's connect()
    picks its source ports first), or None: a busy machine's connections
    in TIME_WAIT may hold them all."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = map(int, f.read().split())
    ports = list(range(lo + (lo & 1), hi, 2))
    random.shuffle(ports)
    for p in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
        return p
    return None


def kernel_self_connects(port):
    """Whether a connect() to <port> (free) reaches itself on this
    machine (bounded: 200,000 refused tries, a few seconds)."""
    for _ in range(200000):
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        mine = s.getsockname() == s.getpeername()
        # reset, not closed: no TIME_WAIT left to hold the port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                     struct.pack("ii", 1, 0))
        s.close()
        return mine
    return False


def test_a_killed_member_s_port_reached_by_chashd_itself(chashd_memcache,
                                                        procs):
    """For real: the key's primary, on an even port of the ephemeral
    range, is killed while 10 clients increment; chashd's reconnects
    reach their own port (its log says it refused that connection), yet
    no client ever gets a reply that is not a number or an error, then or
    in the 3000 replies after; and the member restarts on its port at
    once (the refused self-connection was reset, not left in TIME_WAIT
    holding the port)."""
    primary = None
    for _ in range(5):
        # the port is in the ephemeral range: another test's connection
        # may take it between the check and memcached's bind; then
        # another port
        port = even_free_port()
        if port is None or not kernel_self_connects(port):
            pytest.skip("no free even ephemeral port on which this kernel "
                        "connects a socket to itself: the fault cannot "
                        "occur")
        try:
            primary = MemcachedServer(procs, port=port)
            break
        except AssertionError as e:
            if "Address already in use" not in str(e):
                raise
    assert primary is not None, "5 ports taken before memcached bound them"
    reals = [primary] + [MemcachedServer(procs) for _ in range(3)]
    names = ["m1", "m2", "m3", "m4"]
    cd = start(chashd_memcache, reals, names, replicas=3, write_quorum=2,
               read_policy="quorum")
    k = key_led_by(cd, "m1", 3).encode()
    with cd.client() as c:
        assert c.call(b"set %s 0 0 1\r\n0\r\n" % k) == b"STORED\r\n"
    primary = reals[0]
    primary.proc.kill()
    primary.proc.wait(timeout=5)
    stop, bad, n, errors = threading.Event(), [], [0], []

    def client():
        try:
            with cd.client(timeout=10) as c:
                while not stop.is_set():
                    got = c.call(b"incr %s 4\r\n" % k)
                    n[0] += 1
                    if not is_number(got) and \
                            not got.startswith(b"SERVER_ERROR"):
                        bad.append(got)
        except Exception as e:  # a reply that never came, a close
            errors.append(repr(e))
            stop.set()

    def reached_itself():
        """chashd's log names the echo it refused, or (a chashd that
        takes it) a connection from <port> to itself is open."""
        if re.search(r"member m1 \(\S+\): a connect reached our own port|"
                     r"member m1 sent a malformed reply", full_log(cd)):
            return True
        out = subprocess.run(["ss", "-tanH", "state", "established"],
                             capture_output=True, text=True).stdout
        me = "127.0.0.1:%d" % port
        return any(ln.split()[2:4] == [me, me] for ln in out.splitlines())

    threads = [threading.Thread(target=client) for _ in range(10)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: errors or reached_itself(), timeout=60,
                 interval=0.2, what="chashd to reach its own port")
        # traffic after it: a chashd that takes the echo answers with it
        seen = n[0]
        wait_for(lambda: errors or n[0] >= seen + 3000, timeout=30,
                 what="3000 more replies")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a client hangs"
    assert errors == []
    assert n[0] > 0 and bad == [], "%d of %d replies not memcached's: %r" \
        % (len(bad), n[0], bad[:3])
    # the two members left still make the quorum
    with cd.client() as c:
        assert is_number(c.call(b"incr %s 4\r\n" % k))
    primary.start()  # its port is free: no self-connection holds it
