#!/usr/bin/env bash
# Build and run the libFuzzer targets of the server: the header checks (http_guard.c, a sixth of
# the time, at least 2 s) and the JSON request parser (the rest).
#   tests/fuzz/run_fuzz.sh [SECONDS]     (default 60)
# Needs clang with libFuzzer (-fsanitize=fuzzer). The seed corpora are written to
# build/fuzz/corpus_*; crashes land in build/fuzz/ (crash-*). Exit status non-zero on a crash.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
GUARD_SECS=$(( SECS / 6 > 2 ? SECS / 6 : 2 ))
REQ_SECS=$(( SECS - GUARD_SECS > 1 ? SECS - GUARD_SECS : 1 ))
CLANG=${CLANG:-clang}
OUT=build/fuzz
mkdir -p "$OUT/corpus_request" "$OUT/corpus_http_guard"

# Header checks. Seeds: first byte 0 = HTTP/1.1, 1 = HTTP/1.0; then "name:value" lines. The
# request-smuggling cases (RFC 9112 sec. 6): two lengths, length with chunked, whitespace
# before the colon, a coding other than chunked.
"$CLANG" -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -Iinclude -Isrc \
	tests/fuzz/fuzz_http_guard.c src/server/http_guard.c -o "$OUT/fuzz_http_guard"
gseed() { printf "$1" > "$OUT/corpus_http_guard/$2"; }
gseed '\x00Host: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n' cl_twice
gseed '\x00Host: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n' cl_te
gseed '\x00Host: x\r\nContent-Length : 5\r\n' space_colon
gseed '\x00Transfer-Encoding: gzip, chunked\r\n' te_gzip
gseed '\x01Transfer-Encoding: chunked\r\n' te_http10
gseed '\x00Host: x\r\nContent-Length:\r\n 14\r\n\r\n' obs_fold_cl
gseed '\x00Host: localhost:8080\r\nX-A: a\r\n\tb\r\nX-B: c\r\n\r\n' obs_fold
gseed '\x00Host: x\r\nX-A: a\x00b\r\nX-B: c\n\n' nul_value
gseed '\x00Host: [::1]:80\r\nX-A:   \r\nX-B:\r\n\r\n' blanks
gseed '\x00Content-Type: application/json; charset=utf-8\r\nAuthorization: Bearer k3y\r\nOrigin: http://a.example\r\nExpect: 100-continue\r\nContent-Length: 14\r\n' good
"$OUT/fuzz_http_guard" -max_total_time="$GUARD_SECS" -max_len=1024 -timeout=5 \
	-artifact_prefix="$OUT/" "$OUT/corpus_http_guard"

# JSON request parser.
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
exec "$OUT/fuzz_request" -max_total_time="$REQ_SECS" -max_len=4096 -timeout=5 \
	-artifact_prefix="$OUT/" "$OUT/corpus_request"
