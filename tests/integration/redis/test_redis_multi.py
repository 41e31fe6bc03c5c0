# test_redis_multi.py -- MULTI blocks through chashd (issue 25, item 8).
# chashd does not run transactions yet, so a MULTI block is refused
# whole: MULTI +OK, every command up to EXEC or DISCARD an error that
# says it was not run, EXEC -EXECABORT, DISCARD +OK, and the connection
# goes on. Checked on real redis-servers behind chashd, in a plain pool
# and in a replicated one (replicas 3 of 4 members), with redis-py's
# transactional pipeline and a raw socket that writes a whole pipeline
# in one send(); that nothing ran is checked on the members themselves
# (their keys and their INFO commandstats), never through chashd alone.
# The replies Redis gives the same misuse (EXEC without MULTI, a nested
# MULTI...) are compared with a real redis-server's.
# SPDX-License-Identifier: BSD-2-Clause
import re

import pytest
import redis

from base_util import free_port, wait_for
from redis_util import (CLOSED, Err, RedisServer, Simple,  # noqa: F401
                        chashd_redis, pool_yaml)

GLOBAL = "global:\n  admin: off\n  workers: 2\n"
WHY = "MULTI is refused by chashd (transactions are not supported yet)"
BLOCK = Err("ERR " + WHY + ": this command was not run")
ABORT = Err("EXECABORT Transaction discarded because " + WHY +
            ": none of its commands was run")
OK = Simple("OK")
# commands a member must never see from a refused block
NEVER = ("multi", "exec", "discard", "lpush", "append", "watch")


class Env:
    """redis-servers behind chashd: `plain` (3 members, one copy of each
    key) or `replicated` (4 members, replicas 3, write_quorum 2,
    read_policy quorum)."""

    def __init__(self, procs, start, layout):
        n = 3 if layout == "plain" else 4
        self.copies = 1 if layout == "plain" else 3
        self.servers = [RedisServer(procs) for _ in range(n)]
        opts = dict(timeout=2000)
        if layout == "replicated":
            opts.update(replicas=3, write_quorum=2, read_policy="quorum")
        self.chashd = start(GLOBAL + pool_yaml(
            "tx", free_port(), self.servers, True, ["  mode: redis"], **opts))
        self.port = self.chashd.port

    def client(self):
        return self.chashd.client(timeout=10)

    def calls(self):
        """{command: calls} summed over every member (INFO
        commandstats: the commands each member ran)."""
        out = {}
        for s in self.servers:
            text = s.call("INFO", "commandstats").decode()
            for name, n in re.findall(r"^cmdstat_([^:]+):calls=(\d+)", text,
                                      re.M):
                out[name] = out.get(name, 0) + int(n)
        return out

    def holders(self, key):
        """The members that hold <key>."""
        return [s.addr for s in self.servers if s.call("EXISTS", key) == 1]

    def values(self, key):
        """GET <key> on each member that holds it."""
        return [s.call("GET", key) for s in self.servers
                if s.call("EXISTS", key) == 1]

    def assert_never_ran(self, before):
        """No member ran any command of <NEVER> since <before> (calls())."""
        now = self.calls()
        ran = {c: now.get(c, 0) - before.get(c, 0) for c in NEVER}
        assert not any(ran.values()), ran


@pytest.fixture(params=["plain", "replicated"])
def env(request, procs, chashd_redis):
    return Env(procs, chashd_redis, request.param)


def test_redis_py_transaction_raises_and_leaves_no_trace(env):
    """redis-py's default (transactional) pipeline raises with chashd's
    reason, and no member ever saw a command of it; the same connection
    then serves commands, plain pipelines, and refuses the next
    transaction the same way."""
    pool = redis.ConnectionPool(host="127.0.0.1", port=env.port,
                                max_connections=1, socket_timeout=10)
    r = redis.Redis(connection_pool=pool)
    cid = r.client_id()
    before = env.calls()
    for _ in range(2):
        pipe = r.pipeline()
        pipe.set("a", "1").incr("n").lpush("l", "x").append("s", "y")
        with pytest.raises(redis.ResponseError) as e:
            pipe.execute()
        assert WHY in str(e.value) and "was not run" in str(e.value), \
            str(e.value)
        assert not isinstance(e.value, redis.exceptions.ExecAbortError)
        for k in ("a", "n", "l", "s"):
            assert env.holders(k) == [], k
        env.assert_never_ran(before)
        assert env.calls().get("set", 0) == before.get("set", 0)
        assert env.calls().get("incr", 0) == before.get("incr", 0)
    # the one connection of the pool, still open, serves as before
    assert r.client_id() == cid
    assert r.set("a", "2") is True
    assert r.incr("n") == 1
    assert r.get("a") == b"2"
    assert r.pipeline(transaction=False).set("b", "1").incr("n").execute() \
        == [True, 2]
    assert r.client_id() == cid
    wait_for(lambda: env.values("n") == [b"2"] * env.copies,
             what="n = 2 on its %d member(s): %r" % (env.copies,
                                                     env.values("n")))
    env.assert_never_ran(before)


def test_redis_py_watch_is_refused_and_runs_nothing(env):
    """redis-py's transaction() helper WATCHes first: refused, its
    function never called, nothing written, the client usable."""
    r = redis.Redis(port=env.port, socket_timeout=10)
    called = []

    def body(pipe):
        called.append(1)
        pipe.multi()
        pipe.set("w", "1")

    with pytest.raises(redis.ResponseError, match="WATCH is refused"):
        r.transaction(body, "w")
    assert called == []
    assert env.holders("w") == []
    assert r.set("w", "2") is True and r.get("w") == b"2"


def test_pipelined_block_gets_exact_errors_in_order(env):
    """MULTI, five commands (one a 20 kB value, streamed in a plain pool),
    EXEC and the commands after them, all in one write: +OK, the block's
    error five times, -EXECABORT, then the commands after EXEC run. On
    the members: none of the block's commands ever arrived."""
    before = env.calls()
    big = b"v" * 20000
    with env.client() as c:
        got = c.pipeline([
            ("MULTI",), ("SET", "zz", "1"), ("INCR", "n"), ("LPUSH", "l", "a"),
            ("SET", "big", big), ("PING",), ("EXEC",),
            ("GET", "zz"), ("EXISTS", "zz", "n", "l", "big"),
            ("SET", "zz", "2"), ("INCR", "n"), ("GET", "zz")])
        assert got == [OK, BLOCK, BLOCK, BLOCK, BLOCK, BLOCK, ABORT,
                       None, 0, OK, 1, b"2"], got
        # the inline form (a telnet user), in one write too
        c.send(b"MULTI\r\nSET zi 1\r\nAPPEND zi 2\r\nEXEC\r\nGET zi\r\n"
               b"PING\r\n")
        got = c.read_replies(6)
        assert got == [OK, BLOCK, BLOCK, ABORT, None, Simple("PONG")], got
    # what ran on the members: the SET and INCR after EXEC, once per copy
    wait_for(lambda: env.calls().get("incr", 0) - before.get("incr", 0)
             >= env.copies, what="the INCR on every copy")
    now = env.calls()
    assert now.get("set", 0) - before.get("set", 0) == env.copies
    assert now.get("incr", 0) - before.get("incr", 0) == env.copies
    env.assert_never_ran(before)
    for k in ("l", "big", "zi"):
        assert env.holders(k) == [], k
    assert len(env.holders("zz")) == env.copies


def test_discard_ends_the_block(env):
    """DISCARD answers +OK and ends the block: nothing of it ran, the
    commands after it run, and an EXEC then is one without MULTI. A
    DISCARD with an argument is refused and the block goes on."""
    before = env.calls()
    with env.client() as c:
        got = c.pipeline([
            ("MULTI",), ("SET", "d", "1"), ("DISCARD", "x"), ("INCR", "n"),
            ("DISCARD",), ("GET", "d"), ("EXEC",), ("SET", "d", "2"),
            ("GET", "d"), ("INCR", "n")])
    assert got == [OK, BLOCK,
                   Err("ERR wrong number of arguments for 'discard' command"),
                   BLOCK, OK, None, Err("ERR EXEC without MULTI"), OK, b"2",
                   1], got
    env.assert_never_ran(before)


def test_misuse_is_answered_as_redis_answers_it(env, procs):
    """EXEC and DISCARD without MULTI, a nested MULTI, WATCH inside MULTI
    and EXEC with an argument: the replies a real redis-server gives
    (sent the same sequence); the block's own commands refused."""
    seq = [("EXEC",), ("DISCARD",), ("MULTI",), ("MULTI",), ("WATCH", "x"),
           ("SET", "x", "1"), ("EXEC",), ("GET", "x"), ("MULTI",),
           ("EXEC", "now"), ("GET", "x")]
    ref = RedisServer(procs)
    with ref.client() as c:
        want = c.pipeline(seq)
    before = env.calls()
    with env.client() as c:
        got = c.pipeline(seq)
    same = [0, 1, 2, 3, 4, 8, 9]
    assert [got[i] for i in same] == [want[i] for i in same], (got, want)
    assert got[0] == Err("ERR EXEC without MULTI")
    assert got[1] == Err("ERR DISCARD without MULTI")
    assert got[3] == Err("ERR MULTI calls can not be nested")
    assert got[4] == Err("ERR WATCH inside MULTI is not allowed")
    assert got[9].startswith("EXECABORT") and "exec" in got[9], got[9]
    # where Redis queued and ran the SET, chashd ran nothing
    assert want[5:8] == [Simple("QUEUED"), [OK], b"1"], want
    assert got[5:8] == [BLOCK, ABORT, None], got
    assert got[10] is None
    assert env.holders("x") == []
    env.assert_never_ran(before)


def test_watch_unwatch_reset_and_quit(env):
    """Outside a block WATCH is refused (nothing can be watched) and
    UNWATCH is +OK; inside one UNWATCH is refused like any command, RESET
    ends the block (as Redis runs it inside MULTI), and QUIT closes the
    connection with the block's commands not run."""
    with env.client() as c:
        w = c.call("WATCH", "k")
        assert isinstance(w, Err) and w.startswith("ERR WATCH is refused"), w
        assert c.pipeline([("UNWATCH",), ("MULTI",), ("UNWATCH",),
                           ("SET", "k", "1"), ("RESET",), ("SET", "k", "2"),
                           ("EXEC",), ("GET", "k")]) == [
            OK, OK, BLOCK, BLOCK, Simple("RESET"), OK,
            Err("ERR EXEC without MULTI"), b"2"]
    with env.client() as c:
        assert c.pipeline([("MULTI",), ("SET", "q", "1"), ("QUIT",),
                           ("PING",)]) == [OK, BLOCK, OK, CLOSED]
    with env.client() as c:
        assert c.call("GET", "q") is None
    assert env.holders("q") == []


def test_a_block_is_one_connection_s_own(env):
    """A block on one connection refuses nothing on another, and EXEC on
    the first discards only its own."""
    with env.client() as a, env.client() as b:
        assert a.call("MULTI") == OK
        assert b.call("SET", "k", "1") == OK
        assert a.call("SET", "k", "2") == BLOCK
        assert b.call("INCR", "c") == 1
        assert a.call("EXEC") == ABORT
        assert b.call("GET", "k") == b"1"
        assert a.call("GET", "k") == b"1"
        assert a.call("INCR", "c") == 2
