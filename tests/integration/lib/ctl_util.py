# ctl_util.py -- `chash ctl` against a running chashd (admin_util's
# cluster): one command with its exit status checked, and the ctl examples
# of chash(1) with the page's addresses replaced by the cluster's, each
# run and compared with what the page prints.
# SPDX-License-Identifier: BSD-2-Clause
import re
import subprocess

from admin_util import CHASH
from man_util import man_examples, run_example


def ctl(c, *args, token=None, check=None):
    argv = [CHASH, "ctl", "--admin", "127.0.0.1:%d" % c.admin_port]
    if token:
        argv += ["--token", token]
    p = subprocess.run(argv + list(args), capture_output=True, text=True,
                       timeout=30)
    if check is not None:
        assert p.returncode == check, (args, p.returncode, p.stdout, p.stderr)
    return p


def ctl_examples(c, extra_addr):
    """The `chash ctl` examples of chash(1) with the page's addresses
    127.0.0.1:9001.. replaced by the cluster's members' (and :9004 by
    <extra_addr>), in the page's order."""
    addrs = {"127.0.0.1:900%d" % (i + 1): b.addr
             for i, b in enumerate(c.backends)}
    addrs["127.0.0.1:9004"] = extra_addr

    def fix(text):
        return re.sub(r"127\.0\.0\.1:900\d", lambda m: addrs[m.group(0)],
                      text)
    return [(fix(cmd), fix(out)) for cmd, out in man_examples()
            if cmd.startswith("chash ctl")]


def blanks_apart(text):
    """Lines as words: addresses of another length shift the columns."""
    return [line.split() for line in text.splitlines()]


def run_ctl_examples(c, examples):
    env = {"CHASH_ADMIN": "127.0.0.1:%d" % c.admin_port}
    for cmd, expected in examples:
        p = run_example(cmd, expected, c.tmp, env)
        assert p.returncode == 0, (cmd, p.stderr)
        assert blanks_apart(p.stdout) == blanks_apart(expected), \
            "%s\n%s" % (cmd, p.stdout)
