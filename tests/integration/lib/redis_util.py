# redis_util.py -- what the redis suites share: real redis-server
# processes on free ports, Debian's nutcracker on a config, chashd on a
# redis pool (after checking that this chashd serves redis pools at all),
# which server holds a key, and a small RESP client that writes a whole
# pipeline in one send() and reads the replies back one by one, so a test
# sees exactly what a proxy answered and when it closed, without a client
# library's buffering in between. Every process is started through the
# test's Procs (killed at teardown); every wait is bounded.
# SPDX-License-Identifier: BSD-2-Clause
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile

import pytest

from base_util import CHASHD, can_connect, free_port, lookup_config, wait_for

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
REDIS_BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
NUTCRACKER = shutil.which("nutcracker") or "/usr/sbin/nutcracker"

# ------------------------------------------------------------ replies --


class Simple(str):
    """A simple-string reply (+OK). Equal only to another Simple: an error
    and a status with the same text are different replies."""

    def __eq__(self, other):
        return type(other) is Simple and str.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __repr__(self):
        return "+" + str.__str__(self)


class Err(str):
    """An error reply (-ERR ...), its text without the '-'."""

    def __eq__(self, other):
        return type(other) is Err and str.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __repr__(self):
        return "-" + str.__str__(self)


class _Closed:
    """Stands for a reply that never came: the peer closed first."""

    def __repr__(self):
        return "<connection closed>"


CLOSED = _Closed()


class Closed(Exception):
    """The peer closed the connection before a whole reply arrived."""


def encode(*args):
    """One command as a RESP multibulk request. Arguments may be str,
    bytes or int."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a)
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class SockClient:
    """What a blocking client over one socket (self.sock) has whatever it
    speaks: send() of bytes as given, close(), use in a `with`, and
    peer_closed()."""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def peer_closed(self, timeout=2.0):
        """True when the peer closes the connection within <timeout> s with
        nothing more to read; False when it stays open; an AssertionError
        when it sends bytes nobody asked for."""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
        finally:
            self.sock.settimeout(old)
        assert not data, "unexpected bytes: %r" % data[:80]
        return True


class Resp(SockClient):
    """A blocking RESP2 client over one socket. Replies are returned, never
    raised: Simple, Err, int, bytes (None for a nil bulk), list (None for a
    nil array). A read that meets EOF raises Closed."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0, password=None):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = bytearray()
        if password is not None:
            r = self.call("AUTH", password)
            assert r == Simple("OK"), r

    def settimeout(self, t):
        self.sock.settimeout(t)

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise Closed()
        self.buf += chunk

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            self._fill()

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data = bytes(self.buf[:n])
        assert self.buf[n:n + 2] == b"\r\n", "bulk not ended by CRLF"
        del self.buf[:n + 2]
        return data

    def read_reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return Simple(rest.decode(errors="replace"))
        if t == b"-":
            return Err(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read_reply() for _ in range(n)]
        raise AssertionError("not a RESP reply: %r" % line[:80])

    def call(self, *args):
        """One command, its reply."""
        self.send(encode(*args))
        return self.read_reply()

    def pipeline(self, cmds):
        """<cmds> (tuples of arguments) written in ONE send(), then one
        reply read per command. Replies that never came because the peer
        closed are CLOSED."""
        self.send(b"".join(encode(*c) for c in cmds))
        return self.read_replies(len(cmds))

    def read_replies(self, n):
        out = []
        for _ in range(n):
            try:
                out.append(self.read_reply())
            except (Closed, ConnectionResetError):
                out += [CLOSED] * (n - len(out))
                break
        return out

# ------------------------------------------------------- redis-server --


def port_is_free(port, host="127.0.0.1"):
    """Nobody listens on host:port (SO_REUSEADDR as servers bind, so an
    earlier run's TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class RedisServer:
    """A real redis-server on host:port, no persistence, its own dir."""

    def __init__(self, procs, host="127.0.0.1", port=None, password=None,
                 extra=()):
        self.procs = procs
        self.host = host
        self.port = port or free_port()
        self.password = password
        self.extra = list(extra)
        self.dir = os.path.join(str(procs.tmp), "redis-%s-%d"
                                % (host, self.port))
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None
        self.start()

    @property
    def addr(self):
        return "%s:%d" % (self.host, self.port)

    def start(self):
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", self.host,
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--daemonize", "no", "--protected-mode", "no"]
        if self.password is not None:
            args += ["--requirepass", self.password]
        self.proc = self.procs.start(args + self.extra,
                                     "redis-%s-%d.log" % (self.host,
                                                          self.port))

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("redis-server %s exited: %s"
                                     % (self.addr, self.log()[-2000:]))
            try:
                with self.client() as c:
                    return c.call("PING") == Simple("PONG")
            except (OSError, Closed):
                return False
        wait_for(up, timeout=10, what="redis-server %s" % self.addr)

    def log(self):
        path = os.path.join(str(self.procs.tmp), "redis-%s-%d.log"
                            % (self.host, self.port))
        with open(path, errors="replace") as f:
            return f.read()

    def stop(self):
        """Kill it (SIGKILL: a crash, as a test of failures wants) and wait
        until nothing listens on its port."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        wait_for(lambda: not can_connect(self.port, self.host),
                 what="redis-server %s to stop" % self.addr)

    def client(self, timeout=10.0):
        return Resp(self.port, self.host, timeout, self.password)

    def call(self, *args):
        with self.client() as c:
            return c.call(*args)

    def flush(self):
        assert self.call("FLUSHALL") == Simple("OK")

    def dbsize(self):
        return self.call("DBSIZE")

    def keys(self):
        """Every key it holds (SCAN, so a large keyspace is fine)."""
        out, cursor = set(), b"0"
        with self.client() as c:
            while True:
                cursor, batch = c.call("SCAN", cursor, "COUNT", 1000)
                out.update(k.decode() for k in batch)
                if cursor == b"0":
                    return out

    def holds(self, keys):
        """The subset of <keys> it holds (EXISTS on each, one pipeline)."""
        keys = list(keys)
        with self.client() as c:
            got = []
            for i in range(0, len(keys), 1000):
                part = keys[i:i + 1000]
                got += c.pipeline([("EXISTS", k) for k in part])
        return {k for k, n in zip(keys, got) if n == 1}


def start_on_free_host(server_class, procs, port):
    """A <server_class>(procs, host=, port=<port>) on some 127.0.0.x where
    the port is free: a fixed port (11211, twemproxy's special case) can
    be taken on 127.0.0.1, and the rest of 127/8 is ours on Linux."""
    hosts = ["127.0.0.%d" % i for i in range(2, 255)]
    random.shuffle(hosts)
    last = None
    for host in hosts[:20]:
        if not port_is_free(port, host):
            continue
        try:
            return server_class(procs, host=host, port=port)
        except AssertionError as e:   # lost a race for the port
            last = e
    raise AssertionError("no 127.0.0.x with port %d free: %s" % (port, last))


def start_redis_on_free_host(procs, port):
    """A redis-server on port <port> of some 127.0.0.x (start_on_free_host)."""
    return start_on_free_host(RedisServer, procs, port)


def which_server(servers, key):
    """The servers among <servers> that hold <key> (EXISTS on each)."""
    return [s for s in servers if s.call("EXISTS", key) == 1]


def placement(servers):
    """{key: server addr} of every key on <servers}; a key found on two
    servers is an error."""
    where = {}
    for s in servers:
        for k in s.keys():
            assert k not in where, "key %r on %s and %s" % (k, where[k],
                                                            s.addr)
            where[k] = s.addr
    return where


def flush_all(servers):
    for s in servers:
        s.flush()


@pytest.fixture
def redis_servers(procs):
    """redis_servers(n, password=None) -> [RedisServer] on free ports."""
    def make(n, **kw):
        return [RedisServer(procs, **kw) for _ in range(n)]
    return make


# ---------------------------------------------------------- nutcracker --


def listen_ports(conf_text):
    """The TCP ports of every pool's `listen:` in a YAML config."""
    return [int(p) for p in
            re.findall(r"^\s+listen:\s*['\"]?[^\s'\"]*:(\d+)", conf_text,
                       re.M)]


class Nutcracker:
    """Debian's nutcracker (twemproxy 0.5.0) on <conf_text>, its stats on a
    free port of 127.0.0.1. Ready once every pool's listen port accepts."""

    def __init__(self, procs, conf_text, name="nutcracker", args=()):
        tmp = str(procs.tmp)
        self.conf = os.path.join(tmp, name + ".yml")
        self.log_path = os.path.join(tmp, name + ".log")
        with open(self.conf, "w") as f:
            f.write(conf_text)
        check = subprocess.run([NUTCRACKER, "-t", "-c", self.conf],
                               capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
        self.stats_port = free_port()
        self.ports = listen_ports(conf_text)
        assert self.ports, "no listen port in the config"
        self.proc = procs.start([NUTCRACKER, "-c", self.conf,
                                 "-s", str(self.stats_port),
                                 "-a", "127.0.0.1",
                                 "-p", os.path.join(tmp, name + ".pid"),
                                 "-o", self.log_path, *args],
                                name + ".out")
        self.port = self.ports[0]

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("nutcracker exited: " + self.log())
            return all(can_connect(p) for p in self.ports + [self.stats_port])
        wait_for(up, timeout=10, what="nutcracker to listen")

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def client(self, port=None, timeout=10.0):
        return Resp(port or self.port, timeout=timeout)


@pytest.fixture
def nutcracker(procs):
    """nutcracker(conf_text) -> a running Nutcracker."""
    def start(conf_text, **kw):
        return Nutcracker(procs, conf_text, **kw)
    return start


# -------------------------------------------------------------- chashd --


_SERVES = set()


def need_chashd(mode, pool_keys=""):
    """This chashd must serve <mode> pools ("redis", "memcache"): `chashd
    -t` on a small pool with <pool_keys> (YAML lines) passes, checked once
    per mode. Any other outcome fails the calling test; it is never a
    skip, so a regression cannot hide as one."""
    if (CHASHD, mode) in _SERVES:
        return
    with tempfile.TemporaryDirectory(prefix="chash-%s-probe" % mode) as d:
        conf = os.path.join(d, "probe.yml")
        with open(conf, "w") as f:
            f.write("global:\n  admin: off\n"
                    "probe:\n  listen: 127.0.0.1:%d\n%s"
                    "  hash: fnv1a_64\n  distribution: ketama\n"
                    "  servers:\n    - 127.0.0.1:%d:1 probe-1\n"
                    % (free_port(), pool_keys, free_port()))
        r = subprocess.run([CHASHD, "-t", "-c", conf], capture_output=True,
                           text=True, timeout=30)
    assert r.returncode == 0, "chashd -t on a plain %s pool: exit %d: %s" \
        % (mode, r.returncode, r.stdout + r.stderr)
    _SERVES.add((CHASHD, mode))


def need_chashd_redis():
    """This chashd must serve redis pools (need_chashd)."""
    need_chashd("redis", "  redis: true\n")


def start_chashd(procs, conf, ports, log_name="chashd.log", args=()):
    """chashd on config file <conf>, its output to <log_name> in the
    test's dir; returned once every port of <ports> accepts (the pools'
    and the admin API's, which is bound last), or the test fails with
    the log's tail when it exits first."""
    proc = procs.start([CHASHD, "-c", conf, "--log-level", "info", *args],
                       log_name)

    def up():
        if proc.poll() is not None:
            with open(os.path.join(str(procs.tmp), log_name),
                      errors="replace") as f:
                raise AssertionError("chashd exited %d: %s"
                                     % (proc.returncode, f.read()[-4000:]))
        return all(can_connect(p) for p in ports)
    wait_for(up, timeout=10, what="chashd to listen")
    return proc


class ChashdRedis:
    """chashd on a config written to the test's dir as <name>.yml. Ready
    once every pool's listen port accepts. client(): a Resp to a pool
    (mc_util.ChashdMemcache is this with a memcache client)."""

    def __init__(self, procs, conf_text, name="chashd", args=()):
        tmp = str(procs.tmp)
        self.conf = os.path.join(tmp, name + ".yml")
        self.log_path = os.path.join(tmp, name + ".log")
        with open(self.conf, "w") as f:
            f.write(conf_text)
        self.ports = listen_ports(conf_text)
        assert self.ports, "no listen port in the config"
        self.port = self.ports[0]
        # the admin API, when the config has one, is bound last: wait for
        # it too, or a test's first API call races it
        admin = re.search(r"^  admin: 127\.0\.0\.1:(\d+)$", conf_text, re.M)
        waits = self.ports + ([int(admin.group(1))] if admin else [])
        self.proc = start_chashd(procs, self.conf, waits, name + ".log", args)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]

    def client(self, port=None, timeout=10.0, password=None):
        return Resp(port or self.port, timeout=timeout, password=password)

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS for chashd")


@pytest.fixture
def chashd_redis(procs):
    """chashd_redis(conf_text) -> a running ChashdRedis; skips the test
    (need_chashd_redis) while chashd refuses redis pools."""
    def start(conf_text, **kw):
        need_chashd_redis()
        return ChashdRedis(procs, conf_text, **kw)
    return start


# ------------------------------------------------------------- configs --


def pool_yaml(name, port, servers, names=True, head=(), **opts):
    """A pool in twemproxy's form. <servers>: server objects (with .addr)
    or (server, weight); <names>: True for "<name>-1".. after the address
    (twemproxy then hashes the name, not the address), a list of names,
    or False: unnamed. <head>: lines right after `listen:`; <opts>: more
    keys, written as given."""
    lines = ["%s:" % name, "  listen: 127.0.0.1:%d" % port, *head]
    for k, v in opts.items():
        lines.append("  %s: %s" % (k, v))
    lines.append("  servers:")
    for i, s in enumerate(servers):
        srv, w = s if isinstance(s, tuple) else (s, 1)
        if names is True:
            label = " %s-%d" % (name, i + 1)
        elif names:
            label = " " + names[i]
        else:
            label = ""
        lines.append("    - %s:%d%s" % (srv.addr, w, label))
    return "\n".join(lines) + "\n"


def redis_pool(name, port, servers, names=True, **opts):
    """A redis pool in twemproxy's form (pool_yaml with `redis: true`).
    <servers>: RedisServer or (RedisServer, weight)."""
    return pool_yaml(name, port, servers, names, ["  redis: true"], **opts)


def spread_keys(conf, pool, keys, chash=None):
    """{key: member} for <keys> from `chash lookup --config` (chashd's own
    ring, independent of any proxy run). (<chash>: the build's, always.)"""
    keys = list(keys)
    out = {k: owners[0] for k, owners in
           lookup_config(conf, pool, keys).items()}
    assert set(out) == set(keys), "lookup lost keys"
    return out


