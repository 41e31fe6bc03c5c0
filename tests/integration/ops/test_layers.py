"""test_layers.py -- scripts/layers, the check `make test` runs on the
house's order (doc/internals/architecture.md): it passes on the tree as it
is, and fails, naming the file and the rule, when an include points up a
layer, when lib/ or cli/ reach where they may not, or when modules of one
layer include each other in a circle. Each broken case is a copy of the
tree with one line added.
SPDX-License-Identifier: BSD-2-Clause
"""
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
LAYERS = ROOT / "scripts" / "layers"


def layers(root):
    return subprocess.run([sys.executable, str(LAYERS), "--root", str(root)],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def tree(tmp_path):
    """A copy of the sources the check reads."""
    for top in ("src", "lib", "cli", "include"):
        shutil.copytree(ROOT / top, tmp_path / top,
                        ignore=shutil.ignore_patterns("*.o", "*.d"))
    return tmp_path


def add_include(path, inc):
    text = path.read_text()
    first = text.index("#include")
    path.write_text(text[:first] + '#include "%s"\n' % inc + text[first:])


def test_the_tree_as_it_is_passes(tree):
    r = layers(tree)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "layers: ok" in r.stdout
    assert "0 upward, 0 circles" in r.stdout


def test_an_include_up_a_layer_fails_naming_it(tree):
    # the data path reading a control-plane header
    add_include(tree / "src" / "data" / "splice.c", "control/etcd.h")
    r = layers(tree)
    assert r.returncode == 1
    assert ("layers: upward include data/splice -> control/etcd "
            "(control is above data)") in r.stdout, r.stdout
    assert 'src/data/splice.c includes "control/etcd.h"' in r.stdout
    assert "1 violation(s)" in r.stdout


def test_a_base_file_including_the_model_fails(tree):
    add_include(tree / "src" / "base" / "log.c", "model/pool.h")
    r = layers(tree)
    assert r.returncode == 1
    assert "upward include base/log -> model/pool" in r.stdout, r.stdout


def test_a_part_counts_as_its_module(tree):
    # conf_keys.c is a part of conf/conf: its include is conf/conf's
    add_include(tree / "src" / "conf" / "conf_keys.c", "loop/worker.h")
    r = layers(tree)
    assert r.returncode == 1
    assert "upward include conf/conf -> loop/worker" in r.stdout, r.stdout
    assert 'src/conf/conf_keys.c includes "loop/worker.h"' in r.stdout


def test_cli_may_use_only_conf_of_the_daemon(tree):
    add_include(tree / "cli" / "ctl.c", "model/pool.h")
    r = layers(tree)
    assert r.returncode == 1
    assert "cli/ctl -> model/pool (cli/ uses only cli/, conf/ and libchash)" \
        in r.stdout, r.stdout


def test_lib_may_not_reach_the_daemon(tree):
    add_include(tree / "lib" / "ring.c", "base/log.h")
    r = layers(tree)
    assert r.returncode == 1
    assert "lib/ring -> base/log (lib/ uses only lib/ and include/)" \
        in r.stdout, r.stdout


def test_a_circle_inside_one_layer_fails_naming_its_edges(tree):
    # proto/http already includes proto/tcp; the way back closes a circle
    assert '#include "proto/tcp.h"' in \
        (tree / "src" / "proto" / "http.c").read_text()
    add_include(tree / "src" / "proto" / "tcp.c", "proto/http.h")
    r = layers(tree)
    assert r.returncode == 1
    assert "layers: circle of includes among proto/http, proto/tcp:" \
        in r.stdout, r.stdout
    assert 'src/proto/tcp.c includes "proto/http.h"' in r.stdout


def test_a_circle_in_lib_fails(tree):
    (tree / "lib" / "zz_one.h").write_text('#include "zz_two.h"\n')
    (tree / "lib" / "zz_two.h").write_text('#include "zz_one.h"\n')
    r = layers(tree)
    assert r.returncode == 1
    assert "circle of includes among lib/zz_one, lib/zz_two" in r.stdout, \
        r.stdout
