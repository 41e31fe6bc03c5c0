# test_ctl_requests.py -- `chash ctl show` on a redis pool as an operator
# reads it: real redis-servers behind chashd, a known set of requests sent
# with a real RESP client, and the table checked against what was sent and
# where `chash lookup --config` says each key lives: requests, error
# replies, failed and timed-out requests, in-flight requests, bytes each
# way, reply latency, the pool's line; a tcp pool's output unchanged.
# SPDX-License-Identifier: BSD-2-Clause
import json
import re
import signal
import subprocess
import time

import pytest

from admin_util import CHASH, Api, admin_global, parse_metrics
from base_util import can_connect, free_port, pool_yaml, wait_for
from redis_util import (ChashdRedis, Err, RedisServer, Simple, encode,
                        need_chashd_redis, redis_pool, spread_keys)

NAMES = ["cache-1", "cache-2", "cache-3"]
REQ_COLS = ["MEMBER", "REQUESTS", "INFLIGHT", "ERR_REPLIES", "TIMEOUTS",
            "FAILED", "P50", "P99", "MEAN", "BYTES_IN", "BYTES_OUT"]
DURATION = r"(\d+(?:\.\d+)?)(us|ms|s)"


class Env:
    """3 redis-servers in redis pool "cache" (cache-1..cache-3), 2 `chash
    serve` backends in tcp pool "web", one chashd with its admin API on.
    <owner>: the member of each of <keys>, from `chash lookup --config`
    on the same file (chashd's own ring, computed without the proxy)."""

    def __init__(self, procs, backends, timeout_ms=5000):
        need_chashd_redis()
        self.servers = [RedisServer(procs) for _ in NAMES]
        self.port, web_port, self.admin_port = (free_port(), free_port(),
                                                free_port())
        text = (admin_global(self.admin_port) +
                redis_pool("cache", self.port, self.servers, names=NAMES,
                           hash="murmur", distribution="ketama",
                           timeout=timeout_ms, auto_eject_hosts="false") +
                pool_yaml("web", web_port, backends(2)))
        self.d = ChashdRedis(procs, text)
        wait_for(lambda: can_connect(self.admin_port), what="admin API")
        self.api = Api(self.admin_port)
        self.keys = ["ctl:%d" % i for i in range(150)]
        self.owner = spread_keys(self.d.conf, "cache", self.keys, CHASH)
        assert set(self.owner.values()) == set(NAMES)

    def keys_of(self, member):
        return [k for k in self.keys if self.owner[k] == member]

    def server(self, member):
        return self.servers[NAMES.index(member)]

    def ctl(self, *args):
        p = subprocess.run([CHASH, "ctl", "--admin",
                            "127.0.0.1:%d" % self.admin_port] + list(args),
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
        assert p.stderr == "", p.stderr
        return p.stdout


def requests_table(out):
    """{member: {column: text}} of the requests table in `ctl show`."""
    lines = out.splitlines()
    heads = [i for i, l in enumerate(lines) if l.split()[:2] ==
             ["MEMBER", "REQUESTS"]]
    assert len(heads) == 1, out
    assert lines[heads[0]].split() == REQ_COLS, lines[heads[0]]
    rows = {}
    for line in lines[heads[0] + 1:]:
        if not line.strip() or line.startswith("P50, P99:"):
            break
        cells = line.split()
        assert len(cells) == len(REQ_COLS), line
        rows[cells[0]] = dict(zip(REQ_COLS, cells))
    return rows


def pool_line(out):
    m = re.search(r"^  requests (\d+) \(local (\d+), refused (\d+)\), "
                  r"fragments (\d+), errors (\d+), protocol errors (\d+)$",
                  out, re.M)
    assert m, out
    return dict(zip(["requests", "local", "refused", "fragments", "errors",
                     "protocol_errors"], map(int, m.groups())))


def seconds(cell):
    """A latency cell as seconds; (seconds, True) when it reads ">X"."""
    above = cell.startswith(">")
    m = re.fullmatch(DURATION, cell.lstrip(">"))
    assert m, cell
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1}[m.group(2)], \
        above


def column(rows, col):
    return {n: int(r[col]) for n, r in rows.items()}


def test_show_lists_each_members_requests_errors_bytes_and_the_pool(
        procs, backends):
    """SET and GET of 150 keys, an INCR the member answers with an error,
    a PING chashd answers itself, a KEYS it refuses, a protocol error, and
    a GET to a killed member: `ctl show` gives each member exactly the
    requests and bytes its keys account for, the error reply and the
    failed request where they happened, and the pool's counts; `ctl show`
    on the tcp pool prints what it always did."""
    env = Env(procs, backends)
    want = {n: dict(req=0, err=0, failed=0, out=0, inb=0) for n in NAMES}

    def sent(member, cmd, reply):
        want[member]["req"] += 1
        want[member]["out"] += len(encode(*cmd))
        want[member]["inb"] += len(reply)

    incr_key = env.keys_of("cache-2")[0]
    dead_key = env.keys_of("cache-1")[0]
    with env.d.client() as c:
        sets = [("SET", k, "val-" + k) for k in env.keys]
        assert c.pipeline(sets) == [Simple("OK")] * len(sets)
        for cmd in sets:
            sent(env.owner[cmd[1]], cmd, b"+OK\r\n")
        gets = [("GET", k) for k in env.keys]
        assert c.pipeline(gets) == [("val-" + k).encode() for k in env.keys]
        for k in env.keys:
            v = b"val-" + k.encode()
            sent(env.owner[k], ("GET", k), b"$%d\r\n%s\r\n" % (len(v), v))
        err = c.call("INCR", incr_key)
        assert err == Err("ERR value is not an integer or out of range")
        sent("cache-2", ("INCR", incr_key), b"-%s\r\n" % str(err).encode())
        want["cache-2"]["err"] += 1
        assert c.call("PING") == Simple("PONG")
        assert isinstance(c.call("KEYS", "*"), Err)
    with env.d.client() as bad:
        bad.send(b"*x\r\n")
        assert isinstance(bad.read_reply(), Err) and bad.peer_closed()
    env.server("cache-1").stop()
    with env.d.client() as c:
        assert c.call("GET", dead_key) == Err("ERR Connection refused")
    want["cache-1"]["req"] += 1
    want["cache-1"]["failed"] += 1
    to_members = 2 * len(env.keys) + 2

    out = env.ctl("show", "cache")
    assert out.startswith("pool cache: redis on 127.0.0.1:%d" % env.port)
    rows = requests_table(out)
    assert set(rows) == set(NAMES)
    assert column(rows, "REQUESTS") == {n: w["req"] for n, w in want.items()}
    assert sum(column(rows, "REQUESTS").values()) == to_members
    assert column(rows, "ERR_REPLIES") == {"cache-1": 0, "cache-2": 1,
                                           "cache-3": 0}
    assert column(rows, "FAILED") == {"cache-1": 1, "cache-2": 0,
                                      "cache-3": 0}
    assert column(rows, "TIMEOUTS") == {n: 0 for n in NAMES}
    assert column(rows, "INFLIGHT") == {n: 0 for n in NAMES}
    assert column(rows, "BYTES_OUT") == {n: w["out"] for n, w in want.items()}
    assert column(rows, "BYTES_IN") == {n: w["inb"] for n, w in want.items()}

    # latency: every member answered, so each has figures; the mean is
    # the histogram's sum / count from /metrics
    _, _, samples = parse_metrics(env.api.get("/metrics")[1])
    hist = {}
    for name, labels, value in samples:
        if labels.get("pool") == "cache" and name.startswith(
                "chashd_member_request_duration_seconds_"):
            hist.setdefault(labels["member"], {})[name.rsplit("_", 1)[1]] = \
                value
    for n, r in rows.items():
        p50, above50 = seconds(r["P50"])
        p99, above99 = seconds(r["P99"])
        mean, _ = seconds(r["MEAN"])
        assert not above50 and not above99, r
        assert 0 < p50 <= p99 <= 0.25, r
        want_mean = hist[n]["sum"] / hist[n]["count"]
        # the cell keeps 2-3 significant digits, whole microseconds
        assert mean == pytest.approx(want_mean, rel=0.01, abs=1e-6), \
            (r, hist[n])

    # the pool: every request, the unparsable one too (requests =
    # forwarded + local + refused); PING local, KEYS and the protocol
    # error refused; errors: the forwarded requests answered with an error
    # (the INCR's error reply, the GET on the dead member)
    assert pool_line(out) == {
        "requests": to_members + 3, "local": 1, "refused": 2,
        "fragments": to_members, "errors": 2, "protocol_errors": 1}
    served = {labels["served"]: value for name, labels, value in samples
              if name == "chashd_pool_requests_total" and
              labels.get("pool") == "cache"}
    assert served == {"forwarded": to_members, "local": 1, "refused": 2}

    # --json is still the API's answer, untouched
    j = json.loads(env.ctl("--json", "show", "cache"))
    assert [m["requests"]["total"] for m in j["members"]] == \
        [want[n]["req"] for n in NAMES]
    assert j["stats"]["requests"] == env.api.pool("cache")["stats"][
        "requests"]

    # a tcp pool: its three lines, the member table, nothing more
    web = env.ctl("show", "web").splitlines()
    assert web[0].startswith("pool web: tcp on ")
    assert web[1].startswith("  balance_factor ")
    assert web[2].startswith("  active ")
    assert web[3] == ""
    assert web[4].split()[:2] == ["MEMBER", "ADDRESS"]
    assert [l.split()[0] for l in web[5:]] == ["web-1", "web-2"]


def test_show_counts_in_flight_timeouts_and_a_slow_reply(procs, backends):
    """A stopped (SIGSTOP) member: a request to it shows as in flight
    until `timeout` fails it, then as a timeout. A member stopped for
    0.3 s under one request: that reply puts its P99 above the last
    finite bucket (>250ms) and its mean over 0.3 s / replies, while its
    P50 stays with the fast replies."""
    env = Env(procs, backends, timeout_ms=2000)
    stuck, slow = env.server("cache-2"), env.server("cache-3")
    fast_keys = env.keys_of("cache-3")[:40]
    with env.d.client() as c:
        assert c.pipeline([("SET", k, "v") for k in fast_keys]) == \
            [Simple("OK")] * len(fast_keys)

    def inflight():
        return column(requests_table(env.ctl("show", "cache")), "INFLIGHT")

    stuck.proc.send_signal(signal.SIGSTOP)
    try:
        with env.d.client() as c:
            c.send(encode("GET", env.keys_of("cache-2")[0]))
            wait_for(lambda: inflight() == {"cache-1": 0, "cache-2": 1,
                                            "cache-3": 0},
                     timeout=1.5, what="ctl show: 1 in flight on cache-2")
            assert c.read_reply() == Err("ERR Connection timed out")
    finally:
        stuck.proc.send_signal(signal.SIGCONT)
    rows = requests_table(env.ctl("show", "cache"))
    assert column(rows, "TIMEOUTS") == {"cache-1": 0, "cache-2": 1,
                                        "cache-3": 0}
    assert column(rows, "INFLIGHT") == {n: 0 for n in NAMES}

    slow.proc.send_signal(signal.SIGSTOP)
    try:
        with env.d.client() as c:
            t0 = time.monotonic()
            c.send(encode("GET", fast_keys[0]))
            wait_for(lambda: inflight()["cache-3"] == 1, timeout=1.5,
                     what="ctl show: 1 in flight on cache-3")
            # the member's delay is the thing measured, not a wait for it
            time.sleep(max(0.0, 0.3 - (time.monotonic() - t0)))
            slow.proc.send_signal(signal.SIGCONT)
            assert c.read_reply() == b"v"
    finally:
        slow.proc.send_signal(signal.SIGCONT)
    r = requests_table(env.ctl("show", "cache"))["cache-3"]
    assert int(r["REQUESTS"]) == len(fast_keys) + 1
    assert r["P99"] == ">250ms", r
    p50, above = seconds(r["P50"])
    assert not above and p50 < 0.25, r
    mean, _ = seconds(r["MEAN"])
    assert mean >= 0.3 / (len(fast_keys) + 1), r


HOSTILE_METRICS = "\n".join([
    "# HELP chashd_member_request_duration_seconds Time ...",
    "# TYPE chashd_member_request_duration_seconds histogram",
    # a name with a quote and a backslash, escaped as the format says
    'chashd_member_request_duration_seconds_bucket{pool="p",'
    'member="we\\"ird\\\\name",le="0.001"} 10',
    'chashd_member_request_duration_seconds_bucket{pool="p",'
    'member="we\\"ird\\\\name",le="+Inf"} 10',
    'chashd_member_request_duration_seconds_sum{pool="p",'
    'member="we\\"ird\\\\name"} 0.005',
    'chashd_member_request_duration_seconds_count{pool="p",'
    'member="we\\"ird\\\\name"} 10',
    # nothing of these may count for "plain"
    'chashd_member_request_duration_seconds_bucket{pool="p",'
    'member="plain",le="0.001"} 1e30',
    'chashd_member_request_duration_seconds_bucket{pool="p",'
    'member="plain",le="+Inf"} NaN',
    'chashd_member_request_duration_seconds_count{pool="p",'
    'member="plain"} -1',
    'chashd_member_request_duration_seconds_sum{pool="p",member="plain"} x',
    'chashd_member_request_duration_seconds_bucket{pool="p",member="plain',
    'chashd_member_request_duration_seconds_bucket{pool="p",'
    'member="pl\\qain",le="1"} 5',
    # another pool's member of the same name
    'chashd_member_request_duration_seconds_bucket{pool="q",'
    'member="plain",le="0.001"} 7',
    'chashd_member_request_duration_seconds_count{pool="q",'
    'member="plain"} 7',
] + [
    # more buckets than chashd has, all empty
    'chashd_member_request_duration_seconds_bucket{pool="p",'
    'member="many",le="%d"} 0' % i for i in range(40)
]) + "\nchashd_member_request_duration_seconds_bucket{pool="


def test_show_survives_a_hostile_metrics_page(tmp_path):
    """`ctl show` reads latency from /metrics, network bytes like any
    other: escaped label values are matched unescaped, and lines with
    huge, negative, NaN or missing values, cut labels, bad escapes,
    another pool's series, too many buckets or no end give "-", never a
    crash or a wrong figure. (A stand-in admin API: chashd itself never
    sends such a page.)"""
    import http.server
    import threading

    weird = 'we"ird\\name'
    members = [{"name": n, "address": "127.0.0.1:1", "state": "up",
                "weight": 1, "ramp": 1.0, "share": 1 / 3,
                "bytes_in": 1, "bytes_out": 2,
                "requests": {"total": 10, "error_replies": 0,
                             "timeouts": 0, "failed": 0, "inflight": 0}}
               for n in (weird, "plain", "many")]
    pool = {"name": "p", "mode": "redis", "listen": "127.0.0.1:1",
            "algorithm": "ketama", "hash": "murmur", "snapshot": 1,
            "checksum": "0", "active": 0,
            "settings": {"hash_key": "source_ip"},
            "stats": {"requests": {"total": 30, "fragments": 30, "local": 0,
                                   "refused": 0, "errors": 0,
                                   "protocol_errors": 0}},
            "members": members}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/api/pools/p":
                body, ctype = json.dumps(pool).encode(), "application/json"
            elif self.path == "/metrics":
                body, ctype = HOSTILE_METRICS.encode(), "text/plain"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        p = subprocess.run([CHASH, "ctl", "--admin",
                            "127.0.0.1:%d" % srv.server_address[1], "show",
                            "p"], capture_output=True, text=True, timeout=30)
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)
    assert p.returncode == 0 and p.stderr == "", (p.stdout, p.stderr)
    # the weird name has no space: the table splits on whitespace
    rows = requests_table(p.stdout)
    assert set(rows) == {weird, "plain", "many"}
    lat = {n: (r["P50"], r["P99"], r["MEAN"]) for n, r in rows.items()}
    assert lat == {weird: ("500us", "990us", "500us"),
                   "plain": ("-", "-", "-"), "many": ("-", "-", "-")}
