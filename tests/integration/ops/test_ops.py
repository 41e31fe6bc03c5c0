"""test_ops.py -- chashd as an operator meets it: the build keeps its own
flags whatever CFLAGS says, `make install` and `make uninstall` lay out
and remove the tree, the systemd unit verifies, readiness reaches a real
NOTIFY_SOCKET, the default config path and --demo, JSON and syslog
logging, the pid and state files, and `chashd -t` refusing exactly what a
start refuses.
SPDX-License-Identifier: BSD-2-Clause
"""
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import time
import types
import uuid

import pytest

from admin_util import Api
from redis_util import Resp, Simple
from base_util import (GLOBAL, KeepAlive, can_connect, client_ip, fetch,
                       free_port, lookup_config, pool_yaml, wait_for)

ROOT = pathlib.Path(__file__).resolve().parents[3]
B = pathlib.Path(os.environ.get("CHASH_BUILD", ROOT / "build"))
CHASHD = B / "chashd"
SAN = os.environ.get("CHASH_SANITIZE", "")
# The Makefile puts a sanitizer build in $(BUILD)/sanitize. Relative to
# the tree when inside it, as `make` names it: the dependency files name
# their objects that way.
BUILD_DIR = B.parent if SAN else B
if BUILD_DIR.resolve().is_relative_to(ROOT):
    BUILD_DIR = BUILD_DIR.resolve().relative_to(ROOT)
MAKE_B = BUILD_DIR / "sanitize" if SAN else BUILD_DIR   # make's $(B)
SANFLAGS = [f"-fsanitize={SAN}"] if SAN else []
DEFAULT_CONF = "/etc/chashd/chashd.yml"
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
                   r"\[(error|warn|info|debug)\] ")


def run(cmd, **kw):
    kw.setdefault("timeout", 120)
    return subprocess.run([str(c) for c in cmd], capture_output=True,
                          text=True, **kw)


def make(*args, build=None):
    """make in the tree, on the build the suite runs, or on a plain build
    in <build> (a dry run there builds nothing)."""
    san = SAN if build is None else ""
    return run(["make", "-C", ROOT, "--no-print-directory",
                f"BUILD={build or BUILD_DIR}", f"SANITIZE={san}", *args],
               timeout=300)


def start(procs, tmp, args, env=None, log_name="chashd.log"):
    """chashd with <args> and its own environment; killed at teardown."""
    log = open(os.path.join(tmp, log_name), "ab")
    p = subprocess.Popen([str(CHASHD), *map(str, args)], stdout=log,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env)
    log.close()
    procs.procs.append(p)
    return p


def read(path):
    """The text of <path>, "" while it does not exist."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_started(d, log):
    """Until chashd logs "started" (after its pid file and admin API) or
    exits."""
    wait_for(lambda: d.poll() is not None or " started: " in read(log),
             what="chashd to start")
    assert d.poll() is None, read(log)


# ---------------------------------------------------------------- Makefile

def test_user_cflags_keep_the_flags_the_build_needs(tmp_path):
    """`make CFLAGS=-O1` changes the optimisation, not the language, the
    warnings, the dependency files, the visibility or PIC."""
    r = make("-n", "-B", "CFLAGS=-O1", "CPPFLAGS=-DUSER_DEFINE",
             "LDFLAGS=-Wl,--as-needed", f"{tmp_path}/src/base/log.o",
             f"{tmp_path}/chashd", build=tmp_path)
    assert r.returncode == 0, r.stderr
    cc = [ln for ln in r.stdout.splitlines() if " -c -o " in ln
          and ln.endswith("src/base/log.c")]
    assert len(cc) == 1, r.stdout
    flags = cc[0].split()
    for need in ("-std=c11", "-MMD", "-MP", "-fvisibility=hidden", "-fPIC",
                 "-Wall", "-Wextra", "-Wshadow", "-Wvla", "-Iinclude",
                 "-D_GNU_SOURCE", "-O1", "-DUSER_DEFINE"):
        assert need in flags, (need, cc[0])
    assert "-O2" not in flags
    link = [ln for ln in r.stdout.splitlines()
            if f"-o {tmp_path}/chashd " in ln]
    assert link and "-Wl,--as-needed" in link[0], r.stdout


def test_a_header_change_rebuilds_the_unit_tests_that_include_it():
    test_conf = MAKE_B / "tests" / "test_conf"
    r = make(str(test_conf))
    assert r.returncode == 0, r.stderr
    # conf.h is included by test_conf.c: its object is rebuilt
    r = make("-n", "-W", "src/conf/conf.h", str(test_conf))
    assert r.returncode == 0, r.stderr
    assert re.search(r" -c -o \S*tests/unit/test_conf\.o tests/unit/"
                     r"test_conf\.c", r.stdout), r.stdout
    # pool.h is not: nothing of test_conf is rebuilt
    r = make("-n", "-W", "src/model/pool.h", str(test_conf))
    assert r.returncode == 0, r.stderr
    assert " -c " not in r.stdout and " -o " not in r.stdout, r.stdout


def test_unit_tests_link_only_the_modules_they_test(tmp_path):
    r = make("-n", "-B", f"{tmp_path}/tests/test_conf",
             f"{tmp_path}/tests/test_ring", build=tmp_path)
    assert r.returncode == 0, r.stderr
    links = {}
    for ln in r.stdout.replace("\\\n", " ").splitlines():
        m = re.search(r"-o \S*/tests/(test_\w+) ", ln)
        if m and " -c " not in ln:
            links[m.group(1)] = ln.split()
    objs = {t: sorted(os.path.relpath(a, tmp_path) for a in args
                      if a.endswith(".o"))
            for t, args in links.items()}
    # the config loader is one module in several files: src/conf/conf.c
    # and its parts src/conf/conf_*.c; test_conf links those and the etcd
    # name rules they use, nothing else of the daemon
    loader = [f"src/conf/{p.stem}.o"
              for p in (ROOT / "src" / "conf").glob("conf*.c")]
    assert "src/conf/conf.o" in loader
    assert objs == {
        "test_conf": sorted(loader + ["src/conf/etcd_codec.o",
                                      "tests/unit/test_conf.o"]),
        "test_ring": ["tests/unit/test_ring.o"],
    }, objs


def test_the_makefile_names_only_files_that_exist():
    # comments may name examples (src/loop/io.c)
    text = "\n".join(ln for ln in (ROOT / "Makefile").read_text()
                     .splitlines() if not ln.lstrip().startswith("#"))
    named = set(re.findall(r"\b((?:src|lib|cli|include|doc|conf|dist|"
                           r"scripts|tests)/[\w./-]+\.(?:c|h|o|yml|1|8|"
                           r"service))\b", text))
    assert named, "the pattern found nothing"
    missing = []
    for path in sorted(named):
        src = path[:-2] + ".c" if path.endswith(".o") else path
        if not (ROOT / src).exists():
            missing.append(path)
    assert missing == []


# ---------------------------------------------------------------- install

def installed(root, prefix):
    return pathlib.Path(str(root) + prefix)


def test_install_lays_out_the_tree_and_uninstall_removes_it(tmp_path):
    dest = tmp_path / "dest"
    r = make("install", f"DESTDIR={dest}", "PREFIX=/usr")
    assert r.returncode == 0, r.stderr
    usr = installed(dest, "/usr")
    ver = run([CHASHD, "--version"]).stdout.split()[1]
    files = {
        "usr/bin/chash": 0o755, "usr/sbin/chashd": 0o755,
        "usr/lib/libchash.a": 0o644, f"usr/lib/libchash.so.{ver}": 0o755,
        "usr/include/chash/chash.h": 0o644,
        "usr/share/man/man1/chash.1": 0o644,
        "usr/share/man/man8/chashd.8": 0o644,
        "usr/lib/systemd/system/chashd.service": 0o644,
        "etc/chashd/chashd.yml": 0o644,
    }
    for rel, mode in files.items():
        p = dest / rel
        assert p.is_file() and not p.is_symlink(), rel
        assert p.stat().st_mode & 0o777 == mode, (rel, oct(p.stat().st_mode))
    assert os.readlink(usr / "lib/libchash.so.0") == f"libchash.so.{ver}"
    assert os.readlink(usr / "lib/libchash.so") == "libchash.so.0"
    everything = sorted(str(p.relative_to(dest)) for p in dest.rglob("*")
                        if not p.is_dir())
    assert everything == sorted(list(files) + ["usr/lib/libchash.so",
                                               "usr/lib/libchash.so.0"])
    assert (dest / "etc/chashd/chashd.yml").read_bytes() == \
        (ROOT / "conf/chashd.yml").read_bytes()
    assert (usr / "include/chash/chash.h").read_bytes() == \
        (ROOT / "include/chash/chash.h").read_bytes()
    # the soname a program records is the one installed as a link
    r = run(["objdump", "-p", usr / f"lib/libchash.so.{ver}"])
    assert re.search(r"SONAME\s+libchash\.so\.0\b", r.stdout), r.stdout
    # the unit runs the installed daemon on the installed config
    unit = (usr / "lib/systemd/system/chashd.service").read_text()
    assert "\nExecStart=/usr/sbin/chashd -c /etc/chashd/chashd.yml\n" in unit
    # what was installed works: the daemon, and the library from a program
    # built against the installed header
    r = run([usr / "sbin/chashd", "--version"])
    assert r.returncode == 0 and r.stdout.startswith("chashd "), r.stderr
    exe = tmp_path / "shard"
    r = run(["cc", "-Wall", "-Werror", *SANFLAGS, f"-I{usr}/include",
             ROOT / "doc/examples/shard.c", f"-L{usr}/lib", "-lchash", "-o",
             exe])
    assert r.returncode == 0, r.stderr
    r = run([exe], env={**os.environ, "LD_LIBRARY_PATH": f"{usr}/lib"})
    assert r.returncode == 0 and "share of cache-3" in r.stdout, r.stderr

    # an operator's config survives a second install and the uninstall
    conf = dest / "etc/chashd/chashd.yml"
    conf.write_text("# mine\n")
    r = make("install", f"DESTDIR={dest}", "PREFIX=/usr")
    assert r.returncode == 0, r.stderr
    assert conf.read_text() == "# mine\n"
    r = make("uninstall", f"DESTDIR={dest}", "PREFIX=/usr")
    assert r.returncode == 0, r.stderr
    left = sorted(str(p.relative_to(dest)) for p in dest.rglob("*")
                  if not p.is_dir())
    assert left == ["etc/chashd/chashd.yml"]
    assert "keeping" in r.stdout and str(conf) in r.stdout
    assert not (usr / "include/chash").exists()
    # the shipped example, unchanged, goes with the rest
    shutil.copy(ROOT / "conf/chashd.yml", conf)
    r = make("uninstall", f"DESTDIR={dest}", "PREFIX=/usr")
    assert r.returncode == 0, r.stderr
    assert not (dest / "etc/chashd").exists()


def test_install_defaults_to_usr_local(tmp_path):
    dest = tmp_path / "dest"
    r = make("install", f"DESTDIR={dest}")
    assert r.returncode == 0, r.stderr
    local = installed(dest, "/usr/local")
    assert (local / "sbin/chashd").is_file()
    assert (local / "bin/chash").is_file()
    assert (local / "lib/libchash.a").is_file()
    assert (local / "share/man/man8/chashd.8").is_file()
    # the config is the system's, whatever the prefix
    assert (dest / "etc/chashd/chashd.yml").is_file()
    unit = (local / "lib/systemd/system/chashd.service").read_text()
    assert "\nExecStart=/usr/local/sbin/chashd -c /etc/chashd/chashd.yml\n" \
        in unit


# ---------------------------------------------------------------- systemd

def unit_keys(text):
    """{(section, key): [values]} of a unit file."""
    keys, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        k, v = line.split("=", 1)
        keys.setdefault((section, k), []).append(v)
    return keys


def test_unit_file_says_what_a_packager_needs():
    keys = unit_keys((ROOT / "dist/chashd.service").read_text())
    want = {
        "Type": "notify",
        "ExecStart": "/usr/local/sbin/chashd -c /etc/chashd/chashd.yml",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "Restart": "on-failure",
        "RuntimeDirectory": "chashd",
        "StateDirectory": "chashd",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "CapabilityBoundingSet": "CAP_NET_BIND_SERVICE",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    }
    for k, v in want.items():
        assert keys.get(("Service", k)) == [v], (k, keys.get(("Service", k)))
    assert int(keys[("Service", "LimitNOFILE")][0]) >= 65536
    # a bad config (exit 2) is not restarted in a loop
    assert keys[("Service", "RestartPreventExitStatus")] == ["2"]
    assert keys[("Install", "WantedBy")] == ["multi-user.target"]


def test_the_shipped_example_runs_under_the_unit():
    """`make install` puts conf/chashd.yml where the unit reads it: it
    must pass `chashd -t`, and keep its pid and state files in the
    directories systemd creates for the service (everything else is
    read-only under ProtectSystem=strict)."""
    conf = (ROOT / "conf/chashd.yml").read_text()
    for key, d in (("pid_file", "/run/chashd/"),
                   ("state_file", "/var/lib/chashd/")):
        m = re.search(r"^\s*%s:\s*(\S+)" % key, conf, re.M)
        assert m and m.group(1).startswith(d), (key, m and m.group(1))
    r = run([CHASHD, "-t", "-c", ROOT / "conf/chashd.yml"], timeout=10)
    assert r.returncode == 0, r.stderr


def test_unit_file_verifies(tmp_path):
    """systemd-analyze verify on the unit as installed: it needs
    ExecStart to exist, so install under a real prefix in tmp_path."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    prefix = tmp_path / "usr"
    r = make("install", f"PREFIX={prefix}", f"SYSCONFDIR={tmp_path}/etc")
    assert r.returncode == 0, r.stderr
    unit = prefix / "lib/systemd/system/chashd.service"
    assert f"ExecStart={prefix}/sbin/chashd -c {tmp_path}/etc/chashd/" \
        "chashd.yml" in unit.read_text()
    # --man=no: man(1) looks for chashd(8) in the system's paths only
    r = run(["systemd-analyze", "verify", "--man=no", unit])
    assert r.returncode == 0, r.stderr
    # verify exits 0 on unknown keys: they are only warnings
    assert r.stderr.strip() == "", r.stderr


# ---------------------------------------------------------------- sd_notify

class Notify:
    """A NOTIFY_SOCKET of our own: a unix datagram socket bound to a path
    or (abstract) to '@' + a name."""

    def __init__(self, tmp_path, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "chash-test-%s" % uuid.uuid4().hex
            self.sock.bind("\0" + name)
            self.env = "@" + name
        else:
            self.env = os.path.join(str(tmp_path), "notify.sock")
            self.sock.bind(self.env)

    def recv(self, timeout=10):
        """The next message as {key: value}."""
        self.sock.settimeout(timeout)
        data = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in data.splitlines())

    def nothing(self, timeout=0.3):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return True
        raise AssertionError("unexpected notification %r" % data)

    def close(self):
        self.sock.close()


def notify_conf(tmp_path, bs, port, aport):
    conf = tmp_path / "chashd.yml"
    text = ("global:\n  admin: 127.0.0.1:%d\n  workers: 2\n" % aport +
            pool_yaml("web", port, bs, shutdown_timeout="5s"))
    conf.write_text(text)
    return conf, text


def test_notify_ready_reload_and_stopping(tmp_path, procs, backends):
    bs = backends(2)
    port, aport = free_port(), free_port()
    conf, text = notify_conf(tmp_path, bs, port, aport)
    n = Notify(tmp_path)
    env = {**os.environ, "NOTIFY_SOCKET": n.env}
    d = start(procs, tmp_path, ["-c", conf], env=env)
    msg = n.recv()
    # READY=1 only once every listener and the admin API are up: they
    # answer right now, without a retry
    assert msg.get("READY") == "1", msg
    assert "serving 1 pools" in msg["STATUS"]
    assert fetch(port) in ("web-1", "web-2")
    st, _, _ = Api(aport).get("/api/pools")
    assert st == 200
    # SIGHUP: RELOADING=1 (with the time Type=notify-reload wants), then
    # READY=1 once the new config runs
    d.send_signal(signal.SIGHUP)
    msg = n.recv()
    assert msg.get("RELOADING") == "1", msg
    assert int(msg["MONOTONIC_USEC"]) > 0
    assert time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6 >= \
        int(msg["MONOTONIC_USEC"])
    msg = n.recv()
    assert msg.get("READY") == "1" and "reloaded" in msg["STATUS"], msg
    # a refused reload is still READY (the old config serves), and says so
    conf.write_text(text + "  retries: many\n")
    d.send_signal(signal.SIGHUP)
    assert n.recv().get("RELOADING") == "1"
    msg = n.recv()
    assert msg.get("READY") == "1" and "refused" in msg["STATUS"], msg
    assert fetch(port) in ("web-1", "web-2")
    # SIGTERM: STOPPING=1 as draining starts, while a client still holds
    # a connection and the process still runs
    ka = KeepAlive(port)
    assert ka.ask() in ("web-1", "web-2")
    d.send_signal(signal.SIGTERM)
    msg = n.recv()
    assert msg.get("STOPPING") == "1", msg
    assert re.fullmatch(r"draining \d+ connections", msg["STATUS"]), msg
    assert d.poll() is None
    ka.close()
    assert d.wait(timeout=10) == 0
    n.nothing()
    n.close()


def test_notify_abstract_socket(tmp_path, procs, backends):
    bs = backends(1)
    port = free_port()
    conf = tmp_path / "chashd.yml"
    conf.write_text(GLOBAL + pool_yaml("web", port, bs))
    n = Notify(tmp_path, abstract=True)
    d = start(procs, tmp_path, ["-c", conf],
              env={**os.environ, "NOTIFY_SOCKET": n.env})
    assert n.recv().get("READY") == "1"
    assert fetch(port) == "web-1"
    d.send_signal(signal.SIGTERM)
    assert n.recv().get("STOPPING") == "1"
    assert d.wait(timeout=10) == 0
    n.close()


def test_notify_bad_socket_is_a_warning_not_a_failure(tmp_path, procs,
                                                      backends):
    bs = backends(1)
    port = free_port()
    conf = tmp_path / "chashd.yml"
    conf.write_text(GLOBAL + pool_yaml("web", port, bs))
    env = {**os.environ, "NOTIFY_SOCKET": "relative/notify.sock"}
    d = start(procs, tmp_path, ["-c", conf], env=env)
    wait_started(d, tmp_path / "chashd.log")
    assert fetch(port) == "web-1"
    assert "NOTIFY_SOCKET 'relative/notify.sock' is not a unix socket" \
        in read(tmp_path / "chashd.log")
    # a socket nobody listens on: the send fails, chashd serves on
    env["NOTIFY_SOCKET"] = str(tmp_path / "nobody.sock")
    port2 = free_port()
    conf.write_text(GLOBAL + pool_yaml("web", port2, bs))
    d2 = start(procs, tmp_path, ["-c", conf], env=env, log_name="d2.log")
    wait_started(d2, tmp_path / "d2.log")
    assert fetch(port2) == "web-1"
    wait_for(lambda: "cannot notify the service manager: No such file" in
             read(tmp_path / "d2.log"), what="the warning")
    for p in (d, d2):
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0


# ---------------------------------------------------------------- config path

def test_no_config_reads_etc_chashd_and_says_so_when_missing(tmp_path):
    if os.path.exists(DEFAULT_CONF):
        pytest.skip("%s exists on this machine" % DEFAULT_CONF)
    for args in ([], ["-t"]):
        r = run([CHASHD, *args], cwd=tmp_path, timeout=10)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert f"{DEFAULT_CONF}: cannot open: No such file or directory" \
            in r.stderr
        assert "-c FILE" in r.stderr and "--demo" in r.stderr
    # nothing was started: the demo's port is not taken by us
    assert r.stdout == ""


def test_demo_runs_only_when_asked():
    r = run([CHASHD, "-t", "--demo"], timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == \
        "<embedded>: configuration OK"
    r = run([CHASHD, "--demo", "-c", "x.yml"], timeout=10)
    assert r.returncode == 2
    assert "-c and --demo exclude each other" in r.stderr
    r = run([CHASHD, "--help"], timeout=10)
    assert "--demo" in r.stdout and DEFAULT_CONF in r.stdout


def mc_exchange(port, request, skip):
    """Send <request> to the memcache text port, read the <skip> bytes of
    replies that come first, then one reply: a line, or VALUE blocks to
    END (bounded by a timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        buf = b""
        while True:
            if len(buf) >= len(skip):
                rest = buf[len(skip):]
                if rest.endswith(b"END\r\n") or (
                        rest.endswith(b"\r\n") and
                        not rest.startswith(b"VALUE")):
                    if not rest.startswith(b"VA ") or rest.count(b"\r\n") > 1:
                        assert buf.startswith(skip), buf[:200]
                        return rest
            chunk = s.recv(65536)
            assert chunk, "closed: %r" % buf[-200:]
            buf += chunk


def test_make_run_starts_the_demo(tmp_path):
    """scripts/run-demo (make run) on the build: the demo answers on
    127.0.0.1:8080 from its three backends, its http pool on 8081 routes
    each request by its session cookie (else its client address) to the
    member `chash lookup --config conf/demo.yml` names and says which in
    X-Chash-Member, its redis pool on 6380 stores
    keys spread over the three redis-servers (each key on exactly one),
    its memcache pool on 11311 over the three memcacheds, and SIGTERM
    stops it all."""
    ports = (9001, 9002, 9003, 8080, 8081, 8404, 6380, 7001, 7002, 7003,
             11311, 7101, 7102, 7103)
    busy = [p for p in ports if can_connect(p)]
    if busy:
        pytest.skip("the demo's ports are in use: %s" % busy)
    out = tmp_path / "run-demo.out"
    with open(out, "wb") as f:
        p = subprocess.Popen([str(ROOT / "scripts/run-demo"), str(B)],
                             stdout=f, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: p.poll() is not None or
                 "chashd is running (chashd --demo" in read(out),
                 timeout=20, what="the demo to say it runs")
        assert p.poll() is None, read(out)
        got = {fetch(8080, "127.0.0.%d" % i) for i in range(2, 40)}
        assert got == {"web-1", "web-2", "web-3"}
        sessions = ["s%d" % i for i in range(30)]
        ips = ["127.0.0.%d" % i for i in range(2, 12)]
        want = lookup_config(str(ROOT / "conf/demo.yml"), "api",
                             sessions + ips)
        for sess in sessions:
            c = http.client.HTTPConnection("127.0.0.1", 8081, timeout=5)
            c.request("GET", "/", headers={"Cookie": "session=" + sess})
            r = c.getresponse()
            assert r.read().decode().strip() == want[sess][0]
            assert r.getheader("X-Chash-Member") == want[sess][0]
            c.close()
        for ip in ips:
            c = http.client.HTTPConnection("127.0.0.1", 8081, timeout=5,
                                           source_address=(ip, 0))
            c.request("GET", "/")
            assert c.getresponse().getheader("X-Chash-Member") == want[ip][0]
            c.close()
        assert {want[k][0] for k in sessions} == {"web-1", "web-2", "web-3"}
        keys = ["user:%d" % i for i in range(60)]
        with Resp(6380) as c:
            assert c.pipeline([("SET", k, k) for k in keys]) == \
                [Simple("OK")] * len(keys)
            assert c.call("MGET", *keys) == [k.encode() for k in keys]
        held = []
        for port in (7001, 7002, 7003):
            with Resp(port) as c:
                held.append({k for k, v in zip(keys, c.call("MGET", *keys))
                             if v is not None})
        assert all(held), held          # every member holds some
        assert sorted(k for h in held for k in h) == sorted(keys), held
        # the memcache pool: a multi-get of keys spread over its members
        req = b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(k),
                                                       k.encode())
                       for k in keys)
        got = mc_exchange(11311, req + b"get " +
                          " ".join(keys).encode() + b"\r\n",
                          b"STORED\r\n" * len(keys))
        assert got == b"".join(b"VALUE %s 0 %d\r\n%s\r\n" % (
            k.encode(), len(k), k.encode()) for k in keys) + b"END\r\n"
        held = [{k for k in keys
                 if mc_exchange(port, b"mg %s v\r\n" % k.encode(), b"")
                 .startswith(b"VA")} for port in (7101, 7102, 7103)]
        assert all(held), held
        assert sorted(k for h in held for k in h) == sorted(keys), held
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 0, read(out)
        wait_for(lambda: not any(can_connect(q) for q in ports),
                 what="the demo's processes to stop")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


# ---------------------------------------------------------------- logging

# A path that holds every kind of byte a log line must survive: a quote,
# a backslash, a newline, a tab, control characters, valid UTF-8 and
# bytes that are not UTF-8 (one each, so each becomes one U+FFFD).
WEIRD = b'we"ird\\ \n\t\x01\x7f \xc3\xa9 \xe2\x80\xa8 \xff \xc3( .yml'


def weird_conf(tmp_path, port, bs):
    path = os.path.join(os.fsencode(str(tmp_path)), WEIRD)
    with open(path, "w") as f:
        f.write(GLOBAL + pool_yaml("web", port, bs))
    return path


def test_json_log_lines_parse_whatever_the_message_holds(tmp_path, procs,
                                                         backends):
    bs = backends(1)
    port = free_port()
    path = weird_conf(tmp_path, port, bs)
    log = tmp_path / "json.log"
    d = start(procs, tmp_path, ["--log-format", "json", "--log-level",
                                "debug", "--log", log, "-c",
                                os.fsdecode(path)])
    wait_started(d, log)
    # a reload of a broken file: an error line with the path in it
    with open(path, "a") as f:
        f.write("  retries: many\n")
    d.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload refused" in read(log), what="the refusal")
    d.send_signal(signal.SIGTERM)
    assert d.wait(timeout=10) == 0
    raw = log.read_bytes()
    lines = raw.split(b"\n")
    assert lines[-1] == b""
    objs = []
    for ln in lines[:-1]:
        ln.decode("utf-8")              # strict: the line is UTF-8
        o = json.loads(ln)
        assert set(o) == {"time", "level", "msg"}, o
        assert o["level"] in ("error", "warn", "info", "debug")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",
                            o["time"])
        objs.append(o)
    want = os.fsdecode(path).encode("utf-8", "surrogateescape").decode(
        "utf-8", "replace")
    started = [o for o in objs if o["msg"].startswith("chashd ") and
               " started: " in o["msg"]]
    assert len(started) == 1 and started[0]["level"] == "info"
    assert started[0]["msg"].endswith("config " + want), started[0]
    refused = [o for o in objs if "reload refused" in o["msg"]]
    assert refused and refused[0]["level"] == "error"
    assert want + ":" in refused[0]["msg"]


def test_text_log_lines_cannot_be_split(tmp_path, procs, backends):
    bs = backends(1)
    port = free_port()
    path = weird_conf(tmp_path, port, bs)
    log = tmp_path / "text.log"
    d = start(procs, tmp_path, ["--log", log, "-c", os.fsdecode(path)])
    wait_started(d, log)
    d.send_signal(signal.SIGTERM)
    assert d.wait(timeout=10) == 0
    lines = log.read_bytes().split(b"\n")[:-1]
    assert lines
    for ln in lines:
        assert STAMP.match(ln.decode("utf-8", "replace")), ln
    started = [ln for ln in lines if b" started: " in ln]
    assert started and started[0].endswith(
        b'config ' + os.fsencode(str(tmp_path)) +
        b'/we"ird\\ \\n\\t\\x01\\x7f \xc3\xa9 \xe2\x80\xa8 \xff \xc3( .yml')


def test_log_format_and_destination_arguments():
    for args, phrase in ((["--log-format", "xml"], "--log-format 'xml'"),
                         (["--log", ""], "--log: expected stderr")):
        r = run([CHASHD, *args], timeout=10)
        assert r.returncode == 2 and phrase in r.stderr, r.stderr


def test_syslog_gets_daemon_facility_and_mapped_levels(tmp_path, procs,
                                                       backends):
    """--log syslog: chashd runs in a mount namespace whose /dev holds
    our own datagram socket as /dev/log (the real /dev is not touched)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    probe = run(["unshare", "-m", "true"], timeout=10)
    if probe.returncode != 0:
        pytest.skip("no mount namespace here: " + probe.stderr.strip())
    dev = tmp_path / "dev"
    dev.mkdir()
    for node in ("null", "zero", "urandom", "random"):
        (dev / node).touch()
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(dev / "log"))
    # a member nobody listens on: its refused connects log at debug
    bs = backends(1) + [types.SimpleNamespace(
        addr="127.0.0.1:%d" % free_port(), name="dead")]
    port = free_port()
    conf = tmp_path / "chashd.yml"
    conf.write_text(GLOBAL + pool_yaml("web", port, bs))
    binds = " && ".join("mount --bind /dev/%s %s/%s" % (n, dev, n)
                        for n in ("null", "zero", "urandom", "random"))
    script = '%s && mount --bind %s /dev && exec "$@"' % (binds, dev)
    log = open(tmp_path / "stderr.log", "ab")
    d = subprocess.Popen(["unshare", "-m", "sh", "-c", script, "sh",
                          str(CHASHD), "-c", str(conf), "--log", "syslog",
                          "--log-level", "debug"],
                         stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    log.close()
    procs.procs.append(d)
    got = []

    def seen(pattern):
        """Read datagrams until one matches <pattern> (bounded)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(re.search(pattern, g) for g in got):
                return True
            sink.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                got.append(sink.recv(65536).decode("utf-8", "replace"))
            except socket.timeout:
                break
        raise AssertionError("no syslog line /%s/ in %r (stderr: %s)" % (
            pattern, got, read(tmp_path / "stderr.log")))

    seen(r" started: ")
    assert {fetch(port, client_ip(i)) for i in range(20)} == {"web-1"}
    seen(r"connect to dead .* failed")
    # a reload that changes workers: a warning; then a broken one: an error
    conf.write_text(GLOBAL.replace("workers: 2", "workers: 1") +
                    pool_yaml("web", port, bs))
    d.send_signal(signal.SIGHUP)
    seen(r"reload: done")
    conf.write_text(GLOBAL + pool_yaml("web", port, bs) + "  retries: x\n")
    d.send_signal(signal.SIGHUP)
    seen(r"reload refused")
    d.send_signal(signal.SIGTERM)
    assert d.wait(timeout=10) == 0
    seen(r"chashd stopped")
    sink.close()
    # "<PRI>Mmm dd hh:mm:ss chashd[pid]: message", PRI = facility * 8 +
    # severity, facility daemon = 3
    sev = {}
    for g in got:
        m = re.match(r"<(\d+)>\w{3} [ \d]\d \d\d:\d\d:\d\d chashd\[(\d+)\]: "
                     r"(.*)$", g, re.S)
        assert m, g
        pri, pid, msg = int(m.group(1)), int(m.group(2)), m.group(3)
        assert pri >> 3 == 3, g
        assert pid == d.pid, g
        # the message alone: syslog adds the time and the priority
        assert not re.match(r"\d{4}-\d\d-\d\dT", msg), g
        for phrase in (" started: ", "needs a restart", "reload refused",
                       "reload: loading", "connect to dead"):
            if phrase in msg:
                sev[phrase] = pri & 7
    assert sev == {" started: ": 6,            # info -> LOG_INFO
                   "needs a restart": 4,       # warn -> LOG_WARNING
                   "reload refused": 3,        # error -> LOG_ERR
                   "reload: loading": 6,
                   "connect to dead": 6}, sev  # info: failures are
    # logged at info (rate limited), per-connection events at debug


# ---------------------------------------------------------------- pid file

def test_pid_file_is_removed_after_a_reload_then_stop(tmp_path, procs,
                                                      backends):
    """global.pid_file outlives the config it came from: after SIGHUP
    frees that config, SIGTERM still removes the file."""
    bs = backends(1)
    port = free_port()
    pid = tmp_path / "chashd.pid"
    conf = tmp_path / "chashd.yml"
    text = (GLOBAL + "  pid_file: %s\n" % pid + pool_yaml("web", port, bs))
    conf.write_text(text)
    d = start(procs, tmp_path, ["-c", conf])
    wait_started(d, tmp_path / "chashd.log")
    assert int(pid.read_text()) == d.pid
    for _ in range(2):
        n = read(tmp_path / "chashd.log").count("reload: done")
        d.send_signal(signal.SIGHUP)
        wait_for(lambda: read(tmp_path / "chashd.log").count("reload: done")
                 > n, what="the reload")
    d.send_signal(signal.SIGTERM)
    assert d.wait(timeout=10) == 0
    assert not pid.exists()


def test_a_symlink_at_the_pid_path_is_replaced_not_followed(tmp_path, procs,
                                                            backends):
    bs = backends(1)
    port, port2 = free_port(), free_port()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    pid = tmp_path / "chashd.pid"
    pid.symlink_to(victim)
    conf = tmp_path / "chashd.yml"
    conf.write_text(GLOBAL + pool_yaml("web", port, bs))
    d = start(procs, tmp_path, ["-c", conf, "--pid-file", pid])
    wait_started(d, tmp_path / "chashd.log")
    assert victim.read_text() == "precious\n"
    assert not pid.is_symlink() and pid.is_file()
    assert int(pid.read_text()) == d.pid
    assert pid.stat().st_mode & 0o777 == 0o644
    # a dangling link must not create its target either
    pid2 = tmp_path / "chashd2.pid"
    target = tmp_path / "created-through-the-link"
    pid2.symlink_to(target)
    conf.write_text(GLOBAL + pool_yaml("web", port2, bs))
    d2 = start(procs, tmp_path, ["-c", conf, "--pid-file", pid2],
               log_name="d2.log")
    wait_started(d2, tmp_path / "d2.log")
    assert not target.exists()
    assert int(pid2.read_text()) == d2.pid
    # no temporary file is left beside them
    for p in (d, d2):
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    assert sorted(p.name for p in tmp_path.iterdir()
                  if "pid" in p.name) == []


def test_a_pid_file_rewritten_by_someone_else_is_left_alone(tmp_path, procs,
                                                            backends):
    bs = backends(1)
    port = free_port()
    pid = tmp_path / "chashd.pid"
    conf = tmp_path / "chashd.yml"
    conf.write_text(GLOBAL + pool_yaml("web", port, bs))
    d = start(procs, tmp_path, ["-c", conf, "--pid-file", pid])
    wait_started(d, tmp_path / "chashd.log")
    pid.write_text("1\n")                   # another instance's now
    d.send_signal(signal.SIGTERM)
    assert d.wait(timeout=10) == 0
    assert pid.read_text() == "1\n"


def test_missing_pid_and_state_directories_are_created(tmp_path, procs,
                                                       backends):
    bs = backends(2)
    port, aport = free_port(), free_port()
    run_dir, lib_dir = tmp_path / "run-chashd", tmp_path / "lib-chashd"
    conf = tmp_path / "chashd.yml"
    conf.write_text("global:\n  admin: 127.0.0.1:%d\n  workers: 1\n"
                    "  pid_file: %s/chashd.pid\n  state_file: %s/state.json\n"
                    % (aport, run_dir, lib_dir) + pool_yaml("web", port, bs))
    d = start(procs, tmp_path, ["-c", conf])
    wait_started(d, tmp_path / "chashd.log")
    umask = os.umask(0)
    os.umask(umask)
    for sub in (run_dir, lib_dir):
        assert sub.is_dir()
        assert sub.stat().st_mode & 0o777 == 0o755 & ~umask
    assert int((run_dir / "chashd.pid").read_text()) == d.pid
    # the state file can be written there: a change through the API
    wait_for(lambda: can_connect(aport), what="admin API")
    Api(aport).ok("PATCH", "/api/pools/web/members/web-2", {"weight": 3})
    wait_for(lambda: (lib_dir / "state.json").exists(),
             what="the state file")
    assert json.loads((lib_dir / "state.json").read_text())
    d.send_signal(signal.SIGTERM)
    assert d.wait(timeout=10) == 0
    assert not (run_dir / "chashd.pid").exists()


def test_a_pid_file_two_levels_down_is_refused_clearly(tmp_path, procs,
                                                       backends):
    bs = backends(1)
    port = free_port()
    conf = tmp_path / "chashd.yml"
    conf.write_text(GLOBAL + pool_yaml("web", port, bs))
    pid = tmp_path / "a" / "b" / "chashd.pid"
    d = start(procs, tmp_path, ["-c", conf, "--pid-file", pid])
    assert d.wait(timeout=10) == 1
    assert f"cannot write pid file {pid}: No such file or directory" in \
        read(tmp_path / "chashd.log")
    assert not can_connect(port)


# ---------------------------------------------------------------- chashd -t

POOL = "global:\n  admin: off\np:\n  listen: %s\n"
REFUSED = [
    ("modula", POOL + "  mode: tcp\n  distribution: modula\n"
     "  servers: [127.0.0.1:9001]\n",
     3, "pool 'p': distribution modula is not supported by chashd yet"),
    ("random", POOL + "  mode: tcp\n  distribution: random\n"
     "  servers: [127.0.0.1:9001]\n",
     3, "pool 'p': distribution random is not supported by chashd yet"),
    ("unix-listen", "global:\n  admin: off\np:\n  mode: tcp\n"
     "  servers: [127.0.0.1:9001]\n  listen: %s\n",
     6, "pool 'p': listen on a unix socket is not supported in mode tcp"),
]


@pytest.mark.parametrize("yaml,line,phrase", [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])
def test_check_refuses_what_a_start_refuses(tmp_path, yaml, line, phrase):
    port = free_port()
    sock = tmp_path / "p.sock"
    listen = str(sock) if "unix" in phrase else "127.0.0.1:%d" % port
    path = tmp_path / "c.yml"
    path.write_text(yaml % listen)
    want = f"{path}:{line}: {phrase}"
    r = run([CHASHD, "-t", "-c", path], timeout=10)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith(want), r.stderr
    assert r.stdout == ""
    # a start refuses the same file with the same message, binding nothing
    r = run([CHASHD, "-c", path], timeout=10)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert want in r.stderr, r.stderr
    assert not can_connect(port) and not sock.exists()


def test_check_accepts_what_a_start_runs(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text(GLOBAL + "p:\n  listen: 127.0.0.1:%d\n  mode: tcp\n"
                    "  distribution: maglev\n  servers: [127.0.0.1:9001]\n"
                    % free_port())
    r = run([CHASHD, "-t", "-c", path], timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == f"{path}: configuration OK"
