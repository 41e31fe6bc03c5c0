"""The access log of an http pool: one line per request, in text and
JSON, naming the client, the member `chash lookup` gives the request's
key, the hash_key link used, how the member was chosen (first choice, or
failed over when it is down), the request line and the status -- also for
the answers chashd writes itself."""
import json
import re

from base_util import free_port, log_lines, lookup_config, wait_for
from http_util import connection, get_json, http_backends, http_pool, raw

# ... "GET /x?y=1 HTTP/1.1" 200 key=cookie:session
HTTP_TAIL = re.compile(r' "(?P<method>\S+) (?P<target>\S+) (?P<version>\S+)" '
                       r'(?P<status>\d+) key=(?P<key>\S+)')


def test_json_lines_per_request(procs, chashd):
    members = http_backends(procs, 3)
    port = free_port()
    log = str(procs.tmp / "access.json")
    d = chashd(http_pool(port, members,
                         hash_key="[cookie:session, header:X-User-Id, "
                                  "source_ip]",
                         access_log=log, access_log_format="json",
                         retries=2), port)
    users = ["u%d" % i for i in range(30)]
    order = lookup_config(d.conf, "web", users, replicas=2)
    conn = connection(port, src="127.0.0.44")
    for u in users:
        get_json(conn, "/a?u=%s" % u, {"Cookie": "session=" + u})
    get_json(conn, "/b", {"X-User-Id": users[0]})
    get_json(conn, "/c")
    raw(port, b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n")
    wait_for(lambda: len(log_lines(log)) >= len(users) + 3, what="log lines")
    got = [json.loads(x) for x in log_lines(log)]
    for u, e in zip(users, got):
        assert e["pool"] == "web"
        assert e["client"].startswith("127.0.0.44:")
        assert e["member"] == order[u][0]
        assert e["routing"] == "first"
        assert e["method"] == "GET" and e["target"] == "/a?u=%s" % u
        assert e["status"] == 200 and e["key"] == "cookie:session"
        assert e["bytes_in"] > 0 and e["bytes_out"] > 0
    assert got[len(users)]["key"] == "header:X-User-Id"
    assert got[len(users) + 1]["key"] == "source_ip"
    bad = got[len(users) + 2]
    assert bad["status"] == 400 and "duplicate Host" in bad["error"]
    assert bad["member"] is None
    # the key's member stopped: the request fails over to the next one
    victim = order[users[0]][0]
    next(m for m in members if m.name == victim).stop()
    n = len(log_lines(log))
    st, _, j = get_json(connection(port), "/d",
                        {"Cookie": "session=" + users[0]})
    assert st == 200 and j["member"] == order[users[0]][1]
    wait_for(lambda: len(log_lines(log)) > n, what="the fail-over's line")
    e = json.loads(log_lines(log)[-1])
    assert e["member"] == order[users[0]][1]
    assert e["routing"] == "failed_over" and e["retries"] == 1


def test_text_lines(procs, chashd):
    members = http_backends(procs, 2)
    port = free_port()
    log = str(procs.tmp / "access.log")
    d = chashd(http_pool(port, members, access_log=log), port)
    want = lookup_config(d.conf, "web", ["t1"])["t1"][0]
    conn = connection(port)
    get_json(conn, "/x?y=1", {"X-User-Id": "t1"})
    get_json(conn, "/status/404", {"X-User-Id": "t1"})
    wait_for(lambda: len(log_lines(log)) >= 2, what="log lines")
    first, second = log_lines(log)[:2]
    assert " web 127.0.0.1:" in first and " -> %s " % want in first
    m = HTTP_TAIL.search(first)
    assert m and m.group("method") == "GET" and m.group("target") == "/x?y=1"
    assert m.group("status") == "200" and m.group("key") == "header:X-User-Id"
    assert HTTP_TAIL.search(second).group("status") == "404"
