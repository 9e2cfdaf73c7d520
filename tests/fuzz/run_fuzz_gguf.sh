#!/usr/bin/env bash
# Build and run the libFuzzer target of the GGUF reader (tests/fuzz/fuzz_gguf.c).
#   tests/fuzz/run_fuzz_gguf.sh [SECONDS]     (default 60)
# Needs clang with libFuzzer. Seeds (build/fuzz/corpus_gguf): a small file of every value type and
# dequantizable tensor type written by gguf-py's GGUFWriter (skipped without the gguf package).
# Crashes land in build/fuzz/ (crash-*). Exit status non-zero on a crash.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
CLANG=${CLANG:-clang}
OUT=build/fuzz
mkdir -p "$OUT/corpus_gguf"
"$CLANG" -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -Iinclude -Isrc $(pkg-config --cflags json-c) \
	tests/fuzz/fuzz_gguf.c src/core/gguf.c src/core/error.c src/core/file.c \
	src/core/safetensors.c src/core/json.c -o "$OUT/fuzz_gguf" $(pkg-config --libs json-c)
python3 - "$OUT/corpus_gguf" <<'PY' || echo "no gguf package: fuzzing without seeds"
import sys, numpy as np, gguf
from gguf import GGMLQuantizationType as QT, GGUFValueType as VT
rng = np.random.default_rng(1)
w = gguf.GGUFWriter(sys.argv[1] + "/seed.gguf", "llama")
w.add_uint32("a.u32", 7); w.add_int64("a.i64", -5); w.add_float64("a.f64", 0.5)
w.add_bool("a.b", True); w.add_string("a.s", "xyz"); w.add_array("a.as", ["p", "qr"])
w.add_array("a.ai", [1, -2]); w.add_array("a.af", [0.25]); w.add_uint32("general.alignment", 32)
w.add_tensor("f32", np.ones((2, 3), np.float32))
w.add_tensor("f16", np.ones(4, np.float16))
for qt, tsize in [(QT.Q4_0, 18), (QT.Q4_1, 20), (QT.Q8_0, 34), (QT.BF16, 2)]:
    blck = gguf.GGML_QUANT_SIZES[qt][0]
    w.add_tensor(qt.name, rng.integers(0, 256, (1, tsize * 32 // blck), dtype=np.uint8).astype(np.uint8) & 0x3f, raw_dtype=qt)
for qt in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
    tsize = gguf.GGML_QUANT_SIZES[qt][1]
    w.add_tensor(qt.name, (rng.integers(0, 256, (1, tsize), dtype=np.uint8) & 0x3f).astype(np.uint8), raw_dtype=qt)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
exec "$OUT/fuzz_gguf" -max_total_time="$SECS" -max_len=8192 -timeout=5 \
	-artifact_prefix="$OUT/" "$OUT/corpus_gguf"
