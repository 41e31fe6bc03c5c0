"""test_conf_example.py -- conf/chashd.yml, the annotated example, as a user
meets it: `chashd -t` passes it, and chashd started on the file exactly as
shipped listens on its five ports (two tcp pools, a redis pool, a memcache
pool, the admin API) and stops cleanly on SIGTERM.
SPDX-License-Identifier: BSD-2-Clause
"""
import os
import pathlib
import re
import signal
import socket
import subprocess

import pytest

from base_util import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("CHASH_BUILD", ROOT / "build"))
CHASHD = BUILD / "chashd"
CHASH = BUILD / "chash"
EXAMPLE = ROOT / "conf" / "chashd.yml"

needs_chashd = pytest.mark.skipif(not CHASHD.exists(),
                                  reason=f"{CHASHD} is not built")

# What the example listens on, as (family, host, port).
LISTENS = [(socket.AF_INET, "127.0.0.1", 8080),   # web
           (socket.AF_INET6, "::1", 8081),        # api
           (socket.AF_INET, "127.0.0.1", 22121),  # sessions (redis)
           (socket.AF_INET, "127.0.0.1", 22122),  # cache (memcache)
           (socket.AF_INET, "127.0.0.1", 8404)]   # admin


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True,
                          text=True, timeout=60, **kw)


def example_value(key):
    """The value of the global <key> in the example, as written."""
    m = re.search(rf"^  {key}: (\S+)", EXAMPLE.read_text(), re.M)
    assert m, f"{key} is not in {EXAMPLE}"
    return m.group(1)


@needs_chashd
def test_check_passes_without_warnings():
    r = run([CHASHD, "-t", "-c", EXAMPLE])
    assert r.returncode == 0, r.stderr
    assert f"{EXAMPLE}: configuration OK" in r.stdout
    assert "warning" not in (r.stdout + r.stderr).lower(), r.stdout + r.stderr


def test_example_keeps_its_promises():
    """What the task asks of the file itself: every pool says its mode, no
    pid or state file in /tmp, one pool of each mode served."""
    text = EXAMPLE.read_text()
    pools = re.findall(r"^([A-Za-z0-9_.-]+):\s*$", text, re.M)
    pools = [p for p in pools if p != "global"]
    assert pools == ["web", "api", "sessions", "cache"]
    for pool, mode in zip(pools, ("tcp", "tcp", "redis", "memcache")):
        body = re.search(rf"^{pool}:\n((?:[ #].*\n|\n)*)", text, re.M).group(1)
        assert re.search(rf"^  mode: {mode}\b", body, re.M), pool
    assert example_value("pid_file") == "/run/chashd/chashd.pid"
    assert example_value("state_file") == "/var/lib/chashd/state.json"


def port_free(family, host, port):
    with socket.socket(family) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def listening(family, host, port):
    try:
        with socket.socket(family) as s:
            s.settimeout(0.5)
            s.connect((host, port))
        return True
    except OSError:
        return False


@pytest.fixture
def runtime_dirs():
    """The directories of the example's pid_file and state_file, as a
    package would provide them (systemd RuntimeDirectory= and
    StateDirectory=). Made only when missing, and removed again only when
    this test made them and they are empty."""
    made = []
    for path in (example_value("pid_file"), example_value("state_file")):
        d = pathlib.Path(path).parent
        if d.is_dir():
            continue
        try:
            d.mkdir(parents=True)
        except PermissionError:
            pytest.skip(f"cannot create {d} for the example's "
                        f"{pathlib.Path(path).name} (not root)")
        made.append(d)
    if not os.access(pathlib.Path(example_value("pid_file")).parent,
                     os.W_OK):
        pytest.skip("the example's pid_file directory is not writable")
    yield
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            pass


@needs_chashd
def test_starts_as_shipped_and_stops_on_sigterm(tmp_path, runtime_dirs):
    for family, host, port in LISTENS:
        if not port_free(family, host, port):
            pytest.skip(f"{host} port {port} is in use on this machine: the "
                        "example cannot start here as shipped")
    pid_file = pathlib.Path(example_value("pid_file"))
    log_path = tmp_path / "chashd.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(CHASHD), "-c", str(EXAMPLE)],
                                stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        def up():
            return proc.poll() is not None or all(
                listening(*l) for l in LISTENS)
        wait_for(up, timeout=10, what="chashd to listen on 8080, 8081, 22121, 8404")
        assert proc.poll() is None, log_path.read_text()
        # it is the daemon those ports belong to
        assert pid_file.read_text().strip() == str(proc.pid)
        with socket.create_connection(("127.0.0.1", 8404), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1:8404\r\n\r\n")
            head = s.recv(64)
        assert head.startswith(b"HTTP/1.1 200") or \
            head.startswith(b"HTTP/1.0 200"), head

        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=15)
        log = log_path.read_text()
        assert rc == 0, log
        assert "chashd stopped" in log, log
        assert not pid_file.exists(), "the pid file is left behind"
        for l in LISTENS:
            assert not listening(*l), f"{l} still accepts after the stop"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
