#!/usr/bin/env bash
# Build and run the libFuzzer target for the server's JSON request parser.
#   tests/fuzz/run_fuzz.sh [SECONDS]     (default 60)
# Needs clang with libFuzzer (-fsanitize=fuzzer). The seed corpus is written to
# build/fuzz/corpus_request; crashes land in build/fuzz/ (crash-*). Exit status non-zero on a crash.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
CLANG=${CLANG:-clang}
OUT=build/fuzz
mkdir -p "$OUT/corpus_request"
"$CLANG" -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -Iinclude -Isrc $(pkg-config --cflags json-c) \
	tests/fuzz/fuzz_request.c src/server/request.c src/core/utf8.c src/core/buf.c -o "$OUT/fuzz_request" $(pkg-config --libs json-c)
# Seeds: route byte (0 embed, 1 openai, 2 tokenize, 3 predict, 4 rerank, 5 embed_all,
# 6 similarity, 7 decode; +8k varies max_inputs) + body.
seed() { printf "$1" > "$OUT/corpus_request/$2"; }
seed '\x00{"inputs": "hello world"}' s1
seed '\x00{"inputs": ["a", "b\\u00e9", "\\ud83d\\ude00"], "normalize": false, "truncate": true}' s2
seed '\x01{"input": [[101, 7592, 102], [101, 102]], "model": "m", "encoding_format": "base64"}' s3
seed '\x01{"input": [101, 2088, 102]}' s4
seed '\x02{"inputs": "tokenize me"}' s5
seed '\x01{"input": "x", "encoding_format": "float", "user": "u", "dimensions": null}' s6
seed '\x03{"inputs": [["a", "b"], ["c"]], "raw_scores": true}' s7
seed '\x03{"inputs": ["text", "pair"], "truncate": true}' s8
seed '\x04{"query": "q", "texts": ["a", "b\\u00e9"], "return_text": true}' s9
seed '\x00{"inputs": "x", "dimensions": 8, "truncation_direction": "left", "prompt_name": "q"}' s10
seed '\x05{"inputs": ["a", "b"], "truncate": true, "truncation_direction": "Right"}' s11
seed '\x06{"inputs": {"source_sentence": "a", "sentences": ["b", "c"]}, "parameters": null}' s12
seed '\x07{"ids": [[101, 7592, 102], []], "skip_special_tokens": false}' s13
seed '\x02{"inputs": ["a b"], "add_special_tokens": false, "prompt_name": "query"}' s14
exec "$OUT/fuzz_request" -max_total_time="$SECS" -max_len=4096 -timeout=5 \
	-artifact_prefix="$OUT/" "$OUT/corpus_request"
