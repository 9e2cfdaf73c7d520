"""Measured model-level errors of ragged on a device against the float64 NumPy BERT (ref_bert.py):
for MiniLM on real sentences (tokenized by HF `tokenizers`) and on the ragged shapes, and for every
tiny random-weight config, in each dtype: min per-row cosine and max relative error
(max |got - ref| / max |ref| per row). The pytest suite asserts the thresholds; this records the
numbers (issue 2: "record the measured errors").

usage: python3 tests/gpu/model_errors.py MODEL_DIR --device cuda --json OUT [--sentences 200]
Exit 1 when a threshold is missed (fp32 rel err > 1e-4 on cuda / 1e-5 on cpu; cosine < 0.9999 in
fp16, < 0.999 in bf16: issue 6's bars). RAGGED_EXACT_GELU=1 in the environment measures the exact
(erf) GELU pass instead of cuBLASLt's tanh-form epilogue; the JSON records which ran."""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
import make_tiny  # noqa: E402
import ragged_ctypes as rc  # noqa: E402
from ref_bert import RefBert  # noqa: E402


def errors(got, ref):
    cos = np.sum(got * ref, 1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    rel = np.max(np.abs(got - ref), 1) / np.max(np.abs(ref), 1)
    return float(np.min(cos)), float(np.max(rel))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    import tokenizers
    from corpus import english_sentences

    tok = tokenizers.Tokenizer.from_file(os.path.join(a.model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    sents = list(english_sentences(a.sentences))
    rng = np.random.default_rng(7)
    ref = RefBert(a.model_dir)
    P = ref.cfg["max_position_embeddings"]
    workloads = {
        f"minilm_{len(sents)}_sentences": [tok.encode(s).ids[:P] for s in sents],
        "minilm_ragged_shapes": [[101] + rng.integers(1000, 29000, n - 2).tolist() + [102]
                                 for n in (3, 7, 3, 128, 2, 64, 33, P, P, 2, 2)],
    }
    refs = {k: ref.embed_batch(v) for k, v in workloads.items()}
    dtypes = ["fp32"] + (["fp16", "bf16"] if a.device == "cuda" else [])
    rows, ok = [], True
    for dt in dtypes:
        m = rc.Model(a.model_dir, a.device, dt)
        H = refs[next(iter(refs))].shape[1]
        for name, seqs in workloads.items():
            cos, rel = errors(m.embed_ids(seqs, H).astype(np.float64), refs[name])
            rows.append({"model": "all-MiniLM-L6-v2", "workload": name, "dtype": dt,
                         "n_seq": len(seqs), "min_cosine": cos, "max_rel_err": rel})
        m.close()
    with tempfile.TemporaryDirectory() as tmp:
        for cfg, path in make_tiny.build_all(tmp, a.model_dir).items():
            r = RefBert(path)
            seqs = [[101] + rng.integers(1000, 29000, n - 2).tolist() + [102] for n in (2, 9, 17, 31, 50)]
            want = r.embed_batch(seqs)
            for dt in dtypes:
                m = rc.Model(path, a.device, dt)
                cos, rel = errors(m.embed_ids(seqs, want.shape[1]).astype(np.float64), want)
                rows.append({"model": f"tiny:{cfg}", "workload": "lengths 2,9,17,31,50", "dtype": dt,
                             "n_seq": len(seqs), "min_cosine": cos, "max_rel_err": rel})
                m.close()
    lim32 = 1e-4 if a.device == "cuda" else 1e-5
    for r in rows:
        bar = {"fp16": 0.9999, "bf16": 0.999}
        r["pass"] = (r["max_rel_err"] <= lim32) if r["dtype"] == "fp32" else (
            r["min_cosine"] >= bar[r["dtype"]])
        ok &= r["pass"]
    with open(a.json, "w") as f:
        json.dump({"device": a.device, "exact_gelu": os.environ.get("RAGGED_EXACT_GELU") == "1",
                   "rows": rows, "pass": ok}, f, indent=1)
    print(f"{'model':28} {'workload':26} {'dtype':5} {'min cosine':>12} {'max rel err':>12}")
    for r in rows:
        print(f"{r['model']:28} {r['workload']:26} {r['dtype']:5} {r['min_cosine']:12.9f} "
              f"{r['max_rel_err']:12.3e} {'' if r['pass'] else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
