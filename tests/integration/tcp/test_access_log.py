# test_access_log.py -- a tcp pool's access log as an operator reads it:
# one line per connection naming the client, the member `chash lookup`
# says owns it (the next in its preference order when that one is down,
# with routing failed_over), the bytes each way; JSON lines any parser
# reads; syslog as a target; rotation (SIGHUP, SIGUSR1); a file that
# cannot be opened stops a start and refuses a reload.
# SPDX-License-Identifier: BSD-2-Clause
import calendar
import json
import os
import re
import signal
import subprocess
import time

from base_util import (CHASHD, GLOBAL, client_ip, connect_from, free_port,
                       log_lines, lookup_config, pool_yaml, recv_all, wait_for)

REQUEST = b"GET / HTTP/1.0\r\nHost: t\r\n\r\n"

# 2026-12-01T17:05:33.123Z web 127.0.10.2:41234 -> web-2 127.0.0.1:9002
#   first retries=0 3ms 27B/107B
LINE = re.compile(r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) "
                  r"(?P<pool>\S+) (?P<client>\S+) -> (?P<member>\S+) "
                  r"(?P<member_addr>\S+) (?P<routing>\S+) "
                  r"retries=(?P<retries>\d+) (?P<duration>\d+)ms "
                  r"(?P<bytes_in>\d+)B/(?P<bytes_out>\d+)B$")


def parse_text(path):
    """The text lines of <path> as dicts; a line that does not parse
    fails the test."""
    out = []
    for line in log_lines(path):
        m = LINE.match(line)
        assert m, "not an access log line: %r" % line
        out.append(m.groupdict())
    return out


def parse_json(path):
    return [json.loads(line) for line in log_lines(path)]


def request_from(src, port):
    """One request through chashd from <src>: (client "ip:port", bytes
    sent, the answer)."""
    s = connect_from(src, port)
    with s:
        client = "%s:%d" % s.getsockname()
        s.sendall(REQUEST)
        data = recv_all(s)
    return client, len(REQUEST), data


def answered_by(data):
    assert data.startswith(b"HTTP/1.1 200"), data[:80]
    return data.split(b"\r\n\r\n", 1)[1].decode().strip()


def lines_of(parse, path, clients):
    """Wait until <path> holds a line for each of <clients> ("ip:port")
    and return them by client (the readiness probe's line is not ours)."""
    def ready():
        got = {e["client"]: e for e in parse(path)}
        return got if all(c in got for c in clients) else None
    return wait_for(ready, what="a line per connection in %s" % path)


def epoch_ms(stamp):
    return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) \
        * 1000 + int(stamp[20:23])


def test_one_line_per_connection_names_the_owner(tmp_path, backends,
                                                 chashd):
    bs = backends(3)
    port = free_port()
    log = str(tmp_path / "access.log")
    d = chashd(GLOBAL + pool_yaml("web", port, bs, access_log=log), port)
    t0 = time.time()
    sent = {}
    for i in range(40):
        client, nbytes, data = request_from(client_ip(i), port)
        sent[client] = (nbytes, len(data), answered_by(data))
    lines = lines_of(parse_text, log, sent)
    t1 = time.time()
    # exactly one line per connection; the only other is the fixture's
    # readiness probe, from 127.0.0.1
    seen = [e["client"] for e in parse_text(log)]
    assert sorted(c for c in seen if c in sent) == sorted(sent)
    assert all(c.startswith("127.0.0.1:") for c in seen if c not in sent)
    ips = [c.split(":")[0] for c in sent]
    owner = lookup_config(d.conf, "web", ips)
    addr = {b.name: b.addr for b in bs}
    for client, (nin, nout, name) in sent.items():
        e = lines[client]
        ip = client.split(":")[0]
        assert e["pool"] == "web"
        assert e["member"] == owner[ip][0] == name
        assert e["member_addr"] == addr[name]
        assert (e["routing"], e["retries"]) == ("first", "0")
        assert int(e["bytes_in"]) == nin
        assert int(e["bytes_out"]) == nout
        # logged at the close, in UTC, within the test's own window
        assert t0 * 1000 - 1000 <= epoch_ms(e["time"]) <= t1 * 1000 + 1000
        assert int(e["duration"]) < 3000
    # the three members all served some of the 40 clients
    assert len({e["member"] for e in lines.values()}) == 3


def test_failed_over_to_the_next_in_preference_order(tmp_path, backends,
                                                     chashd):
    bs = backends(3)
    port = free_port()
    log = str(tmp_path / "access.log")
    d = chashd(GLOBAL + pool_yaml("web", port, bs, access_log=log,
                                  retries=2), port)
    down = bs[0]
    down.stop()
    ips = [client_ip(i) for i in range(60)]
    pref = lookup_config(d.conf, "web", ips, replicas=3)
    theirs = [ip for ip in ips if pref[ip][0] == down.name][:8]
    others = [ip for ip in ips if pref[ip][0] != down.name][:4]
    assert theirs and others
    sent = {}
    for ip in theirs + others:
        client, _, data = request_from(ip, port)
        sent[client] = answered_by(data)
    lines = lines_of(parse_text, log, sent)
    for client, name in sent.items():
        e = lines[client]
        ip = client.split(":")[0]
        assert e["member"] == name
        if ip in theirs:
            # the owner refused the connect: the next member of the
            # key's preference order took it, on the second attempt
            assert (e["routing"], e["retries"]) == ("failed_over", "1")
            assert name == pref[ip][1]
        else:
            assert (e["routing"], e["retries"]) == ("first", "0")
            assert name == pref[ip][0]


def test_refused_client_has_a_line_without_member(tmp_path, backends,
                                                  chashd):
    # both members refuse: two connects (retries: 1), then the refusal
    bs = backends(2)
    port = free_port()
    log = str(tmp_path / "access.log")
    chashd(GLOBAL + pool_yaml("web", port, bs, access_log=log, retries=1),
           port)
    for b in bs:
        b.stop()
    client, _, data = request_from(client_ip(0), port)
    assert data == b""
    e = lines_of(parse_text, log, [client])[client]
    assert (e["member"], e["member_addr"]) == ("-", "-")
    assert (e["routing"], e["retries"]) == ("no_member", "1")
    assert e["bytes_out"] == "0"


def test_json_lines_parse(tmp_path, backends, chashd):
    bs = backends(3)
    port = free_port()
    log = str(tmp_path / "access.json")
    d = chashd(GLOBAL + pool_yaml("web", port, bs, access_log=log,
                                  access_log_format="json"), port)
    sent = {}
    for i in range(20):
        client, nbytes, data = request_from(client_ip(i), port)
        sent[client] = (nbytes, len(data), answered_by(data))
    lines = lines_of(parse_json, log, sent)
    owner = lookup_config(d.conf, "web", [c.split(":")[0] for c in sent])
    for client, (nin, nout, name) in sent.items():
        e = lines[client]
        assert e["member"] == owner[client.split(":")[0]][0] == name
        assert e["pool"] == "web"
        assert e["routing"] == "first" and e["retries"] == 0
        assert (e["bytes_in"], e["bytes_out"]) == (nin, nout)
        assert isinstance(e["duration_ms"], int)
        assert "method" not in e  # a tcp line
    # every line in the file is one JSON object
    for e in parse_json(log):
        assert isinstance(e, dict) and e["pool"] == "web"


def test_syslog_target_loads_and_serves(backends, chashd):
    bs = backends(2)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs, access_log="syslog"),
               port)
    for i in range(10):
        _, _, data = request_from(client_ip(i), port)
        assert answered_by(data) in ("web-1", "web-2")
    assert d.proc.poll() is None


def test_rotation_by_reload_and_by_sigusr1(tmp_path, backends, chashd):
    bs = backends(2)
    port = free_port()
    log = str(tmp_path / "access.log")
    text = GLOBAL + pool_yaml("web", port, bs, access_log=log)
    d = chashd(text, port)
    a, _, _ = request_from(client_ip(0), port)
    lines_of(parse_text, log, [a])
    # logrotate's move, then a reload with the same config: new lines go
    # to a new file at the path, none to the moved one
    os.rename(log, log + ".1")
    d.reload(text)
    b, _, _ = request_from(client_ip(1), port)
    lines_of(parse_text, log, [b])
    # the same with SIGUSR1, which reopens without a reload
    os.rename(log, log + ".2")
    d.proc.send_signal(signal.SIGUSR1)
    wait_for(lambda: os.path.exists(log), what="the access log reopened")
    c, _, _ = request_from(client_ip(2), port)
    lines_of(parse_text, log, [c])
    first = [e["client"] for e in parse_text(log + ".1")]
    second = [e["client"] for e in parse_text(log + ".2")]
    third = [e["client"] for e in parse_text(log)]
    assert a in first and b not in first and c not in first
    assert b in second and c not in second
    assert third == [c]


def test_unopenable_file_stops_the_start(tmp_path, backends):
    bs = backends(1)
    port = free_port()
    bad = str(tmp_path / "no-such-dir" / "access.log")
    conf = tmp_path / "bad.yml"
    conf.write_text(GLOBAL + pool_yaml("web", port, bs, access_log=bad))
    p = subprocess.run([CHASHD, "-c", str(conf)], capture_output=True,
                       text=True, timeout=20)
    assert p.returncode != 0
    assert ("pool web: access_log: cannot open %s: No such file or "
            "directory" % bad) in p.stderr


def test_unopenable_file_refuses_the_reload(tmp_path, backends, chashd):
    bs = backends(2)
    port = free_port()
    log = str(tmp_path / "access.log")
    bad = str(tmp_path / "no-such-dir" / "access.log")
    d = chashd(GLOBAL + pool_yaml("web", port, bs, access_log=log), port)
    # the reload would also add a member: refused whole, it does not
    extra = bs + backends(1, prefix="new")
    d.reload(GLOBAL + pool_yaml("web", port, extra, access_log=bad))
    assert ("reload refused, the running config stays: pool web: "
            "access_log: cannot open %s: No such file or directory" % bad) \
        in d.log()
    assert "new-1" not in d.log()
    assert not os.path.exists(os.path.dirname(bad))
    # the old file keeps its lines
    a, _, data = request_from(client_ip(3), port)
    assert answered_by(data) in ("web-1", "web-2")
    lines_of(parse_text, log, [a])


def test_proxy_header_client_is_logged(tmp_path, backends, chashd):
    # accept_proxy: the line names the client the PROXY header names (the
    # ring's key too), not the proxy that connected
    bs = backends(3)
    port = free_port()
    log = str(tmp_path / "access.log")
    d = chashd(GLOBAL + pool_yaml("web", port, bs, access_log=log,
                                  accept_proxy="true"), port)
    clients = ["198.51.100.%d" % i for i in range(1, 9)]
    got = {}
    for i, ip in enumerate(clients):
        s = connect_from(client_ip(i), port)
        with s:
            s.sendall(b"PROXY TCP4 %s 127.0.0.1 %d 80\r\n"
                      % (ip.encode(), 40000 + i) + REQUEST)
            got["%s:%d" % (ip, 40000 + i)] = answered_by(recv_all(s))
    lines = lines_of(parse_text, log, got)
    owner = lookup_config(d.conf, "web", clients)
    for client, name in got.items():
        assert lines[client]["member"] == name == \
            owner[client.split(":")[0]][0]
