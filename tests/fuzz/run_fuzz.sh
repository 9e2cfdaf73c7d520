#!/usr/bin/env bash
# Build and run the libFuzzer targets of the server: the header checks (http_guard.c, a sixth of
# the time, at least 2 s), the generation routes' JSON (gen_request.c, a third, at least 2 s) and
# the JSON request parser (the rest).
#   tests/fuzz/run_fuzz.sh [SECONDS]     (default 60)
# Needs clang with libFuzzer (-fsanitize=fuzzer). The seed corpora are written to
# build/fuzz/corpus_*; crashes land in build/fuzz/ (crash-*). Exit status non-zero on a crash.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
GUARD_SECS=$(( SECS / 6 > 2 ? SECS / 6 : 2 ))
GEN_SECS=$(( SECS / 3 > 2 ? SECS / 3 : 2 ))
REQ_SECS=$(( SECS - GUARD_SECS - GEN_SECS > 1 ? SECS - GUARD_SECS - GEN_SECS : 1 ))
CLANG=${CLANG:-clang}
OUT=build/fuzz
mkdir -p "$OUT/corpus_request" "$OUT/corpus_http_guard" "$OUT/corpus_gen_request"
# core/buf.c's float writer calls Dragonbox through the one C++ unit (src/core/f32_shortest.cc)
DRAGONBOX_INC=${DRAGONBOX_INC:-$(ls -d /usr/include/dragonbox-* 2>/dev/null | head -1)}
[ -n "$DRAGONBOX_INC" ] || { echo "run_fuzz: Dragonbox headers not found (libdragonbox-dev)" >&2; exit 1; }
"$CLANG" -x c++ -std=c++17 -g -O1 -fno-exceptions -fno-rtti -fsanitize=fuzzer-no-link,address,undefined \
	-fno-sanitize-recover=undefined -Iinclude -Isrc -isystem "$DRAGONBOX_INC" \
	-c src/core/f32_shortest.cc -o "$OUT/f32_shortest.o"

# Header checks. Seeds: first byte 0 = HTTP/1.1, 1 = HTTP/1.0; then "name:value" lines. The
# request-smuggling cases (RFC 9112 sec. 6): two lengths, length with chunked, whitespace
# before the colon, a coding other than chunked.
"$CLANG" -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -Iinclude -Isrc -Iapp \
	tests/fuzz/fuzz_http_guard.c app/server/http_guard.c -o "$OUT/fuzz_http_guard"
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
gseed '\x00Host: x\r\n: a\r\nGET /smuggled HTTP/1.1\r\n\r\n' empty_name
gseed '\x00Host: x\n:\r\nX: y\r\n\r\n' empty_name_bare
gseed '\x00Content-Type: application/json; charset=utf-8\r\nAuthorization: Bearer k3y\r\nOrigin: http://a.example\r\nExpect: 100-continue\r\nContent-Length: 14\r\n' good
"$OUT/fuzz_http_guard" -max_total_time="$GUARD_SECS" -max_len=1024 -timeout=5 \
	-artifact_prefix="$OUT/" "$OUT/corpus_http_guard"

# The generation routes' JSON (parser and answer writers).
"$CLANG" -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -Iinclude -Isrc -Iapp $(pkg-config --cflags json-c) \
	tests/fuzz/fuzz_gen_request.c app/server/gen_request.c app/server/tool_call.c app/server/request.c \
	src/gen/grammar.c src/gen/grammar_api.c src/gen/json_schema.c src/core/utf8.c src/core/buf.c src/core/json.c src/core/file.c src/core/error.c \
	"$OUT/f32_shortest.o" -o "$OUT/fuzz_gen_request" \
	$(pkg-config --libs json-c) -lm
# Seeds: API byte (0 completions, 1 chat, 2 TGI generate, 3 TGI generate_stream; the higher bits
# vary max_prompts and max_messages) + body.
gen() { printf "$1" > "$OUT/corpus_gen_request/$2"; }
gen '\x00{"model": "m", "prompt": "Hello", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "stop": ["\\n"], "logprobs": 2, "echo": true, "seed": -3}' g1
gen '\x1c{"prompt": [[1, 2, 3], [4]], "n": 2, "best_of": 3, "logit_bias": {"50256": -100}, "stop_token_ids": [0]}' g2
gen '\x04{"prompt": ["a", "b\\u00e9"], "stream": true, "stream_options": {"include_usage": true}, "use_beam_search": true, "length_penalty": 0.5, "early_stopping": "never"}' g3
gen '\x01{"model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": null}], "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 5}' g4
gen '\xe1{"messages": [{"role": "developer", "content": "d"}, {"role": "tool", "content": "", "tool_call_id": "t"}], "stream": true, "tools": null, "response_format": {"type": "text"}, "min_p": 0.1, "top_k": -1}' g5
gen '\x02{"inputs": "Hello", "parameters": {"max_new_tokens": 5, "details": true, "decoder_input_details": true, "top_n_tokens": 2, "best_of": 2, "do_sample": true, "stop": ["x"]}}' g6
gen '\x03{"inputs": "\\ud83d\\ude00", "parameters": {"temperature": 0.5, "top_k": 10, "top_p": 0.95, "seed": 18446744073709551615, "truncate": 4, "watermark": false}}' g7
gen '\x02{"inputs": "x", "parameters": {"typical_p": 1, "repetition_penalty": 1.1, "frequency_penalty": 0.5, "return_full_text": true, "deadline_ms": 100}}' g8
gen '\x00{"prompt": "x", "guided_json": {"type": "object", "properties": {"a": {"type": "integer", "minimum": -5, "maximum": 90}, "b": {"type": "array", "items": {"enum": ["p", 1, null]}, "maxItems": 2}}, "required": ["a"]}}' g9
gen '\x01{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"anyOf": [{"type": "string", "pattern": "^[a-z]{1,3}(x|y)?$"}, {"$ref": "#/$defs/d"}], "$defs": {"d": {"type": "boolean"}}}}}}' g10
gen '\x02{"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "([0-9]{2}|\\\\w+)[^a-c]*\\\\.?"}}}' g11
gen '\x01{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\\"a\\": 1}"}}]}, {"role": "tool", "content": "r", "tool_call_id": "c"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}], "tool_choice": "required", "parallel_tool_calls": false}' t1
gen '\x01{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "f"}}, "stream": true}' t2
gen '\x00{"prompt": "x", "guided_choice": ["a", "b\\"c"], "structured_outputs": {"regex": "a"}}' g12
gen '\x00{"prompt": ["x", [1, 2]], "echo": true, "logprobs": 3, "max_tokens": 0, "prompt_logprobs": 2, "stream": false}' p1
gen '\x01{"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 20, "max_tokens": 1}' p2
"$OUT/fuzz_gen_request" -max_total_time="$GEN_SECS" -max_len=4096 -timeout=5 \
	-artifact_prefix="$OUT/" "$OUT/corpus_gen_request"

# JSON request parser.
"$CLANG" -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -Iinclude -Isrc -Iapp $(pkg-config --cflags json-c) \
	tests/fuzz/fuzz_request.c app/server/request.c src/core/utf8.c src/core/buf.c \
	src/core/json.c src/core/file.c src/core/error.c \
	"$OUT/f32_shortest.o" -o "$OUT/fuzz_request" $(pkg-config --libs json-c)
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
