#!/usr/bin/python3
# fault_util.py -- helpers of the fault suites (test_faults_*.py): stub
# members of ours that misbehave on purpose (accept and never read, reply
# at N bytes/s, reset or close in the middle of a reply), run as real
# processes; what a client sees (answer, close, reset, or nothing by a
# deadline); a daemon's descriptors and RSS sampled across repeated rounds
# of a fault; a port that refuses connects; SIGSTOP/SIGCONT.
# SPDX-License-Identifier: BSD-2-Clause
#
# Run as a script, this file IS the stub (see stub_main); imported, it
# gives the Stub class that starts one. The stub speaks no protocol: it is
# given the reply's bytes, so one stub serves tcp, http, redis and
# memcache pools alike.
import argparse
import contextlib
import os
import resource
import signal
import socket
import struct
import sys
import threading
import time

PY = "/usr/bin/python3"
HERE = os.path.abspath(__file__)
# a sanitizer build (make SANITIZE=...): ASan's quarantine keeps freed
# memory, RSS says nothing of leaks there (LeakSanitizer does, at exit)
SANITIZED = bool(os.environ.get("CHASH_SANITIZE"))

if __name__ != "__main__":
    # the stub process needs none of this (and not pytest's import time)
    from base_util import free_port, rss_kib, wait_for

# ---------------------------------------------------------------------------
# The stub process

BEHAVIOURS = ("reply", "blackhole", "reset", "close")


def stub_main(argv):
    """A member that misbehaves as told. Every accepted connection prints
    `accept` (flushed) so a test can count them; every request seen
    prints `request`.

    --behaviour reply      answer <reply> per request, at --rate bytes/s
                           (its first --fast bytes at once)
                blackhole  accept, never read, never write, never close
                reset      send --cut bytes of <reply>, then RST
                close      send --cut bytes of <reply>, then FIN (close)
    A request is each occurrence of --until in the incoming stream (hex;
    default CRLFCRLF, an HTTP head); --until '' means every read that
    brings bytes. --greet sends <reply> (or its cut) on accept, before
    reading anything (a tcp member that talks first). --keep holds the
    connection open after a reply (default for `reply`); without it the
    stub closes after one reply. --rcvbuf shrinks the accepted sockets'
    receive buffer (a blackhole then fills faster)."""
    ap = argparse.ArgumentParser(prog="fault_util.py")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--behaviour", choices=BEHAVIOURS, default="reply")
    ap.add_argument("--reply", default="")          # hex
    ap.add_argument("--until", default="0d0a0d0a")  # hex
    ap.add_argument("--rate", type=float, default=0)  # bytes/s, 0: at once
    ap.add_argument("--fast", type=int, default=0)
    ap.add_argument("--cut", type=int, default=0)
    ap.add_argument("--greet", action="store_true")
    ap.add_argument("--close-after-reply", action="store_true")
    ap.add_argument("--rcvbuf", type=int, default=0)
    a = ap.parse_args(argv)
    reply = bytes.fromhex(a.reply)
    until = bytes.fromhex(a.until)
    out_lock = threading.Lock()

    def say(word):
        with out_lock:
            sys.stdout.write(word + "\n")
            sys.stdout.flush()

    def send_reply(c):
        """Send <reply> (its first --cut bytes for reset/close) at --rate;
        False once the peer is gone."""
        data = reply if a.behaviour == "reply" else reply[:a.cut]
        try:
            if a.rate <= 0:
                c.sendall(data)
                return True
            if a.fast:
                c.sendall(data[:a.fast])
                data = data[a.fast:]
            # a steady trickle: 10 writes a second (at least a byte each)
            step = max(1, int(a.rate / 10))
            t0 = time.monotonic()
            for i in range(0, len(data), step):
                c.sendall(data[i:i + step])
                due = t0 + (i + step) / a.rate
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            return True
        except OSError:
            return False

    def finish(c):
        if a.behaviour == "reset":
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                         struct.pack("ii", 1, 0))
        c.close()

    def serve(c):
        if a.behaviour == "blackhole":
            return          # the socket stays referenced in `held`
        try:
            if a.greet:
                if not send_reply(c) or a.behaviour != "reply":
                    finish(c)
                    return
            buf = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while True:
                    if until:
                        i = buf.find(until)
                        if i < 0:
                            break
                        buf = buf[i + len(until):]
                    elif not buf:
                        break
                    else:
                        buf = b""
                    say("request")
                    ok = send_reply(c)
                    if a.behaviour != "reply" or a.close_after_reply or \
                            not ok:
                        finish(c)
                        return
        except OSError:
            pass
        c.close()

    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if a.rcvbuf:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(128)
    say("listening")
    held = []
    while True:
        c, _ = ls.accept()
        say("accept")
        if a.behaviour == "blackhole":
            held.append(c)
            continue
        threading.Thread(target=serve, args=(c,), daemon=True).start()


class Stub:
    """A stub member process on 127.0.0.1:<port> (a fresh port if None),
    started with <procs> (base_util.Procs: killed at teardown).

    behaviour: "reply" (default), "blackhole", "reset", "close" -- see
    stub_main. reply: the bytes it answers (any protocol). until: what
    ends a request (default b"\\r\\n\\r\\n"; b"" = every read). rate:
    bytes/s of the reply (0 = at once), after its first <fast> bytes
    (sent at once: e.g. an HTTP head). cut: bytes of the reply sent
    before a reset/close. greet: send at accept, before reading.
    close_after_reply: close after one reply. rcvbuf: SO_RCVBUF."""

    def __init__(self, procs, name, behaviour="reply", reply=b"",
                 until=b"\r\n\r\n", rate=0, fast=0, cut=0, greet=False,
                 close_after_reply=False, rcvbuf=0, port=None):
        assert behaviour in BEHAVIOURS, behaviour
        self.name = name
        self.port = port or free_port()
        self.addr = "127.0.0.1:%d" % self.port
        self.log_path = os.path.join(str(procs.tmp), "stub-%s.log" % name)
        args = [PY, HERE, "--port", str(self.port), "--behaviour", behaviour,
                "--reply", reply.hex(), "--until", until.hex(),
                "--rate", str(rate), "--fast", str(fast), "--cut", str(cut)]
        if greet:
            args.append("--greet")
        if close_after_reply:
            args.append("--close-after-reply")
        if rcvbuf:
            args += ["--rcvbuf", str(rcvbuf)]
        # a restart on the same port appends to the same log: count the
        # lines this process writes
        self.skip = self.log().count("listening\n")
        self.proc = procs.start(args, "stub-%s.log" % name)
        # it says when it listens (a probe connection would be counted,
        # and held by a blackhole)
        wait_for(lambda: self.proc.poll() is not None or
                 self.log().count("listening\n") > self.skip,
                 what="stub " + name)
        assert self.proc.poll() is None, self.log()

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def accepted(self):
        """Connections accepted so far (by every process started under
        this name)."""
        return self.log().count("accept\n")

    def requests(self):
        """Requests seen so far (occurrences of <until>)."""
        return self.log().count("request\n")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)


def http_reply(body, status="200 OK", extra=b""):
    """A complete HTTP/1.1 response with Content-Length, as bytes."""
    if isinstance(body, str):
        body = body.encode()
    return (b"HTTP/1.1 " + status.encode() + b"\r\nContent-Length: " +
            str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)


# ---------------------------------------------------------------------------
# Refused connects, stopped processes


class RefusedPort:
    """A 127.0.0.1 port bound by us and never listened on: every connect
    to it is refused (RST), and nobody else can take it while we hold it.
    Close it (or use `with`) when done."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.addr = "127.0.0.1:%d" % self.port

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def proc_state(pid):
    """The one-letter state of /proc/<pid>/stat (R, S, T, Z...), or None
    when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def sigstop(pid, timeout=3.0):
    """SIGSTOP <pid> and wait (bounded) until the kernel shows it stopped."""
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: proc_state(pid) in ("T", "t", None), timeout=timeout,
             what="pid %d to stop" % pid)


def sigcont(pid):
    """SIGCONT <pid> (no error if it is gone)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def stopped(pid):
    """`with stopped(pid):` -- the process is SIGSTOPped inside the block
    and always SIGCONTed after it, even when the block fails."""
    sigstop(pid)
    try:
        yield
    finally:
        sigcont(pid)


def nofile_limit(n):
    """A preexec_fn that starts a process with RLIMIT_NOFILE <n>."""
    def set_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return set_limit


# ---------------------------------------------------------------------------
# What a client sees


class Outcome:
    """What one client saw: <data> received, <how> it ended ("eof",
    "reset", "timeout": still open at the deadline), <elapsed> seconds
    from <start> to the end."""

    def __init__(self, data, how, elapsed):
        self.data = data
        self.how = how
        self.elapsed = elapsed

    def __repr__(self):
        return "Outcome(%s after %.2fs, %d bytes: %r)" % (
            self.how, self.elapsed, len(self.data), self.data[:120])

    def status(self):
        """The HTTP status code at the start of <data>, or None."""
        if not self.data.startswith(b"HTTP/1."):
            return None
        try:
            return int(self.data.split(b" ", 2)[1])
        except (IndexError, ValueError):
            return None


def read_outcome(sock, deadline_s, start=None, stop_at=None):
    """Read <sock> until EOF, reset, or <deadline_s> seconds from <start>
    (default now); with <stop_at>(data) true, stop early (e.g. a complete
    reply on a keep-alive connection: how = "done"). Never waits longer
    than the deadline. The socket is left open."""
    start = time.monotonic() if start is None else start
    data = b""
    how = "timeout"
    while True:
        left = start + deadline_s - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            how = "reset"
            break
        if not chunk:
            how = "eof"
            break
        data += chunk
        if stop_at and stop_at(data):
            how = "done"
            break
    return Outcome(data, how, time.monotonic() - start)


def http_complete(data):
    """Is <data> one complete HTTP response with a Content-Length?"""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            return len(body) >= int(v.strip())
    return False


def exchange(port, request, deadline_s, src="127.0.0.1", stop_at=None,
             shut_wr=False):
    """Connect to 127.0.0.1:<port> from <src>, send <request>, and read
    the outcome within <deadline_s> (connect included). A refused or
    reset connect is Outcome(b"", "refused"/"reset", t)."""
    start = time.monotonic()
    s = socket.socket()
    try:
        s.settimeout(deadline_s)
        s.bind((src, 0))
        try:
            s.connect(("127.0.0.1", port))
            if request:
                s.sendall(request)
            if shut_wr:
                s.shutdown(socket.SHUT_WR)
        except ConnectionRefusedError:
            return Outcome(b"", "refused", time.monotonic() - start)
        except (ConnectionResetError, BrokenPipeError):
            return Outcome(b"", "reset", time.monotonic() - start)
        except socket.timeout:
            return Outcome(b"", "timeout", time.monotonic() - start)
        return read_outcome(s, deadline_s, start, stop_at)
    finally:
        s.close()


def http_get(port, deadline_s=3.0, path="/", src="127.0.0.1", close=True):
    """One GET through an http pool; the Outcome (stops at a complete
    response)."""
    req = ("GET %s HTTP/1.1\r\nHost: t\r\n%s\r\n" % (
        path, "Connection: close\r\n" if close else "")).encode()
    return exchange(port, req, deadline_s, src, stop_at=http_complete)


# ---------------------------------------------------------------------------
# Resources of a process


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV",
              "04": "FIN_WAIT1", "05": "FIN_WAIT2", "06": "TIME_WAIT",
              "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK",
              "0A": "LISTEN", "0B": "CLOSING"}


def tcp_sockets(pid):
    """{inode: "local->remote STATE"} of the IPv4 TCP sockets <pid> sees."""
    def addr(hexaddr):
        ip, port = hexaddr.split(":")
        return "%s:%d" % (socket.inet_ntoa(struct.pack("<I", int(ip, 16))),
                          int(port, 16))
    out = {}
    with contextlib.suppress(OSError):
        with open("/proc/%d/net/tcp" % pid) as f:
            for row in f.read().splitlines()[1:]:
                col = row.split()
                out[col[9]] = "%s->%s %s" % (addr(col[1]), addr(col[2]),
                                             TCP_STATES.get(col[3], col[3]))
    return out


def fd_targets(pid):
    """{fd: what it points to} (a path, pipe:[...], anon_inode:..., or for
    a TCP socket its addresses and state), to say which descriptor a
    leak is."""
    out = {}
    d = "/proc/%d/fd" % pid
    tcp = tcp_sockets(pid)
    for name in os.listdir(d):
        with contextlib.suppress(OSError):
            t = os.readlink(os.path.join(d, name))
            if t.startswith("socket:["):
                t = tcp.get(t[8:-1], t)
            out[int(name)] = t
    return out


def connections_to(pid, port):
    """How many of <pid>'s descriptors are TCP sockets connected to
    127.0.0.1:<port> (a member's connections, say)."""
    want = "->127.0.0.1:%d " % port
    return sum(1 for t in fd_targets(pid).values() if want in t)


def wait_fds(pid, want, settle=3.0):
    """Wait (at most <settle> s) until <pid> holds exactly <want>
    descriptors; assert with the descriptors listed when it does not."""
    deadline = time.monotonic() + settle
    while True:
        n = fd_count(pid)
        if n == want:
            return n
        if time.monotonic() > deadline:
            raise AssertionError(
                "pid %d holds %d descriptors %.1fs after the fault, not the "
                "%d of the baseline: %r" % (pid, n, settle, want,
                                             sorted(fd_targets(pid).items())))
        time.sleep(0.05)


def assert_flat(proc, round_fn, rounds, rss_growth_kib, settle=3.0,
                warmup=1, check=None):
    """Run <round_fn>(i) <warmup> times unmeasured (first-use allocations,
    idle member connections a pool keeps), take the baseline (fds, RSS)
    of <proc> (a Popen), then run it <rounds> times more. <check>() (e.g.
    "a normal request is served") runs after every round. After each,
    <proc> must still run, and its descriptors must come back to the
    baseline exactly within <settle> s; after the last, RSS may exceed
    the baseline by at most <rss_growth_kib> KiB (not checked in a
    sanitizer build). Returns (baseline fds, rss before, rss after)."""
    pid = proc.pid

    def one(i):
        round_fn(i)
        assert proc.poll() is None, "the daemon died in round %d" % i
        if check:
            check()

    for i in range(warmup):
        one(-1 - i)
    # the baseline itself must be steady: what the warm-up left closing
    # is given time to go
    base = fd_count(pid)
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        time.sleep(0.1)
        n = fd_count(pid)
        if n == base:
            break
        base = n
    rss0 = rss_kib(pid)
    for i in range(rounds):
        one(i)
        wait_fds(pid, base, settle)
    rss1 = rss_kib(pid)
    assert SANITIZED or rss1 - rss0 <= rss_growth_kib, (
        "RSS grew by %d KiB over %d rounds (%d -> %d), more than %d KiB"
        % (rss1 - rss0, rounds, rss0, rss1, rss_growth_kib))
    return base, rss0, rss1


if __name__ == "__main__":
    stub_main(sys.argv[1:])
