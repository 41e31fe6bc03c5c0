# Makefile -- one non-recursive GNU Makefile for libchash, chash and chashd.
# SPDX-License-Identifier: BSD-2-Clause
#
#   make                      build/libchash.{a,so}, build/chash, build/chashd
#   make test                 the layer check, unit tests (cmocka) and
#                             integration tests (pytest; the tcp ones twice:
#                             kernel fast path, splice)
#   make test SANITIZE=address,undefined   the same, built in build/sanitize
#   make run                  the demo (chashd --demo, three local backends)
#   make install [PREFIX=/usr/local] [DESTDIR=]   and make uninstall
#   make bench | fuzz         benchmarks against peers | libFuzzer targets
#   make soak [DURATION=5m]   every mode under traffic, changes and faults;
#                             RSS, fds, req/s, errors graphed in build/soak
#   make jepsen [DURATION=2m] the replication checker's whole matrix (redis
#                             and memcache, every fault, 1 and 2 workers);
#                             fails on any anomaly (doc/jepsen.md)
#   make valgrind             integration subset with chashd under memcheck
#   make reliability          all of it: fault suites, fuzzers, valgrind, soak
#   WERROR=1                  warnings are errors
#   FASTPATH=0                chashd without the tcp fast path (default: with
#                             it when clang and libbpf-dev are there)
#
# CFLAGS, CPPFLAGS and LDFLAGS are the user's (default CFLAGS: -O2 -g):
# `make CFLAGS=-O0` changes the optimisation and nothing else. What the
# build itself needs (C11, warnings, dependency files, hidden visibility,
# PIC, the sanitizers) lives in CHASH_* variables that always apply.

CC       ?= cc
SANITIZE ?=
WERROR   ?=
PYTHON   ?= /usr/bin/python3

# BUILD picks the output folder (helpers and CI may use their own).
BUILD    ?= build
ifeq ($(SANITIZE),)
B := $(BUILD)
SANFLAGS :=
else
B := $(BUILD)/sanitize
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wformat=2 -Wundef -Wvla
ifneq ($(WERROR),)
WARN += -Werror
endif

CFLAGS         ?= -O2 -g
CHASH_CPPFLAGS := -Iinclude -D_GNU_SOURCE
CHASH_CFLAGS   := -std=c11 -fPIC -fvisibility=hidden -MMD -MP $(WARN) \
                  $(SANFLAGS)
CHASH_LDFLAGS  := $(SANFLAGS)
LIBDEPS  := -lxxhash -lmd -lz -lm
DLIBS    := -lyaml -ljansson -lmicrohttpd -lcurl -lpthread

# Install layout. The config and the unit's -c follow SYSCONFDIR; chashd
# with no -c reads /etc/chashd/chashd.yml.
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
INSTALL    ?= install
VERSION := $(shell sed -n 's/^\#define CHASH_VERSION_STRING "\(.*\)"/\1/p' \
                       include/chash/chash.h)

LIB_SRC   := $(wildcard lib/*.c)
LIB_OBJ   := $(LIB_SRC:%.c=$(B)/%.o)
CLI_SRC   := $(wildcard cli/*.c)
CLI_OBJ   := $(CLI_SRC:%.c=$(B)/%.o)
D_LAYERS  := base conf proto loop model data control api
D_SRC     := src/main.c $(foreach l,$(D_LAYERS),$(wildcard src/$(l)/*.c))
D_OBJ     := $(D_SRC:%.c=$(B)/%.o)
# A module is src/<layer>/<name>.c with its parts src/<layer>/<name>_*.c
# (conf/conf is conf.c, conf_addr.c, conf_check.c...; the parts share
# <name>_int.h). with_parts turns module names into the files' stems.
with_parts = $(foreach m,$(1),$(m) \
    $(patsubst src/%.c,%,$(sort $(wildcard src/$(m)_*.c))))
# chash uses exactly one piece of the daemon: the config loader.
CLI_DOBJ  := $(patsubst %,$(B)/src/%.o,$(call with_parts,conf/conf)) \
             $(B)/src/conf/etcd_codec.o

# Unit tests: tests/unit/test_X.c becomes $(B)/tests/test_X and links
# libchash plus the daemon modules listed in UT_MODS_test_X (paths under
# src/ without .o; a module brings its parts), never the whole daemon: a test links what it tests,
# and a link error names a dependency nobody listed. A test of libchash
# alone needs no line. To give a test one more module (say src/loop/io.c),
# append it to its line:
#     UT_MODS_test_pool += loop/io
# and a new test tests/unit/test_Y.c needs only its own UT_MODS_test_Y.
# (pool reaches membership through health: a health transition is a
# membership event.)
UT_MODS_test_report    := model/report
UT_MODS_test_conf      := conf/conf conf/etcd_codec
UT_MODS_test_log       := base/log base/text
UT_MODS_test_pool      := model/pool conf/conf base/log control/health \
                          loop/control base/invariant loop/builder \
                          control/membership model/report model/state base/text proto/modes proto/tcp \
                          proto/redis proto/memcache proto/error proto/http \
                          control/migration model/migration_view \
                          model/replica_log \
                          model/fence \
                          base/stats api/metrics loop/rconn control/replica \
                          loop/access_log control/etcd \
                          conf/etcd_codec control/hot
UT_MODS_test_state     := model/state conf/conf conf/etcd_codec
UT_MODS_test_migration := $(UT_MODS_test_pool)
UT_MODS_test_tcp       := proto/modes proto/tcp proto/redis proto/memcache \
                          proto/error proto/http conf/conf conf/etcd_codec
UT_MODS_test_redis     := proto/redis proto/error
UT_MODS_test_memcache  := proto/memcache proto/error
UT_MODS_test_http      := proto/http proto/tcp
UT_MODS_test_proxy     := proto/proxy
UT_MODS_test_access_log := loop/access_log base/log base/invariant base/text
UT_MODS_test_etcd      := conf/etcd_codec
UT_MODS_test_hot       :=
UT_MODS_test_health    := $(UT_MODS_test_pool)
UT_SRC    := $(wildcard tests/unit/test_*.c)
UT_OBJ    := $(UT_SRC:%.c=$(B)/%.o)
UT_BIN    := $(UT_SRC:tests/unit/%.c=$(B)/tests/%)

TARGETS := $(B)/libchash.a $(B)/libchash.so $(B)/chash $(B)/chashd

.PHONY: all test unit integration integration-fastpath run bench fuzz clean \
        layers \
        deps format install uninstall soak valgrind reliability
all: $(TARGETS)

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CHASH_CPPFLAGS) $(CPPFLAGS) $(CHASH_CFLAGS) $(CFLAGS) -c -o $@ $<

# The daemon's files name each other's headers by layer ("base/log.h"),
# as the CLI names the config loader's; lib/ sees only include/.
$(D_OBJ) $(CLI_OBJ): CHASH_CPPFLAGS += -Isrc

# Unit tests see the library's and the daemon's internal headers.
$(UT_OBJ): CHASH_CPPFLAGS += -Ilib -Isrc

$(B)/libchash.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libchash.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libchash.so.0 $(CHASH_LDFLAGS) $(LDFLAGS) \
	    -o $@ $^ $(LIBDEPS)
	ln -sf libchash.so $(B)/libchash.so.0

$(B)/chash: $(CLI_OBJ) $(CLI_DOBJ) $(B)/libchash.a
	$(CC) $(CHASH_LDFLAGS) $(LDFLAGS) -o $@ $(CLI_OBJ) $(CLI_DOBJ) \
	    $(B)/libchash.a $(LIBDEPS) $(DLIBS)

# The tcp fast path (src/data/fastpath.c): src/data/bpf/fastpath.bpf.c built by
# clang for the BPF target, its object embedded in chashd as a byte array
# and loaded through libbpf. Without clang or libbpf chashd is built
# without it (`chashd -t` says so).
BPF_CLANG ?= clang
FASTPATH  ?= $(shell command -v $(BPF_CLANG) >/dev/null 2>&1 && \
                     pkg-config --exists libbpf 2>/dev/null && echo 1 || \
                     echo 0)
FP_LIBS   :=
ifeq ($(FASTPATH),1)
FP_OBJ    := $(B)/bpf/fastpath_obj.o
FP_LIBS   := $(shell pkg-config --libs libbpf)
$(B)/src/data/fastpath.o: CHASH_CPPFLAGS += -DCHASH_FASTPATH=1
$(B)/src/data/fastpath.o: $(FP_OBJ)
endif

$(B)/bpf/fastpath.bpf.o: src/data/bpf/fastpath.bpf.c src/data/bpf/fastpath_abi.h
	@mkdir -p $(dir $@)
	$(BPF_CLANG) -target bpf -O2 -g -Wall \
	    -I/usr/include/$(shell $(BPF_CLANG) -print-multiarch) -c -o $@ $<

$(B)/bpf/fastpath_obj.c: $(B)/bpf/fastpath.bpf.o
	@{ echo '/* generated from src/data/bpf/fastpath.bpf.c: do not edit */'; \
	  echo '#include <stddef.h>'; \
	  echo 'extern const unsigned char fastpath_bpf_obj[];'; \
	  echo 'extern const size_t fastpath_bpf_obj_len;'; \
	  echo 'const unsigned char fastpath_bpf_obj[] = {'; \
	  od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '};'; \
	  echo 'const size_t fastpath_bpf_obj_len = sizeof(fastpath_bpf_obj);'; \
	} >$@.tmp && mv $@.tmp $@

$(B)/bpf/fastpath_obj.o: $(B)/bpf/fastpath_obj.c
	$(CC) $(CHASH_CFLAGS) $(CFLAGS) -c -o $@ $<

$(B)/chashd: $(D_OBJ) $(FP_OBJ) $(B)/libchash.a
	$(CC) $(CHASH_LDFLAGS) $(LDFLAGS) -o $@ $(D_OBJ) $(FP_OBJ) \
	    $(B)/libchash.a $(LIBDEPS) $(DLIBS) $(FP_LIBS)

.SECONDEXPANSION:
$(UT_BIN): $(B)/tests/%: $(B)/tests/unit/%.o \
    $$(addprefix $(B)/src/,$$(addsuffix .o,$$(call with_parts,$$(UT_MODS_$$*)))) \
    $(B)/libchash.a
	$(CC) $(CHASH_LDFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) \
	    $(B)/libchash.a $(LIBDEPS) $(DLIBS) -lcmocka

# tests/diff/http_diff: chashd's http parser against libhttp-parser
# (libhttp-parser-dev) on generated requests; run by
# tests/integration/http/test_http_parser_diff.py. Two objects: the two
# parsers' headers cannot meet in one file (both name HTTP_GET...).
HTTP_DIFF_OBJ := $(B)/tests/diff/http_diff.o $(B)/tests/diff/hp_side.o
$(HTTP_DIFF_OBJ): CHASH_CPPFLAGS += -Isrc
$(B)/tests/http_diff: $(HTTP_DIFF_OBJ) $(B)/src/proto/http.o \
    $(B)/src/proto/tcp.o
	$(CC) $(CHASH_LDFLAGS) $(LDFLAGS) -o $@ $^ -lhttp_parser
-include $(HTTP_DIFF_OBJ:.o=.d)

deps:
	@scripts/deps

unit: $(UT_BIN)
	@set -e; for t in $(UT_BIN); do echo "== $$t"; $$t; done

# pytest exits 5 when it collects nothing: that is not a failure here.
# TEST_JOBS pytest processes (pytest-xdist) run the tests side by side:
# most tests wait on timers and real peers, so two on two cores take about
# 60% of the time of one. TEST_JOBS=1 runs them one by one.
TEST_JOBS ?= 2
integration: all
	@if ls tests/integration/*/test_*.py >/dev/null 2>&1; then \
	    CHASH_BUILD=$(abspath $(B)) CHASH_SANITIZE=$(SANITIZE) \
	    $(PYTHON) -m pytest -q $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS)) \
	        tests/integration; \
	fi

# The tcp suite once more with the kernel's fast path: `integration` runs
# tcp pools with chashd's splice (fast_path's default, off), this one with
# fast_path: sockmap where the kernel loads it; both ways must pass.
TCP_SUITE := $(wildcard tests/integration/tcp/test_*.py)
integration-fastpath: all
	CHASH_BUILD=$(abspath $(B)) CHASH_SANITIZE=$(SANITIZE) \
	    CHASHD_FAST_PATH=sockmap $(PYTHON) -m pytest -q \
	    $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS)) $(TCP_SUITE)

# layers: the house's order (scripts/layers, doc/internals/architecture.md):
# every #include and every call points down src/'s layers, no circles in
# src/, lib/ or cli/. Fails naming the upward edge or the circle.
layers: all
	@$(PYTHON) scripts/layers --build $(B)

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory layers
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory integration
	@$(MAKE) --no-print-directory integration-fastpath

run: deps
	@$(MAKE) --no-print-directory all
	@scripts/run-demo $(B)

# bench/mcload: the memcached load generator of bench/memcache.sh (libc
# only); built by make bench, not by make all.
$(B)/mcload: bench/mcload.c
	@mkdir -p $(dir $@)
	$(CC) $(CHASH_CPPFLAGS) $(CPPFLAGS) $(CHASH_CFLAGS) $(CFLAGS) \
	    $(CHASH_LDFLAGS) $(LDFLAGS) -pthread -o $@ $<

bench: deps
	@$(MAKE) --no-print-directory all $(B)/mcload
	@set -e; for s in bench/*.sh; do echo "== $$s"; B=$(B) $$s; done

fuzz: deps
	@scripts/fuzz

# soak: one chashd with a tcp, an http, a redis and a memcache pool under
# bounded mixed traffic, membership changes and faults for DURATION (30m,
# 90s, 300); fails on fd growth, RSS growth, a dead chashd or errors
# outside the fault windows (scripts/soak --help).
DURATION ?= 5m
soak: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) scripts/soak --build $(B) --duration $(DURATION) \
	    --out $(B)/soak

# jepsen: tests/integration/lib/jepsen_util.py's checker over every scenario
# (mode x fault x workers) for DURATION in total, default 2m here (not
# soak's 5m: DURATION counts only when given); prints a table, fails on
# any anomaly; histories of the failing scenarios in build/jepsen
# (scripts/jepsen --help).
.PHONY: jepsen
JEPSEN_DURATION = $(if $(filter command line environment, \
                  $(origin DURATION)),$(DURATION),2m)
jepsen: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) scripts/jepsen --build $(B) --out $(B)/jepsen \
	    --duration $(JEPSEN_DURATION)

# valgrind: a subset of tests/integration with chashd under memcheck;
# fails on any memcheck error or definite leak (scripts/valgrind).
valgrind: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) scripts/valgrind --build $(B)

# reliability: the suite of doc/reliability.md in one command -- the fault
# suites (tests/integration/faults/), every fuzzer for
# FUZZ_SECONDS (default 60), valgrind's subset, then a soak of DURATION.
# Stops at the first part that fails.
reliability: deps
	@$(MAKE) --no-print-directory all
	CHASH_BUILD=$(abspath $(B)) CHASH_SANITIZE=$(SANITIZE) \
	    $(PYTHON) -m pytest -q $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS)) \
	    tests/integration/faults
	scripts/fuzz
	@$(MAKE) --no-print-directory valgrind
	@$(MAKE) --no-print-directory soak DURATION=$(DURATION)

# ---- install ---------------------------------------------------------------
#
# The shared library is installed as libchash.so.VERSION with the soname
# link libchash.so.0 and the development link libchash.so. An existing
# $(SYSCONFDIR)/chashd/chashd.yml is the operator's: install never
# overwrites it and uninstall removes it only while it is still the
# shipped example. The unit's ExecStart and -c are rewritten for SBINDIR
# and SYSCONFDIR. Packagers run ldconfig and `systemctl daemon-reload`.

D := $(DESTDIR)
install: all
	$(INSTALL) -d $(D)$(BINDIR) $(D)$(SBINDIR) $(D)$(LIBDIR) \
	    $(D)$(INCLUDEDIR)/chash $(D)$(MANDIR)/man1 $(D)$(MANDIR)/man8 \
	    $(D)$(SYSCONFDIR)/chashd $(D)$(UNITDIR)
	$(INSTALL) -m 755 $(B)/chash $(D)$(BINDIR)/chash
	$(INSTALL) -m 755 $(B)/chashd $(D)$(SBINDIR)/chashd
	$(INSTALL) -m 644 $(B)/libchash.a $(D)$(LIBDIR)/libchash.a
	$(INSTALL) -m 755 $(B)/libchash.so $(D)$(LIBDIR)/libchash.so.$(VERSION)
	ln -sf libchash.so.$(VERSION) $(D)$(LIBDIR)/libchash.so.0
	ln -sf libchash.so.0 $(D)$(LIBDIR)/libchash.so
	$(INSTALL) -m 644 include/chash/chash.h $(D)$(INCLUDEDIR)/chash/chash.h
	$(INSTALL) -m 644 doc/chash.1 $(D)$(MANDIR)/man1/chash.1
	$(INSTALL) -m 644 doc/chashd.8 $(D)$(MANDIR)/man8/chashd.8
	sed -e 's|/usr/local/sbin/chashd|$(SBINDIR)/chashd|' \
	    -e 's|/etc/chashd/|$(SYSCONFDIR)/chashd/|' dist/chashd.service \
	    > $(D)$(UNITDIR)/chashd.service.tmp
	chmod 644 $(D)$(UNITDIR)/chashd.service.tmp
	mv -f $(D)$(UNITDIR)/chashd.service.tmp $(D)$(UNITDIR)/chashd.service
	@if [ -e $(D)$(SYSCONFDIR)/chashd/chashd.yml ]; then \
	    echo "install: keeping $(D)$(SYSCONFDIR)/chashd/chashd.yml"; \
	else \
	    echo "$(INSTALL) -m 644 conf/chashd.yml" \
	         "$(D)$(SYSCONFDIR)/chashd/chashd.yml"; \
	    $(INSTALL) -m 644 conf/chashd.yml \
	        $(D)$(SYSCONFDIR)/chashd/chashd.yml; \
	fi

uninstall:
	rm -f $(D)$(BINDIR)/chash $(D)$(SBINDIR)/chashd \
	    $(D)$(LIBDIR)/libchash.a $(D)$(LIBDIR)/libchash.so \
	    $(D)$(LIBDIR)/libchash.so.0 $(D)$(LIBDIR)/libchash.so.$(VERSION) \
	    $(D)$(INCLUDEDIR)/chash/chash.h $(D)$(MANDIR)/man1/chash.1 \
	    $(D)$(MANDIR)/man8/chashd.8 $(D)$(UNITDIR)/chashd.service
	rmdir $(D)$(INCLUDEDIR)/chash 2>/dev/null || true
	@c=$(D)$(SYSCONFDIR)/chashd/chashd.yml; \
	if [ -e $$c ] && cmp -s $$c conf/chashd.yml; then \
	    echo "rm -f $$c"; rm -f $$c; \
	    rmdir $(D)$(SYSCONFDIR)/chashd 2>/dev/null || true; \
	elif [ -e $$c ]; then \
	    echo "uninstall: keeping $$c (changed since install)"; \
	fi

format:
	clang-format -i include/chash/*.h lib/*.[ch] cli/*.[ch] src/*.c \
	    src/*/*.[ch] tests/unit/*.c tests/fuzz/*.c

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(D_OBJ:.o=.d) $(UT_OBJ:.o=.d)
