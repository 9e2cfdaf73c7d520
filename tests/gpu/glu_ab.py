"""The SwiGLU act_mul folded into the down projection's decode GEMM (rg_op_act_mul_gemm, issue
30 item 2) on the GPU, end to end: random SmolLM2-135M- and Llama-3.2-1B-shaped GGUF files (F16,
and Q4_0 kept quantized: the dense small-M GEMV and qmv_kernel paths), each loaded with
RAGGED_GLU_GEMV=1 (fused) and =0 (act_mul, then the GEMM), in alternating order (1, 0, 1, 0),
each in a fresh Generator (its own CUDA graphs):
- correctness: greedy ids fused == unfused, 4 prompts of 32 random ids, 48 new tokens (the fused
  kernel multiplies the same act-rounded values in the same order: equal, not just close);
- speed: decode tok/s at batch 1 and 16 (tests/gpu/issue30_gq.py's tok_s: prompts of 32 tokens,
  128 new, prefill included, median of GQ_REPEATS after a warm-up), best of the two loads each.
Writes OUTDIR/glu_ab_<gpu>_<YYYYMMDD-HHMM>.json / .md. Exit 0 when every check passed.
GQ_DEVICE=cpu GQ_MODELS=tiny: a dry run of the script on a machine without a GPU.
Usage: RAGGED_LIB=build/libragged.so python3 tests/gpu/glu_ab.py OUTDIR"""
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import issue30_gq as gq  # noqa: E402
from issue30_gq import Generator, check, checks, fails, gguf, hf_to_gguf, make_decoder  # noqa


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(outdir, exist_ok=True)
    gpu = gq.gpu_name()
    base = f"glu_ab_{gq.slug(gpu)}_{time.strftime('%Y%m%d-%H%M', time.gmtime())}"
    rows = []
    tmp = tempfile.mkdtemp(prefix="glu_")
    for name in os.environ.get("GQ_MODELS", "smollm2-135m,llama-3.2-1b").split(","):
        rng = np.random.default_rng(31)
        cfg, w, _ = make_decoder.llama(rng, **gq.SHAPES[name])
        files = {"F16": hf_to_gguf.write(os.path.join(tmp, f"{name}-F16.gguf"), cfg, w, f16=True),
                 "Q4_0": hf_to_gguf.write(os.path.join(tmp, f"{name}-Q4_0.gguf"), cfg, w,
                                          qtype=gguf.GGMLQuantizationType.Q4_0)}
        del w
        vocab = gq.SHAPES[name]["vocab"]
        prompts = [rng.integers(3, vocab, gq.PROMPT).tolist() for _ in range(4)]
        for label, path in files.items():
            ids, speed = {}, {"1": [], "0": []}
            for fuse in ("1", "0", "1", "0"):
                os.environ["RAGGED_GLU_GEMV"] = fuse
                g = Generator(path, device=gq.DEVICE, dtype=gq.DTYPE)
                got = [o["ids"] for o in g.generate(prompts, max_tokens=gq.CHECK_NEW,
                                                    ignore_eos=True)]
                ids.setdefault(fuse, got)
                speed[fuse].append({b: gq.tok_s(g, np.random.default_rng(5), vocab, b)
                                    for b in (1, 16)})
                g.close()
            os.environ["RAGGED_GLU_GEMV"] = "1"
            check(f"{name} {label}: greedy ids fused == unfused", ids["1"] == ids["0"],
                  f"{sum(a == b for a, b in zip(ids['1'], ids['0']))} of 4 rows equal")
            row = {"model": name, "file": label}
            for b in (1, 16):
                f1 = max(x[b] for x in speed["1"])
                f0 = max(x[b] for x in speed["0"])
                row[f"fused_b{b}"], row[f"unfused_b{b}"], row[f"gain_b{b}"] = f1, f0, f1 / f0
            rows.append(row)
            print(f"info {json.dumps(row)}", flush=True)
        for p in files.values():
            os.remove(p)
    meta = {"gpu": gpu, "commit": os.environ.get("RAGGED_COMMIT", "unknown"),
            "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), "rows": rows,
            "checks": checks}
    json.dump(meta, open(os.path.join(outdir, base + ".json"), "w"), indent=1)
    lines = ["# The SwiGLU act_mul folded into the down projection's decode GEMM (issue 30 item 2)",
             "", f"{gpu}, commit {meta['commit']}, {meta['date']}; tests/gpu/glu_ab.py: random "
             "weights at the public shapes, fp16 on CUDA, prompts of 32 tokens, 128 new, greedy, "
             "prefill included; RAGGED_GLU_GEMV=1 (fused) against =0, each loaded twice in "
             "alternating order, best of the two.", "",
             "| model | file | fused b1 tok/s | unfused b1 | gain b1 | fused b16 | unfused b16 | "
             "gain b16 |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['file']} | {r['fused_b1']:,.0f} | "
                     f"{r['unfused_b1']:,.0f} | {r['gain_b1']:.3f}x | {r['fused_b16']:,.0f} | "
                     f"{r['unfused_b16']:,.0f} | {r['gain_b16']:.3f}x |")
    lines += ["", f"checks: {len(checks) - len(fails)} of {len(checks)} passed"]
    open(os.path.join(outdir, base + ".md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
