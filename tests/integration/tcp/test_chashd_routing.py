# test_chashd_routing.py -- chashd in tcp mode routes each client address
# to the member `chash lookup` names, always the same one, with the
# distribution the ring promises; the command line behaves.
# SPDX-License-Identifier: BSD-2-Clause
import os
import signal
import subprocess

import pytest

from base_util import (CHASHD, GLOBAL, client_ip, connect_from, fetch,
                       free_port, lookup_config, pool_yaml, recv_all, wait_for)

N_CLIENTS = 200


def test_sticky_and_agrees_with_chash_lookup(backends, chashd):
    bs = backends(3)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs), port)
    clients = [client_ip(i) for i in range(N_CLIENTS)]
    first = {c: fetch(port, c) for c in clients}
    again = {c: fetch(port, c) for c in clients}
    assert None not in first.values()
    assert first == again
    expected = lookup_config(d.conf, "web", clients)
    assert {c: expected[c][0] for c in clients} == first


def test_source_ip_port_key(backends, chashd):
    # With source_ip_port the key is "ip:port": connections from one
    # address spread over the members, each where chash lookup says.
    bs = backends(3)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs,
                                  hash_key="source_ip_port"), port)
    got = {}
    for _ in range(60):
        s = connect_from("127.0.0.9", port)
        key = "127.0.0.9:%d" % s.getsockname()[1]
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        got[key] = recv_all(s).split(b"\r\n\r\n", 1)[1].decode().strip()
        s.close()
    want = lookup_config(d.conf, "web", list(got))
    assert got == {k: want[k][0] for k in got}
    assert len(set(got.values())) >= 2


def test_check_embedded_config():
    # the embedded config runs only when asked (no -c reads
    # /etc/chashd/chashd.yml)
    p = subprocess.run([CHASHD, "-t", "--demo"], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0
    # one line per pool says what a start would run, and where its mode
    # came from; the last says the file is fine
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == "<embedded>: configuration OK"
    # a tcp pool says who moves its bytes: chashd (the default), or the
    # kernel (CHASHD_FAST_PATH=sockmap), or why the kernel cannot
    web, fast = lines[0].split(", fast_path ")
    if os.environ.get("CHASHD_FAST_PATH") != "sockmap":
        assert fast == "off"
    else:
        assert fast == "sockmap" or \
            fast.startswith("off (sockmap unavailable: "), fast
    assert [web] + lines[1:-1] == ["pool web: mode tcp (set by 'mode:'), listen "
                          "127.0.0.1:8080, 3 servers, ring/xxh3, hash_key "
                          "source_ip",
                          "pool api: mode http (set by 'mode:'), listen "
                          "127.0.0.1:8081, 3 servers, ring/xxh3, hash_key "
                          "[cookie:session, source_ip]",
                          "pool kv: mode redis (from twemproxy's 'redis:' "
                          "key), listen 127.0.0.1:6380, 3 servers, "
                          "ketama/murmur, migration off (the default of "
                          "twemproxy's 'redis: true')",
                          "pool mc: mode memcache (the default: neither "
                          "'mode:' nor 'redis:' is given (twemproxy's "
                          "rule)), listen 127.0.0.1:11311, 3 servers, "
                          "ketama/murmur, migration off (the default)"]


def test_pid_file_and_log_file(tmp_path, backends, chashd):
    bs = backends(1)
    port = free_port()
    pid, log = tmp_path / "chashd.pid", tmp_path / "own.log"
    d = chashd(GLOBAL + pool_yaml("web", port, bs), port,
               args=("--pid-file", str(pid), "--log", str(log)))
    assert int(pid.read_text()) == d.proc.pid
    assert fetch(port) == "web-1"
    assert "chashd 0.1.0 started" in log.read_text()
    # rotation: move the file away, SIGUSR1 reopens the path
    rotated = tmp_path / "own.log.1"
    log.rename(rotated)
    d.proc.send_signal(signal.SIGUSR1)
    wait_for(lambda: log.exists(), what="the log reopened")
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload: done" in log.read_text(),
             what="a line in the new log")
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=5) == 0
    assert not pid.exists()


def test_distribution_within_theory(backends, chashd):
    # Weights 1:1:2 -- the weight-2 member owns about half of the ring;
    # 400 clients land within a few binomial sigmas of the exact shares
    # chash lookup implies.
    bs = backends(3)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port,
                                  [bs[0], bs[1], (bs[2], 2)]), port)
    clients = [client_ip(i) for i in range(400)]
    got = {c: fetch(port, c) for c in clients}
    counts = {b.name: 0 for b in bs}
    for m in got.values():
        counts[m] += 1
    # exact ring shares from a big sample of the same ring
    sample = ["10.%d.%d.%d" % (i >> 16, (i >> 8) & 255, i & 255)
              for i in range(20000)]
    owners = lookup_config(d.conf, "web", sample)
    share = {b.name: sum(1 for o in owners.values() if o[0] == b.name)
             / len(sample) for b in bs}
    assert share["web-3"] > share["web-1"] and share["web-3"] > share["web-2"]
    for name, n in counts.items():
        p = share[name]
        sigma = (len(clients) * p * (1 - p)) ** 0.5
        assert abs(n - len(clients) * p) <= 4 * sigma, (name, n, p)


def test_check_config_ok_and_errors(tmp_path, backends):
    bs = backends(1)
    good = tmp_path / "good.yml"
    good.write_text(GLOBAL + pool_yaml("web", free_port(), bs))
    p = subprocess.run([CHASHD, "-t", "-c", str(good)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0
    assert p.stdout.strip().splitlines()[-1] == \
        "%s: configuration OK" % good
    bad = tmp_path / "bad.yml"
    bad.write_text(GLOBAL + "web:\n  listen: 127.0.0.1:1\n  mode: tcp\n"
                   "  balance_factor: lots\n  servers:\n"
                   "    - 127.0.0.1:2:1 a\n")
    p = subprocess.run([CHASHD, "-t", "-c", str(bad)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 2
    # file:line: message, the line of the bad value
    assert p.stderr.startswith("%s:7: " % bad), p.stderr
    assert "balance_factor" in p.stderr


def test_every_mode_is_served(tmp_path):
    """http was the last mode chashd refused at start: every mode a config
    can name is served now, and -t says what a start would run."""
    conf = tmp_path / "http.yml"
    conf.write_text(GLOBAL + "alpha:\n  listen: 127.0.0.1:%d\n"
                    "  mode: http\n"
                    "  servers:\n    - 127.0.0.1:11211:1 m1\n" % free_port())
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    assert "pool alpha: mode http (set by 'mode:')" in p.stdout
    assert p.stdout.rstrip().endswith("configuration OK")


def test_bad_arguments_print_usage():
    for args in (["--bogus"], ["-c"], ["--log-level", "loud"], ["extra"]):
        p = subprocess.run([CHASHD, *args], capture_output=True, text=True,
                           timeout=10)
        assert p.returncode == 2, args
        assert p.stderr.startswith("chashd: "), p.stderr
        assert "usage: chashd" in p.stderr
    p = subprocess.run([CHASHD, "--version"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 0 and p.stdout.startswith("chashd ")
    p = subprocess.run([CHASHD, "--help"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 0 and "usage: chashd" in p.stdout


@pytest.mark.parametrize("algo", ["maglev", "rendezvous", "jump", "ketama",
                                  "nginx"])
def test_every_distribution_agrees_with_chash_lookup(backends, chashd, algo):
    bs = backends(3)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs, distribution=algo), port)
    clients = [client_ip(i) for i in range(100)]
    got = {c: fetch(port, c) for c in clients}
    want = lookup_config(d.conf, "web", clients)
    assert got == {c: want[c][0] for c in clients}
    assert len(set(got.values())) == 3
