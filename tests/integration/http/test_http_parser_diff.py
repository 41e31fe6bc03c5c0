# test_http_parser_diff.py -- chashd's strict http parser against Debian's
# libhttp-parser (tests/diff/http_diff.c, linked with -lhttp_parser): on
# generated requests both accept, every field agrees; an input only one
# accepts is of a category the program expects for that side (ours is
# stricter by design; where libhttp-parser is, an allow-list with
# reasons). The program is built here with make, in the suite's build
# folder, since `make all` does not build it.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import subprocess

import pytest

from base_util import BUILD

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SANITIZE = os.environ.get("CHASH_SANITIZE", "")
DIFF = os.path.join(BUILD, "tests", "http_diff")


@pytest.fixture(scope="module")
def http_diff():
    if not os.path.exists("/usr/include/http_parser.h"):
        pytest.fail("libhttp-parser-dev is missing: run scripts/deps")
    # B is BUILD, or BUILD/sanitize when sanitized: give make the BUILD
    # that leads to the suite's folder.
    build = os.path.dirname(BUILD) if SANITIZE else BUILD
    r = subprocess.run(["make", "-s", "-C", ROOT, "BUILD=" + build,
                        "SANITIZE=" + SANITIZE, DIFF],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return DIFF


def run(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True,
                       timeout=120)
    m = re.search(r"^summary: inputs=(\d+) valid=(\d+) agree=(\d+) "
                  r"valid_agree=(\d+) close_wins=(\d+) failures=(\d+)$",
                  r.stdout, re.M)
    assert m, r.stdout + r.stderr
    keys = ("inputs", "valid", "agree", "valid_agree", "close_wins",
            "failures")
    return r, dict(zip(keys, map(int, m.groups())))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parsers_agree(http_diff, seed):
    r, s = run(http_diff, "-n", "1000", "-s", str(seed))
    print(r.stdout)
    assert r.returncode == 0 and s["failures"] == 0, r.stdout
    assert s["inputs"] == 1000
    # the valid requests are accepted by both, and agree on every field
    # (but the documented keep-alive reading of 1.0 requests that say
    # both keep-alive and close)
    assert s["valid_agree"] >= 0.9 * s["valid"], r.stdout
    assert s["valid"] >= 300
    # the mutations make both kinds of one-sided acceptance happen
    assert "obs_fold" in r.stdout and "chunk_no_crlf" in r.stdout
    assert "method_unknown" in r.stdout


def test_comparison_catches_a_difference(http_diff):
    """-k flips a bit of every target chashd's side accepted: the run must
    report the differences and fail, or the comparison checks nothing."""
    r, s = run(http_diff, "-k", "-n", "200")
    assert r.returncode == 1
    assert s["failures"] > 0 and s["agree"] == 0
    assert "the url differs" in r.stdout
