# conftest.py -- the integration suites' pytest glue. The suites live in
# one folder per area (tcp/, http/, redis/, memcache/, migration/,
# replication/, etcd/, admin/, faults/, cluster/, cli/, ops/); every
# module they share lives in lib/, which this file puts first on sys.path
# so that `from base_util import ...` (free ports, stub backends, chashd on
# a config, clients from a chosen 127.x.y.z address) or `from redis_util
# import ...` works in any area, under pytest-xdist too (each worker loads
# this file before it collects). The area folders are not packages (a
# package named http or redis would hide the standard library's and
# redis-py's): pytest imports each test file by its own name, so no two
# test files may share one. Here: the fixtures every area uses (procs,
# backends, chashd; every process a test starts is killed at teardown)
# and the report header.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import subprocess
import sys

import pytest

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
if LIB not in sys.path:
    sys.path.insert(0, LIB)

from base_util import CHASHD, Backend, Chashd, Procs  # noqa: E402


def pytest_report_header(config):
    """Who moves the bytes of tcp pools that do not say, in this run:
    chashd's splice (fast_path: off, the default) or the kernel
    (CHASHD_FAST_PATH=sockmap, where it loads)."""
    if os.environ.get("CHASHD_FAST_PATH") != "sockmap":
        return "chashd tcp pools: fast_path off (the default)"
    try:
        p = subprocess.run([CHASHD, "-t", "--demo"], capture_output=True,
                           text=True, timeout=10)
        m = re.search(r"fast_path ([^\n]*)", p.stdout)
        return "chashd tcp pools: fast_path " + (m.group(1) if m else "?")
    except OSError as e:
        return "chashd tcp pools: %s" % e


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.kill_all()


@pytest.fixture
def backends(procs):
    """backends(n) -> [Backend web-1 .. web-n]."""
    def make(n, prefix="web", **kw):
        return [Backend(procs, "%s-%d" % (prefix, i + 1), **kw)
                for i in range(n)]
    return make


@pytest.fixture
def chashd(procs, tmp_path):
    """chashd(text, port) -> a running Chashd."""
    def start(text, port, args=(), preexec_fn=None):
        return Chashd(procs, str(tmp_path), text, port, args, preexec_fn)
    return start
