"""Helpers of the http mode's tests: stub members (http_backend.py, real
processes), an http pool's YAML, clients that speak raw HTTP/1.1 over one
socket, and a minimal WebSocket client."""
import base64
import http.client
import json
import os
import socket
import sys

from base_util import GLOBAL, can_connect, free_port, log_lines, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
STUB = os.path.join(HERE, "http_backend.py")


class HttpBackend:
    """A stub HTTP/1.1 member named <name>; <fail>: reset, close, garbage
    or hang on every request."""

    def __init__(self, procs, name, fail=""):
        self.procs = procs
        self.name = name
        # how it answers every request (set()), and what it was asked
        self.mode = os.path.join(str(procs.tmp), "%s.mode" % name)
        self.port = free_port()
        self.addr = "127.0.0.1:%d" % self.port
        self.fail = fail
        self.proc = None
        self.start()

    def start(self):
        args = [sys.executable, STUB, self.name, str(self.port), "127.0.0.1",
                self.fail, self.mode]
        self.proc = self.procs.start(args, "http-%s.log" % self.name)
        wait_for(lambda: can_connect(self.port), what="member " + self.name)

    def set(self, mode):
        """From now on answer every request so: a status ("503"; "200":
        as usual), "garbage", "close" or "silent" (http_backend.py)."""
        with open(self.mode + ".new", "w") as f:
            f.write(mode)
        os.replace(self.mode + ".new", self.mode)

    def requests(self):
        """The requests received so far: [(mode answered, head)]."""
        rows = log_lines(self.mode + ".requests")
        return [(r["mode"], r["head"]) for r in map(json.loads, rows)]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        wait_for(lambda: not can_connect(self.port),
                 what="member %s to stop" % self.name)


def http_backends(procs, n, prefix="h", fail=None):
    fail = fail or {}
    return [HttpBackend(procs, "%s%d" % (prefix, i + 1),
                        fail.get("%s%d" % (prefix, i + 1), ""))
            for i in range(n)]


def http_pool(port, members, hash_key="[header:X-User-Id, source_ip]",
              name="web", global_text=GLOBAL, **opts):
    lines = [global_text.rstrip("\n"), "%s:" % name,
             "  listen: 127.0.0.1:%d" % port, "  mode: http",
             "  hash_key: %s" % hash_key]
    for k, v in opts.items():
        lines.append("  %s: %s" % (k, v))
    lines.append("  servers:")
    for b in members:
        lines.append("    - %s:1 %s" % (b.addr, b.name))
    return "\n".join(lines) + "\n"


def get_json(conn, path, headers=None, method="GET", body=None,
             chunked=False):
    """One request on http.client connection <conn>: (status, response,
    the stub's JSON or the raw body); <chunked>: the body goes chunked."""
    conn.request(method, path, body=body, headers=headers or {},
                 encode_chunked=chunked)
    r = conn.getresponse()
    data = r.read()
    try:
        data = json.loads(data)
    except ValueError:
        pass
    return r.status, r, data


def raw(port, data, src="127.0.0.1", timeout=5.0, until_close=True,
        want=None):
    """Send <data> on a fresh connection from <src>; read until the peer
    closes (or, with <want>, until that many bytes of it are in)."""
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(data)
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
            if want is not None and want(out):
                break
    except socket.timeout:
        if until_close:
            raise
    finally:
        s.close()
    return out


def complete(data, n=1):
    """Whether <data> holds <n> whole Content-Length framed responses."""
    try:
        return len(responses(data)) >= n and all(
            len(b) == int(h.get("content-length", "0"))
            for _, h, b in responses(data))
    except (ValueError, IndexError):
        return False


def responses(data):
    """Split raw HTTP/1.1 responses (Content-Length framed) into
    (status, headers dict lower-cased, body)."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        n = int(hdrs.get("content-length", "0"))
        out.append((status, hdrs, rest[:n]))
        data = rest[n:]
    return out


def ws_frame(text):
    """A masked client text frame (RFC 6455), payload under 126 bytes."""
    data = text.encode()
    mask = os.urandom(4)
    return bytes([0x81, 0x80 | len(data)]) + mask + bytes(
        b ^ mask[i % 4] for i, b in enumerate(data))


def ws_key():
    return base64.b64encode(os.urandom(16)).decode()


def connection(port, src="127.0.0.1", timeout=5.0):
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                      source_address=(src, 0))
