# admin_util.py -- helpers for the admin API suites: configs with the admin
# API on, an HTTP client (http.client), the Prometheus text parser, headless
# Chromium, and the generator of src/api/dashboard.c from
# src/api/dashboard.html (run `/usr/bin/python3
# tests/integration/lib/admin_util.py --regen-dashboard`).
# SPDX-License-Identifier: BSD-2-Clause
import http.client
import json
import os
import re
import shutil
import subprocess
import signal
import sys
import tempfile
import types

import pytest

from base_util import can_connect, free_port, pool_yaml, wait_for

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__),
                                    "..", "..", ".."))
BUILD = os.environ.get("CHASH_BUILD", os.path.join(REPO, "build"))
CHASH = os.path.join(BUILD, "chash")
CHASHD = os.path.join(BUILD, "chashd")


def admin_global(admin_port, state_file=None, token=None, workers=2,
                 admin_host="127.0.0.1"):
    """The global: block with the admin API on <admin_port>."""
    lines = ["global:", "  admin: %s:%d" % (admin_host, admin_port),
             "  workers: %d" % workers]
    if state_file:
        lines.append("  state_file: %s" % state_file)
    if token:
        lines.append("  admin_token: %s" % token)
    return "\n".join(lines) + "\n"


class Cluster(types.SimpleNamespace):
    """A running chashd with its admin API, backends and config."""

    def restart(self, chashd, kill=signal.SIGKILL):
        """Stop chashd (SIGKILL by default: a crash) and start it again on
        the same config file."""
        self.d.proc.send_signal(kill)
        self.d.proc.wait(timeout=10)
        wait_for(lambda: not can_connect(self.admin_port),
                 what="the old admin port to close")
        self.d = chashd(self.text, self.port)
        wait_for(lambda: can_connect(self.admin_port), what="admin API")
        return self.d

    def state(self):
        with open(self.state_file) as f:
            return json.load(f)


@pytest.fixture
def cluster(backends, chashd, tmp_path):
    """cluster(n=3, token=None, pool_opts={}, extra="") -> Cluster: <n>
    `chash serve` backends web-1..web-n in pool "web" (tcp), the admin API
    on a free port, a state file in tmp_path."""
    def start(n=3, token=None, pool_opts=None, extra="", state=True):
        bs = backends(n)
        port, aport = free_port(), free_port()
        state_file = os.path.join(str(tmp_path), "state.json") if state \
            else None
        text = (admin_global(aport, state_file, token) +
                pool_yaml("web", port, bs, **(pool_opts or {})) + extra)
        d = chashd(text, port)
        wait_for(lambda: can_connect(aport), what="admin API")
        return Cluster(d=d, backends=bs, port=port, admin_port=aport,
                       api=Api(aport, token), state_file=state_file,
                       text=text, tmp=str(tmp_path))
    return start


class Api:
    """The admin API over real HTTP. Each call opens a connection (as
    curl would) and returns (status, parsed JSON or text, headers)."""

    def __init__(self, port, token=None, host="127.0.0.1"):
        self.host = host
        self.port = port
        self.token = token

    def raw(self, method, path, body=None, headers=None, token=None):
        h = dict(headers or {})
        tok = token if token is not None else self.token
        if tok:
            h["Authorization"] = "Bearer " + tok
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        # a body is JSON unless the test says otherwise (a header given as
        # None is left out: a request without a Content-Type)
        if body is not None:
            h.setdefault("Content-Type", "application/json")
        h = {k: v for k, v in h.items() if v is not None}
        c = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, data, dict(r.getheaders())
        finally:
            c.close()

    def call(self, method, path, body=None, **kw):
        status, data, headers = self.raw(method, path, body, **kw)
        ctype = headers.get("Content-Type", "")
        if ctype.startswith("application/json"):
            return status, json.loads(data), headers
        return status, data.decode("utf-8", "replace"), headers

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def ok(self, method, path, body=None, status=(200, 201)):
        """A call that must succeed; returns its JSON."""
        st, j, _ = self.call(method, path, body)
        assert st in (status if isinstance(status, tuple) else (status,)), \
            "%s %s -> %d %s" % (method, path, st, j)
        return j

    def pool(self, name):
        return self.ok("GET", "/api/pools/" + name)

    def members(self, name):
        return {m["name"]: m for m in self.pool(name)["members"]}

    def lookup(self, pool, key, replicas=1):
        j = self.ok("GET", "/api/pools/%s/lookup?key=%s&replicas=%d"
                    % (pool, key, replicas))
        return [m["name"] for m in j["members"]]


# ---- Prometheus text format 0.0.4 ---------------------------------------

METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(r"^(%s)(\{(?:%s)(?:,(?:%s))*\})? (\S+)$"
                    % (METRIC_NAME, LABEL, LABEL))
LABEL_ONE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"')


def unescape_label(v):
    out, i = [], 0
    while i < len(v):
        if v[i] == "\\" and i + 1 < len(v):
            out.append({"\\": "\\", '"': '"', "n": "\n"}[v[i + 1]])
            i += 2
        else:
            out.append(v[i])
            i += 1
    return "".join(out)


def parse_metrics(text):
    """Parse the exposition strictly. Returns (help, type, samples):
    help/type map family -> text/type; samples is a list of
    (name, {label: value}, float). Raises AssertionError on any line that
    is not a comment, HELP/TYPE, or `name{labels} value`."""
    helps, types, samples = {}, {}, []
    for n, line in enumerate(text.split("\n"), 1):
        if line == "":
            continue
        if line.startswith("# HELP "):
            name, _, h = line[7:].partition(" ")
            assert re.fullmatch(METRIC_NAME, name), line
            assert name not in helps, "HELP twice for " + name
            helps[name] = h
            continue
        if line.startswith("# TYPE "):
            name, _, t = line[7:].partition(" ")
            assert t in ("counter", "gauge", "histogram", "summary",
                         "untyped"), line
            assert name not in types, "TYPE twice for " + name
            types[name] = t
            continue
        assert not line.startswith("#") or line.startswith("# "), line
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "line %d is not `name{labels} value`: %r" % (n, line)
        labels = {k: unescape_label(v)
                  for k, v in LABEL_ONE.findall(m.group(2) or "")}
        value = float(m.group(3))
        samples.append((m.group(1), labels, value))
    return helps, types, samples


# ---- headless Chromium ---------------------------------------------------

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def chromium_args(profile):
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-dev-shm-usage",
            "--user-data-dir=" + profile, "--virtual-time-budget=5000"]


def dump_dom(url, timeout=60, extra=()):
    """The DOM of <url> after its scripts ran (a real browser); <extra>:
    more Chromium switches."""
    with tempfile.TemporaryDirectory(prefix="chash-chromium-") as prof:
        p = subprocess.run(chromium_args(prof) + list(extra) +
                           ["--dump-dom", url],
                           capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def screenshot(url, path, timeout=60):
    with tempfile.TemporaryDirectory(prefix="chash-chromium-") as prof:
        p = subprocess.run(chromium_args(prof) + [
            "--window-size=1200,900", "--screenshot=" + path, url],
            capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]


def dom_elements(dom, tag, cls):
    """Attribute dicts of every <tag class="cls" ...> in a dumped DOM."""
    out = []
    for m in re.finditer(r"<%s\b([^>]*)>" % tag, dom):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))
        if cls in attrs.get("class", "").split():
            out.append(attrs)
    return out


# ---- the embedded dashboard ----------------------------------------------

def dashboard_c(html):
    """src/api/dashboard.c for the bytes of src/api/dashboard.html."""
    out = ['/* dashboard.c -- GENERATED from src/api/dashboard.html: do not '
           'edit; edit',
           ' * the .html and run `/usr/bin/python3 '
           'tests/integration/lib/admin_util.py',
           ' * --regen-dashboard` (a test fails when the two differ).',
           ' * SPDX-License-Identifier: BSD-2-Clause',
           ' */',
           '#include "api/dashboard.h"',
           '',
           'const char dashboard_html[] =']
    for line in html.decode("utf-8").splitlines(keepends=True):
        s = ""
        for ch in line.encode("utf-8"):
            c = chr(ch)
            if c == "\\":
                s += "\\\\"
            elif c == '"':
                s += '\\"'
            elif c == "\n":
                s += "\\n"
            elif c == "?":
                s += "\\?"  # no trigraphs
            elif 32 <= ch < 127:
                s += c
            else:
                s += "\\%03o" % ch
        out.append('    "' + s + '"')
    out[-1] += ";"
    out.append("const size_t dashboard_html_len = sizeof(dashboard_html) - 1;")
    return "\n".join(out) + "\n"


def regen_dashboard():
    with open(os.path.join(REPO, "src", "api", "dashboard.html"), "rb") as f:
        text = dashboard_c(f.read())
    with open(os.path.join(REPO, "src", "api", "dashboard.c"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    if sys.argv[1:] == ["--regen-dashboard"]:
        regen_dashboard()
    else:
        sys.exit("usage: admin_util.py --regen-dashboard")
