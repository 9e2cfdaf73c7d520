#!/usr/bin/env python3
"""Random-weight decoder checkpoints for the generation serving benchmarks, as Hugging Face
directories that both `ragged serve` and transformers load (config.json + model.safetensors +
tokenizer.json); no download.

Shapes (the public configs, random weights from tests/py/make_decoder.py, seed 0):
  smollm2  SmolLM2-135M: Llama, hidden 576, 30 layers, 9 heads, 3 KV heads, intermediate 1536,
           vocab 49152, tied embeddings, rope_theta 100000, 8192 positions (134.5 M parameters)
  gpt2     GPT-2 small: hidden 768, 12 layers, 12 heads, vocab 50257, 1024 positions
           (too short for chunked_prefill.py's 2,000-token prompt + 32 streams: 2,304 positions)
  tiny     a small Llama for the 2-core CPU: hidden 256, 4 layers, 4 heads, 2 KV heads,
           intermediate 768, vocab 8192, 8192 positions (4.6 M parameters)

tokenizer.json is synthetic: a byte-level BPE whose vocabulary gives every id a distinct string
of 1-3 ASCII letters and digits (no merges, no special tokens). The prompts are token ids, so the
tokenizer only decodes; with it every generated token is visible text, and the server streams
one event per token (an id that decodes to nothing, e.g. a special token, is streamed with the
next one, which would blur the inter-token times). EOS is never hit: the benchmarks send
"ignore_eos" (and transformers gets eos_token_id None).

With --gguf it also writes OUT_DIR/model-f16.gguf: the same weights as llama.cpp's
convert_hf_to_gguf.py --outtype f16 writes them (tests/py/hf_to_gguf.py, the `gguf` package;
Llama-family kinds only), with the same vocabulary as tokenizer.json, so that ragged and a peer
can run the GGUF file of the issues' benchmarks ("the random SmolLM2-135M-shaped F16 GGUF").

Usage: python3 bench/serving/make_gen_model.py {smollm2|gpt2|tiny} OUT_DIR [--gguf]
       (or import: make(kind, out_dir) -> out_dir; skipped when OUT_DIR/config.json exists;
       make_gguf(kind, out_dir) -> the .gguf path)."""
import itertools
import json
import os
import string
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "py"))

SPECS = {
    "smollm2": ("llama", dict(H=576, heads=9, kv_heads=3, layers=30, inter=1536, vocab=49152,
                              max_pos=8192, tie=True, rope_theta=100000.0)),
    "gpt2": ("gpt2", dict(H=768, heads=12, layers=12, vocab=50257, n_pos=1024)),
    "tiny": ("llama", dict(H=256, heads=4, kv_heads=2, layers=4, inter=768, vocab=8192,
                           max_pos=8192, tie=True, rope_theta=100000.0)),
}


def _token_strings(n):
    """n distinct strings over [A-Za-z0-9], shortest first: every one is plain ASCII, so each
    id decodes to visible text by itself (byte-level BPE maps these characters to themselves)."""
    alpha = string.ascii_letters + string.digits
    out = []
    for k in itertools.count(1):
        for t in itertools.product(alpha, repeat=k):
            out.append("".join(t))
            if len(out) == n:
                return out


def write_tokenizer(out_dir, vocab):
    """tokenizer.json in HF `tokenizers`' format: BPE(vocab, merges []), ByteLevel
    pre-tokenizer and decoder."""
    vocab_map = {s: i for i, s in enumerate(_token_strings(vocab))}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab_map, "merges": []},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tok, f)


def make(kind, out_dir):
    if os.path.exists(os.path.join(out_dir, "config.json")) and \
            os.path.exists(os.path.join(out_dir, "tokenizer.json")):
        return out_dir
    import make_decoder
    family, spec = SPECS[kind]
    make_decoder.make(out_dir, family, seed=0, **spec)
    write_tokenizer(out_dir, spec["vocab"])
    return out_dir


def make_gguf(kind, out_dir):
    """out_dir/model-f16.gguf from out_dir's checkpoint (made first if missing)."""
    if SPECS[kind][0] != "llama":
        raise SystemExit(f"--gguf: {kind} is not a Llama-family shape")
    make(kind, out_dir)
    path = os.path.join(out_dir, "model-f16.gguf")
    if os.path.exists(path):
        return path
    import hf_to_gguf
    from safetensors.numpy import load_file
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    w = load_file(os.path.join(out_dir, "model.safetensors"))
    tmp = path + ".tmp"
    hf_to_gguf.write(tmp, cfg, w, f16=True, tokens=_token_strings(cfg["vocab_size"]),
                     eos_id=cfg.get("eos_token_id") or 0)
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--gguf"]
    if len(args) != 2 or args[0] not in SPECS:
        sys.exit(__doc__)
    print(make_gguf(*args) if "--gguf" in sys.argv else make(*args))
