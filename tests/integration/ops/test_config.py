"""test_config.py -- the config loader as users meet it: `chashd -t -c FILE`
(one test per error class: exit status 2 and "file:line: message" on
stderr), nutcracker.yml files loading unchanged, and `chash lookup --config`
placing keys exactly where a running nutcracker puts them.
SPDX-License-Identifier: BSD-2-Clause
"""
import os
import pathlib
import re
import shutil
import socket
import subprocess

import pytest

from base_util import can_connect, free_port, wait_for

ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("CHASH_BUILD", ROOT / "build"))
CHASHD = BUILD / "chashd"
CHASH = BUILD / "chash"

needs_chashd = pytest.mark.skipif(not CHASHD.exists(),
                                  reason=f"{CHASHD} is not built")


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True,
                          text=True, timeout=60, **kw)


def write(tmp_path, text, name="chashd.yml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------- chashd -t

POOL = "p:\n  listen: 127.0.0.1:7001\n  mode: tcp\n"

# (id, yaml, line of the offending node, key phrase of the message)
ERRORS = [
    ("unknown-key", POOL + "  balance: 2\n  servers: [127.0.0.1:9001]\n",
     4, "unknown key 'balance' in pool 'p' (valid keys: listen,"),
    ("unknown-global-key", "global:\n  admin_port: 1\n" + POOL,
     2, "unknown key 'admin_port' in global (valid keys: admin,"),
    ("wrong-type", "p:\n  listen:\n    - 127.0.0.1:7001\n",
     3, "'listen' takes a single value, not a list"),
    ("bad-address", POOL + "  servers:\n    - 127.0.0.1:9001:1\n"
     "    - 127.0.0.1:99999:1\n",
     6, "bad server '127.0.0.1:99999:1'"),
    ("bad-listen", "p:\n  listen: 127.0.0.1\n",
     2, "bad 'listen': bad address '127.0.0.1'"),
    ("bad-number", POOL + "  retries: many\n",
     4, "'retries' must be a whole number, not 'many'"),
    ("bad-duration", POOL + "  slow_start: 10 seconds\n",
     4, "'slow_start' must be a duration"),
    ("out-of-range", POOL + "  balance_factor: 0.5\n",
     4, "'balance_factor' is out of range"),
    ("unknown-name", POOL + "  distribution: consistent\n",
     4, "unknown distribution 'consistent' (valid: ring, maglev,"),
    ("unknown-hash", POOL + "  hash: sha256\n",
     4, "unknown hash 'sha256' (valid: xxh3,"),
    ("duplicate-name", POOL + "  servers:\n    - 127.0.0.1:9001:1 a\n"
     "    - 127.0.0.1:9002:1 a\n",
     6, "duplicate server name 'a' in pool 'p' (first at line 5)"),
    ("duplicate-address", POOL + "  servers:\n    - 127.0.0.1:9001:1 a\n"
     "    - 127.0.0.1:9001:1 b\n",
     6, "duplicate server address '127.0.0.1:9001'"),
    ("listen-twice", POOL + "  servers: [127.0.0.1:9001]\n"
     "q:\n  listen: 0.0.0.0:7001\n  servers: [127.0.0.1:9001]\n",
     6, "pool 'q' listens on '0.0.0.0:7001', which pool 'p' already uses "
     "(line 2)"),
    ("listen-is-admin", "global:\n  admin: 127.0.0.1:7001\n" + POOL +
     "  servers: [127.0.0.1:9001]\n",
     4, "which is the admin address '127.0.0.1:7001'"),
    ("no-servers", "global:\n  workers: 1\n" + POOL,
     3, "pool 'p' has no servers"),
    ("no-listen", "p:\n  mode: tcp\n  servers: [127.0.0.1:9001]\n",
     1, "pool 'p' has no 'listen' address"),
    ("yaml-syntax", POOL + "  servers:\n    - 127.0.0.1:9001\n"
     "   - 127.0.0.1:9002\n",
     6, "YAML syntax error"),
    ("admin-without-token", "global:\n  admin: 0.0.0.0:8404\n" + POOL +
     "  servers: [127.0.0.1:9001]\n",
     2, "admin address '0.0.0.0:8404' is not loopback: set 'admin_token'"),
    ("duplicate-key", POOL + "  servers: [127.0.0.1:9001]\n  mode: http\n",
     5, "duplicate key 'mode' in pool 'p' (first given at line 3)"),
    ("no-pools", "global:\n  workers: 2\n", 1, "no pools"),
    ("mode-and-redis-disagree", POOL + "  redis: true\n"
     "  servers: [127.0.0.1:9001]\n",
     4, "'redis: true' disagrees with 'mode: tcp' (line 3) in pool 'p'"),
    ("server-is-own-listen", POOL + "  servers:\n    - 127.0.0.1:9001:1 a\n"
     "    - 127.0.0.1:7001:1 me\n",
     6, "server 'me' (127.0.0.1:7001) is chashd's own address, the listen "
     "address of pool 'p' (127.0.0.1:7001): chashd would connect to itself"),
    ("server-reaches-wildcard", "p:\n  listen: 0.0.0.0:7001\n  mode: tcp\n"
     "  servers:\n    - 127.0.0.5:7001:1 a\n",
     5, "server 'a' (127.0.0.5:7001) is chashd's own address, the listen "
     "address of pool 'p' (0.0.0.0:7001)"),
    ("server-is-admin", POOL + "  servers:\n    - localhost:8404:1 a\n",
     5, "server 'a' (localhost:8404) is chashd's own address, the admin "
     "address (127.0.0.1:8404)"),
    ("over-max-points", POOL + "  servers:\n"
     "    - 127.0.0.1:9001:6000 a\n    - 127.0.0.1:9002:6000 b\n"
     "    - 127.0.0.1:9003:6000 c\n",
     4, "pool 'p': its servers need 2880000 ring points, over max_points "
     "2000000 (lower the weights or points_per_weight, or raise "
     "max_points)"),
    ("copy-in-a-memcache-pool", "p:\n  listen: 127.0.0.1:7001\n"
     "  mode: memcache\n  migration: copy\n  servers: [127.0.0.1:9001]\n",
     4, "'migration: copy' is for redis pools; pool 'p' is memcache"),
    ("warmup-in-a-redis-pool", "p:\n  listen: 127.0.0.1:7001\n"
     "  mode: redis\n  migration: warmup\n  servers: [127.0.0.1:9001]\n",
     4, "'migration: warmup' is for memcache pools; pool 'p' is redis"),
    ("copy-to-a-unix-socket", "p:\n  listen: 127.0.0.1:7001\n"
     "  mode: redis\n  servers:\n    - /tmp/r.sock:1 a\n",
     5, "server 'a' of pool 'p' is a unix socket: 'migration: copy' moves "
     "keys with MIGRATE, which needs host:port"),
    ("unknown-migration", "p:\n  listen: 127.0.0.1:7001\n"
     "  mode: redis\n  migration: move\n  servers: [127.0.0.1:9001]\n",
     4, "migration"),
]


@needs_chashd
@pytest.mark.parametrize("yaml,line,phrase",
                         [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_check_refuses_with_file_and_line(tmp_path, yaml, line, phrase):
    path = write(tmp_path, yaml)
    r = run([CHASHD, "-t", "-c", path])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"{path}:{line}: " in r.stderr, r.stderr
    assert phrase in r.stderr, r.stderr


@needs_chashd
def test_check_refuses_a_huge_ring_before_building_it(tmp_path):
    """Weights typed with extra zeros: 128 servers x 6000 x 160 points is
    a ring of 122880000 points, seconds and about 2 GB to build. The size
    is refused from arithmetic, so `chashd -t` answers at once (the wait
    is bounded by run()'s timeout, not measured)."""
    servers = "".join(f"    - 127.0.0.1:{10000 + i}:6000 m-{i}\n"
                      for i in range(128))
    path = write(tmp_path, POOL + "  servers:\n" + servers)
    r = run([CHASHD, "-t", "-c", path])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert (f"{path}:4: pool 'p': its servers need 122880000 ring points, "
            "over max_points 2000000") in r.stderr, r.stderr
    # and max_points lets an operator who means it go further
    path = write(tmp_path, POOL + "  max_points: 3000000\n  servers:\n"
                 "    - 127.0.0.1:9001:6000 a\n    - 127.0.0.1:9002:6000 b\n"
                 "    - 127.0.0.1:9003:6000 c\n", "raised.yml")
    r = run([CHASHD, "-t", "-c", path])
    assert r.returncode == 0, r.stderr


@needs_chashd
def test_check_refuses_endless_and_deep_files(tmp_path):
    """A file that never ends (/dev/zero) is refused at 16 MB, not read
    until memory runs out; 60,000 levels of nesting (120 KB, which took
    libyaml 10 s to compose) are refused at level 65, with the line. The
    bounds are run()'s timeout, not measured."""
    r = run([CHASHD, "-t", "-c", "/dev/zero"])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "/dev/zero: larger than 16 MB: not a config" in r.stderr
    for n, body in (("flow", "  servers: " + "[" * 60000 + "]" * 60000),
                    ("map", "  servers: " + "{a: " * 60000 + "1" +
                     "}" * 60000),
                    ("block", "  servers:\n    " + "- " * 60000 + "x")):
        path = write(tmp_path, POOL + body + "\n", n + ".yml")
        r = run([CHASHD, "-t", "-c", path])
        assert r.returncode == 2, (n, r.stdout, r.stderr)
        assert re.match(re.escape(str(path)) + r":[45]: nested deeper than "
                        r"64 levels", r.stderr), (n, r.stderr)
    # 64 levels are not refused for their depth (the value is still no
    # list of servers)
    path = write(tmp_path, POOL + "  servers: " + "[" * 62 + "]" * 62 +
                 "\n", "ok.yml")
    r = run([CHASHD, "-t", "-c", path])
    assert r.returncode == 2 and "nested deeper" not in r.stderr, r.stderr


@needs_chashd
def test_check_missing_file(tmp_path):
    path = tmp_path / "nope.yml"
    r = run([CHASHD, "-t", "-c", path])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"{path}: cannot open" in r.stderr


@needs_chashd
def test_check_accepts_the_annotated_example():
    """conf/chashd.yml starts as shipped: `chashd -t` accepts it whole."""
    path = ROOT / "conf" / "chashd.yml"
    r = run([CHASHD, "-t", "-c", path])
    assert r.returncode == 0, r.stderr
    assert str(path) in r.stdout + r.stderr


@needs_chashd
def test_check_refuses_what_cannot_run_yet():
    """nutcracker.yml loads whole (the loader takes it), and `chashd -t`
    refuses, as a start does, what chashd cannot run (a pool with
    twemproxy's modula distribution, which is not consistent hashing),
    naming the first such pool with file:line."""
    path = ROOT / "conf" / "nutcracker.yml"
    r = run([CHASHD, "-t", "-c", path])
    assert r.returncode == 2, r.stdout
    assert re.fullmatch(re.escape(str(path)) + r":\d+: pool '\w+': "
                        r"distribution (modula|random) is not supported by "
                        r"chashd yet \(.*\)\n", r.stderr), r.stderr


@needs_chashd
def test_nutcracker_accepts_the_same_file():
    """The shipped nutcracker.yml is a real twemproxy file: nutcracker
    itself checks it too, so "loads unchanged" is not our word alone."""
    if shutil.which("nutcracker") is None:
        pytest.skip("nutcracker is not installed")
    r = run(["nutcracker", "-t", "-c", ROOT / "conf/nutcracker.yml"])
    assert r.returncode == 0, r.stderr + r.stdout


@needs_chashd
def test_bad_config_never_starts(tmp_path):
    """Without -t too: a bad file is refused before anything listens."""
    port = free_port()
    path = write(tmp_path, f"p:\n  listen: 127.0.0.1:{port}\n  mode: tcp\n"
                 "  servers: [127.0.0.1:9001:x]\n")
    r = run([CHASHD, "-c", path])
    assert r.returncode != 0
    assert f"{path}:4: bad server '127.0.0.1:9001:x'" in r.stderr


# ------------------------------------------------------- chash lookup --config

def lookup(*args, keys):
    r = run([CHASH, "lookup", *args, *keys])
    assert r.returncode == 0, r.stderr
    return dict(line.split("\t", 1) for line in r.stdout.splitlines())


KEYS = [f"key:{i}" for i in range(300)] + ["foo", "bar", "", "\u00e9t\u00e9"]


@pytest.mark.parametrize("pool,hash_,members", [
    # twemproxy names: host alone on port 11211, else host:port
    ("gamma", "fnv1a_64", "127.0.0.1,127.0.0.1:11212,127.0.0.1:11213"),
    # explicit names win
    ("beta", "fnv1a_64", "server1,server2,server3,server4"),
    # weights and md5
    ("delta", "md5", "127.0.0.1:11214,127.0.0.1:11215,127.0.0.1:11216=2,"
     "127.0.0.1:11217,127.0.0.1:11218"),
])
def test_lookup_config_matches_members(pool, hash_, members):
    conf = ROOT / "conf/nutcracker.yml"
    keys = [k for k in KEYS if k]  # an empty argument is not a key
    got = lookup("--config", conf, "--pool", pool, keys=keys)
    want = lookup("--algo", "ketama", "--hash", hash_, "--members", members,
                  keys=keys)
    assert got == want
    assert len(set(got.values())) == len(members.split(","))


def test_lookup_config_bad_file_exits_2(tmp_path):
    path = write(tmp_path, "p:\n  listen: 127.0.0.1:7001\n  bogus: 1\n")
    r = run([CHASH, "lookup", "--config", path, "--pool", "p", "k"])
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"{path}:3: unknown key 'bogus'" in r.stderr


# -------------------------------------------- against a running nutcracker

def resp(sock, *args):
    """Send one RESP command, return the first reply line."""
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    sock.sendall(out)
    buf = b""
    while not buf.endswith(b"\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def read_reply(sock, buf=b""):
    """Read one full RESP reply (enough for KEYS: an array of bulk strings).
    Returns (value, rest)."""
    def need(n):
        nonlocal buf
        while len(buf) < n:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk

    def line():
        nonlocal buf
        while b"\r\n" not in buf:
            need(len(buf) + 1)
        head, _, buf = buf.partition(b"\r\n")
        return head

    head = line()
    if head[:1] == b"*":
        items = []
        for _ in range(int(head[1:])):
            h = line()
            n = int(h[1:])
            need(n + 2)
            items.append(buf[:n].decode())
            buf = buf[n + 2:]
        return items, buf
    return head, buf


def wait_listening(port, proc, what):
    """Wait until <port> accepts, failing early if <proc> has exited."""
    wait_for(lambda: proc.poll() is not None or can_connect(port),
             timeout=10, what=what)
    assert proc.poll() is None, f"{what}: exited with {proc.returncode}"


def test_lookup_config_agrees_with_nutcracker(tmp_path, procs):
    """Write keys through a real nutcracker, read back from each redis which
    keys it holds, and compare with `chash lookup --config` on the very same
    file: defaults (ketama, fnv1a_64), explicit names, weights, hash_tag and
    a non-default hash."""
    for tool in ("nutcracker", "redis-server"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    ports = [free_port() for _ in range(3)]
    redis = [procs.start(["redis-server", "--port", str(port), "--bind",
                          "127.0.0.1", "--save", "", "--appendonly", "no"],
                         f"redis-{port}.log") for port in ports]
    alpha, beta, stats = free_port(), free_port(), free_port()
    a, b, c = ports
    conf = write(tmp_path, f"""\
alpha:
  listen: 127.0.0.1:{alpha}
  redis: true
  servers:
   - 127.0.0.1:{a}:1
   - 127.0.0.1:{b}:2 second
   - 127.0.0.1:{c}:1

beta:
  listen: 127.0.0.1:{beta}
  hash: murmur
  hash_tag: "{{}}"
  distribution: ketama
  redis: true
  timeout: 2000
  servers:
   - 127.0.0.1:{a}:1 one
   - 127.0.0.1:{b}:1 two
   - 127.0.0.1:{c}:1 three
""", "nutcracker.yml")
    nc = procs.start(["nutcracker", "-c", str(conf), "-s", str(stats),
                      "-a", "127.0.0.1", "-o",
                      str(tmp_path / "nutcracker.log")], "nutcracker.out")
    for port, proc in zip(ports, redis):
        wait_listening(port, proc, f"redis-server on {port}")
    wait_listening(alpha, nc, "nutcracker pool alpha")
    wait_listening(beta, nc, "nutcracker pool beta")

    keys = {"alpha": [f"a:{i}" for i in range(200)],
            "beta": [f"b:{{user{i % 40}}}:{i}" for i in range(200)]}
    for pool, port in (("alpha", alpha), ("beta", beta)):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            for k in keys[pool]:
                assert resp(s, "SET", k, "v") == b"+OK\r\n"

    holder = {}
    for port in ports:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n")
            found, _ = read_reply(s)
        for k in found:
            holder[k] = port

    names = {"alpha": {f"127.0.0.1:{a}": a, "second": b,
                       f"127.0.0.1:{c}": c},
             "beta": {"one": a, "two": b, "three": c}}
    for pool in ("alpha", "beta"):
        got = lookup("--config", conf, "--pool", pool, keys=keys[pool])
        placed = {k: names[pool][m] for k, m in got.items()}
        actual = {k: holder[k] for k in keys[pool]}
        assert placed == actual, pool
        # not trivial: the keys spread (twemproxy's 32-bit fnv1a_64 is
        # lumpy on keys this alike, so not necessarily over all three).
        # Only for beta: alpha's members are named by their free ports, so
        # its placement changes from run to run and may put every key on
        # one server (seen: 200 keys on one redis), which is not a bug.
        if pool == "beta":
            assert len(set(actual.values())) >= 2, pool
    # beta's tag: every key of one user on one server
    for u in range(40):
        owners = {holder[k] for k in keys["beta"] if f"{{user{u}}}" in k}
        assert len(owners) == 1

    if CHASHD.exists():
        # chashd takes the very same file: its redis pools run as they are
        r = run([CHASHD, "-t", "-c", conf])
        assert r.returncode == 0, r.stderr
        assert "pool alpha: mode redis" in r.stdout


@needs_chashd
def test_check_names_each_pools_mode_and_where_it_came_from(tmp_path):
    """A pool written without `mode:` and without `redis:` is a memcache
    pool (twemproxy's rule): `chashd -t` says so for every pool, with the
    reason, before refusing what it cannot run yet."""
    conf = tmp_path / "m.yml"
    conf.write_text("web:\n  listen: 127.0.0.1:1\n  mode: tcp\n"
                    "  servers:\n    - 127.0.0.1:2:1 a\n")
    r = run([CHASHD, "-t", "-c", conf])
    assert r.returncode == 0, r.stderr
    assert "pool web: mode tcp (set by 'mode:')" in r.stdout
    conf.write_text("cache:\n  listen: 127.0.0.1:1\n"
                    "  servers:\n    - 127.0.0.1:2:1 a\n")
    r = run([CHASH, "lookup", "--config", conf, "--pool", "cache", "k"])
    assert r.returncode == 0, r.stderr
    r = run([CHASHD, "-t", "-c", conf])
    # served, and the mode's source is said
    assert r.returncode == 0, r.stderr
    assert "pool cache: mode memcache (the default" in r.stdout, r.stdout


@needs_chashd
def test_check_prints_warnings_with_their_lines(tmp_path):
    """A plain number for a key that is not twemproxy's is read as
    milliseconds, and a key that does nothing in a pool's mode is said so:
    `chashd -t` accepts the file and prints both, with their lines."""
    conf = tmp_path / "w.yml"
    conf.write_text("web:\n"                       # 1
                    "  listen: 127.0.0.1:1\n"       # 2
                    "  mode: tcp\n"                 # 3
                    "  slow_start: 30\n"            # 4
                    "  redis_auth: secret\n"        # 5
                    "  servers:\n"
                    "    - 127.0.0.1:2:1 a\n")
    r = run([CHASHD, "-t", "-c", conf])
    assert r.returncode == 0, r.stderr
    assert re.search(r"%s:4: warning: 'slow_start: 30' has no unit and is "
                     r"read as 30 milliseconds" % re.escape(str(conf)),
                     r.stderr), r.stderr
    assert re.search(r"%s:5: warning: 'redis_auth' has no effect in pool "
                     r"'web' \(mode tcp\)" % re.escape(str(conf)),
                     r.stderr), r.stderr


@needs_chashd
def test_check_says_where_migration_came_from_and_warns_slow_start(tmp_path):
    # mode: redis copies by default, a nutcracker-style pool does not, and
    # slow_start has no effect in a pool that copies
    path = write(tmp_path,
                 "a:\n  listen: 127.0.0.1:7001\n  mode: redis\n"
                 "  slow_start: 30s\n  servers: [127.0.0.1:9001]\n"
                 "b:\n  listen: 127.0.0.1:7002\n  redis: true\n"
                 "  servers: [127.0.0.1:9002]\n")
    r = run([CHASHD, "-t", "-c", path])
    assert r.returncode == 0, r.stderr
    assert "migration copy (the default of 'mode: redis')" in r.stdout
    assert "migration off (the default of twemproxy's 'redis: true')" in \
        r.stdout
    assert re.search(r"%s:4: warning: 'slow_start' has no effect in pool "
                     r"'a' \(migration: copy" % re.escape(str(path)),
                     r.stderr), r.stderr
