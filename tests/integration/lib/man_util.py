# man_util.py -- chash(1) as the suites read it: a line as the reader sees
# it (the escapes the page uses), the commands of its EXAMPLES with what
# each prints, and one example run as a user types it.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import subprocess

from base_util import BUILD

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__),
                                    "..", "..", ".."))
MAN = os.path.join(REPO, "doc", "chash.1")


def man_text(line):
    """A line of chash.1 as the reader sees it (the escapes it uses)."""
    return re.sub(r"\\(-|e|&|\(mu)", lambda m: {
        "-": "-", "e": "\\", "&": "", "(mu": "x"}[m.group(1)], line)


def man_examples():
    """[(command, expected output)] of the .EX blocks of EXAMPLES, in the
    page's order: a line "$ CMD" is a command, the lines after it up to
    the next "$ " are what it prints."""
    with open(MAN) as f:
        text = f.read().split("\n.SH EXAMPLES\n", 1)[1]
    out = []
    for block in re.findall(r"^\.EX\n(.*?)^\.EE$", text, re.M | re.S):
        for line in block.split("\n")[:-1]:
            line = man_text(line)
            if line.startswith("$ "):
                out.append([line[2:], []])
            else:
                assert out, "output before any command: %r" % line
                out[-1][1].append(line)
    return [(c, "".join(l + "\n" for l in o)) for c, o in out]


def run_example(cmd, expected, cwd, env=None):
    """Run one example as a user types it (chash from this build first in
    PATH); "cat FILE" writes the file the page shows instead."""
    m = re.fullmatch(r"cat (\S+)", cmd)
    if m:
        with open(os.path.join(cwd, m.group(1)), "w") as f:
            f.write(expected)
    e = dict(os.environ, **(env or {}))
    e["PATH"] = BUILD + os.pathsep + e.get("PATH", "")
    return subprocess.run(["bash", "-c", "set -o pipefail; " + cmd],
                          cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=120)
