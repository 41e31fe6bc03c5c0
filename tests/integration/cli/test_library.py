"""test_library.py -- libchash as an outside C or C++ program sees it: the
public header alone, the shared and the static library, only public symbols.
SPDX-License-Identifier: BSD-2-Clause
"""
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("CHASH_BUILD", ROOT / "build"))
# A sanitizer build of the library needs the same runtime in the program.
SAN = os.environ.get("CHASH_SANITIZE", "")
SANFLAGS = [f"-fsanitize={SAN}"] if SAN else []


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def test_example_links_against_shared_library(tmp_path):
    exe = tmp_path / "shard"
    r = run(["cc", "-Wall", "-Werror", *SANFLAGS, f"-I{ROOT}/include",
             str(ROOT / "doc/examples/shard.c"), f"-L{BUILD}", "-l:libchash.so",
             "-o", str(exe)])
    assert r.returncode == 0, r.stderr
    r = run([str(exe)], env={**os.environ, "LD_LIBRARY_PATH": str(BUILD)})
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    # user:42 -> owner (replica other): two distinct members of the three
    owner = first.split(" -> ")[1].split(" ")[0]
    replica = first.split("(replica ")[1].rstrip(")")
    assert owner != replica
    assert {owner, replica} <= {"cache-1", "cache-2", "cache-3"}
    # cache-3 has weight 2 of 4: about half the circle
    share = float(second.split(": ")[1])
    assert 0.4 < share < 0.6


def test_example_links_statically(tmp_path):
    exe = tmp_path / "shard-static"
    r = run(["cc", *SANFLAGS, f"-I{ROOT}/include", str(ROOT / "doc/examples/shard.c"),
             str(BUILD / "libchash.a"), "-lxxhash", "-lmd", "-lz", "-lm",
             "-o", str(exe)])
    assert r.returncode == 0, r.stderr
    assert run([str(exe)]).returncode == 0


def test_header_is_self_contained_c_and_cxx(tmp_path):
    src = tmp_path / "h.c"
    src.write_text("#include <chash/chash.h>\nint main(void){return 0;}\n")
    for std in ("-std=c99", "-std=c11"):
        r = run(["cc", std, "-pedantic", "-Wall", "-Werror", f"-I{ROOT}/include",
                 "-fsyntax-only", str(src)])
        assert r.returncode == 0, r.stderr
    r = run(["g++", "-x", "c++", "-Wall", "-Werror", f"-I{ROOT}/include",
             "-fsyntax-only", str(src)])
    assert r.returncode == 0, r.stderr


def test_only_public_symbols_are_exported():
    r = run(["nm", "-D", "--defined-only", str(BUILD / "libchash.so")])
    assert r.returncode == 0, r.stderr
    names = [line.split()[-1] for line in r.stdout.splitlines() if line.strip()]
    assert "chash_ring_create" in names and "chash_ring_lookup" in names
    leaked = [n for n in names if not n.startswith("chash_") or n.startswith("chash__")]
    assert leaked == []
