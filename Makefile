# cinder — build with GNU make (why make and not CMake: one small C tree, no configure
# step, and per-file ISA flags for kernels are two pattern rules; see README).
#
#   make              libcinder.a, the cinder CLI, the unit-test binary
#   make test         everything, then all tests (unit, sanitizers, python checks)
#   make BUILD=dir    build into another folder (parallel checkouts, sanitizer builds)
#   make SAN=1        ASan + UBSan build (default folder build-san)
#   make cross-arm64  the NEON kernels built for arm64 and checked against ref under qemu
#   make check-layers the #include graph against DESIGN.md's layer rules (tools/layers.txt)

SAN     ?= 0
ifeq ($(SAN),1)
BUILD   ?= build-san
SANFLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
OPT     ?= -O1
else
BUILD   ?= build
SANFLAGS =
OPT     ?= -O2
endif

CC      ?= cc
# The library needs PCRE2 and jansson; only the HTTP server (its own archive, linked by
# the CLI and the tests) needs libmicrohttpd, so libcinder.so does not.
PKGS     = libpcre2-8 jansson
SERVE_PKGS = libmicrohttpd
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) $(SERVE_PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
SERVE_LIBS := $(shell pkg-config --libs $(SERVE_PKGS) 2>/dev/null)
CFLAGS  ?=
CFLAGS  += -std=c11 $(OPT) -g -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -Isrc \
           -fno-strict-aliasing -fPIC -fvisibility=hidden $(SANFLAGS) $(PKG_CFLAGS) -MMD -MP
LDFLAGS += $(SANFLAGS)
LDLIBS  += $(PKG_LIBS) -lpthread -lm

# Per-ISA kernel files: compiled with their ISA enabled, called only after dispatch
# checked the CPU (src/core/cpu.c). Everything else stays baseline x86-64 / arm64.
ARCH := $(shell uname -m)
ISA_AVX2   = -mavx2 -mfma -mf16c
ISA_AVX512 = -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512dq
ISA_AMX    = $(ISA_AVX512) -mamx-tile -mamx-int8
# The kernel files' functions are too large for gcc's variable tracking: it gives up on
# each ("size limit exceeded ... retrying without") after doing the work, so the debug
# info is the same without it and each file compiles in 60% of the time (same code).
# clang knows no such flag.
KERNEL_G  := $(shell $(CC) -fno-var-tracking-assignments -E -x c /dev/null >/dev/null 2>&1 && \
                     echo -fno-var-tracking-assignments)

LIB_SRC  := $(sort $(wildcard src/core/*.c src/gguf/*.c src/tensor/*.c src/kernels/*.c \
              src/kernels/ref/*.c src/kv/*.c src/model/*.c src/quant/*.c src/jinja/*.c src/text/*.c src/grammar/*.c \
              src/gen/*.c src/engine/*.c))
# The HTTP server: an archive of its own over the public API (tools/layers.txt: serve
# includes cinder.h only), linked by the CLI, the unit tests and the fuzz/alloc harnesses.
SERVE_SRC := $(sort $(wildcard src/serve/*.c))
ifeq ($(ARCH),x86_64)
LIB_SRC  += $(sort $(wildcard src/kernels/x86/*.c))
endif
ifeq ($(ARCH),aarch64)
LIB_SRC  += $(sort $(wildcard src/kernels/arm/*.c))
endif
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/*.c))
ifneq ($(ARCH),x86_64)
TEST_SRC := $(filter-out %_avx512.c,$(TEST_SRC))
endif
TOOL_SRC := $(sort $(wildcard tests/tools/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
SERVE_OBJ := $(SERVE_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)

LIB   := $(BUILD)/libcinder.a
SERVE_LIB := $(BUILD)/libcinder-serve.a
# The shared library: the same objects (all -fPIC, symbols hidden unless cinder.h marks
# them CN_API), soname libcinder.so.MAJOR. Not in the sanitizer build.
VERSION := $(shell sed -n 's/^\#define CN_VERSION "\(.*\)"/\1/p' include/cinder.h)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))
SO    := $(BUILD)/libcinder.so.$(VERSION)
CLI   := $(BUILD)/cinder
UNIT  := $(BUILD)/test_unit
# small test helpers run by tests/py (tests/tools/x.c -> $(BUILD)/tools/x)
TOOLS := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tools/%)
# benchmark programs in C (bench/x.c -> $(BUILD)/bench/x), built with everything else so
# that they keep compiling
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCHES := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

# Quiet by default (one line per file); V=1 shows full commands.
ifeq ($(V),1)
Q =
else
Q = @
endif

.PHONY: all test test-unit test-san test-py clean models
# Tiny random-weight models (qwen2, qwen3, llama) made by our own GGUF writer; the golden
# tests read them (and check their sha256 against the goldens). Made here rather than by
# the tests, since Criterion's runner does not cope with tests that fork.
TINY := $(patsubst %,$(BUILD)/tiny/tiny-%.gguf,qwen2 qwen3 llama)

all: $(LIB) $(SERVE_LIB) $(CLI) $(UNIT) $(TOOLS) $(BENCHES) $(TINY)
ifneq ($(SAN),1)
all: $(SO)
endif

$(BUILD)/tiny/tiny-%.gguf: $(BUILD)/tools/make_tiny_model
	@mkdir -p $(dir $@)
	@echo "  TINY    $@"
	$(Q)$< $* $@

# Objects are rebuilt when the flags change (another SAN, CC or CFLAGS into one folder):
# $(BUILD)/.cflags holds the last flags and is rewritten only when they differ.
FLAGS_STAMP := $(BUILD)/.cflags
$(shell mkdir -p $(BUILD) && { echo '$(CC) $(CFLAGS) $(KERNEL_NOSAN) $(KERNEL_G)' | cmp -s - $(FLAGS_STAMP) || \
    echo '$(CC) $(CFLAGS) $(KERNEL_NOSAN) $(KERNEL_G)' > $(FLAGS_STAMP); })

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/src/kernels/x86/%_avx2.o: src/kernels/x86/%_avx2.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC avx2 $<"
	$(Q)$(CC) $(filter-out $(KERNEL_NOSAN),$(CFLAGS)) $(ISA_AVX2) $(KERNEL_G) -c $< -o $@

$(BUILD)/obj/src/kernels/x86/%_avx512.o: src/kernels/x86/%_avx512.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC avx512 $<"
	$(Q)$(CC) $(filter-out $(KERNEL_NOSAN),$(CFLAGS)) $(ISA_AVX512) $(KERNEL_G) -c $< -o $@

$(BUILD)/obj/src/kernels/x86/%_amx.o: src/kernels/x86/%_amx.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC amx  $<"
	$(Q)$(CC) $(filter-out $(KERNEL_NOSAN),$(CFLAGS)) $(ISA_AMX) $(KERNEL_G) -c $< -o $@

# Test code built on a kernel template (tests/unit/amx_emu_avx512.c), like the kernels.
$(BUILD)/obj/tests/unit/%_avx512.o: tests/unit/%_avx512.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC avx512 $<"
	$(Q)$(CC) $(filter-out $(KERNEL_NOSAN),$(CFLAGS)) $(ISA_AVX512) $(KERNEL_G) -c $< -o $@

# The sanitized CLI (build-san/cinder: the server and the CLI the python checks run
# under ASan + UBSan) links its SIMD kernel files built a second time without the
# sanitizers, at -O2 as in the optimized build: ASan on them made a decoded token 8x
# slower (Qwen2.5-0.5B: 8 tok/s against 70), about all of the python checks' time under
# ASan, while everything a request runs besides the kernels (HTTP, JSON, the engine,
# tokenizers, templates, grammars) is sanitized all the same. The kernels themselves
# run under ASan + UBSan in the sanitized unit tests (build-san/test_unit: every family
# against ref on odd shapes and tails, the small models' goldens), which link the
# sanitized library whole, as do alloc_fail and api_test.
CLI_LIB := $(LIB)
ifeq ($(SAN),1)
FAST_KERNEL_SRC := $(filter src/kernels/x86/%_avx2.c src/kernels/x86/%_avx512.c src/kernels/x86/%_amx.c \
                     src/kernels/arm/%.c,$(LIB_SRC))
FAST_KERNEL_OBJ := $(FAST_KERNEL_SRC:%.c=$(BUILD)/obj-nosan/%.o)
FAST_CFLAGS = $(filter-out $(SANFLAGS) $(OPT),$(CFLAGS)) -O2 $(KERNEL_G)
CLI_LIB := $(BUILD)/libcinder-cli.a
$(CLI_LIB): $(filter-out $(FAST_KERNEL_SRC:%.c=$(BUILD)/obj/%.o),$(LIB_OBJ)) $(FAST_KERNEL_OBJ)
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^
$(BUILD)/obj-nosan/src/kernels/x86/%_avx2.o: src/kernels/x86/%_avx2.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC avx2 (no sanitizers) $<"
	$(Q)$(CC) $(FAST_CFLAGS) $(ISA_AVX2) -c $< -o $@
$(BUILD)/obj-nosan/src/kernels/x86/%_avx512.o: src/kernels/x86/%_avx512.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC avx512 (no sanitizers) $<"
	$(Q)$(CC) $(FAST_CFLAGS) $(ISA_AVX512) -c $< -o $@
$(BUILD)/obj-nosan/src/kernels/x86/%_amx.o: src/kernels/x86/%_amx.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC amx  (no sanitizers) $<"
	$(Q)$(CC) $(FAST_CFLAGS) $(ISA_AMX) -c $< -o $@
$(BUILD)/obj-nosan/src/kernels/arm/%.o: src/kernels/arm/%.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      (no sanitizers) $<"
	$(Q)$(CC) $(FAST_CFLAGS) -c $< -o $@
endif

# The chat page is embedded with .incbin (src/serve/page.c): rebuild when it changes.
$(BUILD)/obj/src/serve/page.o: src/serve/chat.html

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

$(SERVE_LIB): $(SERVE_OBJ)
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

$(SO): $(LIB_OBJ)
	@echo "  LD      $@"
	$(Q)$(CC) -shared -Wl,-soname,libcinder.so.$(SOMAJOR) -Wl,--no-undefined $(LDFLAGS) -o $@ $^ $(LDLIBS)
	$(Q)ln -sf libcinder.so.$(VERSION) $(BUILD)/libcinder.so.$(SOMAJOR)
	$(Q)ln -sf libcinder.so.$(SOMAJOR) $(BUILD)/libcinder.so

# make install [PREFIX=/usr/local] [DESTDIR=]: the header, both libraries, cinder.pc for
# pkg-config (cinder.pc.in with the prefix filled in) and the CLI.
PREFIX ?= /usr/local
INSTALL_DIR = $(DESTDIR)$(PREFIX)
.PHONY: install shared
shared: $(SO)
install: $(LIB) $(SO) $(CLI)
	@echo "  INSTALL $(INSTALL_DIR)"
	$(Q)install -d $(INSTALL_DIR)/include $(INSTALL_DIR)/lib/pkgconfig $(INSTALL_DIR)/bin
	$(Q)install -m 644 include/cinder.h include/cinder_gguf.h $(INSTALL_DIR)/include/
	$(Q)install -m 644 $(LIB) $(INSTALL_DIR)/lib/libcinder.a
	$(Q)install -m 755 $(SO) $(INSTALL_DIR)/lib/libcinder.so.$(VERSION)
	$(Q)ln -sf libcinder.so.$(VERSION) $(INSTALL_DIR)/lib/libcinder.so.$(SOMAJOR)
	$(Q)ln -sf libcinder.so.$(SOMAJOR) $(INSTALL_DIR)/lib/libcinder.so
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@PKGS@|$(PKGS)|' cinder.pc.in \
	    > $(INSTALL_DIR)/lib/pkgconfig/cinder.pc
	$(Q)install -m 755 $(CLI) $(INSTALL_DIR)/bin/cinder

$(CLI): $(CLI_OBJ) $(SERVE_LIB) $(CLI_LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(SERVE_LIB) $(CLI_LIB) $(SERVE_LIBS) $(LDLIBS)

$(UNIT): $(TEST_OBJ) $(SERVE_LIB) $(LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(SERVE_LIB) $(LIB) $(SERVE_LIBS) $(LDLIBS) -lcriterion

# Allocation-failure injection (tests/alloc/alloc_fail.c): every allocation the library
# makes goes through the test's counter (-Wl,--wrap), so each can be made to fail in
# turn; LeakSanitizer checks each run, so it is built in the sanitizer build only.
ALLOC_FAIL := $(BUILD)/tests/alloc_fail
ALLOC_WRAP := $(foreach f,malloc calloc realloc strdup strndup aligned_alloc,-Wl,--wrap=$(f))
# tests/api/api_test.c includes only the public headers: scripts/test_installed.sh builds it
# against the installed libcinder.so; the sanitizer build links it statically too.
API_TEST := $(BUILD)/tests/api_test
ifeq ($(SAN),1)
all: $(ALLOC_FAIL) $(API_TEST)
endif
$(API_TEST): tests/api/api_test.c include/cinder.h include/cinder_gguf.h $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) -std=c11 $(OPT) -g -Wall -Wextra -Werror $(SANFLAGS) -Iinclude -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)
$(ALLOC_FAIL): $(BUILD)/obj/tests/alloc/alloc_fail.o $(SERVE_LIB) $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) $(ALLOC_WRAP) -o $@ $< $(SERVE_LIB) $(LIB) $(SERVE_LIBS) $(LDLIBS)

$(TOOLS): $(BUILD)/tools/%: $(BUILD)/obj/tests/tools/%.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BENCHES): $(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# The README's test command, the whole setup on its own: scripts/setup.sh --all installs
# what is missing (Debian and Python packages, every model a test reads; each step checks
# first, so a second run only verifies), then scripts/test.sh builds and runs unit tests
# (optimized build, then ASan+UBSan build) and the python checks against independent
# implementations (gguf package, llama.cpp goldens). No prerequisite on `all`: the build
# needs the packages setup installs.
test:
	./scripts/setup.sh --all
	./scripts/test.sh

# Every model the tests read, into the model cache (skips what is present and correct).
models:
	./scripts/fetch_models.sh all

test-unit: $(UNIT)
	$(UNIT) --jobs 2

# The layer rules of DESIGN.md, kept as data in tools/layers.txt, against the real
# #include graph of src/ and include/: fails naming each arrow the rules do not allow.
.PHONY: check-layers
check-layers:
	$(Q)python3 tools/check_layers.py

# libFuzzer: every harness in tests/fuzz (the GGUF reader, tokenizer encode/decode, chat
# templates, the Jinja interpreter, the HTTP body -> engine request mapping, the stop-string
# stream filter),
# linked against a clang build of the library with ASan + UBSan in $(FUZZ_BUILD). Not part
# of `all`: the unit tests replay every committed corpus file and the GGUF seeds under
# the sanitizers (tests/unit/test_fuzz_corpus.c, test_gguf_fuzz.c).
#   make fuzz                build the harnesses
#   make fuzz FUZZ_S=600     and run each for 600 s on its corpus (new inputs go to
#                            $(FUZZ_BUILD)/corpus/NAME, crashes to $(FUZZ_BUILD)/crash-NAME-*;
#                            tests/fuzz/corpus/NAME is read, never written); fails,
#                            naming the harnesses, if any found a crash
FUZZ_CC    ?= clang-14
FUZZ_BUILD ?= build-fuzz
FUZZ_S     ?= 0
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS  := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz/fuzz_%)
.PHONY: fuzz fuzz-lib
fuzz: fuzz-lib
	$(Q)$(MAKE) --no-print-directory $(FUZZ_BINS)
	$(Q)if [ "$(FUZZ_S)" != 0 ]; then set -e; failed=; for n in $(FUZZ_NAMES); do \
	    mkdir -p $(FUZZ_BUILD)/corpus/$$n tests/fuzz/corpus/$$n; \
	    [ $$n != gguf ] || $(FUZZ_BUILD)/tools/gguf_tool seeds $(FUZZ_BUILD)/corpus/$$n >/dev/null; \
	    echo "  FUZZ    $$n for $(FUZZ_S) s"; \
	    if ! $(FUZZ_BUILD)/fuzz/fuzz_$$n -max_total_time=$(FUZZ_S) -print_final_stats=1 -max_len=8192 \
	        -artifact_prefix=$(FUZZ_BUILD)/crash-$$n- $(FUZZ_BUILD)/corpus/$$n tests/fuzz/corpus/$$n \
	        >$(FUZZ_BUILD)/fuzz-$$n.log 2>&1; then failed="$$failed $$n"; fi; \
	    grep -E '^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|^stat::peak_rss|^==[0-9]+==|^SUMMARY' \
	        $(FUZZ_BUILD)/fuzz-$$n.log || true; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: a harness failed:$$failed (log: $(FUZZ_BUILD)/fuzz-NAME.log, input: $(FUZZ_BUILD)/crash-NAME-*)" >&2; exit 1; fi; fi

# The SIMD kernel files are built without the sanitizers there (KERNEL_NOSAN): no harness
# reaches them, and clang's ASan takes many minutes over their intrinsics.
# FUZZ_SANITIZERS and FUZZ_COV pick the flavour: the default is ASan + UBSan with
# libFuzzer's full feedback; the long runs of docs/testing.md also use a build with
# FUZZ_COV=-fno-sanitize-coverage=trace-cmp (comparison tracing is ~70% of a grammar
# harness's time, perf; the corpus it saturated is the starting point) in its own
# FUZZ_BUILD.
FUZZ_SANITIZERS ?= address,undefined
FUZZ_COV ?=
FUZZ_SAN := -fsanitize=fuzzer-no-link,$(FUZZ_SANITIZERS) -fno-sanitize-recover=undefined $(FUZZ_COV)
fuzz-lib:
	$(Q)$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) SANFLAGS="$(FUZZ_SAN) -g" \
	    KERNEL_NOSAN="$(FUZZ_SAN)" OPT=-O1 $(FUZZ_BUILD)/libcinder.a $(FUZZ_BUILD)/libcinder-serve.a \
	    $(FUZZ_BUILD)/tools/gguf_tool

$(FUZZ_BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(FUZZ_BUILD)/libcinder.a $(FUZZ_BUILD)/libcinder-serve.a
	@mkdir -p $(dir $@)
	@echo "  LD fuzz $@"
	$(Q)$(FUZZ_CC) -std=c11 -g -O1 -D_GNU_SOURCE -Iinclude -Isrc $(PKG_CFLAGS) \
	    -fsanitize=fuzzer,$(FUZZ_SANITIZERS) -fno-sanitize-recover=undefined $(FUZZ_COV) -o $@ $< \
	    $(FUZZ_BUILD)/libcinder-serve.a $(FUZZ_BUILD)/libcinder.a $(SERVE_LIBS) $(PKG_LIBS) -lpthread -lm

# arm64 cross check, for x86 hosts (scripts/test.sh runs it there): every library and
# CLI source an aarch64 build compiles (so not kernels/x86) is compiled by $(ARM_CC) with
# the project's CFLAGS less the sanitizers; then tests/arm/check_kernels.c (the NEON
# family against ref, bit for bit; plain C, no Criterion for arm64 here) is linked
# statically against core + tensor + kernels only and run by qemu-aarch64 on an armv8.0
# CPU model, so nothing past baseline NEON can pass. The pcre2 and jansson headers are
# the same for every architecture, so the compile-only step may take them from
# /usr/include after the cross compiler's own. Objects stay apart in $(BUILD)/arm64/.
ARM_CC   ?= aarch64-linux-gnu-gcc
ARM_QEMU ?= qemu-aarch64 -cpu cortex-a53
ARM_DIR  := $(BUILD)/arm64
ARM_CFLAGS = $(filter-out $(SANFLAGS),$(CFLAGS)) -idirafter /usr/include
ARM_SRC  := $(sort $(wildcard src/core/*.c src/gguf/*.c src/tensor/*.c src/kernels/*.c \
              src/kernels/ref/*.c src/kernels/arm/*.c src/kv/*.c src/model/*.c src/quant/*.c src/jinja/*.c \
              src/text/*.c src/grammar/*.c src/gen/*.c src/engine/*.c src/serve/*.c src/cli/*.c))
ARM_OBJ  := $(ARM_SRC:%.c=$(ARM_DIR)/obj/%.o)
ARM_CHECK_OBJ := $(filter $(ARM_DIR)/obj/src/core/% $(ARM_DIR)/obj/src/tensor/% \
                   $(ARM_DIR)/obj/src/kernels/%,$(ARM_OBJ)) $(ARM_DIR)/obj/tests/arm/check_kernels.o
ARM_NEEDS = scripts/setup.sh installs them (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)

.PHONY: cross-arm64 arm64-tools
cross-arm64: $(ARM_OBJ) $(ARM_DIR)/check_kernels
	@echo "  QEMU    $(ARM_DIR)/check_kernels"
	$(Q)env -u CINDER_ISA -u CINDER_REF $(ARM_QEMU) $(ARM_DIR)/check_kernels
	$(Q)env -u CINDER_REF CINDER_ISA=ref $(ARM_QEMU) $(ARM_DIR)/check_kernels --dispatch ref
	$(Q)env -u CINDER_REF CINDER_ISA=avx2 $(ARM_QEMU) $(ARM_DIR)/check_kernels --dispatch neon

arm64-tools:
	@echo '#include <stdio.h>' | $(ARM_CC) -E -x c - >/dev/null 2>&1 || \
	    { echo "cross-arm64: no working $(ARM_CC) with arm64 libc headers; $(ARM_NEEDS)" >&2; exit 1; }
	@command -v $(firstword $(ARM_QEMU)) >/dev/null 2>&1 || \
	    { echo "cross-arm64: $(firstword $(ARM_QEMU)) not found; $(ARM_NEEDS)" >&2; exit 1; }

$(ARM_DIR)/obj/%.o: %.c | arm64-tools
	@mkdir -p $(dir $@)
	@echo "  CC a64  $<"
	$(Q)$(ARM_CC) $(ARM_CFLAGS) -c $< -o $@

$(ARM_DIR)/check_kernels: $(ARM_CHECK_OBJ)
	@echo "  LD a64  $@"
	$(Q)$(ARM_CC) -static -o $@ $^ -lpthread -lm

-include $(ARM_OBJ:.o=.d) $(ARM_DIR)/obj/tests/arm/check_kernels.d

clean:
	rm -rf build build-san

-include $(LIB_OBJ:.o=.d) $(SERVE_OBJ:.o=.d) $(FAST_KERNEL_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) \
         $(BUILD)/obj/tests/alloc/alloc_fail.d
