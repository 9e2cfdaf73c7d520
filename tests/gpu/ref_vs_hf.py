"""The float64 NumPy decoder reference (tests/py/ref_decoder.py), which the CPU tests in make test
compare ragged against, checked itself against Hugging Face transformers in float64, on the GPU
machine where transformers is installed (issue 19: "The reference itself is checked against HF
transformers in float64"). Every random-weight checkpoint of tests/py/test_decoder.py's MODELS (GPT-2
with and without scale_attn_by_inverse_layer_idx, Llama with GQA, Llama-3 rope_scaling, explicit
head_dim, Qwen2 biases, public widths) is written by make_decoder.py, loaded by transformers'
AutoModelForCausalLM in float64 on the CPU, and both give the logits of one random sequence at every
position; they must agree to 1e-9 of the row max for GPT-2 and to 1e-6 for the Llama family,
whose RoPE transformers computes in float32 whatever the model's dtype (LlamaRotaryEmbedding:
inv_freq and cos / sin in float32, then cast), so float64 agreement stops near 1e-7 there. Prints one line per model, writes a JSON report
(argv[1]), exits non-zero on a mismatch."""
import json
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "py"))
import make_decoder  # noqa: E402
import ref_decoder  # noqa: E402
from test_decoder import MODELS  # noqa: E402


def main():
    from transformers import AutoModelForCausalLM
    rows, ok = [], True
    root = tempfile.mkdtemp(prefix="ref_vs_hf_")
    for i, (name, (fam, spec)) in enumerate(MODELS.items()):
        d = os.path.join(root, name)
        cfg, w = make_decoder.make(d, fam, seed=100 + i, **spec)
        ids = np.random.default_rng(i).integers(0, cfg["vocab_size"], 37)
        ref = ref_decoder.forward(cfg, w, ids)
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64).eval()
        with torch.no_grad():
            got = m(torch.tensor(ids[None])).logits[0].numpy()
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        tol = 1e-9 if fam == "gpt2" else 1e-6
        good = bool(np.isfinite(err) and err <= tol)
        ok &= good
        rows.append({"model": name, "family": fam, "max_rel_err": err, "tol": tol, "pass": good})
        print(f"{name}: float64 reference vs transformers {err:.3g} {'PASS' if good else 'FAIL'}",
              flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump({"transformers": __import__("transformers").__version__, "rows": rows,
                   "pass": ok}, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
