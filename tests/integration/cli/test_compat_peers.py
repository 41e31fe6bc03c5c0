# test_compat_peers.py -- our ketama and nginx placements against the real
# programs: nutcracker (twemproxy) in front of redis-server instances, and
# nginx `hash $arg_k consistent` in front of stub upstreams. Every key must
# land where `chash lookup` says it does.
# SPDX-License-Identifier: BSD-2-Clause
import http.client
import os
import shutil
import socket
import subprocess

import pytest

from base_util import CHASH, can_connect, free_port, wait_for

NUTCRACKER = shutil.which("nutcracker") or "/usr/sbin/nutcracker"
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

NKEYS = 3000


def port_is_free(port):
    """Nobody listens on <port>. SO_REUSEADDR as servers bind: connections
    of an earlier run in TIME_WAIT do not make the port busy."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_port(port, proc, timeout=10.0):
    """Poll until something accepts on <port>; fail early if <proc> dies."""
    def up():
        if proc.poll() is not None:
            raise AssertionError("process exited with %d" % proc.returncode)
        return can_connect(port)
    wait_for(up, timeout=timeout, what="a listener on port %d" % port)


def chash_lookup(args, keys):
    """Run `chash lookup ARGS` with <keys> on stdin: {key: member}."""
    r = subprocess.run([CHASH, "lookup"] + args, input="\n".join(keys) + "\n",
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        k, m = line.split("\t")[:2]
        out[k] = m
    assert len(out) == len(keys)
    return out


# ---------------------------------------------------------------- redis --

def resp(*args):
    """One RESP command."""
    b = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        b += b"$%d\r\n%s\r\n" % (len(a), a)
    return b


class Resp:
    """A tiny blocking RESP client: enough for SET, PING and SCAN."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def close(self):
        self.s.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _bulk(self, n):
        while len(self.buf) < n + 2:
            chunk = self.s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t in (b"+", b":"):
            return rest
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._bulk(n)
        if t == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError("bad reply %r" % line)

    def pipeline(self, cmds):
        self.s.sendall(b"".join(cmds))
        return [self.reply() for _ in cmds]


def start_redis(procs, tmp, port):
    p = procs.start([REDIS, "--port", str(port), "--bind", "127.0.0.1",
                     "--save", "", "--appendonly", "no", "--dir", tmp,
                     "--daemonize", "no"],
                    "redis-%d.log" % port)
    wait_port(port, p)
    c = Resp(port)
    assert c.pipeline([resp("PING")]) == [b"PONG"]
    c.close()


def redis_keys(port):
    c = Resp(port)
    keys, cursor = set(), b"0"
    while True:
        cursor, batch = c.pipeline([resp("SCAN", cursor, "COUNT", "1000")])[0]
        keys.update(k.decode() for k in batch)
        if cursor == b"0":
            break
    c.close()
    return keys


def run_nutcracker(procs, tmp, hash_name, servers):
    """nutcracker with one ketama pool over <servers> [(port, weight)]."""
    listen, stats = free_port(), free_port()
    conf = os.path.join(tmp, "nutcracker-%s.yml" % hash_name)
    with open(conf, "w") as f:
        f.write("pool:\n  listen: 127.0.0.1:%d\n  hash: %s\n"
                "  distribution: ketama\n  redis: true\n"
                "  auto_eject_hosts: false\n  servers:\n" % (listen, hash_name))
        for port, weight in servers:
            f.write("   - 127.0.0.1:%d:%d\n" % (port, weight))
    p = procs.start([NUTCRACKER, "-c", conf, "-s", str(stats),
                     "-a", "127.0.0.1", "-p", os.path.join(tmp, "nc.pid"),
                     "-o", os.path.join(tmp, "nc-%s.log" % hash_name)],
                    "nc-%s.out" % hash_name)
    wait_port(listen, p)
    return listen


def tw_name(port):
    """twemproxy's ketama name: the host alone for port 11211."""
    return "127.0.0.1" if port == 11211 else "127.0.0.1:%d" % port


def check_nutcracker(procs, tmp, hash_name, servers, chash_hash):
    for port, _ in servers:
        start_redis(procs, tmp, port)
    listen = run_nutcracker(procs, tmp, hash_name, servers)
    keys = ["user:%d:%x" % (i, (i * 2654435761) & 0xffffffff)
            for i in range(NKEYS)]
    keys += ["k%d" % i for i in range(200)] + ["x", "foo", "bar"]
    c = Resp(listen)
    for i in range(0, len(keys), 500):
        replies = c.pipeline([resp("SET", k, "v") for k in keys[i:i + 500]])
        assert all(r == b"OK" for r in replies)
    c.close()
    where = {}
    for port, _ in servers:
        for k in redis_keys(port):
            assert k not in where, "key %s on two servers" % k
            where[k] = tw_name(port)
    assert set(where) == set(keys)
    members = ",".join("%s=%d" % (tw_name(p), w) for p, w in servers)
    ours = chash_lookup(["--algo", "ketama", "--hash", chash_hash,
                         "--members", members], keys)
    wrong = [k for k in keys if ours[k] != where[k]]
    assert not wrong, "%d of %d keys differ, e.g. %s: nutcracker %s, chash %s" % (
        len(wrong), len(keys), wrong[0], where[wrong[0]], ours[wrong[0]])
    # every server got some keys: the comparison covered them all
    assert set(where.values()) == {tw_name(p) for p, _ in servers}


@pytest.mark.parametrize("hash_name", ["fnv1a_64", "md5", "murmur"])
def test_nutcracker_ketama(procs, tmp_path, hash_name):
    tmp = str(tmp_path)
    servers = [(free_port(), w) for w in (1, 2, 1, 3)]
    check_nutcracker(procs, tmp, hash_name, servers, hash_name)


def test_nutcracker_port_11211(procs, tmp_path):
    """A server on 11211 is named by its host alone (twemproxy keeps
    libmemcached's rule); 11211 is a fixed port, so run only when free."""
    if not port_is_free(11211):
        pytest.skip("127.0.0.1:11211 is in use: cannot start a server on it")
    servers = [(11211, 1), (free_port(), 2), (free_port(), 1)]
    check_nutcracker(procs, str(tmp_path), "md5", servers, "md5")


# ---------------------------------------------------------------- nginx --

def test_nginx_consistent(procs, tmp_path):
    tmp = str(tmp_path)
    weights = [1, 2, 1, 3, 1]
    ups = [free_port() for _ in weights]
    front = free_port()
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.mkdir(os.path.join(tmp, d))
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write("worker_processes 1;\nerror_log %s/error.log;\n"
                "events { worker_connections 256; }\nhttp {\n"
                "  access_log off;\n" % tmp)
        for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            name = "client_body" if d == "body" else d
            f.write("  %s_temp_path %s/%s;\n" % (name, tmp, d))
        f.write("  upstream up {\n    hash $arg_k consistent;\n")
        for port, w in zip(ups, weights):
            f.write("    server 127.0.0.1:%d weight=%d;\n" % (port, w))
        f.write("  }\n  server {\n    listen 127.0.0.1:%d;\n"
                "    location / { proxy_pass http://up; }\n  }\n" % front)
        for port in ups:
            f.write("  server {\n    listen 127.0.0.1:%d;\n"
                    "    return 200 \"$server_port\";\n  }\n" % port)
        f.write("}\n")
    p = procs.start([NGINX, "-p", tmp + "/", "-e", tmp + "/error.log",
                     "-c", conf, "-g",
                     "daemon off; master_process off; pid %s/nginx.pid;" % tmp],
                    "nginx.out")
    wait_port(front, p)
    for port in ups:
        wait_port(port, p)
    keys = ["key%d" % i for i in range(6)]
    keys += ["s%x" % ((i * 2654435761) & 0xffffffff) for i in range(NKEYS)]
    where = {}
    conn = http.client.HTTPConnection("127.0.0.1", front, timeout=10)
    try:
        for k in keys:
            conn.request("GET", "/?k=" + k)
            r = conn.getresponse()
            body = r.read().decode()
            assert r.status == 200, body
            where[k] = "127.0.0.1:" + body
    finally:
        conn.close()
    members = ",".join("127.0.0.1:%d=%d" % (p_, w) for p_, w in zip(ups, weights))
    ours = chash_lookup(["--algo", "nginx", "--members", members], keys)
    wrong = [k for k in keys if ours[k] != where[k]]
    assert not wrong, "%d of %d keys differ, e.g. %s: nginx %s, chash %s" % (
        len(wrong), len(keys), wrong[0], where[wrong[0]], ours[wrong[0]])
    assert set(where.values()) == {"127.0.0.1:%d" % p_ for p_ in ups}
