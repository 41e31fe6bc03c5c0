# Makefile -- one non-recursive GNU Makefile for libchash, chash and chashd.
# SPDX-License-Identifier: BSD-2-Clause
#
#   make                      build/libchash.{a,so}, build/chash, build/chashd
#   make test                 unit tests (cmocka) and integration tests (pytest)
#   make test SANITIZE=address,undefined   the same, built in build/sanitize
#   make run                  the demo on the embedded default config
#   make bench | fuzz         benchmarks against peers | libFuzzer targets
#   WERROR=1                  warnings are errors

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

CPPFLAGS += -Iinclude -D_GNU_SOURCE
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -fPIC -fvisibility=hidden -MMD -MP $(WARN) $(SANFLAGS)
LDFLAGS  += $(SANFLAGS)
LIBDEPS  := -lxxhash -lmd -lz -lm
DLIBS    := -lyaml -ljansson -lmicrohttpd -lpthread

LIB_SRC   := $(wildcard lib/*.c)
LIB_OBJ   := $(LIB_SRC:%.c=$(B)/%.o)
CLI_SRC   := $(wildcard cli/*.c)
CLI_OBJ   := $(CLI_SRC:%.c=$(B)/%.o)
D_SRC     := $(wildcard src/*.c src/proto/*.c)
D_OBJ     := $(D_SRC:%.c=$(B)/%.o)
D_MAIN    := $(B)/src/main.o
D_LIBOBJ  := $(filter-out $(D_MAIN),$(D_OBJ))
# chash uses exactly one piece of the daemon: the config loader.
CLI_DOBJ  := $(filter $(B)/src/conf.o $(B)/src/addr.o,$(D_OBJ))
UT_SRC    := $(wildcard tests/unit/test_*.c)
UT_BIN    := $(UT_SRC:tests/unit/%.c=$(B)/tests/%)

TARGETS := $(B)/libchash.a $(B)/libchash.so $(B)/chash
ifneq ($(wildcard src/main.c),)
TARGETS += $(B)/chashd
endif

.PHONY: all test unit integration run bench fuzz clean deps format
all: $(TARGETS)

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(B)/libchash.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libchash.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libchash.so.0 $(LDFLAGS) -o $@ $^ $(LIBDEPS)
	ln -sf libchash.so $(B)/libchash.so.0

$(B)/chash: $(CLI_OBJ) $(CLI_DOBJ) $(B)/libchash.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(CLI_DOBJ) $(B)/libchash.a $(LIBDEPS) $(DLIBS)

$(B)/chashd: $(D_OBJ) $(B)/libchash.a
	$(CC) $(LDFLAGS) -o $@ $(D_OBJ) $(B)/libchash.a $(LIBDEPS) $(DLIBS)

# Unit tests link the library and the daemon's modules (all but main).
$(B)/tests/%: tests/unit/%.c $(B)/libchash.a $(D_LIBOBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Ilib -Isrc $(CFLAGS) $(LDFLAGS) -o $@ $< $(D_LIBOBJ) \
	    $(B)/libchash.a $(LIBDEPS) $(DLIBS) -lcmocka

deps:
	@scripts/deps

unit: $(UT_BIN)
	@set -e; for t in $(UT_BIN); do echo "== $$t"; $$t; done

# pytest exits 5 when it collects nothing: that is not a failure here.
integration: all
	@if ls tests/integration/test_*.py >/dev/null 2>&1; then \
	    CHASH_BUILD=$(abspath $(B)) CHASH_SANITIZE=$(SANITIZE) \
	    $(PYTHON) -m pytest -q tests/integration; \
	fi

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory integration

run: deps
	@$(MAKE) --no-print-directory all
	@scripts/run-demo $(B)

bench: deps
	@$(MAKE) --no-print-directory all
	@set -e; for s in bench/*.sh; do echo "== $$s"; B=$(B) $$s; done

fuzz: deps
	@scripts/fuzz

format:
	clang-format -i include/chash/*.h lib/*.[ch] cli/*.[ch] src/*.[ch] tests/unit/*.c

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(D_OBJ:.o=.d)
