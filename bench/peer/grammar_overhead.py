"""Structured-output masking overhead: issue 31 item 1's target is <= 5% of the step time at
batch 16 on the GPU.

The model is random weights at SmolLM2-135M's shape (tests/py/make_decoder.py), with SmolLM2's
real 49152-token vocabulary, so the masks are walked over the real token trie
(src/gen/grammar_vocab.c). The token strings come from --tokens FILE (JSON list, .xz allowed).
`--extract GGUF OUT.json.xz` writes that file from a GGUF's tokenizer.ggml.tokens; the pip
package's SmolLM2 file has them, and scripts/pack-gpu-carry.sh carries them. The model is written
as an F16 GGUF (tests/py/hf_to_gguf.py), whose byte-level tokens have no merges; the prompts are
token ids.

Runs, each with prompts of 32 random ids, greedy, `ignore_eos`, max_tokens N (128), the median
of --repeats:
- plain: no grammar;
- regex `[a-z ]*`;
- json_schema: an object with one unbounded string field, which stays open for N tokens;
- json_object.
T(N) is a run's wall time, and steps is the longest row's token count (a grammar may end a row
early). The decode step time is (T(N) - T(1)) / (steps - 1): the prefill and first token,
T(1), are measured with max_tokens=1 and the same grammar. The overhead is a grammar's step
time over the plain step time, minus 1.

Writes OUTDIR/grammar_overhead_<device>_<stamp>.md and .json (bench/results naming).
Usage: RAGGED_LIB=build/libragged.so python3 bench/peer/grammar_overhead.py --tokens T.json.xz
[--device cuda] [--batches 1,16] [--new 128] OUTDIR"""
import argparse
import json
import lzma
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.join(ROOT, "python"))

SMOLLM2 = dict(H=576, heads=9, kv_heads=3, layers=30, inter=1536, vocab=49152, tie=True,
               rope_theta=100000.0, max_pos=2048)
GRAMMARS = [
    ("plain", None),
    ("regex [a-z ]*", ("regex", "[a-z ]*")),
    ("json_schema, one open string",
     ("json_schema", {"type": "object", "properties": {"text": {"type": "string"}},
                      "required": ["text"]})),
    ("json_object", ("json_object", None)),
]


def extract(gguf_path, out):
    import gguf
    r = gguf.GGUFReader(gguf_path)
    f = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    with lzma.open(out, "wt") as fh:
        json.dump(toks, fh)
    print(f"{len(toks)} tokens -> {out}")


def load_tokens(path):
    op = lzma.open if path.endswith(".xz") else open
    with op(path, "rt") as fh:
        return json.load(fh)


def gpu_name(device):
    if device != "cuda":
        return "cpu"
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return "cuda"


def run(g, prompts, new, grammar, repeats):
    """(median wall seconds, longest row's tokens) of generate(prompts)."""
    kw = dict(max_tokens=new, ignore_eos=True)
    if grammar is not None:
        kw["grammar"] = grammar
    g.generate(prompts, **kw)  # warm-up: plans, graphs, the grammar's compiled automaton
    ts, steps = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        out = g.generate(prompts, **kw)
        ts.append(time.perf_counter() - t)
        steps = max(len(o["ids"]) for o in out)
    return statistics.median(ts), steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?", default=".")
    ap.add_argument("--tokens")
    ap.add_argument("--extract", nargs=2, metavar=("GGUF", "OUT"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if a.extract:
        return extract(*a.extract)
    import hf_to_gguf
    import make_decoder
    from ragged.generate import Generator

    toks = load_tokens(a.tokens)
    rng = np.random.default_rng(31)
    cfg, w, _ = make_decoder.llama(rng, **SMOLLM2)
    tmp = tempfile.mkdtemp(prefix="gram_")
    path = hf_to_gguf.write(os.path.join(tmp, "smollm2-shape.gguf"), cfg, w, f16=True,
                            tokens=toks, eos_id=0)
    del w
    dtype = "fp16" if a.device == "cuda" else "fp32"
    g = Generator(path, device=a.device, dtype=dtype)
    gpu = gpu_name(a.device)
    commit = os.environ.get("RAGGED_COMMIT") or subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    for b in [int(x) for x in a.batches.split(",")]:
        prompts = [rng.integers(3, len(toks), 32).tolist() for _ in range(b)]
        base = None
        for name, gr in GRAMMARS:
            t1, _ = run(g, prompts, 1, gr, a.repeats)
            tn, steps = run(g, prompts, a.new, gr, a.repeats)
            step_ms = (tn - t1) / max(steps - 1, 1) * 1e3
            if gr is None:
                base = step_ms
            rows.append(dict(batch=b, grammar=name, steps=steps, t1_ms=t1 * 1e3,
                             tn_ms=tn * 1e3, step_ms=step_ms,
                             overhead=step_ms / base - 1 if base else 0.0))
            print(f"batch {b} {name}: {steps} steps, step {step_ms:.3f} ms "
                  f"({rows[-1]['overhead'] * 100:+.1f}%)", flush=True)
    g.close()
    os.remove(path)
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    slug = gpu.lower().replace("nvidia ", "").replace(" ", "-") if a.device == "cuda" else "cpu"
    base_name = f"grammar_overhead_{slug}_{stamp}"
    os.makedirs(a.outdir, exist_ok=True)
    meta = dict(device=gpu, commit=commit, date=time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
                dtype=dtype, new=a.new, repeats=a.repeats, vocab=len(toks))
    with open(os.path.join(a.outdir, base_name + ".json"), "w") as fh:
        json.dump(dict(meta, rows=rows), fh, indent=1)
    lines = ["# Structured-output masking overhead (issue 31 item 1)", "",
             f"{gpu}, commit {commit}, {meta['date']}; random weights at SmolLM2-135M's shape with "
             f"its real {len(toks)}-token vocabulary, {dtype}, prompts of 32 ids, greedy, "
             f"ignore_eos, max_tokens {a.new}, median of {a.repeats}; "
             "bench/peer/grammar_overhead.py. Step time = (T(N) - T(1)) / (steps - 1).", "",
             "| batch | grammar | steps | T(1) ms | T(N) ms | decode step ms | overhead vs plain |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['grammar']} | {r['steps']} | {r['t1_ms']:.1f} | "
                     f"{r['tn_ms']:.1f} | {r['step_ms']:.3f} | {r['overhead'] * 100:+.1f}% |")
    with open(os.path.join(a.outdir, base_name + ".md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
