# jepsen_util.py -- a Jepsen-style checker for replicated store pools:
# client threads that record every operation (invoke and complete times,
# client, op, argument, outcome), faults injected during the load and
# recorded as windows, then model checkers that judge the history and the
# copies left on every member (counters, registers, lists, append
# registers). test_replication_checker.py runs a bounded subset in `make
# test`, scripts/jepsen the whole matrix for DURATION; doc/jepsen.md states
# every rule and why it is sound. Every wait and every socket is bounded.
# SPDX-License-Identifier: BSD-2-Clause
import bisect
import collections
import hashlib
import json
import os
import random
import re
import signal
import socket
import threading
import time

from admin_util import Api, admin_global
from base_util import can_connect, free_port, lookup_config, wait_for
from mc_util import MemcachedServer, task_states
from redis_util import RedisServer, pool_yaml, start_chashd

POOL = "store"
INF = float("inf")
MISSING = object()      # no final value could be read (checks skip it)

# ============================================================ history ==


class Op:
    """One operation of one client. <t0> is taken before the request is
    sent and <t1> after its reply was read, so the real moment the store
    applied it lies inside [t0, t1] whatever the scheduling delays of the
    client's thread (a late t1 only widens the window: the checks stay
    sound, they just see less). <type>: "ok" (a reply, <value> its
    meaning), "fail" (an error reply, <value> its text) or "info" (no
    reply: a timeout, a connection error, a reply that was not one). A
    write that is not "ok" is indeterminate: it may have been applied, at
    any moment from <t0> on, even after <t1>."""

    __slots__ = ("client", "wl", "f", "key", "arg", "write", "t0", "t1",
                 "type", "value")

    def __init__(self, client, wl, f, key, arg, write):
        self.client, self.wl, self.f, self.key = client, wl, f, key
        self.arg, self.write = arg, write
        self.t0 = self.t1 = 0.0
        self.type, self.value = None, None

    @property
    def acked(self):
        return self.type == "ok"

    def row(self, t_base=0.0):
        """The op as a JSON-able dict (times relative to <t_base>)."""
        val = self.value
        if isinstance(val, bytes):
            val = val.decode("latin-1")
        elif isinstance(val, list):
            val = [v.decode("latin-1") if isinstance(v, bytes) else v
                   for v in val[:50]]
        arg = self.arg.decode("latin-1") if isinstance(self.arg, bytes) \
            else self.arg
        return {"client": self.client, "wl": self.wl, "f": self.f,
                "key": self.key, "arg": arg, "write": self.write,
                "t0": round(self.t0 - t_base, 6),
                "t1": round(self.t1 - t_base, 6), "type": self.type,
                "value": val}

    def __repr__(self):
        return "Op(%s)" % json.dumps(self.row())


class Anomaly:
    """One violation of a model's rule: <kind> (a short name, the rules
    in doc/jepsen.md), the workload and key, what was seen, and the ops
    that prove it."""

    def __init__(self, kind, wl, key, detail, ops=()):
        self.kind, self.wl, self.key = kind, wl, key
        self.detail, self.ops = detail, list(ops)

    def __repr__(self):
        return "%s [%s %s]: %s" % (self.kind, self.wl, self.key, self.detail)


class History:
    """Every op of a run, the fault windows, and the anomalies the clients
    saw at once (invalid replies). list.append is atomic in CPython: the
    client threads add without a lock."""

    def __init__(self):
        self.t_base = time.monotonic()
        self.ops = []
        self.events = []
        self.anomalies = []
        self.refused = 0          # connects refused: no op was sent
        self.notes = []

    def begin(self, fault, **detail):
        ev = {"fault": fault, "start": time.monotonic(), "end": None}
        ev.update(detail)
        self.events.append(ev)
        return ev

    def end(self, ev, **detail):
        ev["end"] = time.monotonic()
        ev.update(detail)

    def dump(self, path):
        """The history as JSON lines: the ops by invoke time, then the
        fault windows and the anomalies seen by the clients."""
        with open(path, "w") as f:
            for op in sorted(self.ops, key=lambda o: o.t0):
                f.write(json.dumps(op.row(self.t_base)) + "\n")
            for ev in self.events:
                row = dict(ev)
                row["start"] = round(ev["start"] - self.t_base, 6)
                if ev["end"] is not None:
                    row["end"] = round(ev["end"] - self.t_base, 6)
                f.write(json.dumps({"event": row}) + "\n")

# ============================================================= codecs ==


class ProtocolError(Exception):
    """Bytes that are not a reply of the protocol at all."""


class Invalid(Exception):
    """A well-formed reply that the command cannot have: a number asked
    and a line of text given, +OK to a GET, a value of another key."""


class Status(str):
    """A RESP simple string (+OK)."""


class RespError(str):
    """A RESP error reply (-ERR ...), its text without the '-'."""


def resp_encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def resp_parse(buf, i=0):
    """(reply, next index) of the RESP2 reply at <buf>[i:], or None while
    it is incomplete. A nil bulk or array is (None, next)."""
    j = buf.find(b"\r\n", i)
    if j < 0:
        if len(buf) - i > 1 << 16:
            raise ProtocolError("a reply line over 64 KiB")
        return None
    line = bytes(buf[i:j])
    kind, rest, nxt = line[:1], line[1:], j + 2
    try:
        if kind == b"+":
            return Status(rest.decode("latin-1")), nxt
        if kind == b"-":
            return RespError(rest.decode("latin-1")), nxt
        if kind == b":":
            return int(rest), nxt
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None, nxt
            if len(buf) < nxt + n + 2:
                return None
            if buf[nxt + n:nxt + n + 2] != b"\r\n":
                raise ProtocolError("a bulk not ended by CRLF")
            return bytes(buf[nxt:nxt + n]), nxt + n + 2
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None, nxt
            items = []
            for _ in range(n):
                got = resp_parse(buf, nxt)
                if got is None:
                    return None
                items.append(got[0])
                nxt = got[1]
            return items, nxt
    except ValueError:
        raise ProtocolError("not a RESP reply: %r" % line[:80])
    raise ProtocolError("not a RESP reply: %r" % line[:80])


class Conn:
    """One TCP connection with a deadline on every exchange."""

    def __init__(self, port, host="127.0.0.1", timeout=3.0):
        self.timeout = timeout
        self.sock = socket.create_connection((host, port),
                                             timeout=min(timeout, 1.0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def close(self):
        self.sock.close()

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("no whole reply in %.1fs" % self.timeout)
        self.sock.settimeout(left)
        chunk = self.sock.recv(1 << 18)
        if not chunk:
            raise ConnectionError("closed by the peer")
        self.buf += chunk


class RespConn(Conn):
    def exchange(self, req):
        """Send <req> (bytes), return its one reply."""
        self.sock.settimeout(self.timeout)
        self.sock.sendall(req)
        deadline = time.monotonic() + self.timeout
        while True:
            got = resp_parse(self.buf)
            if got is not None:
                del self.buf[:got[1]]
                return got[0]
            self._fill(deadline)

    def call(self, *args):
        return self.exchange(resp_encode(*args))


class McConn(Conn):
    def _line(self, deadline):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            if len(self.buf) > 1 << 16:
                raise ProtocolError("a reply line over 64 KiB")
            self._fill(deadline)

    def exchange(self, req):
        """<req>: (bytes, shape). Shape "line": the reply line. Shape
        "get": [(key, flags, data)...] of VALUE blocks up to END, or the
        one line (an error) that came instead."""
        data, shape = req
        self.sock.settimeout(self.timeout)
        self.sock.sendall(data)
        deadline = time.monotonic() + self.timeout
        line = self._line(deadline)
        if shape == "line":
            return line
        values = []
        while line.startswith(b"VALUE "):
            parts = line.split()
            if len(parts) not in (4, 5) or not parts[3].isdigit():
                raise ProtocolError("bad VALUE line %r" % line[:80])
            n = int(parts[3])
            while len(self.buf) < n + 2:
                self._fill(deadline)
            if self.buf[n:n + 2] != b"\r\n":
                raise ProtocolError("a data block not ended by CRLF")
            values.append((parts[1], parts[2], bytes(self.buf[:n])))
            del self.buf[:n + 2]
            line = self._line(deadline)
        if line == b"END":
            return values
        if values:
            raise ProtocolError("%r after VALUE blocks" % line[:80])
        return line


def mc_error(line):
    return isinstance(line, bytes) and (
        line.startswith(b"SERVER_ERROR") or line.startswith(b"CLIENT_ERROR")
        or line == b"ERROR")

# ------------------------------------------------ reply interpreters --
# Each takes the raw reply and returns (type, value) or (type, value,
# anomaly kind), or raises Invalid: a reply the command cannot have.


def r_int(raw):
    if isinstance(raw, RespError):
        return "fail", str(raw)
    if isinstance(raw, int):
        return "ok", raw
    raise Invalid("not an integer: %r" % (raw,))


def r_ok(raw):
    if isinstance(raw, RespError):
        return "fail", str(raw)
    if isinstance(raw, Status) and raw == "OK":
        return "ok", "OK"
    raise Invalid("not +OK: %r" % (raw,))


def r_bulk(raw):
    if isinstance(raw, RespError):
        return "fail", str(raw)
    if raw is None or isinstance(raw, bytes):
        return "ok", raw
    raise Invalid("not a bulk string: %r" % (raw,))


def r_counter(raw):
    """GET of a counter: its integer (nil reads as 0: the key was set to 0
    before the load, so a nil is a lost write, which the checks see)."""
    t, v = r_bulk(raw)
    if t != "ok":
        return t, v
    if v is None:
        return "ok", 0
    try:
        return "ok", int(v)
    except ValueError:
        raise Invalid("a counter that is not a number: %r" % v[:80])


def r_list(raw):
    if isinstance(raw, RespError):
        return "fail", str(raw)
    if isinstance(raw, list) and all(isinstance(x, bytes) for x in raw):
        return "ok", raw
    raise Invalid("not an array of bulks: %r" % (raw,))


def m_number(raw):
    """incr/decr: the new value; NOT_FOUND on a key created before the
    load and never deleted is an anomaly of its own (and indeterminate)."""
    if mc_error(raw):
        return "fail", raw.decode("latin-1")
    if isinstance(raw, bytes) and re.fullmatch(rb"\d+ *", raw):
        return "ok", int(raw)
    if raw == b"NOT_FOUND":
        return "fail", "NOT_FOUND", "missing-key"
    raise Invalid("not a number: %r" % (raw,))


def m_stored(raw):
    if mc_error(raw):
        return "fail", raw.decode("latin-1")
    if raw == b"STORED":
        return "ok", "STORED"
    raise Invalid("not STORED: %r" % (raw,))


def m_appended(raw):
    """append: STORED; NOT_STORED means the key was not there, which for a
    key created before the load and never deleted is an anomaly."""
    if raw == b"NOT_STORED":
        return "fail", "NOT_STORED", "missing-key"
    return m_stored(raw)


def m_deleted(raw):
    if mc_error(raw):
        return "fail", raw.decode("latin-1")
    if raw in (b"DELETED", b"NOT_FOUND"):
        return "ok", raw.decode()
    raise Invalid("not DELETED or NOT_FOUND: %r" % (raw,))


def m_get(key):
    """get <key>: its data or None; a VALUE of another key, or more than
    one, is invalid."""
    def interp(raw):
        if mc_error(raw):
            return "fail", raw.decode("latin-1")
        if not isinstance(raw, list):
            raise Invalid("not a get reply: %r" % (raw,))
        if not raw:
            return "ok", None
        if len(raw) != 1 or raw[0][0] != key.encode():
            raise Invalid("get %s answered %r" % (key, raw[:3]))
        return "ok", raw[0][2]
    return interp


def m_counter(key):
    get = m_get(key)

    def interp(raw):
        out = get(raw)
        if out[0] != "ok" or out[1] is None:
            return out if out[0] != "ok" else ("ok", None)
        try:
            return "ok", int(out[1].strip())
        except ValueError:
            raise Invalid("a counter that is not a number: %r"
                          % out[1][:80])
    return interp

# ============================================================ clients ==


class Client:
    """One logical client (a Jepsen process): one connection at a time
    to <port>, bounded by <timeout> per exchange. A connection error, a
    timeout or an invalid reply closes the connection (its stream can no
    longer be trusted) and the next op reconnects. A connect that fails
    sends nothing, so no op is recorded (counted in history.refused)."""

    def __init__(self, cid, port, proto, history, timeout, rng):
        self.cid, self.port, self.proto = cid, port, proto
        self.history, self.timeout, self.rng = history, timeout, rng
        self.conn = None
        self.key = None           # the key a workload gave this client
        self.seq = 0              # its writes so far (unique values)

    def drop(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def do(self, wl, f, key, arg, write, req, interp):
        if self.conn is None:
            cls = RespConn if self.proto == "redis" else McConn
            try:
                self.conn = cls(self.port, timeout=self.timeout)
            except OSError:
                self.history.refused += 1
                time.sleep(0.02)
                return None
        op = Op(self.cid, wl, f, key, arg, write)
        op.t0 = time.monotonic()
        try:
            raw = self.conn.exchange(req)
            op.t1 = time.monotonic()
            out = interp(raw)
            op.type, op.value = out[0], out[1]
            if len(out) > 2:
                self.history.anomalies.append(Anomaly(
                    out[2], wl, key, "%s answered %r" % (f, out[1]), [op]))
        except (ProtocolError, Invalid) as e:
            op.t1 = op.t1 or time.monotonic()
            op.type, op.value = "info", "invalid reply: %s" % e
            self.history.anomalies.append(Anomaly(
                "invalid-reply", wl, key, "%s %r: %s" % (f, arg, e), [op]))
            self.drop()
        except OSError as e:        # timeouts and resets included
            op.t1 = time.monotonic()
            op.type, op.value = "info", "%s: %s" % (type(e).__name__, e)
            self.drop()
        self.history.ops.append(op)
        return op

# ========================================================== workloads ==
# A workload: <nclients> clients over <keys> (client i on keys[i % n], so
# every key has nclients/len(keys) clients of its own), step() does one
# op, setup() writes the initial state through the pool, read() reads a
# key's value through a connection (the pool's or a member's), check()
# judges the ops of each key and the final values.


class Workload:
    name = "?"
    keys = ()
    nclients = 10

    def key_of(self, i):
        return self.keys[i % len(self.keys)]

    def setup(self, conn):
        pass

    @staticmethod
    def must(conn, req, interp, what):
        """A setup write that must be acknowledged (5 tries)."""
        last = None
        for _ in range(5):
            try:
                out = interp(conn.exchange(req))
                if out[0] == "ok":
                    return
                last = out
            except (OSError, ProtocolError, Invalid) as e:
                last = e
            time.sleep(0.2)
        raise AssertionError("setup %s not acknowledged: %r" % (what, last))


class Counter(Workload):
    """Clients increment ONE key by small positive deltas (redis INCR and
    INCRBY, memcache incr) and read it; with <mix> (memcache) they also
    decrement. Checked by check_counter: unique replies (without mix),
    each reply and read within the bounds the real-time order allows, the
    final value within [acked, acked + indeterminate]."""

    def __init__(self, proto, key="ctr", nclients=10, mix=False,
                 reads=0.1):
        self.proto, self.key, self.mix, self.reads = proto, key, mix, reads
        self.keys = [key]
        self.nclients = nclients
        self.name = "counter-mix" if mix else "counter"
        # memcache's decr stops at 0: start far above what decrs take
        self.init = 10 ** 9 if mix else 0

    def setup(self, conn):
        if self.proto == "redis":
            self.must(conn, resp_encode("SET", self.key, self.init), r_ok,
                      "SET %s" % self.key)
        else:
            v = b"%d" % self.init
            self.must(conn, (b"add %s 0 0 %d\r\n%s\r\n"
                             % (self.key.encode(), len(v), v), "line"),
                      m_stored, "add %s" % self.key)

    def step(self, c):
        k, r = self.key, c.rng.random()
        if r < self.reads:
            return self.read_op(c)
        d = c.rng.randint(1, 5)
        if self.mix and r < self.reads + 0.3:
            return c.do(self.name, "add", k, -d, True,
                        (b"decr %s %d\r\n" % (k.encode(), d), "line"),
                        m_number)
        if self.proto == "memcache":
            return c.do(self.name, "add", k, d, True,
                        (b"incr %s %d\r\n" % (k.encode(), d), "line"),
                        m_number)
        if r < 0.55:
            return c.do(self.name, "add", k, 1, True,
                        resp_encode("INCR", k), r_int)
        return c.do(self.name, "add", k, d, True,
                    resp_encode("INCRBY", k, d), r_int)

    def read_op(self, c):
        if self.proto == "redis":
            return c.do(self.name, "read", self.key, 0, False,
                        resp_encode("GET", self.key), r_counter)
        return c.do(self.name, "read", self.key, 0, False,
                    (b"get %s\r\n" % self.key.encode(), "get"),
                    m_counter(self.key))

    def read(self, conn, key):
        if self.proto == "redis":
            return r_counter(conn.call("GET", key))
        return m_counter(key)(conn.exchange((b"get %s\r\n" % key.encode(),
                                             "get")))

    def check(self, ops, finals):
        final = finals.get(self.key, MISSING)
        out = []
        if final is None:          # memcache: the counter is gone
            out.append(Anomaly("missing-key", self.name, self.key,
                               "the counter is gone at the end"))
            final = MISSING
        return out + check_counter(self.name, self.key,
                                   ops.get(self.key, []), self.init, final,
                                   unique=not self.mix)


class Registers(Workload):
    """<nclients> clients per key over <nkeys> keys: SET of unique values
    (client.seq), GET, DEL. Checked by check_register."""

    def __init__(self, proto, nkeys=3, per_key=10):
        self.proto = proto
        self.name = "register"
        self.keys = ["reg:%d" % i for i in range(nkeys)]
        self.nclients = nkeys * per_key

    def step(self, c):
        k, r = c.key, c.rng.random()
        if r < 0.45:
            c.seq += 1
            v = b"c%d.%d" % (c.cid, c.seq)
            if self.proto == "redis":
                return c.do(self.name, "set", k, v, True,
                            resp_encode("SET", k, v), r_ok)
            return c.do(self.name, "set", k, v, True,
                        (b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v),
                                                       v), "line"),
                        m_stored)
        if r < 0.9:
            return self.read_op(c, k)
        if self.proto == "redis":
            return c.do(self.name, "del", k, None, True,
                        resp_encode("DEL", k), r_int)
        return c.do(self.name, "del", k, None, True,
                    (b"delete %s\r\n" % k.encode(), "line"), m_deleted)

    def read_op(self, c, k):
        if self.proto == "redis":
            return c.do(self.name, "get", k, None, False,
                        resp_encode("GET", k), r_bulk)
        return c.do(self.name, "get", k, None, False,
                    (b"get %s\r\n" % k.encode(), "get"), m_get(k))

    def read(self, conn, key):
        if self.proto == "redis":
            return r_bulk(conn.call("GET", key))
        return m_get(key)(conn.exchange((b"get %s\r\n" % key.encode(),
                                         "get")))

    def check(self, ops, finals):
        out = []
        for k in self.keys:
            out += check_register(self.name, k, ops.get(k, []),
                                  finals.get(k, MISSING))
        return out


class List(Workload):
    """Clients push unique elements (client.seq) to ONE redis list, RPUSH
    and LPUSH, and read LLEN. Checked by check_list."""

    def __init__(self, key="lst", nclients=10):
        self.proto, self.key, self.name = "redis", key, "list"
        self.keys = [key]
        self.nclients = nclients

    def step(self, c):
        r = c.rng.random()
        if r < 0.1:
            return c.do(self.name, "read", self.key, 0, False,
                        resp_encode("LLEN", self.key), r_int)
        c.seq += 1
        e = b"c%d.%d" % (c.cid, c.seq)
        cmd = "RPUSH" if r < 0.75 else "LPUSH"
        return c.do(self.name, cmd.lower(), self.key, e, True,
                    resp_encode(cmd, self.key, e), r_int)

    def read(self, conn, key):
        return r_list(conn.call("LRANGE", key, 0, -1))

    def check(self, ops, finals):
        return check_list(self.name, self.key, ops.get(self.key, []),
                          finals.get(self.key, MISSING))


class Append(Workload):
    """Clients append unique tokens ("c3.17,") to ONE memcache key created
    empty before the load, and read it. Checked by check_append. A client
    stops appending after <cap> tokens (memcached's items stop at 1 MB)."""

    def __init__(self, key="app", nclients=10, cap=3000):
        self.proto, self.key, self.name = "memcache", key, "append"
        self.keys = [key]
        self.nclients, self.cap = nclients, cap

    def setup(self, conn):
        self.must(conn, (b"set %s 0 0 0\r\n\r\n" % self.key.encode(),
                         "line"), m_stored, "set %s" % self.key)

    def step(self, c):
        k = self.key.encode()
        if c.seq >= self.cap:
            time.sleep(0.05)
            return None
        if c.rng.random() < 0.12:
            return c.do(self.name, "read", self.key, None, False,
                        (b"get %s\r\n" % k, "get"), m_get(self.key))
        c.seq += 1
        t = b"c%d.%d," % (c.cid, c.seq)
        return c.do(self.name, "append", self.key, t[:-1], True,
                    (b"append %s 0 0 %d\r\n%s\r\n" % (k, len(t), t),
                     "line"), m_appended)

    def read(self, conn, key):
        return m_get(key)(conn.exchange((b"get %s\r\n" % key.encode(),
                                         "get")))

    def check(self, ops, finals):
        return check_append(self.name, self.key, ops.get(self.key, []),
                            finals.get(self.key, MISSING))


def workloads_for(proto, per_key=10):
    """Every workload of a protocol, each with <per_key> clients per key."""
    if proto == "redis":
        return [Counter("redis", "ctr", per_key), Registers("redis", 3,
                                                            per_key),
                List("lst", per_key)]
    return [Counter("memcache", "ctr", per_key),
            Counter("memcache", "ctrmix", per_key, mix=True),
            Registers("memcache", 3, per_key), Append("app", per_key)]

# =========================================================== checkers ==
# Pure functions of the ops of one key and its final value. Each rule is
# a necessary condition of linearizability, so a correct store never
# breaks one (no false alarm); the times make them exact where they can.


def _prefix(values):
    out = [0]
    for v in values:
        out.append(out[-1] + v)
    return out


def check_counter(wl, key, ops, init, final, unique, names=None):
    """A counter of signed deltas. <ops>: writes f="add" with arg=delta
    and value=the reply (the new value), reads with arg=0 and value=the
    value read. Rules:
    - range: an op's reply (or a read) is init + the deltas of every acked
      write that completed before it began + its own delta + any subset
      of the deltas of the writes (acked or not) that began before it
      completed: below that is "counter-stale" (an acked increment is
      missing), above is "counter-future";
    - unique (all deltas positive): the acked replies' intervals
      [reply-delta+1, reply] never overlap ("duplicate-reply": a value
      handed out twice);
    - final: init + acked <= final <= init + acked + indeterminate
      positives (and the negative side for decrements): "counter-final-
      low" (acked writes lost) / "counter-final-high"; every acked reply
      <= final when all deltas are positive ("reply-above-final")."""
    n = dict(stale="counter-stale", future="counter-future",
             dup="duplicate-reply", low="counter-final-low",
             high="counter-final-high", above="reply-above-final")
    n.update(names or {})
    out = []
    writes = [o for o in ops if o.write]
    acked = sorted((o for o in writes if o.acked), key=lambda o: o.t1)
    t1s = [o.t1 for o in acked]
    d_all = _prefix(o.arg for o in acked)
    d_pos = _prefix(max(o.arg, 0) for o in acked)
    d_neg = _prefix(min(o.arg, 0) for o in acked)
    by_t0 = sorted(writes, key=lambda o: o.t0)
    t0s = [o.t0 for o in by_t0]
    a_pos = _prefix(max(o.arg, 0) for o in by_t0)
    a_neg = _prefix(min(o.arg, 0) for o in by_t0)
    for o in ops:
        if not o.acked or o.value is None:
            continue
        k = bisect.bisect_left(t1s, o.t0)       # acked, done before o began
        j = bisect.bisect_left(t0s, o.t1)       # begun before o was done
        base = init + d_all[k] + o.arg
        lo = base + (a_neg[j] - d_neg[k] - (min(o.arg, 0) if o.write else 0))
        hi = base + (a_pos[j] - d_pos[k] - (max(o.arg, 0) if o.write else 0))
        if o.value < lo:
            out.append(Anomaly(n["stale"], wl, key, "%s %+d answered %d, "
                               "at least %d (acked writes done before it "
                               "began)" % (o.f, o.arg, o.value, lo), [o]))
        elif o.value > hi:
            out.append(Anomaly(n["future"], wl, key, "%s %+d answered %d, "
                               "at most %d (writes begun before it ended)"
                               % (o.f, o.arg, o.value, hi), [o]))
    if unique:
        spans = sorted(((o.value - o.arg + 1, o.value, o) for o in acked
                        if o.value is not None), key=lambda s: s[:2])
        top, prev = None, None
        for lo, hi, o in spans:
            if top is not None and lo <= top:
                out.append(Anomaly(n["dup"], wl, key, "%s %+d -> %d overlaps "
                                   "%s %+d -> %d" % (o.f, o.arg, o.value,
                                                     prev.f, prev.arg,
                                                     prev.value), [prev, o]))
            if top is None or hi > top:
                top, prev = hi, o
    if final is MISSING:
        return out
    s_acked = sum(o.arg for o in acked)
    indet = [o for o in writes if not o.acked]
    lo = init + s_acked + sum(min(o.arg, 0) for o in indet)
    hi = init + s_acked + sum(max(o.arg, 0) for o in indet)
    if final < lo:
        out.append(Anomaly(n["low"], wl, key, "final %d < %d: %d acked "
                           "(%d indeterminate)" % (final, lo, len(acked),
                                                   len(indet))))
    elif final > hi:
        out.append(Anomaly(n["high"], wl, key, "final %d > %d: %d acked, "
                           "%d indeterminate" % (final, hi, len(acked),
                                                 len(indet))))
    if unique:
        for o in acked:
            if o.value is not None and o.value > final:
                out.append(Anomaly(n["above"], wl, key, "%s answered %d, "
                                   "final %d" % (o.f, o.value, final), [o]))
    return out


def _suffix_min(values):
    out = [INF] * (len(values) + 1)
    for i in range(len(values) - 1, -1, -1):
        out[i] = min(values[i], out[i + 1])
    return out


def check_register(wl, key, ops, final):
    """A register of unique values (SET v, GET, DEL). E(w), the moment a
    write is known to have taken effect: its completion when acked, or
    the completion of the first read that returned its value (values are
    unique, so a read of v proves v was written). A read r of v:
    - "phantom-read": v was never written (not in this key);
    - "future-read": write(v) began after r completed;
    - "stale-read" / "resurrected-delete": some other SET / DEL w2 began
      after E(write v) and had taken effect before r began (E(w2) <
      r.t0): v was overwritten / deleted before r, and never rewritten;
    - "lost-write": r read nil although a SET was known to have taken
      effect before r began, and no DEL could fall between that SET's
      start and r's end.
    The final value (read when all ops are done): "final-register" if no
    linearization can end with it (v overwritten by a later known write,
    or nil with no DEL that can follow the last known SET)."""
    out = []
    sets = [o for o in ops if o.f == "set"]
    dels = [o for o in ops if o.f == "del"]
    reads = [o for o in ops if o.f == "get" and o.acked]
    by_val = {o.arg: o for o in sets}
    eff = {id(o): (o.t1 if o.acked else INF) for o in sets + dels}
    for r in reads:
        w = by_val.get(r.value)
        if w is not None and r.t1 < eff[id(w)]:
            eff[id(w)] = r.t1

    def tables(ws):
        ws = sorted(ws, key=lambda o: o.t0)
        return [o.t0 for o in ws], _suffix_min([eff[id(o)] for o in ws]), ws
    set_t0, set_min, _ = tables(sets)
    del_t0, del_min, _ = tables(dels)

    def overwritten(w, before):
        """Which kind of known write began after E(w) and took effect
        before <before>, or None."""
        e = eff[id(w)]
        if del_min[bisect.bisect_right(del_t0, e)] < before:
            return "resurrected-delete"
        if set_min[bisect.bisect_right(set_t0, e)] < before:
            return "stale-read"
        return None

    # nil reads: the latest start among SETs known effective by time t
    known = sorted(sets, key=lambda o: eff[id(o)])
    known_e = [eff[id(o)] for o in known]
    known_t0max = [-INF]
    for o in known:
        known_t0max.append(max(known_t0max[-1], o.t0))
    indet_del_t0 = min((d.t0 for d in dels if not d.acked), default=INF)
    acked_dels = sorted((d for d in dels if d.acked), key=lambda d: d.t0)
    ad_t0 = [d.t0 for d in acked_dels]
    ad_t1max = [-INF]
    for d in acked_dels:
        ad_t1max.append(max(ad_t1max[-1], d.t1))

    def nil_ok(t_begin, t_end):
        """A nil read over [t_begin, t_end] can be linearized: no SET was
        known effective before t_begin, or a DEL can follow the latest
        such SET's start and precede t_end."""
        t_set = known_t0max[bisect.bisect_left(known_e, t_begin)]
        if t_set == -INF:
            return True
        if indet_del_t0 < t_end:
            return True
        return ad_t1max[bisect.bisect_left(ad_t0, t_end)] > t_set

    for r in reads:
        if r.value is None:
            if not nil_ok(r.t0, r.t1):
                out.append(Anomaly("lost-write", wl, key, "read nil although "
                                   "a SET was known done before it and no "
                                   "DEL can fall between", [r]))
            continue
        w = by_val.get(r.value)
        if w is None:
            out.append(Anomaly("phantom-read", wl, key, "read %r, never "
                               "written to this key" % r.value, [r]))
        elif w.t0 > r.t1:
            out.append(Anomaly("future-read", wl, key, "read %r before its "
                               "SET began" % r.value, [r, w]))
        else:
            kind = overwritten(w, r.t0)
            if kind:
                out.append(Anomaly(kind, wl, key, "read %r after it was "
                                   "overwritten or deleted" % r.value,
                                   [r, w]))
    if final is MISSING:
        return out
    fv = final
    if fv is None:
        if not nil_ok(INF, INF):
            out.append(Anomaly("final-register", wl, key, "final nil, but "
                               "no DEL can follow the last known SET"))
    else:
        w = by_val.get(fv)
        if w is None:
            out.append(Anomaly("phantom-read", wl, key, "final value %r was "
                               "never written to this key" % fv))
        elif overwritten(w, INF):
            out.append(Anomaly("final-register", wl, key, "final value %r "
                               "was overwritten by a later known write"
                               % fv, [w]))
    return out


def _elements(wl, key, writes, final, kinds):
    """The element rules shared by lists and append registers: every acked
    element exactly once in <final>, an indeterminate one at most once,
    nothing never written. Returns (anomalies, {element: index} of the
    elements present once)."""
    out = []
    count = collections.Counter(final)
    written = {o.arg: o for o in writes}
    for o in writes:
        c = count.get(o.arg, 0)
        if o.acked and c == 0:
            out.append(Anomaly(kinds["lost"], wl, key, "acked %s %r is "
                               "missing" % (o.f, o.arg), [o]))
        elif c > 1:
            out.append(Anomaly(kinds["dup"], wl, key, "%s %r (%s) is there "
                               "%d times" % (o.f, o.arg, o.type, c), [o]))
    for e, c in count.items():
        if e not in written:
            out.append(Anomaly(kinds["phantom"], wl, key, "%r (x%d) was "
                               "never written" % (e, c)))
    pos = {e: i for i, e in enumerate(final) if count[e] == 1}
    return out, pos


def _order(wl, key, writes, pos, kind):
    """Real-time order of acked pushes: a push that completed before
    another began is left of it if the later one is an RPUSH/append,
    right of it if an LPUSH. (A client's own ops are sequential, so this
    includes "each client's elements in its own order".)"""
    out = []
    acked = sorted((o for o in writes if o.acked and o.arg in pos),
                   key=lambda o: o.t1)
    t1s = [o.t1 for o in acked]
    pmax, pmin, who_max, who_min = [-1], [INF], [None], [None]
    for o in acked:
        p = pos[o.arg]
        pmax.append(max(pmax[-1], p))
        who_max.append(o if p >= pmax[-2] else who_max[-1])
        pmin.append(min(pmin[-1], p))
        who_min.append(o if p <= pmin[-2] else who_min[-1])
    for o in acked:
        k = bisect.bisect_left(t1s, o.t0)
        p = pos[o.arg]
        if o.f != "lpush" and pmax[k] > p:
            out.append(Anomaly(kind, wl, key, "%s %r is at index %d, left "
                               "of %r (index %d) which was acked before it "
                               "began" % (o.f, o.arg, p, who_max[k].arg,
                                          pmax[k]), [who_max[k], o]))
        elif o.f == "lpush" and pmin[k] < p:
            out.append(Anomaly(kind, wl, key, "lpush %r is at index %d, "
                               "right of %r (index %d) which was acked "
                               "before it began" % (o.arg, p,
                                                    who_min[k].arg,
                                                    pmin[k]),
                               [who_min[k], o]))
    return out


def check_list(wl, key, ops, final):
    """A list of unique pushed elements. Push replies are lengths: a
    counter of +1 steps (check_counter's range and uniqueness rules, as
    "list-length-stale", "list-length-future", "duplicate-length"; LLEN
    reads too); the final list: "lost-element", "duplicate-element",
    "phantom-element", and the real-time order ("reordered-element")."""
    pushes = [o for o in ops if o.write]
    lens = []
    for o in ops:
        c = Op(o.client, o.wl, o.f, o.key, 1 if o.write else 0, o.write)
        c.t0, c.t1, c.type, c.value = o.t0, o.t1, o.type, o.value
        lens.append(c)
    out = check_counter(wl, key, lens, 0, MISSING, True, names=dict(
        stale="list-length-stale", future="list-length-future",
        dup="duplicate-length"))
    if final is MISSING:
        return out
    flist = final
    found, pos = _elements(wl, key, pushes, flist, dict(
        lost="lost-element", dup="duplicate-element",
        phantom="phantom-element"))
    out += found
    out += _order(wl, key, pushes, pos, "reordered-element")
    return out


def tokens(value):
    """The tokens of an append register's value ("c1.1,c2.1," -> [c1.1,
    c2.1])."""
    if not value:
        return []
    parts = value.split(b",")
    return parts[:-1] if parts[-1] == b"" else parts


def check_append(wl, key, ops, final):
    """An append register of unique tokens. The final value: "lost-
    append", "duplicate-append", "phantom-append", "reordered-append"
    (real-time order of acked appends). Each read: a prefix of the final
    value ("append-read-not-prefix": the value only grows at its end),
    holding every acked append done before the read began ("append-read-
    stale") and none begun after it ended ("append-read-future")."""
    apps = [o for o in ops if o.write]
    if final is MISSING:
        return []
    fval = final
    if fval is None:
        return [Anomaly("missing-key", wl, key, "the key is gone at the "
                        "end")]
    ftok = tokens(fval)
    out, pos = _elements(wl, key, apps, ftok, dict(
        lost="lost-append", dup="duplicate-append", phantom="phantom-append"))
    out += _order(wl, key, apps, pos, "reordered-append")
    by_tok = {o.arg: o for o in apps}
    acked = sorted((o for o in apps if o.acked), key=lambda o: o.t1)
    t1s = [o.t1 for o in acked]
    need = [-1]                      # max final index of the first k acked
    for o in acked:
        need.append(max(need[-1], pos.get(o.arg, -1)))
    t0max = [-INF]                   # latest append start in final[:i]
    for e in ftok:
        w = by_tok.get(e)
        t0max.append(max(t0max[-1], w.t0 if w else -INF))
    for r in ops:
        if r.write or not r.acked:
            continue
        rt = tokens(r.value)
        k = bisect.bisect_left(t1s, r.t0)
        if rt == ftok[:len(rt)]:
            if need[k] >= len(rt):
                out.append(Anomaly("append-read-stale", wl, key, "a read of "
                                   "%d tokens misses an acked append done "
                                   "before it" % len(rt), [r]))
            if t0max[len(rt)] > r.t1:
                out.append(Anomaly("append-read-future", wl, key, "a read "
                                   "holds an append begun after it", [r]))
            continue
        out.append(Anomaly("append-read-not-prefix", wl, key, "a read of %d "
                           "tokens is not a prefix of the final %d" % (
                               len(rt), len(ftok)), [r]))
        have = set(rt)
        if any(o.arg not in have for o in acked[:k]):
            out.append(Anomaly("append-read-stale", wl, key, "a read misses"
                               " an acked append done before it", [r]))
        if any(by_tok[e].t0 > r.t1 for e in rt if e in by_tok):
            out.append(Anomaly("append-read-future", wl, key, "a read holds"
                               " an append begun after it", [r]))
        if any(e not in by_tok for e in rt):
            out.append(Anomaly("phantom-append", wl, key, "a read holds a "
                               "token never appended", [r]))
    return out

# ------------------------------------------ runs where all was acked --
# The existing replication tests assert that not one request fails; then
# the models need no times: a counter's replies are exactly 1..n and the
# copies hold n, a list holds each element once in its client's order.


class Shared:
    """What many clients write to the same keys, kept for exact checks:
    the replies of every increment (of 1) of one counter, and per client
    the elements it appended, in its order. add_*() take the reply as
    given; a reply that is not the kind asked is an error of its own."""

    def __init__(self):
        self.replies = []
        self.elements = collections.defaultdict(list)
        self.errors = []

    def add_incr(self, reply):
        if isinstance(reply, int) and not isinstance(reply, bool):
            self.replies.append(reply)
        else:
            self.errors.append(("incr", reply))

    def add_element(self, client, element, acked, reply=None):
        if acked:
            self.elements[client].append(element)
        else:
            self.errors.append(("append", element, reply))

    def counter_problems(self, final):
        """What is wrong with the counter whose copies hold <final>."""
        n = len(self.replies)
        dup = [v for v, c in collections.Counter(self.replies).items()
               if c > 1]
        out = []
        if dup:
            out.append("%d values handed out twice, e.g. %s"
                       % (len(dup), sorted(dup)[:5]))
        if sorted(self.replies) != list(range(1, n + 1)) and not dup:
            out.append("replies are not 1..%d" % n)
        if final != n:
            out.append("final %r after %d acknowledged increments"
                       % (final, n))
        return out

    def sequence_problems(self, final):
        """What is wrong with the sequence <final> (list of elements)."""
        count = collections.Counter(final)
        every = [e for els in self.elements.values() for e in els]
        out = []
        lost = [e for e in every if count[e] == 0]
        twice = [e for e, c in count.items() if c > 1]
        extra = set(count) - set(every)
        if lost:
            out.append("%d acked elements lost, e.g. %s" % (len(lost),
                                                            lost[:3]))
        if twice:
            out.append("%d elements twice, e.g. %s" % (len(twice),
                                                       twice[:3]))
        if extra:
            out.append("%d elements never written" % len(extra))
        pos = {e: i for i, e in enumerate(final)}
        for client, els in self.elements.items():
            idx = [pos[e] for e in els if e in pos]
            if idx != sorted(idx):
                out.append("client %s's elements out of its order" % client)
        return out

# ============================================================ targets ==


class Cluster:
    """<n> members n1.. (redis-servers or memcacheds) in pool `store` of
    one chashd with the admin API, replicas 3, write_quorum 2, the given
    read_policy, timeout 1 s (the issue's config), and <spare> more
    servers started outside the pool (n5..) for membership changes."""

    def __init__(self, procs, proto, workers=2, read_policy="quorum", n=4,
                 spare=1, timeout_ms=1000):
        self.procs, self.proto = procs, proto
        make = RedisServer if proto == "redis" else MemcachedServer
        self.names = ["n%d" % (i + 1) for i in range(n + spare)]
        self.servers = {name: make(procs) for name in self.names}
        self.members = self.names[:n]
        self.port, self.aport = free_port(), free_port()
        self.text = admin_global(self.aport, workers=workers) + pool_yaml(
            POOL, self.port, [self.servers[m] for m in self.members],
            self.members, ["  mode: %s" % proto], replicas=3,
            write_quorum=2, read_policy=read_policy, timeout=timeout_ms)
        self.conf = os.path.join(str(procs.tmp), "chashd.yml")
        with open(self.conf, "w") as f:
            f.write(self.text)
        self.proc = start_chashd(procs, self.conf, [self.port, self.aport])
        self.api = Api(self.aport)

    def rep(self):
        """GET /api/pools/store/replication, or None when it fails."""
        try:
            st, body, _ = self.api.get("/api/pools/%s/replication" % POOL)
        except (OSError, ValueError):
            return None
        return body if st == 200 and isinstance(body, dict) else None

    @staticmethod
    def idle(rp):
        return rp is not None and not rp["filling"] and all(
            m["readable"] and m["pending_keys"] == 0 and not m["overflow"]
            for m in rp["members"])

    def wait_idle(self, timeout, stop=None):
        """Until every member serves reads with nothing pending and no fill
        runs: True; False after <timeout> s or once <stop> is set."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.idle(self.rep()):
                return True
            if stop is not None and stop.is_set():
                return False
            time.sleep(0.1)
        return False

    def sets(self, keys):
        """{key: replica set} of the current membership, from `chash lookup
        --config` on a config of those members (independent of chashd)."""
        path = os.path.join(str(self.procs.tmp), "lookup-%s.yml"
                            % "-".join(self.members))
        with open(path, "w") as f:
            f.write("global:\n  admin: off\n" + pool_yaml(
                POOL, free_port(), [self.servers[m] for m in self.members],
                self.members, ["  mode: %s" % self.proto], replicas=3))
        return lookup_config(path, POOL, keys, replicas=3)

    def kill_chashd(self):
        self.proc.kill()
        self.proc.wait(timeout=10)
        wait_for(lambda: not can_connect(self.port), timeout=10,
                 what="chashd's port to close")

    def start_chashd(self):
        self.proc = start_chashd(self.procs, self.conf,
                                 [self.port, self.aport])

    def change(self, op, name):
        """Add (op "add") or remove a member through the admin API, then
        wait for its fill. Returns the API's status."""
        before = (self.rep() or {}).get("fills", 0)
        if op == "add":
            st, body, _ = self.api.call("POST", "/api/pools/%s/members" % POOL,
                                        {"name": name, "weight": 1,
                                         "address": self.servers[name].addr})
            if st in (200, 201):
                self.members.append(name)
        else:
            st, body, _ = self.api.call("DELETE", "/api/pools/%s/members/%s"
                                        % (POOL, name))
            if st == 200:
                self.members.remove(name)
        if st not in (200, 201):
            raise AssertionError("%s %s: %s %s" % (op, name, st, body))
        return before

    def close(self):
        pass


class Single:
    """The control: one redis-server or memcached, no chashd. A single
    server is linearizable, so the checker must find nothing here."""

    def __init__(self, procs, proto):
        self.proto = proto
        make = RedisServer if proto == "redis" else MemcachedServer
        self.names = self.members = ["s1"]
        self.servers = {"s1": make(procs)}
        self.port = self.servers["s1"].port

    def rep(self):
        return None

    def wait_idle(self, timeout, stop=None):
        return True

    def sets(self, keys):
        return {k: ["s1"] for k in keys}

# ============================================================= faults ==
# Each runs in its own thread until <stop>, one fault at a time: inject,
# hold, heal, wait (bounded) until the pool is idle again, and records a
# window [start, end] per fault. It never starts a fault while the last
# one is not healed (it stops early instead, noted), and always leaves
# the servers running.


class FaultParams:
    def __init__(self, hold=(1.0, 2.0), gap=(0.3, 0.8), heal_timeout=10.0):
        self.hold, self.gap, self.heal_timeout = hold, gap, heal_timeout


def _stopped(pid, timeout=5.0):
    """Wait (bounded) until every thread of <pid> is stopped: SIGSTOP is
    taken asynchronously, and a request sent in between is answered."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(s == "T" for s in task_states(pid)):
            return True
        time.sleep(0.005)
    return False


def _cycle(t, stop, hist, rng, p, name, inject, heal, **detail):
    """One fault: <inject>() then hold, <heal>(), wait idle. False when
    the pool did not heal (no further fault may start)."""
    ev = hist.begin(name, **detail)
    try:
        inject()
        time.sleep(rng.uniform(*p.hold))
    finally:
        heal()
    healed = t.wait_idle(p.heal_timeout, stop)
    hist.end(ev, healed=healed)
    if not healed and not stop.is_set():
        hist.notes.append("%s %s: not healed within %.0fs; no more faults"
                          % (name, detail, p.heal_timeout))
    return healed


def fault_none(t, stop, hist, rng, p):
    stop.wait()


def fault_kill9(t, stop, hist, rng, p):
    """kill -9 one member, restart it EMPTY on the same port."""
    order = list(t.members)
    rng.shuffle(order)
    i = 0
    while not stop.wait(rng.uniform(*p.gap)):
        name = order[i % len(order)]
        i += 1
        srv = t.servers[name]
        if not _cycle(t, stop, hist, rng, p, "kill9", srv.stop, srv.start,
                      member=name):
            return


def fault_sigstop(t, stop, hist, rng, p, count=1, focus=None):
    """SIGSTOP <count> members at once, SIGCONT after the hold. <focus>:
    members to pick from on every other round (a key's replica set, so
    that a one-key workload surely loses its quorum)."""
    i = 0
    while not stop.wait(rng.uniform(*p.gap)):
        pool = focus if focus and i % 2 == 0 else t.members
        i += 1
        names = rng.sample(list(pool), min(count, len(pool)))
        pids = [t.servers[n].proc.pid for n in names]

        def inject():
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            for pid in pids:
                _stopped(pid)

        def heal():
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        if not _cycle(t, stop, hist, rng, p, "sigstop", inject, heal,
                      members=names):
            return


def fault_member(t, stop, hist, rng, p):
    """Membership through the admin API: n5 added then removed, n4
    removed then added back, in turn; each change waits for its fill."""
    rounds = [("add", "n5"), ("remove", "n5"), ("remove", "n4"),
              ("add", "n4")]
    i = 0
    while not stop.wait(rng.uniform(*p.gap)) or i % 2 == 1:
        op, name = rounds[i % len(rounds)]
        i += 1
        ev = hist.begin("member", change=op, member=name)
        before = t.change(op, name)
        ok = wait_for_bool(lambda: (t.rep() or {}).get("fills", 0) > before,
                           p.heal_timeout) and t.wait_idle(p.heal_timeout)
        hist.end(ev, healed=ok)
        if not ok:
            hist.notes.append("member %s %s: fill not done within %.0fs"
                              % (op, name, p.heal_timeout))
            if i % 2 == 1:          # put the membership back, whatever
                t.change(rounds[i % len(rounds)][0], name)
            return


def fault_chashd(t, stop, hist, rng, p):
    """chashd kill -9, restarted on the same config and ports."""
    while not stop.wait(rng.uniform(*p.gap)):
        if not _cycle(t, stop, hist, rng, p, "chashd", t.kill_chashd,
                      t.start_chashd):
            return


def wait_for_bool(pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


FAULTS = ("none", "kill9", "sigstop1", "sigstop2", "member", "chashd")

# ========================================================= a scenario ==


class Result:
    """What a scenario ran and found. anomaly_counts(): {kind: n}."""

    def __init__(self, name, duration, hist, workloads, anomalies, finals,
                 seed):
        self.name, self.duration, self.hist = name, duration, hist
        self.workloads, self.anomalies = workloads, anomalies
        self.finals, self.seed = finals, seed

    def ops(self, wl=None, write=None, type_=None):
        return [o for o in self.hist.ops if (wl is None or o.wl == wl)
                and (write is None or o.write == write)
                and (type_ is None or o.type == type_)]

    def acked_writes(self, wl):
        return len(self.ops(wl, True, "ok"))

    def ok_reads(self, wl):
        return len(self.ops(wl, False, "ok"))

    def anomaly_counts(self):
        return dict(collections.Counter(a.kind for a in self.anomalies))

    def faults(self):
        """(faults done, faults healed)."""
        evs = self.hist.events
        return len(evs), sum(1 for e in evs if e.get("healed"))

    def summary(self):
        ops = self.hist.ops
        ok = sum(1 for o in ops if o.type == "ok")
        failed = sum(1 for o in ops if not o.write and o.type != "ok")
        indet = sum(1 for o in ops if o.write and o.type != "ok")
        done, healed = self.faults()
        counts = self.anomaly_counts()
        an = ", ".join("%s %d" % kv for kv in sorted(counts.items())) \
            or "none"
        return ("jepsen %s: %.1fs, ops ok %d, failed reads %d, "
                "indeterminate writes %d, faults %d (healed %d) | "
                "anomalies: %s" % (self.name, self.duration, ok, failed,
                                   indet, done, healed, an))

    def describe(self, per_kind=3):
        """The summary, then per workload its counts, then up to
        <per_kind> anomalies of each kind with the ops that prove them."""
        lines = [self.summary()]
        t0 = self.hist.t_base
        for wl in self.workloads:
            lines.append("  %-12s writes acked %d, indeterminate %d; reads "
                         "ok %d, failed %d" % (
                             wl.name, self.acked_writes(wl.name),
                             len(self.ops(wl.name, True)) -
                             self.acked_writes(wl.name),
                             self.ok_reads(wl.name),
                             len(self.ops(wl.name, False)) -
                             self.ok_reads(wl.name)))
        if self.finals:
            lines.append("  final: " + ", ".join(
                "%s=%s" % (k, _show(_norm(v)))
                for k, v in sorted(self.finals.items())))
        for note in self.hist.notes:
            lines.append("  note: " + note)
        shown = collections.Counter()
        for a in self.anomalies:
            shown[a.kind] += 1
            if shown[a.kind] > per_kind:
                continue
            lines.append("  %r" % a)
            for o in a.ops[:3]:
                lines.append("      %s" % json.dumps(o.row(t0)))
        return "\n".join(lines)


def run_clients(target, workloads, hist, stop, timeout, seed):
    """A thread per client of every workload, until <stop>."""
    threads = []
    cid = 0
    for wl in workloads:
        for i in range(wl.nclients):
            cid += 1
            c = Client(cid, target.port, wl.proto, hist, timeout,
                       random.Random(seed * 1000 + cid))
            c.key = wl.key_of(i)

            def loop(c=c, wl=wl):
                try:
                    while not stop.is_set():
                        wl.step(c)
                finally:
                    c.drop()
            th = threading.Thread(target=loop, daemon=True,
                                  name="client-%d" % cid)
            th.start()
            threads.append(th)
    return threads


def _connect(target, proto, port=None, host="127.0.0.1", timeout=3.0):
    cls = RespConn if proto == "redis" else McConn
    return cls(port or target.port, host, timeout)


def _norm(value):
    """A value for comparison and display: lists as tuples, long values
    as their length and digest."""
    if isinstance(value, list):
        value = tuple(value)
    return value


def _show(value):
    if isinstance(value, (bytes, tuple)) and len(value) > 40:
        h = hashlib.sha1(repr(value).encode()).hexdigest()[:10]
        return "<%d long, sha1 %s>" % (len(value), h)
    return repr(value)


def read_through(target, wl, key, tries=10):
    """(type, value) of <key> read through the pool; errors tried again
    (every 0.3 s, <tries> times)."""
    last = None
    for _ in range(tries):
        try:
            conn = _connect(target, wl.proto)
            try:
                out = wl.read(conn, key)
            finally:
                conn.close()
            if out[0] == "ok":
                return out
            last = out
        except (OSError, ProtocolError, Invalid) as e:
            last = ("info", str(e))
        time.sleep(0.3)
    return last


def read_copies(target, wl, key, members):
    """{member: value or an error text} of <key> read from each member."""
    out = {}
    for m in members:
        srv = target.servers[m]
        try:
            conn = _connect(target, wl.proto, srv.port, srv.host)
            try:
                got = wl.read(conn, key)
            finally:
                conn.close()
            out[m] = _norm(got[1]) if got[0] == "ok" else "error %s" % (
                got[1],)
        except (OSError, ProtocolError, Invalid) as e:
            out[m] = "error %s" % e
    return out


def final_state(target, workloads, hist, converge_timeout):
    """After the load: every key read through the pool (an op of client
    0, judged as any read), then each key's copies on the members of its
    replica set until they agree (bounded), then through the pool again:
    the final value. Anomalies: "final-unreadable", "divergent-copies",
    "final-mismatch" (the pool answers a value no copy holds)."""
    out, finals = [], {}
    keys = [(wl, k) for wl in workloads for k in wl.keys]
    sets = target.sets([k for _, k in keys])
    for wl, k in keys:
        op = Op(0, wl.name, "get" if wl.name == "register" else "read", k,
                0 if wl.name.startswith("counter") or wl.name == "list"
                else None, False)
        op.t0 = time.monotonic()
        got = read_through(target, wl, k)
        op.t1 = time.monotonic()
        op.type, op.value = got[0], got[1]
        if wl.name not in ("list",):     # LRANGE is no LLEN: not a length
            hist.ops.append(op)
    for wl, k in keys:
        deadline = time.monotonic() + converge_timeout
        while True:
            copies = read_copies(target, wl, k, sets[k])
            if len(set(map(repr, copies.values()))) == 1 or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.2)
        got = read_through(target, wl, k)
        if got[0] != "ok":
            out.append(Anomaly("final-unreadable", wl.name, k, "no read "
                               "through the pool succeeded: %r" % (got,)))
            continue
        finals[k] = got[1]
        vals = set(map(repr, copies.values()))
        if len(vals) > 1:
            out.append(Anomaly("divergent-copies", wl.name, k, ", ".join(
                "%s=%s" % (m, _show(v)) for m, v in copies.items())))
        elif repr(_norm(got[1])) not in vals:
            out.append(Anomaly("final-mismatch", wl.name, k, "the pool "
                               "reads %s, every copy holds %s" % (
                                   _show(_norm(got[1])),
                                   _show(next(iter(copies.values()))))))
    return out, finals


def check_all(workloads, hist, finals):
    by_key = collections.defaultdict(list)
    for o in hist.ops:
        by_key[o.key].append(o)
    out = []
    for wl in workloads:
        out += wl.check(by_key, finals)
    return out


def run_scenario(procs, proto, fault, workers=2, read_policy="quorum",
                 duration=4.0, seed=None, per_key=10, timeout=3.0,
                 params=None, final_timeout=20.0, converge_timeout=5.0,
                 target=None, log=None):
    """One run: the pool (a Cluster, or <target> given: the control), its
    workloads set up, their clients for <duration> s while <fault> runs,
    the fault healed, the pool idle again (bounded: "not-healed"
    otherwise), the final values and copies read, every model checked.
    Returns a Result."""
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    name = "%s %s w%d %s" % (proto, fault, workers, read_policy)
    if target is None:
        target = Cluster(procs, proto, workers, read_policy)
    else:
        name = "%s %s single-server control" % (proto, fault)
    p = params or FaultParams()
    workloads = workloads_for(proto, per_key)
    conn = _connect(target, proto)
    try:
        for wl in workloads:
            wl.setup(conn)
    finally:
        conn.close()
    hist = History()
    stop_clients, stop_fault = threading.Event(), threading.Event()
    t_start = time.monotonic()
    threads = run_clients(target, workloads, hist, stop_clients, timeout,
                          seed)
    fn = {"none": fault_none, "kill9": fault_kill9,
          "sigstop1": fault_sigstop, "member": fault_member,
          "chashd": fault_chashd,
          "sigstop2": lambda *a: fault_sigstop(
              *a, count=2, focus=target.sets(["ctr"])["ctr"])}[fault]
    fault_error = []

    def fault_main():
        try:
            fn(target, stop_fault, hist, rng, p)
        except Exception as e:      # reported, never swallowed
            fault_error.append(e)
    fth = threading.Thread(target=fault_main, daemon=True)
    try:
        time.sleep(min(0.5, duration / 4))   # load before the first fault
        fth.start()
        time.sleep(max(0.0, duration - (time.monotonic() - t_start)))
    finally:
        stop_fault.set()
        if fth.ident is not None:
            fth.join(timeout=p.hold[1] + p.heal_timeout + 30)
        time.sleep(0.3)                  # the healed pool serves the clients
        stop_clients.set()
        for th in threads:
            th.join(timeout=timeout + 5)
    elapsed = time.monotonic() - t_start
    anomalies = list(hist.anomalies)
    for e in fault_error:
        anomalies.append(Anomaly("fault-error", "-", "-", "the fault "
                                 "could not be injected or healed: %r" % e))
    if fth.is_alive() or any(th.is_alive() for th in threads):
        hist.notes.append("a client or the fault thread did not end")
    if not target.wait_idle(final_timeout):
        anomalies.append(Anomaly("not-healed", "-", "-", "not idle %.0fs "
                                 "after the load: %s" % (
                                     final_timeout, json.dumps(target.rep()))))
    found, finals = final_state(target, workloads, hist, converge_timeout)
    anomalies += found
    anomalies += check_all(workloads, hist, finals)
    res = Result(name, elapsed, hist, workloads, anomalies, finals, seed)
    if log:
        log(res.summary())
    return res
