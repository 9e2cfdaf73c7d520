"""Encoder families at their public sizes, on the GPU machine (tests/gpu/run.sh runs it).

For each family (random weights, the public config's sizes: roberta-base, xlm-roberta-base,
distilbert-base-uncased, bert-base-uncased, mpnet-base as in all-mpnet-base-v2), three checks:
  1. the float64 NumPy reference (tests/py/ref_bert.py) against Hugging Face transformers run in
     float64 on the CPU: the reference's family semantics (weight names, positions from
     padding_idx + 1 with pad ids inside a sequence, no token types, MPNet's relative position
     bias over sequences up to 512 tokens, past its 128-distance buckets) are HF's;
  2. ragged on the CPU, fp32, against the reference: max row-relative error <= 1e-5;
  3. ragged on CUDA in fp32 (rel <= 1e-4), fp16 (cosine >= 0.9999) and bf16 (cosine >= 0.999),
     with CUDA graphs (bucketed) and without (eager), packed and in the padded / concat / slotted
     layouts.
Writes one JSON file with every measured number and the verdicts; exit status 1 if any check
failed. Usage: python3 tests/gpu/families.py --minilm DIR --out FILE [--work DIR]
[--models NAME,...] (a subset of PUBLIC's names, e.g. deberta-v3-base,deberta-v3-reranker)
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
import make_tiny  # noqa: E402
import ragged_ctypes as rc  # noqa: E402
from ref_bert import RefBert  # noqa: E402
from test_model import layouts  # noqa: E402

# public configs' sizes (the models' config.json on the Hugging Face hub)
PUBLIC = {
    "roberta-base": dict(family="roberta", H=768, heads=12, layers=12, inter=3072, act="gelu",
                         pooling="mean", max_pos=514, pad=1, vocab=50265),
    "xlm-roberta-base": dict(family="xlm-roberta", H=768, heads=12, layers=12, inter=3072,
                             act="gelu", pooling="cls", max_pos=514, pad=1, vocab=250002),
    "distilbert-base-uncased": dict(family="distilbert", H=768, heads=12, layers=6, inter=3072,
                                    act="gelu", pooling="mean", max_pos=512, vocab=30522),
    "bert-base-uncased": dict(H=768, heads=12, layers=12, inter=3072, act="gelu",
                              pooling="mean", max_pos=512),
    "albert-base-v2": dict(family="albert", H=768, E=128, heads=12, layers=12, inter=3072,
                           act="gelu_new", pooling="mean", max_pos=512, vocab=30000,
                           tokenizer="spm-albert-style"),
    # a cross-encoder (BertForSequenceClassification, one score) at ms-marco-MiniLM-L-6 size
    "ms-marco-MiniLM-L-6-v2": dict(H=384, heads=12, layers=6, inter=1536, act="gelu",
                                   max_pos=512, prefix="bert.", labels=["LABEL_0"]),
    # microsoft/mpnet-base's sizes (sentence-transformers/all-mpnet-base-v2: mean + normalize)
    "mpnet-base": dict(family="mpnet", H=768, heads=12, layers=12, inter=3072, act="gelu",
                       pooling="mean", normalize=True, max_pos=514, pad=1, vocab=30527,
                       buckets=32),
    # microsoft/deberta-v3-base's sizes: no absolute positions, no token types, 256 log
    # position buckets over 512 positions, c2p + p2c through the shared key/query projections
    "deberta-v3-base": dict(family="deberta-v2", H=768, heads=12, layers=12, inter=3072,
                            act="gelu", pooling="mean", max_pos=512, vocab=128100,
                            position_buckets=256, pos_att_type=["p2c", "c2p"]),
    # a DeBERTa-v3 cross-encoder (mxbai-rerank-base-v1 is one: DebertaV2ForSequenceClassification,
    # ContextPooler with GELU, one score) at a 6-layer size
    "deberta-v3-reranker": dict(family="deberta-v2", H=768, heads=12, layers=6, inter=3072,
                                act="gelu", max_pos=512, vocab=128100, position_buckets=256,
                                prefix="deberta.", labels=["LABEL_0"]),
}
LENS = [1, 7, 3, 128, 33, 64, 2, 17]
TOL = {"cpu_fp32_rel": 1e-5, "cuda_fp32_rel": 1e-4, "fp16_cos": 0.9999, "bf16_cos": 0.999,
       "hf_rel": 1e-9,
       # classifiers' logits (one score: a cosine says nothing): max |diff| / max(1, |logit|)
       "fp16_logit": 1e-2, "bf16_logit": 5e-2}


def seqs_for(ref, rng):
    out = []
    for n in LENS + [ref.max_seq_len]:
        s = rng.integers(999, 30000, size=n).tolist()
        s[0] = 101
        if n > 1:
            s[-1] = 102
        if n > 8:
            s[4] = ref.pad  # a pad id inside the sequence: RoBERTa's position rule
        out.append(s)
    return out


def types_for(ref, seqs):
    """Sentence-pair token types (second half type 1) where the family has two types."""
    if ref.cfg.get("type_vocab_size", 0) < 2:
        return None
    return [[0] * (len(s) // 2) + [1] * (len(s) - len(s) // 2) for s in seqs]


def row_stats(got, want):
    got = np.asarray(got, np.float64)
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    rel = np.abs(got - want).max(1) / np.abs(want).max(1)
    scaled = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    return {"min_cos": float(np.nanmin(cos)) if np.isfinite(cos).all() else float("nan"),
            "max_rel": float(rel.max()) if np.isfinite(rel).all() else float("nan"),
            "max_scaled_abs": float(scaled) if np.isfinite(scaled) else float("nan")}


def hf_embed(d, seqs, ref):
    """HF transformers in float64 on the CPU, one sequence at a time, pooled as ref pools (a
    classifier: its logits)."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification
    torch.set_num_threads(max(1, os.cpu_count() - 2))
    cls = AutoModelForSequenceClassification if ref.classifier else AutoModel
    try:
        m = cls.from_pretrained(d, dtype=torch.float64, attn_implementation="eager")
    except TypeError:  # transformers < 4.56 names it torch_dtype
        m = cls.from_pretrained(d, torch_dtype=torch.float64, attn_implementation="eager")
    m = m.eval()
    out = []
    types = types_for(ref, seqs)
    with torch.inference_mode():
        for k, s in enumerate(seqs):
            kw = {"token_type_ids": torch.tensor([types[k]])} if types else {}
            o = m(input_ids=torch.tensor([s]), **kw)
            out.append(o.logits[0].numpy() if ref.classifier
                       else ref.pool(o.last_hidden_state[0].numpy()))
    return np.stack(out)


def ragged_embed(d, seqs, ref, device, dtype, layout_sets, graphs=True):
    env_before = os.environ.get("RAGGED_CUDA_GRAPHS")
    os.environ["RAGGED_CUDA_GRAPHS"] = "1" if graphs else "0"
    try:
        m = rc.Model(d, device=device, dtype=dtype, max_batch_tokens=16384)
    finally:
        if env_before is None:
            os.environ.pop("RAGGED_CUDA_GRAPHS")
        else:
            os.environ["RAGGED_CUDA_GRAPHS"] = env_before
    try:
        res = {"packed": m.run(seqs, types_for(ref, seqs))}
        short = [s for s in seqs if len(s) <= 32]  # layouts(): rows of 32
        for mode, lay in layout_sets.items():
            res[mode] = (m.run(short, types_for(ref, short), layout=lay), short)
        return res
    finally:
        m.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minilm", required=True, help="a directory with MiniLM's tokenizer files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/rg_families")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--small", action="store_true", help="shrink every model (a smoke run)")
    ap.add_argument("--models", default="", help="comma-separated names of PUBLIC (default all)")
    a = ap.parse_args()
    if a.models:
        unknown = set(a.models.split(",")) - set(PUBLIC)
        if unknown:
            ap.error(f"unknown models {sorted(unknown)}; known: {', '.join(PUBLIC)}")
    if a.small:
        for spec in PUBLIC.values():
            spec.update(H=64, heads=4, layers=2, inter=128)
    report = {"tolerances": TOL, "lens": LENS, "models": {}}
    ok = True
    for i, (name, spec) in enumerate(PUBLIC.items()):
        if a.models and name not in a.models.split(","):
            continue  # i stays the model's index: the same seeds as a full run
        t0 = time.time()
        d = make_tiny.make_tiny(os.path.join(a.work, name), spec, a.minilm, seed=500 + i)
        ref = RefBert(d)
        seqs = seqs_for(ref, np.random.default_rng(i))
        want = ref.embed_batch(seqs, types_for(ref, seqs))
        r = {"config": {k: v for k, v in spec.items()}, "max_seq_len": ref.max_seq_len,
             "checks": {}}
        if not a.no_hf:
            try:
                st = row_stats(hf_embed(d, seqs, ref), want)
                st["pass"] = st["max_rel"] <= TOL["hf_rel"]
            except Exception as e:  # noqa: BLE001  (recorded, counted as a failure)
                st = {"error": repr(e)[:300], "pass": False}
            r["checks"]["hf_float64_vs_ref"] = st
        short = [s for s in seqs if len(s) <= 32]  # layouts(): rows of 32
        want_short = ref.embed_batch(short, types_for(ref, short))
        lays = layouts([len(s) for s in short])
        devs = a.devices.split(",")
        runs = ([("cpu", "fp32", True)] if "cpu" in devs else []) + \
            [("cuda", dt, g) for dt in ("fp32", "fp16", "bf16") for g in (True, False)
             if "cuda" in devs]
        for dev, dt, graphs in runs:
            key = f"{dev}_{dt}" + ("" if dev == "cpu" else ("_graphs" if graphs else "_eager"))
            try:
                res = ragged_embed(d, seqs, ref, dev, dt, lays, graphs)
            except Exception as e:  # noqa: BLE001
                r["checks"][key] = {"error": repr(e)[:300], "pass": False}
                ok = False
                continue
            for mode, v in res.items():
                got, w = (v, want) if mode == "packed" else (v[0], want_short)
                st = row_stats(got, w)
                if dt == "fp32":
                    st["pass"] = st["max_rel"] <= TOL[f"{dev}_fp32_rel"]
                elif ref.classifier:
                    st["pass"] = st["max_scaled_abs"] <= TOL[f"{dt}_logit"]
                else:
                    st["pass"] = st["min_cos"] >= TOL[f"{dt}_cos"]
                r["checks"][f"{key}_{mode}"] = st
        r["seconds"] = round(time.time() - t0, 1)
        r["pass"] = all(c.get("pass") for c in r["checks"].values())
        ok = ok and r["pass"]
        report["models"][name] = r
        worst = {k: (c.get("max_rel"), c.get("min_cos")) for k, c in r["checks"].items()
                 if not c.get("pass")}
        print(f"{name}: {'PASS' if r['pass'] else 'FAIL'} ({r['seconds']} s)"
              + (f" failing: {worst}" if worst else ""), flush=True)
        subprocess.run(["rm", "-rf", d])
    report["pass"] = ok
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
