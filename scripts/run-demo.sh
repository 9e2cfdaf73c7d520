#!/usr/bin/env bash
# `make run`: embed a few sample sentences with the default model (all-MiniLM-L6-v2) and print them,
# generate a short continuation with the default generation model (SmolLM2-135M-Instruct, GGUF, on
# the CPU), then serve the embedding model over HTTP (GPU when one is present, else CPU) until Ctrl-C.
# RAGGED_PORT (default 8080) and RAGGED_HOST (default 127.0.0.1) choose the address; RAGGED_NO_SERVE=1
# stops after the embeddings.
set -euo pipefail
cd "$(dirname "$0")/.."
cat > build/demo.txt <<'TXT'
The cat sits on the mat.
A kitten is resting on a rug.
Stock markets fell sharply on Monday.
Padding-free batching serves short and long requests together.
TXT
echo "$ build/ragged info"
build/ragged info
echo "$ build/ragged embed --input build/demo.txt --output build/demo.jsonl"
build/ragged embed --input build/demo.txt --output build/demo.jsonl
python3 - <<'PY'
import json
texts = open("build/demo.txt").read().splitlines()
embs = [json.loads(l) for l in open("build/demo.jsonl")]
for t, e in zip(texts, embs):
    print(f"{t!r:70} dim={len(e)} [{', '.join(f'{x:+.4f}' for x in e[:6])}, ...]")
print("cosine similarity:")
for i, a in enumerate(embs):
    print("  " + " ".join(f"{sum(x*y for x, y in zip(a, b)):.3f}" for b in embs))
PY

printf 'The three primary colors are\ndef fibonacci(n):\n' > build/demo_prompts.txt
echo "$ build/ragged generate --device cpu --max-tokens 16 --input build/demo_prompts.txt"
build/ragged generate --device cpu --max-tokens 16 --input build/demo_prompts.txt --no-progress
echo "$ echo 'Write a haiku about GPUs.' | build/ragged generate --chat --max-tokens 40 --stream"
echo 'Write a haiku about GPUs.' | build/ragged generate --device cpu --chat --max-tokens 40 --stream

[ "${RAGGED_NO_SERVE:-0}" = 1 ] && exit 0
HOST=${RAGGED_HOST:-127.0.0.1}
PORT=${RAGGED_PORT:-8080}
cat <<TXT

Starting the server on http://$HOST:$PORT (Ctrl-C stops it). Example requests:
  curl -s http://$HOST:$PORT/embed -H 'Content-Type: application/json' -d '{"inputs": ["The cat sits on the mat."]}'
  curl -s http://$HOST:$PORT/v1/embeddings -H 'Content-Type: application/json' -d '{"input": ["hello", "world"], "model": "all-MiniLM-L6-v2"}'
  curl -s http://$HOST:$PORT/metrics
TXT
exec build/ragged serve --host "$HOST" --port "$PORT"
