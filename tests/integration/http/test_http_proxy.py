"""The PROXY protocol in http pools, with HAProxy from Debian on both
sides: HAProxy sends a v1/v2 header in front of an http pool with
accept_proxy (the original client keys the ring and is X-Forwarded-For),
and an http pool with send_proxy tells HAProxy members the client, over
member connections no other client shares."""
import os

import pytest

from base_util import client_ip, free_port, lookup_config
from http_util import connection, get_json, http_backends, http_pool
from proxy_util import (HAPROXY, Haproxy, Member, answering_frontends,
                        v1_header)

pytestmark = pytest.mark.skipif(not os.access(HAPROXY, os.X_OK),
                                reason="needs Debian's haproxy")


@pytest.mark.parametrize("send", ["send-proxy", "send-proxy-v2"])
def test_header_keys_and_forwards_the_original_client(procs, chashd, send):
    members = http_backends(procs, 3)
    port = free_port()
    d = chashd(http_pool(port, members, hash_key="source_ip",
                         accept_proxy="true"), port)
    hport = free_port()
    Haproxy(procs, "frontend fe\n  mode tcp\n  bind 127.0.0.1:%d\n"
                   "  default_backend be\n\nbackend be\n  mode tcp\n"
                   "  server chashd 127.0.0.1:%d %s\n" % (hport, port, send),
            [hport])
    ips = [client_ip(i) for i in range(20)]
    want = {k: v[0] for k, v in lookup_config(d.conf, "web", ips).items()}
    assert len(set(want.values())) > 1
    for ip in ips:
        conn = connection(hport, src=ip)
        for _ in range(2):  # keep-alive through HAProxy: one header
            _, _, j = get_json(conn, "/")
            assert j["member"] == want[ip], ip
            xff = [v for k, v in j["headers"]
                   if k.lower() == "x-forwarded-for"]
            assert xff == [ip]
        conn.close()


def test_a_bad_header_closes_only_that_client(procs, chashd):
    members = http_backends(procs, 1)
    port = free_port()
    chashd(http_pool(port, members, accept_proxy="true"), port)
    from http_util import raw
    assert raw(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") == b""
    out = raw(port, v1_header("10.9.8.7", "127.0.0.1", 4000, port) +
              b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and b"10.9.8.7" in out


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_send_proxy_private_member_connections(procs, chashd, version):
    """Each member connection starts with its client's header, and is
    never given to another client: two clients on the same member, each
    over keep-alive, are each told their own address."""
    hp = [Member("hp-%d" % i) for i in range(1, 3)]
    Haproxy(procs, answering_frontends([(m.name, m.port) for m in hp]),
            [m.port for m in hp])
    port = free_port()
    # one worker: its pool of member connections would be shared by both
    # clients if chashd pooled them
    text = http_pool(port, hp, hash_key="header:X-K", send_proxy=version,
                     forward_headers="off",
                     global_text="global:\n  admin: off\n  workers: 1\n")
    d = chashd(text, port)
    want = lookup_config(d.conf, "web", ["a"])["a"][0]
    conns = [connection(port, src=client_ip(i)) for i in (1, 2)]
    for round_ in range(3):
        for i, conn in zip((1, 2), conns):
            st, _, body = get_json(conn, "/", {"X-K": "a"})
            assert st == 200
            text_ = body.decode() if isinstance(body, bytes) else str(body)
            assert text_.startswith("%s src=%s:" % (want, client_ip(i))), \
                (round_, i, text_)
