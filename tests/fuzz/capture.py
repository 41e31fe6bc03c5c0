#!/usr/bin/python3
# capture.py -- regenerate the fuzz targets' seed corpora from real traffic:
# real clients against real servers (redis-cli and redis-benchmark against
# redis-server, memcached's text and meta protocols against memcached,
# curl against nginx, haproxy's send-proxy toward a stub, `chash ctl` and
# curl against chashd's admin API, etcdctl against etcd), each through a
# recording relay on 127.0.0.1 that keeps what each side sent; configs
# from conf/ and the docs; a state file that chashd itself wrote.
# SPDX-License-Identifier: BSD-2-Clause
#
#   /usr/bin/python3 tests/fuzz/capture.py [GROUP ...]
#
# GROUP: conf admin (with state) redis memcache http proxy etcd ring
# (default: all). Captured files are named cap-<what>-<sha1 prefix> in
# tests/fuzz/corpus/<target>/; a group's old cap-* files are replaced, the
# hand-written seeds are left alone. Each file is at most 24 KB; a target
# keeps at most MAX_FILES captured files. Everything listens on
# 127.0.0.1 only, every wait is bounded, and every process started is
# stopped.
import base64
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(REPO, "tests", "fuzz", "corpus")
BUILD = os.environ.get("CHASH_BUILD", os.path.join(REPO, "build"))
# Small enough that a target stays fast on its seeds (a 64 KB pipeline
# fed in pieces costs ~100 times a 1 KB one), big enough for a value over
# PROTO_STREAM_MIN (16 KB), which a request parser streams.
MAX_SIZE = 24 * 1024
MAX_FILES = 300


# ---- corpus files -------------------------------------------------------

class Corpus:
    """The captured files of one target: deduplicated by content, at most
    MAX_FILES, each cut to MAX_SIZE."""

    def __init__(self, target):
        self.target = target
        self.dir = os.path.join(CORPUS, target)
        self.seen = set()
        self.files = []

    def add(self, what, data):
        if isinstance(data, str):
            data = data.encode()
        data = data[:MAX_SIZE]
        if not data:
            return
        h = hashlib.sha1(data).hexdigest()
        if h in self.seen or len(self.files) >= MAX_FILES:
            return
        self.seen.add(h)
        what = re.sub(r"[^A-Za-z0-9_.]+", "_", what)[:40]
        self.files.append(("cap-%s-%s" % (what, h[:8]), data))

    def write(self):
        os.makedirs(self.dir, exist_ok=True)
        for old in glob.glob(os.path.join(self.dir, "cap-*")):
            os.unlink(old)
        for name, data in self.files:
            with open(os.path.join(self.dir, name), "wb") as f:
                f.write(data)
        print("capture: %-17s %3d files" % (self.target, len(self.files)))


# ---- processes and sockets ----------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on 127.0.0.1:%d after %.0f s"
                       % (port, timeout))


class Procs:
    """Processes started by a group: all stopped on exit."""

    def __init__(self):
        self.procs = []

    def start(self, argv, **kw):
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


def run(argv, timeout=30, **kw):
    """A client to completion (bounded): its stdout, errors ignored."""
    if "input" not in kw:
        kw["stdin"] = subprocess.DEVNULL
    return subprocess.run(argv, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, timeout=timeout,
                          **kw).stdout


class Relay:
    """A TCP relay on 127.0.0.1 in front of <upstream>: every connection's
    client bytes (sent) and server bytes (received), whole, and as the
    pieces each side wrote (one recv() each), kept in <self.conns>."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.conns = []
        self.lock = threading.Lock()
        self.threads = []
        t = threading.Thread(target=self.accept, daemon=True)
        t.start()

    def accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            rec = {"sent": [], "received": []}
            with self.lock:
                self.conns.append(rec)
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream),
                                             timeout=5)
            except OSError:
                c.close()
                continue
            for a, b, key in ((c, u, "sent"), (u, c, "received")):
                t = threading.Thread(target=self.pump, args=(a, b, rec[key]),
                                     daemon=True)
                t.start()
                self.threads.append(t)

    @staticmethod
    def pump(src, dst, pieces):
        src.settimeout(30)
        try:
            while True:
                d = src.recv(65536)
                if not d:
                    break
                pieces.append(d)
                dst.sendall(d)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self):
        self.lsock.close()
        for t in self.threads:
            t.join(timeout=5)

    def streams(self, key):
        """Each connection's bytes in direction <key>, whole."""
        with self.lock:
            return [b"".join(r[key]) for r in self.conns if r[key]]

    def pieces(self, key):
        with self.lock:
            return [p for r in self.conns for p in r[key]]


def have(prog):
    if shutil.which(prog) is None:
        print("capture: %s is missing (scripts/deps installs it)" % prog,
              file=sys.stderr)
        return False
    return True


def keep_exchange(relay, req, rep):
    """What the clients sent into <req>, what the server answered into
    <rep> (whole streams, then as it came in pieces), both written."""
    for i, s in enumerate(relay.streams("sent")):
        req.add("conn%d" % i, s)
    for i, s in enumerate(relay.streams("received")):
        rep.add("conn%d" % i, s)
    for i, p in enumerate(relay.pieces("received")):
        rep.add("piece%d" % i, p)
    req.write()
    rep.write()

# ---- conf: the shipped configs and the docs' examples -------------------

def yaml_blocks(path):
    with open(path) as f:
        text = f.read()
    return re.findall(r"```ya?ml\n(.*?)```", text, re.S)


def group_conf():
    c = Corpus("conf")
    for path in sorted(glob.glob(os.path.join(REPO, "conf", "*.yml"))):
        with open(path, "rb") as f:
            c.add(os.path.basename(path), f.read())
    docs = sorted(glob.glob(os.path.join(REPO, "doc", "*.md")))
    for path in docs + [os.path.join(REPO, "README.md")]:
        for i, block in enumerate(yaml_blocks(path)):
            c.add("%s_%d" % (os.path.basename(path)[:-3], i), block)
    c.write()


# ---- redis: redis-cli and redis-benchmark against redis-server ------------

REDIS_COMMANDS = [
    ["PING"], ["SET", "user:1", "alice"], ["GET", "user:1"],
    ["GET", "missing"], ["SET", "{tag}a", "1", "EX", "100"],
    ["MSET", "k1", "v1", "k2", "v2", "{t}k3", "v3"],
    ["MGET", "k1", "k2", "missing", "{t}k3"], ["INCR", "counter"],
    ["INCRBY", "counter", "-7"], ["DEL", "k1", "k2"], ["EXISTS", "k1", "user:1"],
    ["EXPIRE", "user:1", "60"], ["TTL", "user:1"], ["TYPE", "user:1"],
    ["HSET", "h", "f1", "v1", "f2", "v2"], ["HGETALL", "h"],
    ["LPUSH", "list", "a", "b", "c"], ["LRANGE", "list", "0", "-1"],
    ["SADD", "set", "x", "y"], ["SMEMBERS", "set"],
    ["ZADD", "z", "1.5", "m1", "2", "m2"],
    ["ZRANGE", "z", "0", "-1", "WITHSCORES"], ["SCAN", "0", "COUNT", "5"],
    ["LPUSH", "user:1", "x"], ["NOSUCHCOMMAND", "a"], ["GET"],
    ["EVAL", "return {1, 'two', {3}}", "0"], ["EVAL", "return nil", "0"],
    ["OBJECT", "ENCODING", "h"], ["DBSIZE"], ["ECHO", "a\r\nb"],
    ["SET", "big", "x" * 20000], ["GETRANGE", "big", "0", "99"],
    ["STRLEN", "big"], ["INFO", "server"], ["CLIENT", "SETNAME", "capture"],
    ["CONFIG", "GET", "maxmemory"], ["XADD", "stream", "*", "f", "v"],
    ["XRANGE", "stream", "-", "+"], ["PFADD", "hll", "a", "b"],
    ["GETDEL", "{tag}a"], ["UNLINK", "big"], ["WAIT", "0", "0"],
]


def group_redis():
    if not (have("redis-server") and have("redis-cli")):
        return
    req, rep = Corpus("redis_request"), Corpus("redis_reply")
    port = free_port()
    with Procs() as ps:
        ps.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                  "--save", "", "--appendonly", "no"])
        wait_port(port)
        relay = Relay(port)
        cli = ["redis-cli", "-h", "127.0.0.1", "-p", str(relay.port)]
        for cmd in REDIS_COMMANDS:
            run(cli + cmd)
        run(cli + ["-3", "HGETALL", "h"])      # RESP3: HELLO 3, a map
        run(cli + ["-3", "ZRANGE", "z", "0", "-1", "WITHSCORES"])
        run(cli + ["-3", "EVAL", "return {double='3.5'}", "0"])
        # several commands on one connection (a pipeline, as typed)
        run(cli, input=b"SET a 1\nGET a\nINCR a\nLRANGE list 0 1\n"
            b"MGET a b c\nQUIT\n")
        run(cli + ["MULTI"])
        run(cli, input=b"MULTI\nSET tx 1\nINCR tx\nEXEC\n")
        # redis-cli --pipe: the raw protocol from a file
        pipe = b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\nkey:%d\r\n$3\r\nval\r\n"
                        % (len(b"key:%d" % i), i) for i in range(50))
        run(cli + ["--pipe"], input=pipe)
        if have("redis-benchmark"):
            run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(relay.port),
                 "-n", "300", "-c", "2", "-P", "8", "-q", "-t",
                 "ping,set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,"
                 "zadd,zpopmin,lrange_100,mset"], timeout=60)
            run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(relay.port),
                 "-n", "50", "-c", "1", "-d", "3000", "-q", "-t", "set,get"],
                timeout=60)
        # the inline protocol, as a person at telnet types it
        for line in (b"PING\r\n", b"SET inline 'a b'\r\nGET inline\r\n",
                     b"EXISTS inline\nDEL inline\n", b"GET \"q\\x41\"\r\n"):
            with socket.create_connection(("127.0.0.1", relay.port),
                                          timeout=5) as s:
                s.sendall(line)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
        relay.close()
    keep_exchange(relay, req, rep)


# ---- memcache: libmemcached's tools and the text and meta protocols -------

MC_TEXT = [
    b"set greeting 0 0 5\r\nhello\r\nget greeting\r\n",
    b"set a 5 100 1\r\n1\r\nadd a 0 0 1\r\n2\r\nadd b 0 0 1\r\n2\r\n"
    b"replace b 0 0 1\r\n3\r\nappend a 0 0 2\r\nxy\r\n"
    b"prepend a 0 0 2\r\nvw\r\nget a b missing\r\n",
    b"gets a\r\ncas a 0 0 1 999\r\nz\r\n",
    b"set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr nokey 1\r\n"
    b"incr a 1\r\n",
    b"touch a 10\r\ngat 100 a b\r\ngats 0 a\r\ndelete a\r\ndelete a\r\n",
    b"set q 0 0 1 noreply\r\nq\r\nget q\r\nversion\r\nverbosity 1\r\n",
    b"stats\r\nstats settings\r\nstats slabs\r\nstats items\r\n",
    b"bogus command\r\nget " + b"k" * 251 + b"\r\nset bad 0 0 notnum\r\n",
    b"set big 0 0 20000\r\n" + b"b" * 20000 + b"\r\nget big\r\n",
    b"flush_all 0\r\nget greeting\r\nmn\r\n",
]
MC_META = [
    b"ms mk 2 T0 F5\r\nhi\r\nmg mk v f t s k\r\nmg missing v\r\n",
    b"mg mk v q\r\nmg missing v q\r\nmn\r\n",
    b"ms mk 3 c\r\nabc\r\nmg mk c v\r\nms mk 1 C1\r\nx\r\n",
    b"ma cnt N0 J13 D2 v\r\nma cnt MI D1 v\r\nma cnt MD v\r\n",
    b"md mk q\r\nmd mk\r\nmg mk v\r\nmn\r\n",
    b"ms bWV0YQ== 2 b\r\nok\r\nmg bWV0YQ== b v k\r\n",
    b"me mk\r\nms mk 2 I\r\nzz\r\nmg mk O123 v\r\n",
    b"mg mk v N30 R5 h l\r\nms mk 2 MA\r\nzz\r\nms mk 2 MP\r\naa\r\n",
    b"mg\r\nms mk notnum\r\nma\r\nmd\r\n",
]


def group_memcache():
    if not have("memcached"):
        return
    req, rep = Corpus("memcache_request"), Corpus("memcache_reply")
    port = free_port()
    with Procs() as ps:
        ps.start(["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                  "-m", "32", "-u", "root"])
        wait_port(port)
        relay = Relay(port)
        srv = "--servers=127.0.0.1:%d" % relay.port
        for conv in MC_TEXT + MC_META:
            with socket.create_connection(("127.0.0.1", relay.port),
                                          timeout=5) as s:
                s.sendall(conv)
                s.settimeout(1)
                try:
                    while s.recv(65536):
                        pass
                except socket.timeout:
                    pass
        with tempfile.TemporaryDirectory() as tmp:
            f = os.path.join(tmp, "file.txt")
            with open(f, "w") as fh:
                fh.write("a file's text\n" * 20)
            for argv in (["memccp", srv, f], ["memccat", srv, "file.txt"],
                         ["memcstat", srv], ["memcrm", srv, "file.txt"],
                         ["memccp", "--binary", srv, f],
                         ["memccat", "--binary", srv, "file.txt"],
                         ["memcping", srv], ["memcflush", srv]):
                if have(argv[0]):
                    run(argv, cwd=tmp)
        if have("memcslap"):
            run(["memcslap", srv, "--concurrency=2", "--execute-number=100",
                 "--initial-load=20", "--non-blocking"], timeout=60)
        relay.close()
    keep_exchange(relay, req, rep)


# ---- http: curl against nginx ---------------------------------------------

NGINX_CONF = """
daemon off;
worker_processes 1;
pid %(dir)s/nginx.pid;
error_log %(dir)s/error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %(dir)s/body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fastcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    default_type text/plain;
    server {
        listen 127.0.0.1:%(port)d;
        root %(dir)s/www;
        location /gz/ { gzip on; gzip_min_length 1; gzip_types text/plain; }
        location /moved { return 301 /index.html; }
        location /teapot { return 418 "short and stout\\n"; }
        location /empty { return 204; }
        location /echo { return 200 "$request_method $request_uri $http_x_key\\n"; }
        location /upload { client_max_body_size 1m; return 201 "$content_length\\n"; }
        location = /nolength { chunked_transfer_encoding on; add_header X-Tag a; ssi on; }
    }
}
"""


def group_http():
    if not (have("nginx") and have("curl")):
        return
    req, rep, chk = (Corpus("http_request"), Corpus("http_response"),
                     Corpus("http_chunked"))
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="chash-capture-")
    try:
        www = os.path.join(tmp, "www")
        os.makedirs(os.path.join(www, "gz"))
        with open(os.path.join(www, "index.html"), "w") as f:
            f.write("<html><body>chash</body></html>\n")
        with open(os.path.join(www, "gz", "text.txt"), "w") as f:
            f.write("consistent hashing " * 400)
        with open(os.path.join(www, "big.bin"), "wb") as f:
            f.write(bytes(range(256)) * 100)
        with open(os.path.join(tmp, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF % {"dir": tmp, "port": port})
        with Procs() as ps:
            ps.start(["nginx", "-c", os.path.join(tmp, "nginx.conf"),
                      "-p", tmp])
            wait_port(port)
            relay = Relay(port)
            base = "http://127.0.0.1:%d" % relay.port
            curl = ["curl", "-s", "-o", "/dev/null", "--max-time", "10"]
            for args in (
                    [base + "/"], [base + "/index.html", base + "/big.bin"],
                    ["-I", base + "/index.html"], ["-0", base + "/index.html"],
                    ["--compressed", base + "/gz/text.txt"],
                    ["-H", "Accept-Encoding: gzip", "--http1.1",
                     base + "/gz/text.txt", base + "/gz/text.txt"],
                    ["-r", "10-99", base + "/big.bin"],
                    ["-r", "0-1,5-9", base + "/big.bin"],
                    ["-z", "Thu, 01 Jan 2099 00:00:00 GMT", base + "/index.html"],
                    [base + "/moved"], [base + "/teapot"], [base + "/empty"],
                    [base + "/missing?x=1&y=%20z"],
                    ["-b", "id=42; theme=dark", "-H", "X-Key: user-7",
                     base + "/echo?k=v&k2=%2Fa%2F#frag"],
                    ["-H", "Host: example.test", "-A", "capture/1.0",
                     base + "/echo"],
                    ["-X", "OPTIONS", base + "/echo"],
                    ["-X", "DELETE", base + "/echo"],
                    ["-d", "a=1&b=2", base + "/upload"],
                    ["-H", "Content-Type: application/json",
                     "--data-binary", '{"k": [1, 2, 3]}', base + "/upload"],
                    ["-H", "Transfer-Encoding: chunked", "--data-binary",
                     "chunked body " * 50, base + "/upload"],
                    ["-H", "Expect: 100-continue", "--data-binary",
                     "x" * 2000, base + "/upload"],
                    ["-T", os.path.join(www, "index.html"),
                     base + "/upload/put"],
                    ["-H", "Connection: close", base + "/index.html"],
                    ["-H", "Upgrade: websocket", "-H", "Connection: Upgrade",
                     base + "/echo"],
                    ["-X", "PURGE", base + "/echo"],
                    ["--path-as-is", base + "/../index.html"],
                    [base + "/" + "a" * 3000]):
                run(curl + args)
            # a chunked upload from a pipe (no length known: curl chunks it)
            run(curl + ["-T", "-", base + "/upload/stdin"],
                input=b"piped line\n" * 300)
            relay.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for i, s in enumerate(relay.streams("sent")):
        req.add("conn%d" % i, s)
        chunked_bodies(chk, "req%d" % i, s)
    for i, s in enumerate(relay.streams("received")):
        rep.add("conn%d" % i, s)
        chunked_bodies(chk, "resp%d" % i, s)
    req.write()
    rep.write()
    chk.write()


def chunked_bodies(c, what, stream):
    """The chunked bodies in <stream> (the bytes after each head that says
    Transfer-Encoding: chunked), with the target's first byte in front:
    two seeds each, one cutting them into small pieces with the smaller
    trailer limit, one the other way."""
    for m in re.finditer(rb"\r\n\r\n", stream):
        head = stream[:m.start()].rsplit(b"\r\n\r\n", 1)[-1]
        if re.search(rb"(?im)^transfer-encoding:[ \t]*chunked", head):
            body = stream[m.end():]
            c.add(what, b"\x01" + body)
            c.add(what + "_small", b"\x83" + body)


# ---- proxy: haproxy's send-proxy and send-proxy-v2 toward a stub ----------

HAPROXY_CONF = """
global
    maxconn 64
defaults
    mode tcp
    timeout connect 2s
    timeout client 5s
    timeout server 5s
frontend v1
    bind 127.0.0.1:%(f1)d
    bind [::1]:%(f1)d
    default_backend v1
frontend v2
    bind 127.0.0.1:%(f2)d
    bind [::1]:%(f2)d
    default_backend v2
frontend v2tlv
    bind 127.0.0.1:%(f3)d
    default_backend v2tlv
backend v1
    server stub 127.0.0.1:%(stub)d send-proxy
backend v2
    server stub 127.0.0.1:%(stub)d send-proxy-v2 check check-send-proxy inter 300
backend v2tlv
    server stub 127.0.0.1:%(stub)d send-proxy-v2 proxy-v2-options unique-id,crc32c,authority
    unique-id-format %%{+X}o%%ci:%%cp_%%fi:%%fp_%%Ts_%%rt
"""


def group_proxy():
    if not have("haproxy"):
        return
    c = Corpus("proxy")
    stub = socket.socket()
    stub.bind(("127.0.0.1", 0))
    stub.listen(64)
    stub.settimeout(0.2)
    got = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                s, _ = stub.accept()
            except OSError:
                continue
            s.settimeout(0.5)
            data = b""
            try:
                while len(data) < MAX_SIZE:
                    d = s.recv(65536)
                    if not d:
                        break
                    data += d
            except OSError:
                pass
            s.close()
            got.append(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ports = {"f1": free_port(), "f2": free_port(), "f3": free_port(),
             "stub": stub.getsockname()[1]}
    tmp = tempfile.mkdtemp(prefix="chash-capture-")
    try:
        cfg = os.path.join(tmp, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(HAPROXY_CONF % ports)
        with Procs() as ps:
            ps.start(["haproxy", "-db", "-f", cfg])
            for p in ("f1", "f2", "f3"):
                wait_port(ports[p])
            time.sleep(1)  # a few health checks (LOCAL headers)
            payloads = (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", b"*1\r\n$4\r\nPING\r\n",
                        b"get key\r\n", b"")
            for i, p in enumerate(("f1", "f2", "f3")):
                for j, src in enumerate(("127.0.0.1", "127.0.0.7", "::1")):
                    fam = socket.AF_INET6 if ":" in src else socket.AF_INET
                    dst = "::1" if fam == socket.AF_INET6 else "127.0.0.1"
                    if p == "f3" and fam == socket.AF_INET6:
                        continue
                    try:
                        s = socket.socket(fam)
                        s.bind((src, 0))
                        s.settimeout(2)
                        s.connect((dst, ports[p]))
                        s.sendall(payloads[(i + j) % len(payloads)])
                        time.sleep(0.2)
                        s.close()
                    except OSError as e:
                        print("capture: proxy %s from %s: %s" % (p, src, e),
                              file=sys.stderr)
            time.sleep(1)
    finally:
        stop.set()
        t.join(timeout=5)
        stub.close()
        shutil.rmtree(tmp, ignore_errors=True)
    for i, d in enumerate(got):
        c.add("v%d_conn%d" % (2 if d.startswith(b"\r\n\r\n") else 1, i), d)
    c.write()


# ---- admin and state: `chash ctl` and curl against chashd ------------------

def chashd_config(tmp, aport, ports, backends, extra_global="", web_opts=""):
    return ("global:\n  admin: 127.0.0.1:%d\n  workers: 1\n"
            "  state_file: %s/state.json\n%s"
            "web:\n  listen: 127.0.0.1:%d\n  mode: tcp\n%s"
            "  servers: [%s]\n"
            "kv:\n  listen: 127.0.0.1:%d\n  mode: redis\n  migration: off\n"
            "  servers: [127.0.0.1:%d:1 r1]\n"
            % (aport, tmp, extra_global, ports[0], web_opts,
               ", ".join("127.0.0.1:%d:%d web-%d" % (b, i + 1, i + 1)
                         for i, b in enumerate(backends)),
               ports[1], backends[0]))


def start_chashd(ps, tmp, text, aport):
    conf = os.path.join(tmp, "chashd.yml")
    with open(conf, "w") as f:
        f.write(text)
    ps.start([os.path.join(BUILD, "chashd"), "-c", conf])
    wait_port(aport)


def start_backends(ps, n):
    ports = [free_port() for _ in range(n)]
    for i, p in enumerate(ports):
        ps.start([os.path.join(BUILD, "chash"), "serve", "--listen",
                  "127.0.0.1:%d" % p, "--name", "web-%d" % (i + 1)])
    for p in ports:
        wait_port(p)
    return ports


def group_admin():
    for prog in ("chashd", "chash"):
        if not os.path.exists(os.path.join(BUILD, prog)):
            sys.exit("capture: %s/%s is missing: run make first"
                     % (BUILD, prog))
    adm, st = Corpus("admin"), Corpus("state")
    tmp = tempfile.mkdtemp(prefix="chash-capture-")
    state = os.path.join(tmp, "state.json")

    def keep_state(what):
        if os.path.exists(state):
            with open(state, "rb") as f:
                st.add(what, f.read())

    try:
        with Procs() as ps:
            backends = start_backends(ps, 4)
            aport = free_port()
            start_chashd(ps, tmp, chashd_config(tmp, aport, (free_port(),
                                                             free_port()),
                                                backends[:3]), aport)
            relay = Relay(aport)
            ctl = [os.path.join(BUILD, "chash"), "ctl", "--admin",
                   "127.0.0.1:%d" % relay.port]
            new = "127.0.0.1:%d" % backends[3]
            batch = os.path.join(tmp, "batch.json")
            with open(batch, "w") as f:
                json.dump({"changes": [
                    {"op": "add", "name": "web-9", "address": new,
                     "weight": 2},
                    {"op": "update", "name": "web-2", "state": "drain"},
                    {"op": "remove", "name": "web-1"}]}, f)
            steps = (
                ["pools"], ["show", "web"], ["--json", "show", "kv"],
                ["add", "web", "web-4", new, "--weight", "2", "--dry-run"],
                ["add", "web", "web-4", new, "--weight", "2"], "state",
                ["weight", "web", "web-4", "5"], ["drain", "web", "web-2"],
                "state", ["maint", "web", "web-3"], ["up", "web", "web-2"],
                ["reweight", "web", "web-1", "3", "--dry-run"],
                ["lookup", "web", "user:42"],
                ["lookup", "web", "user:42", "--replicas", "2"],
                ["migration", "web"], ["replication", "web"], ["hot", "kv"],
                ["rebalance", "kv", "--target", "1.5", "--dry-run"],
                ["cluster"], ["state"], ["batch", "web", batch, "--dry-run"],
                ["state", "--reset", "web", "web-1", "--dry-run"],
                ["remove", "web", "web-4", "--dry-run"],
                ["remove", "web", "web-4"], "state",
                ["state", "--reset", "web"], "state",
                ["add", "web", "bad name", new], ["weight", "web", "nope", "1"],
                ["lookup", "nopool", "k"])
            for i, step in enumerate(steps):
                if step == "state":
                    time.sleep(0.3)  # written by the control thread
                    keep_state("after%d" % i)
                else:
                    run(ctl + step)
            base = "http://127.0.0.1:%d" % relay.port
            curl = ["curl", "-s", "-o", "/dev/null", "--max-time", "10"]
            js = ["-H", "Content-Type: application/json"]
            for args in (
                    [base + "/"], [base + "/metrics"], [base + "/api/pools"],
                    [base + "/api/pools/web/ring?segments=16"],
                    [base + "/api/pools/web/lookup?key=a%20b&replicas=3"],
                    [base + "/api/pools/web/members/web-1"],
                    [base + "/api/pools/web/members/%2Frun%2Fapp.sock"],
                    [base + "/api/pools/web/members//run/app.sock"],
                    [base + "/api/pools/web/lookup?key=%0a"],
                    [base + "/api/pools/web/members/web%00x"],
                    [base + "/api/state"], [base + "/api/changes"],
                    ["-X", "POST", base + "/api/pools/web/members"],
                    js + ["-d", '{"address": "127.0.0.1:1", "colour": 1}',
                          base + "/api/pools/web/members?dry_run=1"],
                    js + ["-d", '{"address": ', base + "/api/pools/web/members"],
                    ["-H", "Content-Type: text/plain", "-d",
                     '{"address": "127.0.0.1:1"}',
                     base + "/api/pools/web/members"],
                    js + ["-X", "PATCH", "-d", '{"state": "draining"}',
                          base + "/api/pools/web/members/web-2?dry_run=true"],
                    js + ["-X", "PATCH", "-d", '{"weight": -1}',
                          base + "/api/pools/web/members/web-2"],
                    js + ["-d", '{"changes": [{"op": "add", "name": "x"}]}',
                          base + "/api/pools/web/changes?dry_run=on"],
                    js + ["-d", '{"changes": []}',
                          base + "/api/pools/web/changes"],
                    ["-X", "DELETE",
                     base + "/api/pools/web/members/web-3?now=maybe"],
                    ["-X", "DELETE", base + "/api/state/pools/web?dry_run=1"],
                    ["-X", "PUT", base + "/api/pools"],
                    ["-H", "Host: evil.example", base + "/api/pools"],
                    ["-H", "Origin: http://evil.example", base + "/api/pools"],
                    ["-H", "Authorization: Bearer nothing", base + "/api/state"],
                    [base + "/api/pools/kv/rebalance?target=0.5"],
                    [base + "/api/pools/web//members"],
                    [base + "/api/pools/nopool/ring"]):
                run(curl + args)
            relay.close()
            keep_state("end")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for i, s in enumerate(relay.streams("sent")):
        adm.add("req%d" % i, s)
    adm.write()
    st.write()


# ---- etcd: what chashd writes to etcd, read back from it -------------------

def group_etcd():
    if not (have("etcd") and have("etcdctl")):
        return
    c = Corpus("etcd")
    tmp = tempfile.mkdtemp(prefix="chash-capture-")
    cport, pport = free_port(), free_port()
    try:
        with Procs() as ps:
            ps.start(["etcd", "--data-dir", os.path.join(tmp, "etcd"),
                      "--listen-client-urls", "http://127.0.0.1:%d" % cport,
                      "--advertise-client-urls",
                      "http://127.0.0.1:%d" % cport,
                      "--listen-peer-urls", "http://127.0.0.1:%d" % pport,
                      "--initial-advertise-peer-urls",
                      "http://127.0.0.1:%d" % pport,
                      "--initial-cluster", "default=http://127.0.0.1:%d" % pport])
            wait_port(cport)
            relay = Relay(cport)
            backends = start_backends(ps, 4)
            aport = free_port()
            extra = ("  etcd:\n    endpoints: [http://127.0.0.1:%d]\n"
                     "    prefix: /chash\n    instance: lb-1\n" % relay.port)
            start_chashd(ps, tmp, chashd_config(
                tmp, aport, (free_port(), free_port()), backends[:3], extra,
                "  members_from: etcd\n"), aport)
            ctl = [os.path.join(BUILD, "chash"), "ctl", "--admin",
                   "127.0.0.1:%d" % aport]
            new = "127.0.0.1:%d" % backends[3]
            # the pool's seed members are in etcd once chashd is linked
            end = time.time() + 15
            while time.time() < end and b"members" not in run(
                    ["etcdctl", "--endpoints", "127.0.0.1:%d" % cport,
                     "get", "--prefix", "--keys-only", "/chash"]):
                time.sleep(0.2)
            for step in (["add", "web", "web-4", new, "--weight", "3"],
                         ["drain", "web", "web-2"], ["maint", "web", "web-3"],
                         ["weight", "web", "web-1", "7"]):
                run(ctl + step)
            time.sleep(1)
            out = run(["etcdctl", "--endpoints", "127.0.0.1:%d" % cport,
                       "-w", "json", "get", "--prefix", "/chash"])
            run(ctl + ["remove", "web", "web-4"])
            time.sleep(0.5)
            relay.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # the key-values etcd holds, and every base64 text its JSON gateway
    # sent chashd (keys, values, range ends)
    texts = set()
    try:
        kvs = json.loads(out or b"{}").get("kvs", [])
    except ValueError:
        kvs = []
    for kv in kvs:
        key = base64.b64decode(kv["key"])
        value = base64.b64decode(kv.get("value", ""))
        texts.add(kv["key"].encode())
        texts.add(kv.get("value", "").encode())
        rel = key[len(b"/chash/"):] if key.startswith(b"/chash/") else key
        c.add("key", rel)
        if b"/members/" in rel:
            c.add("record", rel.rsplit(b"/", 1)[-1] + b"\n" + value)
    for stream in relay.streams("received") + relay.streams("sent"):
        for m in re.finditer(rb'"(?:key|value|range_end|prev_kv)":"([A-Za-z0-9+/=]+)"',
                             stream):
            texts.add(m.group(1))
    for t in sorted(texts):
        c.add("b64", t)
    c.write()


# ---- ring: the pools of the shipped configs, as fuzz_ring reads them ------

def group_ring():
    """fuzz_ring's input: an algorithm, a hash, points per weight, then
    (weight, ramp, NUL-terminated name) per member. The members and
    weights of conf/*.yml's pools, under every algorithm."""
    c = Corpus("ring")
    for path in sorted(glob.glob(os.path.join(REPO, "conf", "*.yml"))):
        with open(path) as f:
            text = f.read()
        members = re.findall(r"^\s*-\s*\S+:(\d+)\s+(\S+)\s*$", text, re.M)
        if not members:
            continue
        for algo in range(8):
            data = bytes([algo, algo % 5, 40])
            for w, name in members[:16]:
                data += bytes([int(w) % 8, 250]) + name.encode()[:31] + b"\0"
            c.add("%s_%d" % (os.path.basename(path), algo), data)
    c.write()


GROUPS = {
    "admin": group_admin,
    "state": group_admin,
    "etcd": group_etcd,
    "ring": group_ring,
    "conf": group_conf,
    "redis": group_redis,
    "memcache": group_memcache,
    "http": group_http,
    "proxy": group_proxy,
}


def main(argv):
    names = argv or [n for n in GROUPS if n != "state"]
    for n in names:
        if n not in GROUPS:
            sys.exit("capture: no group %s (groups: %s)"
                     % (n, " ".join(GROUPS)))
    for n in names:
        GROUPS[n]()


if __name__ == "__main__":
    main(sys.argv[1:])
