# test_mode_reload.py -- a reload that changes a pool's mode (redis to
# memcache, redis to tcp, memcache to redis): the clients connected
# before it keep their protocol (their requests are parsed as they were
# written, chashd's own answers come in it, and what the members -- who
# now speak another protocol -- make of the rest comes back as errors or
# as their replies, in order), the clients that come after it get the new
# mode, and the daemon keeps running.
# SPDX-License-Identifier: BSD-2-Clause
import os
import signal

from base_util import free_port, wait_for
from mc_util import GLOBAL, ChashdMemcache, MemcachedServer, Mc
from redis_util import RedisServer, Resp, Err, Simple


def reload(d, text):
    with open(d.conf, "w") as f:
        f.write(text)
    n = d.log().count("reload: done")
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.log().count("reload: done") > n,
             what="the reload to finish")


def pool(port, mode, server):
    return ("p:\n  listen: 127.0.0.1:%d\n  mode: %s\n  timeout: 2000\n"
            "  servers:\n    - %s:1 m1\n" % (port, mode, server.addr))


def test_redis_to_memcache_keeps_old_clients_in_redis(procs):
    rs, mc = RedisServer(procs), MemcachedServer(procs)
    port = free_port()
    d = ChashdMemcache(procs, GLOBAL + pool(port, "redis", rs))
    with Resp(port) as old:
        assert old.call("SET", "a", "1") == Simple("OK")
        reload(d, GLOBAL + pool(port, "memcache", mc))
        # still RESP, parsed as RESP: an error reply in RESP, in order
        for _ in range(3):
            r = old.call("GET", "a")
            assert isinstance(r, Err), r
        with Mc(port) as new:
            assert new.call(b"set a 0 0 1\r\nx\r\n") == b"STORED\r\n"
            assert new.call(b"version\r\n").startswith(b"VERSION 1.6")
    assert d.alive(), d.log()


def test_redis_to_tcp_keeps_old_clients_in_redis(procs):
    rs, mc = RedisServer(procs), MemcachedServer(procs)
    port = free_port()
    d = ChashdMemcache(procs, GLOBAL + pool(port, "redis", rs))
    with Resp(port) as old:
        assert old.call("SET", "a", "1") == Simple("OK")
        # a tcp pool in front of a memcached: new clients are spliced
        reload(d, GLOBAL + pool(port, "tcp", mc))
        r = old.call("GET", "a")
        assert isinstance(r, Err), r
        with Mc(port) as new:
            assert new.call(b"version\r\n") == b"VERSION 1.6.18\r\n"
        # chashd's own answers in the old protocol still come
        assert old.call("PING") == Simple("PONG")
    assert d.alive(), d.log()


def test_memcache_to_redis_keeps_old_clients_in_memcache(procs):
    rs, mc = RedisServer(procs), MemcachedServer(procs)
    port = free_port()
    d = ChashdMemcache(procs, GLOBAL + pool(port, "memcache", mc))
    with Mc(port) as old:
        assert old.call(b"set a 0 0 1\r\nx\r\n") == b"STORED\r\n"
        reload(d, GLOBAL + pool(port, "redis", rs))
        # memcache's own answers still come in memcache's words
        assert old.call(b"version\r\n").startswith(b"VERSION 1.6.0")
        # what the member (now a redis-server, which takes "get a" as an
        # inline command) answers is no memcached reply: never passed on
        # (the member connection closes), an error in its place, in order
        assert old.call(b"get a\r\n").startswith(b"SERVER_ERROR ")
        assert old.call(b"mn\r\n") == b"MN\r\n"
        with Resp(port) as new:
            assert new.call("SET", "b", "2") == Simple("OK")
    assert d.alive(), d.log()
