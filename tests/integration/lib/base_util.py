# base_util.py -- what every integration suite and helper module shares:
# free ports, stub backends (`chash serve`), chashd started on a config
# written to tmp_path, clients that connect FROM a chosen 127.x.y.z
# address, bounded waits. Every process a test starts is killed at
# teardown (by the fixtures of ../conftest.py); every wait is bounded.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import signal
import socket
import subprocess
import time

BUILD = os.environ.get("CHASH_BUILD", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "build"))
CHASH = os.path.join(BUILD, "chash")
CHASHD = os.path.join(BUILD, "chashd")

# Under valgrind (scripts/valgrind sets CHASH_VALGRIND=1 and points
# CHASH_BUILD at its wrapper) chashd runs 20-50x slower and must exit by
# itself to write its leak summary: every wait_for timeout is multiplied by
# CHASH_TIMEOUT_SCALE (default 1) and kill_all stops with SIGTERM first.
# Unset, nothing changes.
VALGRIND = os.environ.get("CHASH_VALGRIND", "") not in ("", "0")
TIMEOUT_SCALE = float(os.environ.get("CHASH_TIMEOUT_SCALE", "1") or "1")


_GIVEN_PORTS = set()


def free_port():
    """A TCP port on 127.0.0.1 nobody listens on (the OS picks it), never
    one this run already handed out: the OS may give the port it just
    freed again, and `port, aport = free_port(), free_port()` then put a
    pool and the admin API on the same port (seen in the suite)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port
    raise RuntimeError("no fresh free port in 100 tries")


def rss_kib(pid):
    """<pid>'s resident memory (VmRSS) in KiB, 0 when it has none."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_for(pred, timeout=5.0, interval=0.02, what="condition"):
    """Poll <pred> until it returns a true value; fail after <timeout> s."""
    timeout *= TIMEOUT_SCALE
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s"
                                 % (timeout, what))
        time.sleep(interval)


def can_connect(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def settled(port, host="127.0.0.1"):
    """A readiness probe that leaves nothing in flight: connect, send FIN,
    read until the proxy closes (through whichever member answers). False
    when nothing listens yet. A proxy that holds the probe longer than 3 s
    still counts as listening."""
    try:
        s = socket.create_connection((host, port), timeout=0.5)
    except OSError:
        return False
    with s:
        s.settimeout(3)
        try:
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass
        except OSError:
            pass
    return True


def client_ip(i):
    """The i-th distinct client address: 127.0.x.y, avoiding .0 and .1."""
    return "127.0.%d.%d" % (10 + i // 250, 2 + i % 250)


def log_lines(path):
    """The complete lines of the log file <path> ([] before it exists). A
    read can meet a line still being written (the kernel makes an append
    visible a page at a time), so a last line without its newline is left
    for the next read."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return text[:text.rfind("\n") + 1].splitlines()


def ejected_at_2(member):
    """The log line of <member>'s passive ejection with
    server_failure_limit 2: the control thread ejects it a moment after
    the workers count the second failure, and under load more may have
    come by then (the line says how many)."""
    return (r"member %s \S+ up -> ejected: (?:[2-9]|[1-9]\d+) failures "
            r"in a row" % member)


def connect_from(src, port, timeout=3.0):
    """A socket connected to 127.0.0.1:<port> from source address <src>."""
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def recv_all(s, limit=1 << 20):
    data = b""
    while len(data) < limit:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    return data


def fetch(port, src="127.0.0.1", timeout=3.0):
    """One HTTP/1.0 request through chashd from <src>; the backend's name,
    or None when the connection was refused or closed without an answer."""
    try:
        s = connect_from(src, port, timeout)
    except OSError:
        return None
    with s:
        try:
            s.sendall(b"GET / HTTP/1.0\r\nHost: t\r\n\r\n")
        except OSError:
            return None
        data = recv_all(s)
    if not data.startswith(b"HTTP/1.1 200"):
        return None
    return data.split(b"\r\n\r\n", 1)[1].decode().strip()


class KeepAlive:
    """A keep-alive HTTP/1.1 connection through chashd: ask() returns the
    answering backend's name on the same connection each time."""

    def __init__(self, port, src="127.0.0.1", timeout=3.0):
        self.sock = connect_from(src, port, timeout)
        self.buf = b""

    def ask(self):
        self.sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                return None
            self.buf += chunk
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        n = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        while len(rest) < n:
            chunk = self.sock.recv(4096)
            if not chunk:
                return None
            rest += chunk
        self.buf = rest[n:]
        return rest[:n].decode().strip()

    def close(self):
        self.sock.close()


class Procs:
    """Processes started by one test; all killed at teardown."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.procs = []

    def start(self, args, log_name, preexec_fn=None):
        log = open(os.path.join(self.tmp, log_name), "ab")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)
        log.close()
        self.procs.append(p)
        return p

    def kill_all(self):
        if VALGRIND:
            self._term_all()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def _term_all(self, timeout=20.0):
        """SIGTERM to every process still running, then wait for them all
        together, <timeout> s at most: chashd under valgrind writes its
        leak summary only when it exits by itself (SIGKILL follows in
        kill_all for what is left)."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


class Backend:
    """A `chash serve` stub: answers HTTP with its name, or echoes."""

    def __init__(self, procs, name, port=None, echo=False, extra=()):
        self.procs = procs
        self.name = name
        self.port = port or free_port()
        self.addr = "127.0.0.1:%d" % self.port
        self.echo = echo
        self.extra = list(extra)
        self.proc = None
        self.start()

    def start(self):
        args = [CHASH, "serve", "--listen", self.addr, "--name", self.name]
        if self.echo:
            args.append("--echo")
        self.proc = self.procs.start(args + self.extra,
                                     "serve-%s.log" % self.name)
        wait_for(lambda: can_connect(self.port), what="backend " + self.name)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        wait_for(lambda: not can_connect(self.port),
                 what="backend %s to stop" % self.name)


def pool_yaml(name, port, servers, **opts):
    """A tcp pool as YAML text. <servers>: list of Backend or
    (Backend, weight); <opts>: extra pool keys, written as given."""
    lines = ["%s:" % name, "  listen: 127.0.0.1:%d" % port, "  mode: tcp"]
    for k, v in opts.items():
        lines.append("  %s: %s" % (k, v))
    lines.append("  servers:")
    for s in servers:
        b, w = s if isinstance(s, tuple) else (s, 1)
        lines.append("    - %s:%d %s" % (b.addr, w, b.name))
    return "\n".join(lines) + "\n"


GLOBAL = "global:\n  admin: off\n  workers: 2\n"


class Chashd:
    """chashd on a config written to tmp_path."""

    def __init__(self, procs, tmp_path, text, port, args=(), preexec_fn=None):
        self.procs = procs
        self.tmp = tmp_path
        self.port = port
        self.conf = os.path.join(tmp_path, "chashd.yml")
        self.log_path = os.path.join(tmp_path, "chashd.log")
        with open(self.conf, "w") as f:
            f.write(text)
        self.proc = procs.start([CHASHD, "-c", self.conf, "--log-level",
                                 "debug", *args], "chashd.log", preexec_fn)
        # settled, not just listening: the probe's own connection is
        # closed and counted when chashd is handed to the test
        wait_for(lambda: self.proc.poll() is not None or settled(port),
                 what="chashd to listen")
        assert self.proc.poll() is None, self.log()

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_log(self, pattern, timeout=5.0, count=1):
        """Wait until <pattern> (regex) appears <count> times in the log."""
        return wait_for(
            lambda: len(re.findall(pattern, self.log())) >= count and
            re.findall(pattern, self.log()),
            timeout=timeout, what="log line /%s/" % pattern)

    def reload(self, text):
        with open(self.conf, "w") as f:
            f.write(text)
        n = len(re.findall(r"reload: (done|refused)|reload refused",
                           self.log()))
        self.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: len(re.findall(
            r"reload: done|reload refused", self.log())) > n,
            what="reload to finish")

    def cpu_seconds(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self):
        return rss_kib(self.proc.pid)


def flood(s, limit, seconds=15):
    """Send from non-blocking <s> until it stays blocked for 0.5 s, it is
    closed, <limit> bytes or <seconds>. Returns (bytes sent, "stalled" |
    "closed" | "never held back")."""
    s.setblocking(False)
    chunk = os.urandom(64 * 1024)
    sent, stalled = 0, None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and sent < limit:
        try:
            sent += s.send(chunk)
            stalled = None
        except BlockingIOError:
            if stalled is None:
                stalled = time.monotonic()
            elif time.monotonic() - stalled > 0.5:
                return sent, "stalled"
            time.sleep(0.01)
        except OSError:
            return sent, "closed"
    return sent, "never held back"


def lookup_config(conf, pool, keys, replicas=1):
    """key -> [owners...] from `chash lookup --config`."""
    args = [CHASH, "lookup", "--config", conf, "--pool", pool]
    if replicas > 1:
        args += ["--replicas", str(replicas)]
    p = subprocess.run(args, input="".join(k + "\n" for k in keys),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    rows = [line.split("\t") for line in p.stdout.splitlines()]
    return {r[0]: r[1:] for r in rows}
