# replication_util.py -- what the replication suites share
# (test_replication.py, test_replication_memcache.py): a replicated pool
# over real servers behind chashd with the admin API, its replication
# state (GET /api/pools/{pool}/replication), the replica set of each key
# (`chash lookup --config --replicas N`, independent of chashd), bounded
# waits for the repairs and fills, and stopping the clients' threads.
# SPDX-License-Identifier: BSD-2-Clause
import threading

from admin_util import Api, admin_global
from base_util import free_port, lookup_config, wait_for


class Replicated:
    """<n> servers made by <make_server>(procs), named <prefix>1.., and a
    chashd started by <start>(config text) with pool <pool> over them
    (replicas 3 unless given, timeout 2 s, the given pool keys) written
    by <pool_text>(pool, port, servers, names, **opts), and the admin
    API."""

    def __init__(self, procs, start, make_server, pool_text, pool, prefix,
                 n=3, **opts):
        self.procs = procs
        self.pool = pool
        self.servers = [make_server(procs) for _ in range(n)]
        self.names = ["%s%d" % (prefix, i + 1) for i in range(n)]
        self.aport, self.port = free_port(), free_port()
        opts.setdefault("replicas", 3)
        opts.setdefault("timeout", 2000)
        self.replicas = min(int(opts["replicas"]), n)
        workers = opts.pop("workers", 2)
        self.chashd = start(admin_global(self.aport, workers=workers) +
                            pool_text(pool, self.port, self.servers,
                                      self.names, **opts))
        self.api = Api(self.aport)
        # chashd compares every key's copies when it starts (writes may
        # have been on their way when it stopped): a test that edits the
        # members behind its back waits for that first
        if self.replicas > 1:
            wait_for(lambda: not self.rep()["verifying"], timeout=30,
                     interval=0.05, what="the start's comparison")

    def by_name(self, name):
        return self.servers[self.names.index(name)]

    def client(self, timeout=10.0):
        return self.chashd.client(timeout=timeout)

    def rep(self):
        st, body, _ = self.api.get("/api/pools/%s/replication" % self.pool)
        assert st == 200, body
        return body

    def member(self, name):
        return next(m for m in self.rep()["members"] if m["name"] == name)

    def sets(self, keys):
        """{key: [members of its replica set, primary first]}."""
        return lookup_config(self.chashd.conf, self.pool, keys,
                             replicas=self.replicas)

    def wait_repaired(self, timeout=30):
        def done():
            rep = self.rep()
            return not rep["verifying"] and all(
                m["readable"] and m["pending_keys"] == 0
                and not m["overflow"] for m in rep["members"])
        wait_for(done, timeout=timeout, interval=0.1,
                 what="every member repaired: %s" % self.rep())

    def wait_filled(self, fills, timeout=30):
        """Until <fills> fills are done and none runs."""
        wait_for(lambda: self.rep()["fills"] >= fills
                 and not self.rep()["filling"], timeout=timeout,
                 interval=0.1, what="the fill: %s" % self.rep())


def start_clients(stop, fns):
    """A thread per callable of <fns>, each called with <stop> (the
    event that ends its loop); started, returned."""
    threads = [threading.Thread(target=fn, args=(stop,)) for fn in fns]
    for t in threads:
        t.start()
    return threads


def join_all(stop, threads, timeout=30):
    """Tell the clients' threads to stop and wait for them (bounded)."""
    stop.set()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a client thread hangs"
