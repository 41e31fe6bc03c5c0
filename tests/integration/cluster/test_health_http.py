# test_health_http.py -- health_check type http on a tcp pool in front of
# HTTP members: our stub member (http_backend.py) answers each request as
# its switch file says (200, 503, garbage, a close, silence) and notes what
# it was asked. A member answering 503 goes down after
# `fall` checks and comes back after `rise` once it answers 200, clients
# failing over meanwhile; garbage, a close, silence and a status other
# than expect_status take it down too; the reason, as GET
# /api/pools/<pool> shows it, names what came.
# SPDX-License-Identifier: BSD-2-Clause
import pytest

from admin_util import Api, admin_global
from base_util import can_connect, client_ip, free_port, pool_yaml, wait_for
from http_util import HttpBackend, connection, get_json

CHECK = ("{ type: http, path: /healthz, host: example.com, interval: 100ms, "
         "timeout: 400ms, rise: 2, fall: 3%s }")


def fetch(port, src):
    """The member that answers one request through chashd from <src>
    (http_backend.py says its name), or None."""
    try:
        st, _, j = get_json(connection(port, src=src), "/")
    except OSError:
        return None
    return j["member"] if st == 200 else None


def member(api, name):
    st, j, _ = api.get("/api/pools/web")
    assert st == 200, j
    for m in j["members"]:
        if m["name"] == name:
            return m
    raise AssertionError("no member %s in %r" % (name, j["members"]))


def start(procs, tmp_path, chashd, n=2, extra="", modes=()):
    """<n> stubs web-1.. (answering as <modes> says, else 200) behind
    pool web with the http check (+ <extra> keys), the admin API on."""
    stubs = [HttpBackend(procs, "web-%d" % (i + 1)) for i in range(n)]
    for stub, mode in zip(stubs, modes):
        stub.set(mode)
    port, aport = free_port(), free_port()
    d = chashd(admin_global(aport) +
               pool_yaml("web", port, stubs, health_check=CHECK % extra),
               port)
    wait_for(lambda: can_connect(aport), what="admin API")
    return d, port, Api(aport), stubs


def checks(stub):
    """The health checks <stub> received: (mode answered, head)."""
    return [r for r in stub.requests() if "User-Agent: chashd-health" in r[1]]


def health_is(api, name, health):
    return member(api, name)["health"] == health


# ---- tests ------------------------------------------------------------------

def test_503_down_after_fall_up_after_rise(procs, tmp_path, chashd):
    d, port, api, (s1, s2) = start(procs, tmp_path, chashd)
    # the check's request, as the member sees it
    wait_for(lambda: len(checks(s1)) >= 2, what="checks of web-1")
    head = checks(s1)[0][1]
    assert head == ("GET /healthz HTTP/1.1\r\nHost: example.com\r\n"
                    "User-Agent: chashd-health\r\nConnection: close\r\n\r\n")
    assert health_is(api, "web-1", "up")

    s1.set("503")
    wait_for(lambda: health_is(api, "web-1", "down"), timeout=10,
             what="web-1 down")
    m = member(api, "web-1")
    assert m["state"] == "down"
    assert m["reason"] == ("3 checks failed (last: http status 503, "
                           "expected 2xx or 3xx)")
    # `fall` is 3: at least three checks were answered 503 by then
    assert sum(1 for mode, _ in checks(s1) if mode == "503") >= 3
    assert health_is(api, "web-2", "up")
    # every client now reaches web-2, whoever owns it
    assert {fetch(port, client_ip(i)) for i in range(30)} == {"web-2"}

    n200 = len(checks(s1))
    s1.set("200")
    wait_for(lambda: health_is(api, "web-1", "up"), timeout=10,
             what="web-1 up again")
    m = member(api, "web-1")
    assert m["reason"] == "2 checks passed"
    assert sum(1 for mode, _ in checks(s1)[n200:] if mode == "200") >= 2
    assert "web-1" in {fetch(port, client_ip(i)) for i in range(30)}


@pytest.mark.parametrize("mode,extra,reason", [
    ("garbage", "",
     'not an HTTP status line: "SSH-2.0-OpenSSH_..."'),
    ("close", "", "closed before answering"),
    ("silent", "", "timed out"),
    ("200", ", expect_status: 204", "http status 200, expected 204"),
])
def test_bad_answers_take_a_member_down(procs, tmp_path, chashd, mode, extra,
                                        reason):
    d, port, api, (s1, s2) = start(procs, tmp_path, chashd, extra=extra)
    # (expect_status 204: web-1 answers 200 as it is, and fails)
    if mode != "200":
        s1.set(mode)
    wait_for(lambda: health_is(api, "web-1", "down"), timeout=10,
             what="web-1 down")
    assert member(api, "web-1")["reason"] == \
        "3 checks failed (last: %s)" % reason
    assert d.proc.poll() is None


def test_expect_status_exact(procs, tmp_path, chashd):
    # expect_status 503: the member that answers 503 is the healthy one
    d, port, api, (s1, s2) = start(procs, tmp_path, chashd,
                                   extra=", expect_status: 503",
                                   modes=("503",))
    wait_for(lambda: health_is(api, "web-2", "down"), timeout=10,
             what="web-2 down")
    assert member(api, "web-2")["reason"] == \
        "3 checks failed (last: http status 200, expected 503)"
    # web-1 answers 503 to as many checks (`fall` of them would take it
    # down) and stays up
    wait_for(lambda: sum(1 for mode, _ in checks(s1) if mode == "503") >= 4,
             what="four checks of web-1")
    m = member(api, "web-1")
    assert (m["health"], m.get("reason")) == ("up", None)
