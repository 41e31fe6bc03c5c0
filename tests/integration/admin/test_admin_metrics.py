# test_admin_metrics.py -- GET /metrics parsed line by line as Prometheus'
# text format 0.0.4: every sample is `name{labels} value`, every family has
# HELP and TYPE, counters end in _total, label values are escaped; and the
# values agree with the JSON API and with the traffic the test sent.
# SPDX-License-Identifier: BSD-2-Clause
from admin_util import cluster, parse_metrics  # noqa: F401 (fixture)
from base_util import client_ip, fetch, free_port, wait_for

ODD = 'we"b\\x'  # a member name that needs escaping in a label value


def scrape(api):
    st, text, headers = api.get("/metrics")
    assert st == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse_metrics(text)


def by_member(samples, name):
    return {(s[1]["pool"], s[1]["member"]): s[2] for s in samples
            if s[0] == name and "state" not in s[1]}


def test_metrics_are_valid_prometheus_and_match_the_api(cluster):
    c = cluster(3)
    for i in range(30):
        assert fetch(c.port, src=client_ip(i)) is not None
    rep = c.api.ok("POST", "/api/pools/web/members",
                   {"name": ODD, "address": "127.0.0.1:%d" % free_port()})
    c.d.reload(c.text.replace("workers: 2", "workers: 2"))

    helps, types, samples = scrape(c.api)
    names = set()
    for s in samples:
        # a histogram's samples are <family>_bucket, _sum and _count
        n = s[0]
        for suffix in ("_bucket", "_sum", "_count"):
            base = n[:-len(suffix)]
            if n.endswith(suffix) and types.get(base) == "histogram":
                if suffix == "_bucket":
                    assert "le" in s[1], s
                n = base
        names.add(n)
    for n in names:
        assert n.startswith("chashd_"), n
        assert n in helps and helps[n], "no HELP for " + n
        assert n in types, "no TYPE for " + n
        assert (types[n] == "counter") == n.endswith("_total"), n
    assert set(helps) == set(types) == names  # no family without samples

    members = {"web-1", "web-2", "web-3", ODD}
    for fam in ("chashd_member_active_connections",
                "chashd_member_connections_total",
                "chashd_member_received_bytes_total",
                "chashd_member_sent_bytes_total",
                "chashd_member_connect_failures_total",
                "chashd_member_up", "chashd_member_weight",
                "chashd_member_ramp_ratio", "chashd_member_share_ratio"):
        got = by_member(samples, fam)
        assert {m for p, m in got} == members, fam
        assert {p for p, m in got} == {"web"}, fam

    api = c.api.members("web")
    share = by_member(samples, "chashd_member_share_ratio")
    assert abs(sum(share.values()) - 1) < 1e-9
    conns = by_member(samples, "chashd_member_connections_total")
    sent = by_member(samples, "chashd_member_sent_bytes_total")
    for m in members:
        # the JSON API prints 12 significant digits, metrics 17
        assert abs(share[("web", m)] - api[m]["share"]) < 1e-11
        assert conns[("web", m)] == api[m]["connections_total"]
        assert sent[("web", m)] == api[m]["bytes_out"]
    assert sum(conns.values()) >= 30
    assert by_member(samples, "chashd_member_weight")[("web", ODD)] == 1

    # one state series per state, exactly one of them 1 per member
    states = [s for s in samples if s[0] == "chashd_member_state"]
    assert {s[1]["state"] for s in states} == \
        {"up", "down", "ejected", "draining", "maint"}
    for m in members:
        assert sum(s[2] for s in states if s[1]["member"] == m) == 1

    pool = {s[0]: s[2] for s in samples if s[1].get("pool") == "web" and
            "member" not in s[1] and "reason" not in s[1]}
    stats = c.api.pool("web")["stats"]
    assert pool["chashd_pool_connections_total"] == stats["accepted"] >= 30
    assert pool["chashd_pool_first_choice_total"] == stats["first_choice"]
    assert pool["chashd_pool_spills_total"] == stats["spilled"]
    assert pool["chashd_pool_failovers_total"] == stats["failed_over"]
    assert pool["chashd_pool_members"] == 4
    assert pool["chashd_pool_membership_changes_total"] == 1
    assert abs(pool["chashd_pool_last_change_moved_ratio"] -
               rep["moved"]) < 1e-11
    assert rep["moved"] > 0
    refused = {s[1]["reason"] for s in samples
               if s[0] == "chashd_pool_refused_total"}
    assert refused == {"limit", "error", "no_member"}

    proc = {s[0]: s for s in samples if "pool" not in s[1]}
    assert proc["chashd_build_info"][1]["version"]
    assert proc["chashd_uptime_seconds"][2] > 0
    reloads = {s[1]["result"]: s[2] for s in samples
               if s[0] == "chashd_config_reloads_total"}
    assert reloads == {"success": 1, "failure": 0}


def test_ejections_and_connect_failures_are_counted(cluster):
    c = cluster(3, pool_opts={"auto_eject_hosts": "true",
                              "server_failure_limit": 2,
                              "server_retry_timeout": 60000})
    ips = [client_ip(i) for i in range(100)]
    mine = [ip for ip in ips if c.api.lookup("web", ip) == ["web-2"]]
    assert len(mine) >= 4
    c.backends[1].stop()
    for ip in mine[:3]:
        # failover: the client is still served, by another member
        assert fetch(c.port, src=ip) in ("web-1", "web-3")
    # the control thread ejects it as soon as a worker reports the limit
    wait_for(lambda: c.api.members("web")["web-2"]["state"] == "ejected",
             what="web-2 to be ejected")
    # a client of web-2 now: its owner is known ejected when it is routed,
    # a failover (the fetches above may all have been routed before the
    # ejection was published: a first choice whose connect was retried)
    assert fetch(c.port, src=mine[3]) in ("web-1", "web-3")
    _, _, samples = scrape(c.api)
    ej = by_member(samples, "chashd_member_ejections_total")
    assert ej == {("web", "web-1"): 0, ("web", "web-2"): 1,
                  ("web", "web-3"): 0}
    fails = by_member(samples, "chashd_member_connect_failures_total")
    assert fails[("web", "web-2")] >= 2
    assert fails[("web", "web-1")] == fails[("web", "web-3")] == 0
    up = by_member(samples, "chashd_member_up")
    assert up[("web", "web-2")] == 0 and up[("web", "web-1")] == 1
    state = {s[1]["state"]: s[2] for s in samples
             if s[0] == "chashd_member_state" and s[1]["member"] == "web-2"}
    assert state["ejected"] == 1 and state["up"] == 0
    pool = {s[0]: s[2] for s in samples if s[1].get("pool") == "web" and
            "member" not in s[1] and "reason" not in s[1]}
    assert pool["chashd_pool_failovers_total"] >= 1
    assert pool["chashd_pool_failovers_total"] == \
        c.api.pool("web")["stats"]["failed_over"]
