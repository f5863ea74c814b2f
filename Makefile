# libmor - the Makefile is the one build system.
#
#   make                 library (lib/), tools and examples (bin/)
#   make demo            convert a bundled checkpoint and generate from it
#   make test            the whole test suite; last line "N passed, N failed"
#   make fixtures        convert the test fixtures to GGUF (build/fixtures)
#   make test-sanitize   the C tests again under ASan + UBSan (build/san)
#   make install PREFIX=/usr/local DESTDIR=
#   make uninstall PREFIX=/usr/local DESTDIR=
#   make bench           bin/mor-bench (when src/tools/mor-bench.c exists)
#   make OMP=1           use OpenMP instead of the internal thread pool
#
# Variables: CC, CXX (header test), CFLAGS (extra), LDFLAGS (extra),
# OUT (output root, default .), SAN=1, PREFIX, LIBDIR, INCLUDEDIR, DESTDIR.
# Header dependencies are tracked with -MMD (files under $(OUT)/build/obj).

VERSION_MAJOR := $(shell sed -n 's/^\#define MOR_VERSION_MAJOR \([0-9]*\)/\1/p' include/mor.h)
VERSION_MINOR := $(shell sed -n 's/^\#define MOR_VERSION_MINOR \([0-9]*\)/\1/p' include/mor.h)
VERSION_PATCH := $(shell sed -n 's/^\#define MOR_VERSION_PATCH \([0-9]*\)/\1/p' include/mor.h)
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)
# While at 0.x a minor release may break the ABI, so the SONAME carries it.
ifeq ($(VERSION_MAJOR),0)
SOVER := 0.$(VERSION_MINOR)
else
SOVER := $(VERSION_MAJOR)
endif

CC      ?= cc
OUT     ?= .
BUILD   := $(OUT)/build/obj
LIBOUT  := $(OUT)/lib
BINOUT  := $(OUT)/bin
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DESTDIR ?=

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
OPT     ?= -O2
BASEFLAGS := -std=c11 $(OPT) -g $(WARN) -Iinclude -Isrc -D_GNU_SOURCE
LIBFLAGS  := -fPIC -fvisibility=hidden -DMOR_BUILD
LDLIBS  := -lm -lpthread
OMP_LIBS :=
ifeq ($(OMP),1)
BASEFLAGS += -fopenmp -DMOR_USE_OPENMP
LDLIBS  += -fopenmp
OMP_LIBS := -fopenmp
endif
ifeq ($(SAN),1)
BASEFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDLIBS  += -fsanitize=address,undefined
endif
ALL_CFLAGS := $(BASEFLAGS) $(CFLAGS)
# Dependency files: -MMD writes the headers each output includes; -MP adds
# empty rules so a deleted header does not break the build.
# Objects get theirs beside them, programs in $(DEPDIR).
DEPDIR  := $(BUILD)/dep
OBJDEP   = -MMD -MP
BINDEP   = -MMD -MP -MF $(DEPDIR)/$(notdir $@).d -MT $@

LIB_SRC     := $(sort $(wildcard src/*.c))
CONVERT_SRC := $(sort $(wildcard src/convert/*.c))
TOOL_SRC    := $(sort $(wildcard src/tools/*.c))
EXAMPLE_SRC := $(sort $(wildcard examples/*.c))
TEST_SRC    := $(sort $(wildcard tests/*.c))

LIB_OBJ     := $(LIB_SRC:src/%.c=$(BUILD)/lib/%.o)
CONVERT_OBJ := $(CONVERT_SRC:src/convert/%.c=$(BUILD)/convert/%.o)
TOOLS       := $(TOOL_SRC:src/tools/%.c=$(BINOUT)/%)
EXAMPLES    := $(EXAMPLE_SRC:examples/%.c=$(BINOUT)/example-%)
TESTS       := $(TEST_SRC:tests/%.c=$(OUT)/build/tests/%)

STATIC  := $(LIBOUT)/libmor.a
SHARED  := $(LIBOUT)/libmor.so.$(VERSION)
# The library's objects with their internal symbols still global: for the
# tools and tests, which may use internal headers. Never installed.
INTERNAL := $(BUILD)/libmor-internal.a
OBJCOPY ?= objcopy

.PHONY: all lib tools examples tests test test-sanitize install uninstall clean pc bench fixtures demo FORCE
# A recipe that fails leaves no half-written target behind.
.DELETE_ON_ERROR:
all: lib tools examples tests pc

lib: $(STATIC) $(SHARED)
tools: $(TOOLS)
examples: $(EXAMPLES)
tests: $(TESTS)
pc: $(LIBOUT)/pkgconfig/mor.pc

$(BUILD)/lib/%.o: src/%.c include/mor.h $(wildcard src/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LIBFLAGS) $(OBJDEP) -c $< -o $@

$(BUILD)/convert/%.o: src/convert/%.c include/mor.h $(wildcard src/*.h src/convert/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Isrc/convert $(OBJDEP) -c $< -o $@

$(INTERNAL): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

# The installed static library is one prelinked object whose hidden
# (internal) symbols are made local, so that only mor_* names can clash with
# the host program's (ggml, for one, has its own gguf_* functions).
$(STATIC): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ $(BUILD)/libmor-prelinked.o
	$(CC) -r -nostdlib -o $(BUILD)/libmor-prelinked.o $(LIB_OBJ)
	$(OBJCOPY) --localize-hidden $(BUILD)/libmor-prelinked.o
	ar rcs $@ $(BUILD)/libmor-prelinked.o

$(SHARED): $(LIB_OBJ) src/libmor.map
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(LIB_OBJ) -Wl,-soname=libmor.so.$(SOVER) \
	    -Wl,--version-script=src/libmor.map -Wl,--no-undefined $(LDFLAGS) $(LDLIBS)
	ln -sf libmor.so.$(VERSION) $(LIBOUT)/libmor.so.$(SOVER)
	ln -sf libmor.so.$(SOVER) $(LIBOUT)/libmor.so

# Tools and examples link statically: they run from a checkout with no
# LD_LIBRARY_PATH. Tools may use internal code; examples use only the public
# library. The converter also uses the checkpoint readers of src/convert.
$(BINOUT)/mor-convert: src/tools/mor-convert.c $(CONVERT_OBJ) $(INTERNAL)
	@mkdir -p $(dir $@) $(DEPDIR)
	$(CC) $(ALL_CFLAGS) -Isrc/convert $(BINDEP) $< $(CONVERT_OBJ) $(INTERNAL) $(LDFLAGS) $(LDLIBS) -o $@

$(BINOUT)/%: src/tools/%.c $(INTERNAL)
	@mkdir -p $(dir $@) $(DEPDIR)
	$(CC) $(ALL_CFLAGS) $(BINDEP) $< $(INTERNAL) $(LDFLAGS) $(LDLIBS) -o $@

$(BINOUT)/example-%: examples/%.c $(STATIC)
	@mkdir -p $(dir $@) $(DEPDIR)
	$(CC) $(ALL_CFLAGS) $(BINDEP) $< $(STATIC) $(LDFLAGS) $(LDLIBS) -o $@

# Tests may use internal headers (src/) and the converter's readers.
$(OUT)/build/tests/%: tests/%.c tests/check.h $(INTERNAL) $(CONVERT_OBJ)
	@mkdir -p $(dir $@) $(DEPDIR)
	$(CC) $(ALL_CFLAGS) -Isrc/convert -Itests $(BINDEP) $< $(CONVERT_OBJ) $(INTERNAL) $(LDFLAGS) $(LDLIBS) -o $@

-include $(wildcard $(BUILD)/lib/*.d $(BUILD)/convert/*.d $(DEPDIR)/*.d)

# mor.pc for the current PREFIX/LIBDIR/INCLUDEDIR: regenerated whenever one of
# them (or the version) changes, rewritten only when its text changes.
PC_SED = sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@OMP_LIBS@|$(OMP_LIBS)|' pkgconfig/mor.pc.in

$(LIBOUT)/pkgconfig/mor.pc: pkgconfig/mor.pc.in include/mor.h Makefile FORCE
	@mkdir -p $(dir $@)
	@$(PC_SED) > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; echo "generated $@"; fi

FORCE:

# Fixture models for the C tests: each official-code checkpoint in
# tests/data/fixtures/<variant>/hf_safetensors converted by bin/mor-convert to
# $(OUT)/build/fixtures/<variant>.st.gguf (only once the converter exists).
FIXTURE_VARIANTS := $(patsubst tests/data/fixtures/%/hf_safetensors/model.safetensors,%,\
                      $(sort $(wildcard tests/data/fixtures/*/hf_safetensors/model.safetensors)))
ifneq ($(wildcard src/tools/mor-convert.c),)
FIXTURE_GGUF := $(FIXTURE_VARIANTS:%=$(OUT)/build/fixtures/%.st.gguf)
endif
fixtures: $(FIXTURE_GGUF)

# The main job, until a trained model is bundled: convert one of the official
# code's checkpoints and generate from it, each token followed by its depth.
DEMO_GGUF := $(OUT)/build/demo/expert_mc3_fix.gguf
demo: all
	@mkdir -p $(dir $(DEMO_GGUF))
	$(BINOUT)/mor-convert tests/data/fixtures/expert_mc3_fix_perturbed/hf_bin -o $(DEMO_GGUF)
	$(BINOUT)/mor-run -m $(DEMO_GGUF) --ids 14,148,141,59,194,121,35,232 -n 24 --routing threshold --show-depth

$(OUT)/build/fixtures/%.st.gguf: tests/data/fixtures/%/hf_safetensors/model.safetensors \
                                 tests/data/fixtures/%/hf_safetensors/config.json \
                                 tests/data/fixtures/%/mor_cfg.yaml $(BINOUT)/mor-convert
	@mkdir -p $(dir $@)
	$(BINOUT)/mor-convert tests/data/fixtures/$*/hf_safetensors -o $@

test: all fixtures
	@OUT="$(OUT)" CC="$(CC)" CXX="$(CXX)" sh tests/run.sh

test-sanitize:
	$(MAKE) OUT=build/san SAN=1 all fixtures
	@OUT=build/san SANITIZE=1 CC="$(CC)" CXX="$(CXX)" sh tests/run.sh

# A benchmark tool, only when its source exists (it is built by `tools` too).
ifneq ($(wildcard src/tools/mor-bench.c),)
bench: $(BINOUT)/mor-bench
else
bench:
	@echo "bench: src/tools/mor-bench.c does not exist yet; nothing to build"
endif

# mor.pc is written straight from the template for this PREFIX/LIBDIR, so an
# install after a plain `make` (built for /usr/local) gets the right paths.
install: lib
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 include/mor.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/
	ln -sf libmor.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmor.so.$(SOVER)
	ln -sf libmor.so.$(SOVER) $(DESTDIR)$(LIBDIR)/libmor.so
	$(PC_SED) > $(DESTDIR)$(LIBDIR)/pkgconfig/mor.pc
	chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/mor.pc

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/mor.h $(DESTDIR)$(LIBDIR)/libmor.a $(DESTDIR)$(LIBDIR)/libmor.so*
	rm -f $(DESTDIR)$(LIBDIR)/pkgconfig/mor.pc

clean:
	rm -rf build bin lib/libmor.* lib/pkgconfig
