# mc_util.py -- what the memcache suites share: real memcached processes
# on free ports, chashd on a memcache pool (after checking that this
# chashd serves memcache pools at all), nutcracker (redis_util's), which
# member holds a key, and a small text-protocol client that writes bytes
# as given and reads replies back unit by unit (a line, or a VALUE/VA
# header with its data block), so a test sees exactly what a server or a
# proxy answered, and when it closed. Every process is started through
# the test's Procs (killed at teardown); every read and wait is bounded.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import shutil
import signal
import socket
import time
import urllib.parse

import pytest

from base_util import CHASH, can_connect, free_port, wait_for
from redis_util import (ChashdRedis, Nutcracker, SockClient,  # noqa: F401
                        flush_all, need_chashd, pool_yaml, port_is_free,
                        spread_keys, start_on_free_host)

MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"
MEMCCAPABLE = shutil.which("memccapable") or "/usr/bin/memccapable"


# ------------------------------------------------------------- client --


class Closed(Exception):
    """The peer closed the connection before a whole reply arrived."""


class McTimeout(AssertionError):
    """No whole reply within the deadline (an AssertionError: a test that
    waits for a reply that never comes fails, naming what it had)."""


def value_header(line):
    """The data length a reply line announces: "VALUE <key> <flags>
    <bytes> [<cas>]" (text get) or "VA <bytes> <flags>*" (meta). None for
    any other line."""
    if line.startswith(b"VALUE "):
        parts = line.split()
        if len(parts) in (4, 5) and parts[3].isdigit():
            return int(parts[3])
        return None
    if line.startswith(b"VA "):
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            return int(parts[1])
    return None


class Mc(SockClient):
    """A blocking memcache text-protocol client over one socket. It sends
    bytes as given (nothing appended) and reads replies as units: one line
    with its CRLF, or a VALUE/VA line together with its data block and
    CRLF. Every read has a deadline (<timeout> s from the call)."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.timeout = timeout
        self.buf = bytearray()
        self.eof = False

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise McTimeout("no whole reply in %.1fs; have %r"
                            % (self.timeout, bytes(self.buf[:200])))
        if self.eof:
            raise Closed()
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(1 << 20)
        except socket.timeout:
            raise McTimeout("no whole reply in %.1fs; have %r"
                            % (self.timeout, bytes(self.buf[:200])))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            raise Closed()
        self.buf += chunk

    def _deadline(self, timeout):
        return time.monotonic() + (self.timeout if timeout is None
                                   else timeout)

    def line(self, timeout=None):
        """One line, CRLF included (a bare LF ends it too)."""
        deadline = self._deadline(timeout)
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                out = bytes(self.buf[:i + 1])
                del self.buf[:i + 1]
                return out
            self._fill(deadline)

    def exact(self, n, timeout=None):
        deadline = self._deadline(timeout)
        while len(self.buf) < n:
            self._fill(deadline)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def unit(self, timeout=None):
        """One reply unit: a line, or a VALUE/VA line with its data and
        the CRLF after it (the data is read by length, never scanned)."""
        deadline = self._deadline(timeout)
        head = self.line(max(0.0, deadline - time.monotonic()))
        n = value_header(head)
        if n is None:
            return head
        return head + self.exact(n + 2, max(0.0,
                                             deadline - time.monotonic()))

    def units_until(self, last, count=1, timeout=None):
        """Units up to and including the <count>-th one equal to <last>
        (a whole unit, say b"MN\\r\\n" or b"END\\r\\n")."""
        deadline = self._deadline(timeout)
        out, seen = [], 0
        while seen < count:
            u = self.unit(max(0.0, deadline - time.monotonic()))
            out.append(u)
            if u == last:
                seen += 1
        return out

    def get_reply(self, timeout=None):
        """The units of one get/gets/gat/gats reply: VALUE units up to and
        including END, or the one error line that replaced it."""
        deadline = self._deadline(timeout)
        out = []
        while True:
            u = self.unit(max(0.0, deadline - time.monotonic()))
            out.append(u)
            if not u.startswith(b"VALUE "):
                return out

    def call(self, data, timeout=None):
        """Send <data>, read one unit."""
        self.send(data)
        return self.unit(timeout)

    def call_mn(self, data, timeout=None):
        """Send <data> then "mn", and return every byte answered before
        the MN (the MN itself left out): what <data> got, including
        nothing at all for noreply and quiet commands."""
        self.send(data + b"mn\r\n")
        extra = count_mn(data)
        units = self.units_until(b"MN\r\n", extra + 1, timeout)
        return b"".join(units[:-1])

    def read_available(self, wait=0.3):
        """Whatever arrives within <wait> s (for "nothing more came")."""
        deadline = time.monotonic() + wait
        try:
            while True:
                self._fill(deadline)
        except (McTimeout, Closed):
            pass
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def peer_closed(self, timeout=2.0):
        """SockClient.peer_closed, after the bytes already read: any is
        an AssertionError, a close already seen is True."""
        if self.buf:
            raise AssertionError("unexpected bytes: %r" % bytes(self.buf[:80]))
        if self.eof:
            return True
        self.eof = super().peer_closed(timeout)
        return self.eof


def count_mn(data):
    """How many "mn" commands <data> holds at line starts (each answers
    MN before the terminator's). A value block holding "mn\\r\\n" at a line
    start would count wrongly: scripts do not send one."""
    return sum(1 for ln in re.split(rb"\r?\n", data) if ln == b"mn")


def run_stream(port, data, timeout=10.0):
    """<data> in ONE send, then "mn": the units answered before the final
    MN, the connection closed after."""
    with Mc(port, timeout=timeout) as c:
        c.send(data + b"mn\r\n")
        units = c.units_until(b"MN\r\n", count_mn(data) + 1)
    return units[:-1]


def split_units(data):
    """Bytes of replies cut into units, as Mc.unit() reads them."""
    out, i = [], 0
    while i < len(data):
        j = data.find(b"\n", i)
        if j < 0:
            out.append(data[i:])
            break
        head = data[i:j + 1]
        n = value_header(head)
        end = j + 1 + (n + 2 if n is not None else 0)
        out.append(data[i:end])
        i = end
    return out


# ---------------------------------------------------------- memcached --


class MemcachedServer:
    """A real memcached on host:port: no UDP, one worker thread (so its
    CAS counter runs the same in two servers given the same commands)."""

    def __init__(self, procs, host="127.0.0.1", port=None, extra=()):
        self.procs = procs
        self.host = host
        self.port = port or free_port()
        self.extra = list(extra)
        self.proc = None
        self.start()

    @property
    def addr(self):
        return "%s:%d" % (self.host, self.port)

    @property
    def log_name(self):
        return "memcached-%s-%d.log" % (self.host, self.port)

    def start(self):
        args = [MEMCACHED, "-p", str(self.port), "-l", self.host, "-U", "0",
                "-t", "1"]
        if os.geteuid() == 0:
            args += ["-u", "root"]
        self.proc = self.procs.start(args + self.extra, self.log_name)

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("memcached %s exited: %s"
                                     % (self.addr, self.log()[-2000:]))
            try:
                with self.client(timeout=1) as c:
                    return c.call(b"version\r\n").startswith(b"VERSION ")
            except (OSError, Closed, McTimeout):
                return False
        wait_for(up, timeout=10, what="memcached %s" % self.addr)

    def log(self):
        path = os.path.join(str(self.procs.tmp), self.log_name)
        with open(path, errors="replace") as f:
            return f.read()

    def stop(self):
        """Kill it (SIGKILL: a crash) and wait until its port refuses."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        wait_for(lambda: not can_connect(self.port, self.host),
                 what="memcached %s to stop" % self.addr)

    def client(self, timeout=5.0):
        return Mc(self.port, self.host, timeout)

    def call(self, data):
        with self.client() as c:
            return c.call(data)

    def flush(self):
        assert self.call(b"flush_all\r\n") == b"OK\r\n"

    def stats(self):
        with self.client() as c:
            c.send(b"stats\r\n")
            units = c.units_until(b"END\r\n")
        out = {}
        for u in units[:-1]:
            _, name, value = u.decode().rstrip("\r\n").split(" ", 2)
            out[name] = value
        return out

    def keys(self):
        """Every key it holds, from `lru_crawler metadump all` (keys are
        URL-encoded there)."""
        with self.client(timeout=10) as c:
            c.send(b"lru_crawler metadump all\r\n")
            units = c.units_until(b"END\r\n")
        out = set()
        for u in units[:-1]:
            m = re.match(rb"key=(\S+) ", u)
            assert m, "metadump line %r" % u
            out.add(urllib.parse.unquote_to_bytes(m.group(1)).decode())
        return out

    def values(self, keys):
        """{key: value bytes} of the keys among <keys> it holds (one `mg
        <key> v` per key, pipelined in batches)."""
        keys = list(keys)
        out = {}
        with self.client(timeout=10) as c:
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                c.send(b"".join(b"mg %s v\r\n" % k.encode() for k in part))
                for k in part:
                    u = c.unit()
                    if u.startswith(b"VA "):
                        out[k] = u.split(b"\r\n", 1)[1][:-2]
                    else:
                        assert u == b"EN\r\n", (k, u)
        return out

    def holds(self, keys):
        return set(self.values(keys))


def task_states(pid):
    """The state letter of every thread of <pid> (/proc/<pid>/task)."""
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                out.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            pass
    return out


def sigstop(srv):
    """SIGSTOP <srv> and wait until every thread of it is stopped: the
    signal is taken asynchronously, and a request sent in between would
    still be answered."""
    os.kill(srv.proc.pid, signal.SIGSTOP)
    wait_for(lambda: all(s == "T" for s in task_states(srv.proc.pid)),
             timeout=5, interval=0.005, what="%s stopped" % srv.addr)


def sigcont(srv):
    os.kill(srv.proc.pid, signal.SIGCONT)


def start_memcached_on_free_host(procs, port):
    """A memcached on port <port> of some 127.0.0.x where it is free
    (redis_util.start_on_free_host)."""
    return start_on_free_host(MemcachedServer, procs, port)


def placement(servers, keys):
    """{key: server addr} of <keys> over <servers>, and each value equal
    to its key (the scripts write the key as its value, so a server
    holding a key under another key's name shows); a key on two servers,
    or a value not its key, is an error. Keys on no server are left out."""
    where = {}
    for s in servers:
        for k, v in s.values(keys).items():
            assert k not in where, "key %r on %s and %s" % (k, where[k],
                                                            s.addr)
            assert v == k.encode(), "%s holds %r = %r" % (s.addr, k, v)
            where[k] = s.addr
    return where


def which_member(servers, key):
    """The servers among <servers> that hold <key>."""
    return [s for s in servers if key in s.holds([key])]


@pytest.fixture
def memcached_servers(procs):
    """memcached_servers(n) -> [MemcachedServer] on free ports."""
    def make(n, **kw):
        return [MemcachedServer(procs, **kw) for _ in range(n)]
    return make


# -------------------------------------------------------------- chashd --


def need_chashd_memcache():
    """This chashd must serve memcache pools (redis_util.need_chashd): the
    probe pool has no `redis:` key, twemproxy's rule for memcache."""
    need_chashd("memcache")


class ChashdMemcache(ChashdRedis):
    """ChashdRedis (chashd on <conf_text>, ready once every listen port
    accepts) whose client() speaks memcache's text protocol."""

    def alive(self):
        return self.proc.poll() is None

    def client(self, port=None, timeout=5.0):
        return Mc(port or self.port, timeout=timeout)


@pytest.fixture
def chashd_memcache(procs):
    """chashd_memcache(conf_text) -> a running ChashdMemcache; fails the
    test (need_chashd_memcache) while chashd refuses memcache pools."""
    def start(conf_text, **kw):
        need_chashd_memcache()
        return ChashdMemcache(procs, conf_text, **kw)
    return start


# ------------------------------------------------------------- configs --

GLOBAL = "global:\n  admin: off\n  workers: 2\n"


def mc_pool(name, port, servers, names=True, **opts):
    """A memcache pool in twemproxy's form (redis_util.pool_yaml, no
    `redis:` key). <servers>: MemcachedServer or (MemcachedServer,
    weight); <names>: True for "<name>-1".. after the address (ketama
    then hashes the name), a list of names, or False: unnamed."""
    return pool_yaml(name, port, servers, names, **opts)


def lookup(conf, pool, keys):
    """{key: member name} for <keys> from `chash lookup --config` (chashd's
    own ring, independent of any proxy run): redis_util.spread_keys."""
    return spread_keys(conf, pool, keys, CHASH)


class KeysByMember:
    """Keys chosen by where chashd's ring puts them in <pool> of the
    config file <conf>: on(i) is a fresh key owned by the i-th member
    name (sorted)."""

    def __init__(self, conf, pool, prefix="k:", n=600):
        cands = ["%s%d" % (prefix, i) for i in range(n)]
        self.owner = lookup(conf, pool, cands)
        self.by_member = {}
        for k in cands:
            self.by_member.setdefault(self.owner[k], []).append(k)
        self.members = sorted(self.by_member)

    def on(self, m):
        return self.by_member[self.members[m]].pop(0)
