# test_chashd_load.py -- slow start (a new member's share ramps up and
# only its keys move) and bounded loads (no member above the cap under
# many long connections from few addresses).
# SPDX-License-Identifier: BSD-2-Clause
import math
import re
import time

from base_util import (GLOBAL, KeepAlive, client_ip, fetch, free_port,
                       lookup_config, pool_yaml, wait_for)


def test_slow_start_moves_only_new_members_keys_gradually(backends, chashd):
    bs = backends(4)
    port = free_port()
    text = GLOBAL + pool_yaml("web", port, bs[:3], slow_start="3s")
    d = chashd(text, port)
    clients = [client_ip(i) for i in range(200)]
    before = {c: fetch(port, c) for c in clients}
    # members present at start-up are at full weight at once
    assert not re.search(r"ramping", d.log())
    d.reload(GLOBAL + pool_yaml("web", port, bs, slow_start="3s"))
    assert re.search(r"member web-4 \S+ added by reload, ramping", d.log())
    final = lookup_config(d.conf, "web", clients)
    target = {c for c in clients if final[c][0] == "web-4"}
    assert len(target) > 20
    samples = []
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        now = {c: fetch(port, c) for c in clients}
        # only keys moving onto the new member move
        for c in clients:
            assert now[c] in (before[c], "web-4"), (c, now[c])
        samples.append({c for c in clients if now[c] == "web-4"})
        if "ramp done" in d.log() and len(samples) > 1:
            break
        time.sleep(0.2)
    assert re.search(r"member web-4 \S+ ramp done", d.log())
    after = {c: fetch(port, c) for c in clients}
    assert {c for c in clients if after[c] == "web-4"} == target
    # monotone: a key on the new member stays there while it ramps
    for a, b in zip(samples, samples[1:]):
        assert a <= b
    sizes = [len(s) for s in samples]
    assert sizes[0] < len(target)
    assert any(0 < n < len(target) for n in sizes), sizes


def test_slow_start_after_recovery(backends, chashd):
    bs = backends(3)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml(
        "web", port, bs, slow_start="2s", on_failure="remap",
        health_check="{ type: tcp, interval: 100ms, timeout: 100ms, "
                     "rise: 1, fall: 1 }"), port)
    bs[2].stop()
    d.wait_log(r"member web-3 \S+ up -> down")
    bs[2].start()
    line = d.wait_log(r"member web-3 \S+ down -> up, ramping over 2000ms"
                      r".*moved ([0-9.]+)")
    assert float(line[0]) == 0.0       # enters at ramp 0: nothing moves yet
    m = d.wait_log(r"member web-3 \S+ ramp done.*share [0-9.]+ -> "
                   r"([0-9.]+)", timeout=5)
    assert float(m[0]) > 0.2


def test_bounded_load_caps_every_member(backends, chashd):
    bs = backends(3)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs, balance_factor=1.25),
               port)
    owner = lookup_config(d.conf, "web", ["127.0.0.7"])["127.0.0.7"][0]
    conns, counts = [], {}
    try:
        # 30 long connections from two addresses: without bounds they
        # would all sit on at most two members.
        for i in range(30):
            ka = KeepAlive(port, "127.0.0.7" if i % 2 else "127.0.0.8")
            conns.append(ka)
            m = ka.ask()
            counts[m] = counts.get(m, 0) + 1
            # the cap at this connection: ceil(1.25 * (live + 1) / 3);
            # allow for one connection of an earlier check still closing
            live = i + 1
            assert max(counts.values()) <= math.ceil(1.25 * (live + 1) / 3), \
                counts
        assert sum(counts.values()) == 30
        assert len(counts) == 3
        assert counts[owner] >= 1
    finally:
        for ka in conns:
            ka.close()
    # load gone: the owner is the first choice again (as soon as chashd
    # has seen the 30 closes)
    wait_for(lambda: fetch(port, "127.0.0.7") == owner, timeout=3,
             what="the owner to be chosen again")
