# proxy_util.py -- the PROXY protocol as the tcp and http suites meet it:
# v1 and v2 headers written by hand, Debian's HAProxy on a config written
# to the test's dir (sending the headers or taking them), HAProxy
# frontends that answer with the addresses they took, and such a frontend
# as a member of a chashd pool.
# SPDX-License-Identifier: BSD-2-Clause
import os
import socket
import struct

from base_util import can_connect, free_port, wait_for

HAPROXY = "/usr/sbin/haproxy"
V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


class Haproxy:
    """HAProxy on a config written to the test's dir; ready once every
    port of <ports> accepts."""

    def __init__(self, procs, body, ports):
        self.path = os.path.join(str(procs.tmp), "haproxy.cfg")
        with open(self.path, "w") as f:
            f.write("global\n  maxconn 200\n  nbthread 1\n\n"
                    "defaults\n  timeout connect 2s\n  timeout client 10s\n"
                    "  timeout server 10s\n\n" + body)
        self.proc = procs.start([HAPROXY, "-f", self.path, "-db"],
                                "haproxy.log")

        def up():
            assert self.proc.poll() is None, self.log()
            return all(can_connect(p) for p in ports)
        wait_for(up, timeout=10, what="haproxy to listen")

    def log(self):
        with open(os.path.join(os.path.dirname(self.path), "haproxy.log"),
                  errors="replace") as f:
            return f.read()


def v1_header(src, dst, sport, dport):
    fam = "TCP6" if ":" in src else "TCP4"
    return ("PROXY %s %s %s %d %d\r\n" % (fam, src, dst, sport, dport)) \
        .encode()


def v2_header(src, dst, sport, dport, tlvs=b""):
    if ":" in src:
        fam, af = 0x21, socket.AF_INET6
    else:
        fam, af = 0x11, socket.AF_INET
    body = (socket.inet_pton(af, src) + socket.inet_pton(af, dst) +
            struct.pack(">HH", sport, dport) + tlvs)
    return V2_SIG + bytes([0x21, fam]) + struct.pack(">H", len(body)) + body


def answering_frontends(names_ports, accept="accept-proxy"):
    """HAProxy frontends (http mode, <accept> on the bind) that answer
    each request with their name and the addresses they took."""
    body = ""
    for name, p in names_ports:
        body += ("frontend %s\n  mode http\n  bind 127.0.0.1:%d %s\n"
                 "  http-request return status 200 content-type text/plain "
                 "lf-string \"%s src=%%[src]:%%[src_port] "
                 "dst=%%[dst]:%%[dst_port]\"\n\n" % (name, p, accept, name))
    return body


class Member:
    """An HAProxy frontend as a member of a chashd pool (pool_yaml's
    server shape)."""

    def __init__(self, name):
        self.name = name
        self.port = free_port()
        self.addr = "127.0.0.1:%d" % self.port
