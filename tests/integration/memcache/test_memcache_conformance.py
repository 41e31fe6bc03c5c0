# test_memcache_conformance.py -- chashd in a memcache pool answers as ONE
# memcached 1.6.18 does. A script of raw commands of every kind (text
# storage, retrieval, counters, touch/gat, meta mg/ms/md/ma/me with
# flags, opaque, base64 keys, quiet mode, malformed lines, keys over 250
# bytes, values over the item size, "\n" line ends, case) goes to a fresh
# memcached directly and through chashd whose only member is another
# fresh memcached: the replies must be the same bytes, sent one by one
# and pipelined in one write. What chashd answers itself by design
# (version, verbosity, mn, stats, quit) is asserted on its own. With
# three members: a multi-get split per member and merged in key order,
# gets/cas across members, 200 KB values through split reads, and 100
# mixed pipelined requests, against one memcached holding everything.
# SPDX-License-Identifier: BSD-2-Clause
import base64
import os
import random
import re
import time

import pytest

from base_util import free_port
from mc_util import (GLOBAL, ChashdMemcache, KeysByMember, MemcachedServer,
                     Mc, count_mn, mc_pool, need_chashd_memcache,
                     run_stream, split_units)

LONG_KEY = "k" * 251          # one over memcached's KEY_MAX_LENGTH
MAX_KEY = "m" * 250
TOO_BIG = 1100000             # over memcached's -I 1m and chashd's default
B64_KEY = "bkey:1"            # sent base64 in meta commands, plain in get
B64 = base64.b64encode(B64_KEY.encode()).decode()


def script():
    """[(label, raw bytes)]: the byte-compared commands, in order. Every
    reply is deterministic on a fresh memcached with one worker thread
    (CAS values included), but for `me`'s seconds since last access."""
    s = []

    def add(label, data):
        s.append((label, data if isinstance(data, bytes) else data.encode()))

    # -- text storage and retrieval
    add("set", "set a 0 0 5\r\nhello\r\n")
    add("get hit", "get a\r\n")
    add("set flags", "set b 123 0 3\r\nxyz\r\n")
    add("get many, miss, duplicate", "get a b nokey a\r\n")
    add("gets", "gets a b nokey\r\n")
    add("add existing", "add a 0 0 1\r\nx\r\n")
    add("add new", "add c 0 0 1\r\nx\r\n")
    add("replace missing", "replace nokey 0 0 1\r\nx\r\n")
    add("replace", "replace c 5 0 2\r\nyy\r\n")
    add("append", "append a 0 0 6\r\n world\r\n")
    add("prepend", "prepend a 0 0 3\r\n>> \r\n")
    add("append missing", "append nokey 0 0 1\r\nx\r\n")
    add("get after concat", "get a c\r\n")
    add("cas right", "cas b 9 0 3 2\r\nnew\r\n")
    add("cas stale", "cas b 9 0 3 2\r\nold\r\n")
    add("cas missing", "cas nokey 0 0 1 1\r\nx\r\n")
    add("gets after cas", "gets b\r\n")
    add("max flags", "set f 4294967295 0 1\r\nf\r\nget f\r\n")
    add("empty value", "set e 0 0 0\r\n\r\nget e\r\n")
    add("value holding reply words",
        "set v 0 0 12\r\nEND\r\nVALUE x\r\nget v\r\n")
    add("expired at once", "set x 0 -1 1\r\na\r\nget x\r\n")
    add("key of 250 bytes", "set %s 0 0 1\r\nm\r\nget %s\r\n"
        % (MAX_KEY, MAX_KEY))
    add("30 keys in one get", "get %s\r\n"
        % " ".join("a b c nokey e f v".split()[i % 7] for i in range(30)))
    # -- noreply: nothing comes back, the effect is there
    add("set noreply", "set nr 0 0 1 noreply\r\n1\r\n")
    add("add noreply", "add nr2 0 0 1 noreply\r\n2\r\n")
    add("replace noreply", "replace nr 0 0 1 noreply\r\n3\r\n")
    add("append noreply", "append nr 0 0 1 noreply\r\n4\r\n")
    add("prepend noreply", "prepend nr 0 0 1 noreply\r\n5\r\n")
    add("cas noreply", "cas nr 0 0 1 999 noreply\r\n6\r\n")
    add("incr noreply", "set nn 0 0 1\r\n7\r\nincr nn 3 noreply\r\n")
    add("decr noreply", "decr nn 1 noreply\r\n")
    add("touch noreply", "touch nn 100 noreply\r\n")
    add("delete noreply", "delete nr2 noreply\r\n")
    add("after noreply", "get nr nr2 nn\r\n")
    # -- delete
    add("delete", "delete c\r\n")
    add("delete missing", "delete c\r\n")
    add("delete legacy 0", "delete c 0\r\n")
    add("delete with time", "delete c 5\r\n")
    # -- counters
    add("set counter", "set n 0 0 2\r\n10\r\n")
    add("incr", "incr n 5\r\n")
    add("decr below 0", "decr n 100\r\n")
    add("value after decr", "get n\r\n")
    add("incr wraps", "set w 0 0 20\r\n18446744073709551615\r\nincr w 2\r\n")
    add("incr non-numeric", "incr a 1\r\n")
    add("incr missing", "incr nokey 1\r\n")
    add("incr bad delta", "incr n abc\r\n")
    add("incr delta too big", "incr n 18446744073709551616\r\n")
    # -- touch, gat, gats
    add("touch", "touch n 100\r\n")
    add("touch missing", "touch nokey 1\r\n")
    add("gat", "gat 100 n b nokey\r\n")
    add("gats", "gats 0 n b\r\n")
    add("gat no key", "gat 0\r\n")
    # -- meta
    add("ms with flags", "ms m1 3 T0 F7 c\r\nabc\r\n")
    add("ms quiet", "ms m1 2 q\r\nxy\r\n")
    add("mg flags and opaque", "mg m1 v f s c k O123\r\n")
    add("mg no flags", "mg m1\r\n")
    add("mg miss with opaque", "mg nope v O9\r\n")
    add("ms append missing quiet", "ms m2 2 MA q\r\nxy\r\n")
    add("ms append", "ms m1 2 MA\r\nzz\r\nmg m1 v\r\n")
    add("ms mode E", "ms m3 2 ME\r\nxx\r\nms m3 2 ME\r\nyy\r\n")
    add("ms compare cas", "ms m3 2 C1\r\nxx\r\n")
    add("ms invalidate", "ms m4 1 I\r\na\r\n")
    add("ma missing", "ma m5\r\n")
    add("ma autovivify", "ma m5 N0 J13 v\r\n")
    add("ma decr", "ma m5 MD D4 v\r\n")
    add("ma quiet", "ma m5 q\r\nmg m5 v\r\n")
    add("ma to max", "ma m6 N0 J18446744073709551615 v\r\nma m6 v\r\n")
    add("md quiet hit", "md m5 q\r\n")
    add("md miss opaque", "md m5 O5\r\n")
    add("me", "me m1\r\n")
    add("base64 ms", "ms %s 2 b\r\nhi\r\n" % B64)
    add("base64 mg", "mg %s b v k\r\n" % B64)
    add("base64 key read plain", "get %s\r\n" % B64_KEY)
    add("base64 text read literal", "mg %s v\r\n" % B64)
    add("base64 undecodable", "mg !!!! b v\r\n")
    add("quiet batch then mn", "mg a v q k\r\nmg nokey v q k\r\n"
        "mg m1 v q k O7\r\nmn\r\n")
    add("meta bad size", "ms m1 S2\r\nxy\r\n")
    add("meta invalid flag", "ms m1 2 Z\r\nxy\r\n")
    add("meta bad mode", "ms m7 2 MX\r\nxx\r\n")
    add("meta duplicate flag", "mg a v v\r\n")
    add("meta opaque too long", "mg a v O%s\r\n" % ("9" * 40))
    add("meta no key", "mg\r\n")
    # -- malformed
    add("bad data chunk", "set k1 0 0 3\r\nabcde\r\n")
    add("bad length", "set k2 0 0 x\r\n")
    add("negative length", "set k2 0 0 -1\r\n")
    add("bad flags", "set k2 abc 0 1\r\na\r\n")
    add("bad exptime", "set k2 0 abc 1\r\na\r\n")
    add("too few tokens", "set k3 0 0\r\n")
    add("cas without unique", "cas a 0 0 1\r\na\r\n")
    add("cas bad unique", "cas a 0 0 1 abc\r\na\r\n")
    add("touch no time", "touch a\r\n")
    add("touch bad time", "touch a abc\r\n")
    add("gat no time", "gat a\r\n")
    add("get no key", "get\r\n")
    add("delete no key", "delete\r\n")
    add("delete too many", "delete a b c d e\r\n")
    add("incr no args", "incr\r\n")
    add("key over 250 get", "get %s\r\n" % LONG_KEY)
    add("key over 250 set", "set %s 0 0 1\r\na\r\n" % LONG_KEY)
    add("key over 250 mg", "mg %s v\r\n" % LONG_KEY)
    add("key over 250 among others", "get a %s b\r\n" % LONG_KEY)
    add("upper case", "Set a 0 0 1\r\na\r\n")
    add("upper case get", "GET a\r\n")
    add("unknown", "foo bar\r\n")
    add("unknown meta", "mx foo\r\n")
    add("empty line", "\r\n")
    add("blank line", "   \r\n")
    add("extra spaces", "get  a   b  \r\n")
    add("LF line ends", "set nl 0 0 2\nab\r\nget nl\n")
    add("LF after data", "set nl2 0 0 2\nab\nget nl\n")
    add("meta LF", "mg nl v\nmg nl2 v k\n")
    # -- too large: refused, the value swallowed, the key left alone
    add("too large", b"set big 0 0 %d\r\n" % TOO_BIG + b"x" * TOO_BIG
        + b"\r\nget big\r\n")
    add("too large noreply", b"set big 0 0 %d noreply\r\n" % TOO_BIG
        + b"x" * TOO_BIG + b"\r\nget big\r\n")
    add("too large meta quiet", b"ms big %d q\r\n" % TOO_BIG
        + b"x" * TOO_BIG + b"\r\nmg big v\r\n")
    add("final read", "get a b n m1 nn f e v\r\n")
    return s


# memcached 1.6.18 drops the reply of the command just before a get, gets
# or gat naming a key over 250 bytes when that reply is not sent yet: in a
# pipeline, "version\r\nget <251 bytes>\r\n" gets only the CLIENT_ERROR.
# Which reply is lost depends on what memcached had written out, so these
# steps are compared one by one only (and the quirk is pinned below).
ONE_BY_ONE_ONLY = {"key over 250 get", "key over 250 among others"}


def pipeline_script():
    return [(label, data) for label, data in script()
            if label not in ONE_BY_ONE_ONLY]


def normalize(data):
    """`me` prints seconds since the last access (la=): the only field
    that may tick between the two runs."""
    return re.sub(rb"(ME \S+ .*?)la=\d+", rb"\1la=N", data)


def first_diff(got, ref, label, names=("chashd", "memcached")):
    """A readable account of the first unit where <got> and <ref> (bytes
    of replies) differ; "" when they are the same bytes."""
    if got == ref:
        return ""
    g, r = split_units(got), split_units(ref)
    for i in range(max(len(g), len(r))):
        a = g[i] if i < len(g) else b"<nothing>"
        b = r[i] if i < len(r) else b"<nothing>"
        if a != b:
            return ("%s: reply unit #%d differs\n  %-10s %r\n"
                    "  %-10s %r\n  (%s before it: %r)"
                    % (label, i, names[0] + ":", a[:200], names[1] + ":",
                       b[:200], names[1],
                       [u[:60] for u in r[max(0, i - 3):i]]))
    return "%s: same units, different bytes" % label


class Single:
    """A reference memcached and a member memcached, both fresh, and
    chashd in front of the member alone."""

    def __init__(self, procs, **opts):
        self.procs = procs
        self.ref = MemcachedServer(procs)
        self.member = MemcachedServer(procs)
        self.port = free_port()
        base = dict(hash="fnv1a_64", distribution="ketama", timeout=5000,
                    server_connections=1, auto_eject_hosts="false")
        base.update(opts)
        self.text = GLOBAL + mc_pool("one", self.port, [self.member], **base)

    def chashd(self, name="chashd"):
        need_chashd_memcache()
        return ChashdMemcache(self.procs, self.text, name=name)


def step_at(procs, steps, unit):
    """The label of the step whose reply holds unit number <unit> of the
    pipelined stream (step boundaries from a one-by-one run on a fresh
    memcached: the same units, test_script_holds_on_memcached)."""
    m = MemcachedServer(procs)
    n = 0
    for (label, _), r in zip(steps, run_one_by_one(m.port, steps)):
        n += len(split_units(normalize(r)))
        if unit < n:
            return label
    return "<after the last step>"


def run_one_by_one(port, steps):
    """Each step sent alone and followed by "mn": the bytes each got."""
    out = []
    with Mc(port, timeout=10) as c:
        for label, data in steps:
            out.append(c.call_mn(data))
    return out


# ---------------------------------------------------- the script itself --

def test_script_holds_on_memcached(procs):
    """The script is deterministic on memcached: two fresh memcacheds
    give the same bytes, one by one and pipelined (so a difference
    through chashd is chashd's), and it covers what it claims: errors of
    each kind, noreply steps answered by nothing, quiet misses dropped."""
    a, b = MemcachedServer(procs), MemcachedServer(procs)
    steps = script()
    one_a = run_one_by_one(a.port, steps)
    one_b = run_one_by_one(b.port, steps)
    bad = [first_diff(normalize(x), normalize(y), label,
                      ("memcached", "memcached"))
           for (label, _), x, y in zip(steps, one_a, one_b) if
           normalize(x) != normalize(y)]
    assert not bad, "\n".join(bad)
    replies = dict(zip([label for label, _ in steps], one_a))
    assert replies["set noreply"] == b""
    assert replies["delete noreply"] == b""
    assert replies["quiet batch then mn"].endswith(b"MN\r\n")
    assert b"nokey" not in replies["quiet batch then mn"]
    assert replies["key over 250 get"] == \
        b"CLIENT_ERROR bad command line format\r\n"
    assert replies["too large"] == (b"SERVER_ERROR object too large for "
                                    b"cache\r\nEND\r\n")
    assert replies["bad data chunk"].startswith(
        b"CLIENT_ERROR bad data chunk\r\n")
    assert replies["upper case get"] == b"ERROR\r\n"
    assert replies["LF line ends"] == b"STORED\r\nVALUE nl 0 2\r\nab\r\nEND\r\n"
    assert replies["base64 key read plain"].startswith(b"VALUE bkey:1 ")
    # pipelined on fresh servers: the concatenation of the one-by-one
    # replies (the steps memcached answers otherwise left out)
    c, d, e = (MemcachedServer(procs) for _ in range(3))
    psteps = pipeline_script()
    whole = b"".join(data for _, data in psteps)
    pa = b"".join(run_stream(c.port, whole, timeout=20))
    pb = b"".join(run_stream(d.port, whole, timeout=20))
    assert normalize(pa) == normalize(pb)
    one_e = run_one_by_one(e.port, psteps)
    msg = first_diff(normalize(pa), normalize(b"".join(one_e)),
                     "memcached pipelined vs one by one",
                     ("pipelined", "one by one"))
    assert not msg, msg


def test_memcached_drops_a_reply_before_a_long_key_get(procs):
    """The quirk that keeps two steps out of the pipelined comparison: in
    one write, `version` then `get <251-byte key>` gets memcached's
    CLIENT_ERROR alone -- the VERSION line is lost. A proxy cannot know
    which of its earlier replies memcached would have written out."""
    m = MemcachedServer(procs)
    got = run_stream(m.port, b"get a\r\nversion\r\nget %s\r\n"
                     % LONG_KEY.encode())
    assert got == [b"END\r\n", b"CLIENT_ERROR bad command line format\r\n"]


# ------------------------------------------------ byte for byte, chashd --

def test_chashd_one_by_one_same_bytes(procs):
    """Each step alone through chashd gives the bytes memcached gives."""
    s = Single(procs)
    cd = s.chashd()
    steps = script()
    ref = run_one_by_one(s.ref.port, steps)
    got = run_one_by_one(cd.port, steps)
    bad = [first_diff(normalize(g), normalize(r), label)
           for (label, _), g, r in zip(steps, got, ref)
           if normalize(g) != normalize(r)]
    assert not bad, "%d of %d steps differ:\n%s" % (len(bad), len(steps),
                                                    "\n".join(bad))
    assert cd.alive()


def test_chashd_pipelined_same_bytes(procs):
    """The whole script in ONE write through chashd: the same bytes as
    memcached's, in the same order."""
    s = Single(procs)
    cd = s.chashd()
    whole = b"".join(data for _, data in pipeline_script())
    ref = b"".join(run_stream(s.ref.port, whole, timeout=20))
    got = b"".join(run_stream(cd.port, whole, timeout=20))
    msg = first_diff(normalize(got), normalize(ref), "pipelined")
    if msg:
        unit = int(re.search(r"#(\d+)", msg).group(1))
        msg += "\n  in step: %s" % step_at(procs, pipeline_script(), unit)
    assert not msg, msg


def test_chashd_dribbled_same_bytes(procs):
    """The script written in small random pieces (7..4000 bytes, each its
    own send): chashd reassembles lines and values split anywhere."""
    s = Single(procs)
    cd = s.chashd()
    whole = b"".join(data for label, data in pipeline_script()
                     if not label.startswith("too large"))
    ref = b"".join(run_stream(s.ref.port, whole, timeout=20))
    rnd = random.Random(7)
    with Mc(cd.port, timeout=20) as c:
        data = whole + b"mn\r\n"
        i = 0
        while i < len(data):
            n = rnd.randint(7, 4000)
            c.send(data[i:i + n])
            i += n
            if rnd.random() < 0.05:
                time.sleep(0.002)
        got = b"".join(c.units_until(b"MN\r\n", count_mn(whole) + 1)[:-1])
    msg = first_diff(normalize(got), normalize(ref), "dribbled")
    if msg:
        unit = int(re.search(r"#(\d+)", msg).group(1))
        msg += "\n  in step: %s" % step_at(
            procs, [st for st in pipeline_script()
                    if not st[0].startswith("too large")], unit)
    assert not msg, msg


def test_chashd_item_size_max_is_its_own(procs):
    """item_size_max: 1000 -- a 2000-byte value (which the member would
    take) is refused by chashd with memcached's reply, its data
    swallowed: the next command on the connection is served, and the
    member never saw the key."""
    s = Single(procs, item_size_max=1000)
    cd = s.chashd()
    with cd.client() as c:
        assert c.call_mn(b"set big 0 0 2000\r\n" + b"y" * 2000 + b"\r\n") \
            == b"SERVER_ERROR object too large for cache\r\n"
        assert c.call_mn(b"ms big 2000 T0\r\n" + b"y" * 2000 + b"\r\n") \
            == b"SERVER_ERROR object too large for cache\r\n"
        assert c.call_mn(b"set ok 0 0 1000\r\n" + b"z" * 1000 + b"\r\n") \
            == b"STORED\r\n"
        assert c.call_mn(b"get big ok\r\n") == \
            b"VALUE ok 0 1000\r\n" + b"z" * 1000 + b"\r\nEND\r\n"
    assert s.member.holds(["big", "ok"]) == {"ok"}


# ------------------------------------------ answered by chashd, by design --

def test_chashd_version(procs):
    """version: chashd's own line, a 1.6 version (clients that test for
    1.6 features keep them) naming chashd; not the member's."""
    s = Single(procs)
    cd = s.chashd()
    with cd.client() as c:
        v = c.call(b"version\r\n")
    assert v.startswith(b"VERSION 1.6.") and v.endswith(b"\r\n"), v
    assert b"chashd" in v, v
    assert v != s.member.call(b"version\r\n")


def test_chashd_verbosity(procs):
    """verbosity N: OK; with noreply nothing at all."""
    s = Single(procs)
    cd = s.chashd()
    with cd.client() as c:
        assert c.call_mn(b"verbosity 1\r\n") == b"OK\r\n"
        assert c.call_mn(b"verbosity 0 noreply\r\n") == b""
        assert c.call_mn(b"verbosity 0\r\n") == b"OK\r\n"


def test_chashd_mn_after_earlier_replies(procs):
    """mn is answered by chashd, but after every earlier reply of the
    pipeline: 300 gets (two values of 50 KB among them) then mn -- MN is
    the last unit, each get's reply before it in order."""
    s = Single(procs)
    cd = s.chashd()
    big = b"q" * 50000
    with cd.client(timeout=10) as c:
        assert c.call_mn(b"set big 0 0 50000\r\n" + big + b"\r\n"
                         b"set small 0 0 1\r\ns\r\n") == b"STORED\r\n" * 2
        cmds = [b"get big\r\n" if i in (10, 200) else
                b"get small\r\n" if i % 2 else b"mg nokey v\r\n"
                for i in range(300)]
        c.send(b"".join(cmds) + b"mn\r\n")
        for i, cmd in enumerate(cmds):
            if cmd.startswith(b"mg"):
                assert c.unit() == b"EN\r\n", i
            else:
                r = c.get_reply()
                k = cmd.split()[1]
                assert r[0].startswith(b"VALUE " + k + b" "), (i, r[0][:40])
                assert r[-1] == b"END\r\n"
        assert c.unit() == b"MN\r\n"
        assert c.read_available(0.2) == b""


def test_chashd_stats(procs):
    """stats: STAT lines then END, with chashd's pid (not the member's),
    uptime, version, curr_connections and total_connections as numbers
    that move; `stats <anything>` is a SERVER_ERROR line and the
    connection goes on."""
    s = Single(procs)
    cd = s.chashd()

    def stats(c):
        c.send(b"stats\r\n")
        units = c.units_until(b"END\r\n")
        out = {}
        for u in units[:-1]:
            m = re.fullmatch(rb"STAT (\S+) ([^\r\n]*)\r\n", u)
            assert m, u
            out[m.group(1).decode()] = m.group(2).decode()
        return out

    with cd.client() as c:
        st = stats(c)
        for name in ("pid", "uptime", "version", "curr_connections",
                     "total_connections"):
            assert name in st, (name, sorted(st))
        assert int(st["pid"]) == cd.proc.pid
        assert int(st["uptime"]) >= 0
        assert st["version"].startswith("1.6."), st["version"]
        assert int(st["curr_connections"]) >= 1
        with cd.client() as other:
            assert other.call(b"mn\r\n") == b"MN\r\n"
            st2 = stats(c)
        assert int(st2["curr_connections"]) >= 2
        assert int(st2["total_connections"]) > int(st["total_connections"])
        for arg in (b"items", b"slabs", b"settings", b"detail on",
                    b"anything"):
            r = c.call(b"stats " + arg + b"\r\n")
            assert r.startswith(b"SERVER_ERROR"), (arg, r)
        assert c.call(b"get nokey\r\n") == b"END\r\n"


def test_chashd_quit_after_earlier_replies(procs):
    """quit in a pipeline: every reply before it comes, then the close;
    nothing after it runs (the set after quit never reaches the
    member)."""
    s = Single(procs)
    cd = s.chashd()
    with cd.client() as c:
        c.send(b"set q1 0 0 1\r\na\r\nget q1\r\nmg q1 v\r\nquit\r\n"
               b"set q2 0 0 1\r\nb\r\n")
        assert c.unit() == b"STORED\r\n"
        assert c.get_reply() == [b"VALUE q1 0 1\r\na\r\n", b"END\r\n"]
        assert c.unit() == b"VA 1\r\na\r\n"
        assert c.peer_closed(timeout=3)
    time.sleep(0.2)
    assert s.member.holds(["q1", "q2"]) == {"q1"}


# ------------------------------------------------------- three members --

POOL3 = "three"


class Three:
    """Three member memcacheds behind chashd (ketama, murmur, named
    three-1..three-3), a reference memcached, and keys by owner."""

    def __init__(self, procs):
        self.procs = procs
        self.members = [MemcachedServer(procs) for _ in range(3)]
        self.ref = MemcachedServer(procs)
        self.port = free_port()
        self.text = GLOBAL + mc_pool(
            POOL3, self.port, self.members, hash="murmur",
            distribution="ketama", timeout=5000, server_connections=1,
            auto_eject_hosts="false")
        self.conf = os.path.join(str(procs.tmp), "three.yml")
        with open(self.conf, "w") as f:
            f.write(self.text)
        self.keys = KeysByMember(self.conf, POOL3)
        assert self.keys.members == ["three-1", "three-2", "three-3"]

    def member_of(self, key):
        return self.members[self.keys.members.index(self.keys.owner[key])]

    def chashd(self):
        need_chashd_memcache()
        return ChashdMemcache(self.procs, self.text, name="chashd-three")


@pytest.fixture
def three(procs):
    return Three(procs)


def test_multiget_split_and_merged_in_key_order(three):
    """get/gat with keys on all three members interleaved, misses and
    duplicates: one reply in the client's key order, one END -- the bytes
    one memcached holding every key gives; and each key was written to
    its own member (the split was real)."""
    cd = three.chashd()
    k = three.keys
    ks = [k.on(i % 3) for i in range(12)]
    miss = [k.on(0), k.on(1), k.on(2)]
    sets = b"".join(b"set %s %d 0 %d\r\n%s\r\n" % (
        x.encode(), i * 7, len(x) + i, (x + "v" * i).encode())
        for i, x in enumerate(ks))
    req = [ks[5], miss[0], ks[0], ks[1], ks[0], ks[11], miss[2], ks[2],
           ks[7], ks[3], miss[1], ks[5], ks[10], ks[4], ks[6], ks[8], ks[9]]
    reads = (b"get %s\r\n" % " ".join(req).encode()
             + b"gat 0 %s\r\n" % " ".join(reversed(req)).encode()
             + b"get %s\r\n" % " ".join(miss).encode()
             + b"get %s %s\r\n" % (ks[0].encode(), ks[0].encode()))
    ref = run_stream(three.ref.port, sets + reads)
    got = run_stream(cd.port, sets + reads)
    msg = first_diff(b"".join(got), b"".join(ref), "multi-get")
    assert not msg, msg
    assert got.count(b"END\r\n") == 4
    for x in ks:
        assert three.member_of(x).holds([x]) == {x}, x
    assert {three.keys.owner[x] for x in req} == set(three.keys.members)


def test_gets_and_cas_across_members(three):
    """gets over keys on three members: each cas unique is its owner's
    (as `mg <key> c` on the member says); cas with it through chashd
    stores, the same cas again is EXISTS, on every member."""
    cd = three.chashd()
    ks = [three.keys.on(i) for i in (0, 1, 2, 0, 1, 2)]
    with cd.client() as c:
        for x in ks:
            assert c.call(b"set %s 0 0 1\r\n1\r\n" % x.encode()) == \
                b"STORED\r\n"
        c.send(b"gets %s\r\n" % " ".join(ks).encode())
        units = c.get_reply()
        assert units[-1] == b"END\r\n" and len(units) == len(ks) + 1
        cas = {}
        for x, u in zip(ks, units):
            head = u.split(b"\r\n")[0].split()
            assert head[:4] == [b"VALUE", x.encode(), b"0", b"1"], u
            cas[x] = int(head[4])
        for x in ks:
            direct = three.member_of(x).call(b"mg %s c\r\n" % x.encode())
            assert direct == b"HD c%d\r\n" % cas[x], (x, direct, cas[x])
        for x in ks:
            assert c.call(b"cas %s 0 0 1 %d\r\n2\r\n" % (x.encode(),
                                                         cas[x])) \
                == b"STORED\r\n", x
            assert c.call(b"cas %s 0 0 1 %d\r\n3\r\n" % (x.encode(),
                                                         cas[x])) \
                == b"EXISTS\r\n", x
    for x in ks:
        assert three.member_of(x).values([x]) == {x: b"2"}


def test_large_values_split_across_reads(three):
    """Three 200 KB values, one per member, written in 16 KB pieces with
    pauses between (chashd reads each value in many parts) and read back
    with one multi-get and with mg: byte-exact, in order; the members
    hold exactly those bytes."""
    cd = three.chashd()
    ks = [three.keys.on(i) for i in range(3)]
    vals = [random.Random(i).randbytes(200000) for i in range(3)]
    with cd.client(timeout=10) as c:
        for x, v in zip(ks, vals):
            data = b"set %s 1 0 %d\r\n%s\r\n" % (x.encode(), len(v), v)
            for i in range(0, len(data), 16384):
                c.send(data[i:i + 16384])
                time.sleep(0.003)
            assert c.unit() == b"STORED\r\n"
        c.send(b"get %s\r\n" % " ".join(ks[::-1]).encode())
        units = c.get_reply()
        assert units[-1] == b"END\r\n"
        assert units[:-1] == [b"VALUE %s 1 200000\r\n%s\r\n"
                              % (x.encode(), v)
                              for x, v in zip(ks[::-1], vals[::-1])]
        c.send(b"".join(b"mg %s v s\r\n" % x.encode() for x in ks))
        for v in vals:
            assert c.unit() == b"VA 200000 s200000\r\n" + v + b"\r\n"
    for x, v in zip(ks, vals):
        assert three.member_of(x).values([x]) == {x: v}


def mixed_requests(keys, n, seed):
    """<n> mixed requests over <keys> (no CAS shown: members' counters
    differ from one memcached's), deterministic from <seed>."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        k = rnd.choice(keys).encode()
        op = rnd.randrange(14)
        v = (b"v%d" % i) * rnd.randint(1, 40)
        if op == 0:
            out.append(b"set %s %d 0 %d\r\n%s\r\n" % (k, i, len(v), v))
        elif op == 1:
            out.append(b"get %s\r\n" % k)
        elif op == 2:
            out.append(b"get %s\r\n" % b" ".join(
                rnd.choice(keys).encode() for _ in range(rnd.randint(2, 8))))
        elif op == 3:
            out.append(b"set %s 0 0 2\r\n%02d\r\nincr %s %d\r\n"
                       % (k, i % 100, k, i))
        elif op == 4:
            out.append(b"decr %s 3\r\n" % k)
        elif op == 5:
            out.append(b"delete %s\r\n" % k)
        elif op == 6:
            out.append(b"append %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
        elif op == 7:
            out.append(b"mg %s v f k O%d\r\n" % (k, i))
        elif op == 8:
            out.append(b"ms %s %d F%d\r\n%s\r\n" % (k, len(v), i, v))
        elif op == 9:
            out.append(b"md %s q\r\n" % k)
        elif op == 10:
            out.append(b"touch %s 1000\r\n" % k)
        elif op == 11:
            out.append(b"add %s 0 0 %d noreply\r\n%s\r\n" % (k, len(v), v))
        elif op == 12:
            out.append(b"mg %s v q k\r\n" % k)
        else:
            out.append(b"ma %s N0 J5 v\r\n" % k)
    return out


def test_hundred_mixed_pipelined_in_order(three):
    """100 mixed requests (text and meta, noreply and quiet among them)
    over keys on three members, in one write: the bytes one memcached
    gives, in order; then the same again written in odd-sized pieces."""
    cd = three.chashd()
    keys = [three.keys.on(i % 3) for i in range(15)]
    reqs = b"".join(mixed_requests(keys, 100, seed=11))
    ref = run_stream(three.ref.port, reqs)
    got = run_stream(cd.port, reqs)
    msg = first_diff(b"".join(got), b"".join(ref), "mixed pipeline")
    assert not msg, msg
    assert len(ref) > 80
    owners = {three.keys.owner[k] for k in keys}
    assert owners == set(three.keys.members)
    # the same stream again, dribbled
    ref2 = run_stream(three.ref.port, reqs)
    with Mc(cd.port, timeout=10) as c:
        data = reqs + b"mn\r\n"
        for i in range(0, len(data), 97):
            c.send(data[i:i + 97])
        got2 = c.units_until(b"MN\r\n")[:-1]
    msg = first_diff(b"".join(got2), b"".join(ref2), "mixed dribbled")
    assert not msg, msg


def test_base64_keys_routed_by_decoded_key(three):
    """ms with a base64 key (flag b) lands on the member that owns the
    DECODED key, so a plain `get` of the decoded key through chashd finds
    it, for keys owned by each member."""
    cd = three.chashd()
    ks = [three.keys.on(i) for i in range(3)]
    with cd.client() as c:
        for x in ks:
            b64 = base64.b64encode(x.encode())
            assert c.call(b"ms %s 3 b\r\nb64\r\n" % b64) == b"HD\r\n"
            assert c.call(b"mg %s b v k\r\n" % b64) == \
                b"VA 3 k%s b\r\nb64\r\n" % b64
        c.send(b"get %s\r\n" % " ".join(ks).encode())
        assert c.get_reply() == [b"VALUE %s 0 3\r\nb64\r\n" % x.encode()
                                 for x in ks] + [b"END\r\n"]
    for x in ks:
        assert three.member_of(x).values([x]) == {x: b"b64"}


def test_quiet_mode_across_members(three):
    """Quiet meta commands over three members then mn: exactly what one
    memcached suppresses is suppressed (misses of mg q, HD of ms/md q),
    the rest in order, MN last."""
    cd = three.chashd()
    k = [three.keys.on(i % 3) for i in range(6)]
    reqs = b"".join([
        b"ms %s 1 q\r\na\r\n" % k[0].encode(),
        b"ms %s 1 q\r\nb\r\n" % k[1].encode(),
        b"ms %s 1 q MR\r\nc\r\n" % k[2].encode(),      # NS: shown
        b"mg %s v q k\r\n" % k[3].encode(),            # miss: dropped
        b"mg %s v q k\r\n" % k[1].encode(),
        b"mg %s v q k O1\r\n" % k[0].encode(),
        b"md %s q\r\n" % k[0].encode(),                # HD: dropped
        b"md %s q O2\r\n" % k[0].encode(),             # NF: shown
        b"mg %s v q\r\n" % k[5].encode(),
        b"mn\r\n",
        b"mg %s v k\r\n" % k[2].encode(),
    ])
    ref = run_stream(three.ref.port, reqs)
    got = run_stream(cd.port, reqs)
    msg = first_diff(b"".join(got), b"".join(ref), "quiet")
    assert not msg, msg
