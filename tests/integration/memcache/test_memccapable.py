# test_memccapable.py -- libmemcached's protocol checker, memccapable
# (ascii tests only: chashd refuses the binary protocol by design), run
# against memcached directly to learn what passes there, then against
# chashd in front of three memcacheds: every test that passes directly
# must pass through chashd, but for the listed exceptions, each with its
# reason (also in the notes for the docs). Every run is bounded by a
# timeout.
# SPDX-License-Identifier: BSD-2-Clause
import re
import subprocess

from base_util import free_port
from mc_util import (GLOBAL, MEMCCAPABLE, ChashdMemcache, MemcachedServer,
                     mc_pool, need_chashd_memcache)

# Tests that fail through chashd by design, with the reason. Only with
# the default allow_fanout_admin: false -- flush_all must reach every
# member, which chashd does only when the pool allows fan-out admin
# commands; otherwise it answers SERVER_ERROR and memccapable, expecting
# OK (or nothing, for noreply, then a VERSION), fails.
BY_POLICY = {
    "ascii flush": "flush_all is refused without allow_fanout_admin: true",
    "ascii flush noreply": "flush_all noreply is refused without "
                           "allow_fanout_admin: true (the SERVER_ERROR line "
                           "arrives where memccapable expects VERSION)",
}

# Tests that fail through chashd whatever the pool says: none. (chashd
# answers version, verbosity, stats and quit itself, in memccapable's
# terms: a 1.6 VERSION line, OK, STAT lines then END, an error for
# `stats noreply`, and the close.)
BY_DESIGN = {}


def memccapable(port, timeout=60):
    """{test name: "pass"|"FAIL"|"skip"} of `memccapable -a` against
    127.0.0.1:<port>, and its whole output. memccapable prints each name
    padded to 40 columns on stdout, then "[pass]" on stdout but "[FAIL]"
    on stderr: a name with no status after it on stdout failed (and the
    count of those must be the count of [FAIL] on stderr)."""
    r = subprocess.run([MEMCCAPABLE, "-h", "127.0.0.1", "-p", str(port),
                        "-a", "-t", "2"], capture_output=True, text=True,
                       timeout=timeout)
    out = r.stdout + "\n--- stderr:\n" + r.stderr
    res = {}
    for m in re.finditer(r"(ascii [a-z]+(?: [a-z]+)*)\s{2,}"
                         r"(\[(?:pass|skip|FAIL)\])?", r.stdout):
        res[m.group(1)] = (m.group(2) or "[FAIL]")[1:-1]
    assert res, "no test results from memccapable: %r" % out[-2000:]
    nfail = sum(1 for v in res.values() if v == "FAIL")
    assert nfail == r.stdout.count("[FAIL]") + r.stderr.count("[FAIL]"), out
    assert (nfail == 0) == (r.returncode == 0), (r.returncode, out)
    return res, out


_DIRECT = {}


def direct_passes(procs):
    """The ascii tests that pass against a fresh memcached 1.6.18 (run
    once per session: memccapable reads byte by byte, ~2.5 s a run)."""
    if not _DIRECT:
        m = MemcachedServer(procs)
        res, _ = memccapable(m.port)
        m.stop()
        _DIRECT["res"] = res
    res = _DIRECT["res"]
    return {t for t, v in res.items() if v == "pass"}, res


def test_memccapable_direct(procs):
    """Against memcached itself every ascii test passes (27 of them): the
    baseline chashd is held to."""
    passing, res = direct_passes(procs)
    assert len(res) >= 27, res
    assert passing == set(res), {t: v for t, v in res.items()
                                 if v != "pass"}


def chashd_three(procs, **opts):
    need_chashd_memcache()
    members = [MemcachedServer(procs) for _ in range(3)]
    port = free_port()
    base = dict(hash="fnv1a_64", distribution="ketama", timeout=3000,
                server_connections=1, auto_eject_hosts="false")
    base.update(opts)
    return ChashdMemcache(procs, GLOBAL + mc_pool("capable", port, members,
                                                  **base))


def failures(res, passing):
    return {t for t in passing if res.get(t) != "pass"}


def test_memccapable_through_chashd_fanout_allowed(procs):
    """chashd with allow_fanout_admin: true in front of three members:
    every test that passes directly passes, but BY_DESIGN."""
    passing, _ = direct_passes(procs)
    cd = chashd_three(procs, allow_fanout_admin="true")
    res, out = memccapable(cd.port)
    bad = failures(res, passing) - set(BY_DESIGN)
    assert not bad, "failing through chashd: %s\n%s" % (sorted(bad),
                                                         out[-3000:])
    assert cd.alive()


def test_memccapable_through_chashd_default_policy(procs):
    """chashd with the default policy (no fan-out admin): exactly the
    flush tests fail, for the listed reason; the rest passes."""
    passing, _ = direct_passes(procs)
    cd = chashd_three(procs)
    res, out = memccapable(cd.port)
    bad = failures(res, passing) - set(BY_DESIGN)
    assert bad == set(BY_POLICY), "failing through chashd: %s\n%s" % (
        sorted(bad), out[-3000:])
    assert cd.alive()
