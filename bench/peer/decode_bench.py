"""Greedy decode throughput, ragged against HF transformers `generate`, side by side in one process
on the lent GPU (issue 19's benchmark shape): prompts of 32 tokens, 128 new tokens, greedy,
random weights at GPT-2 small's and SmolLM2-135M's public shapes.

ragged runs through its step API (include/ragged.h rg_model_step) from Python: one packed
prefill step of every prompt, then one decode step per token for the whole batch, on the paged
KV cache; the host loop (argmax on the returned logits rows) is part of the time, as a server's
would be. HF: `generate(do_sample=False)` with the dynamic cache and with
`cache_implementation="static"`. Each cell: the median of REPEATS timed runs after one warm-up.
tok/s = batch * 128 / seconds (prefill included, as in the issue's table).

Usage: RAGGED_LIB=build/libragged.so python3 bench/peer/decode_bench.py OUT.json [fp16]"""
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "gpu"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "py"))
from dec_util import Seqs  # noqa: E402
from decoder_hf import build  # noqa: E402
from ragged_ctypes import Model  # noqa: E402

PROMPT, NEW, REPEATS = 32, 128, 3


def ragged_run(m, prompts):
    s = Seqs(m.kv_info().n_blocks, 0)
    lg = s.step(m, [(i, list(p)) for i, p in enumerate(prompts)])
    for _ in range(NEW - 1):
        lg = s.step(m, [(i, [int(np.argmax(lg[i]))]) for i in range(len(prompts))])


def hf_run(hf, x, static):
    kw = dict(max_new_tokens=NEW, do_sample=False, pad_token_id=0)
    if static:
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        hf.generate(x, **kw)


def timed(fn):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main():
    out_path = sys.argv[1]
    dt = sys.argv[2] if len(sys.argv) > 2 else "fp16"
    tdt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    rows = []
    for kind in ("gpt2", "llama"):
        d = tempfile.mkdtemp(prefix=f"bench_{kind}_")
        hf = build(kind, d).to(tdt).cuda()
        hf.generation_config.eos_token_id = None
        m = Model(d, device="cuda", dtype=dt, max_batch_tokens=2048)
        m.kv_init(16, 0)
        kv = m.kv_info()
        for batch in (1, 16):
            rng = np.random.default_rng(batch)
            prompts = rng.integers(0, hf.config.vocab_size, (batch, PROMPT))
            x = torch.tensor(prompts, device="cuda")
            r = {"model": kind, "batch": batch, "dtype": dt}
            r["ragged_s"] = timed(lambda: ragged_run(m, prompts.tolist()))
            r["hf_dynamic_s"] = timed(lambda: hf_run(hf, x, False))
            try:
                r["hf_static_s"] = timed(lambda: hf_run(hf, x, True))
            except Exception as e:  # recorded, not hidden
                r["hf_static_error"] = repr(e)[:300]
            for k in [k for k in r if k.endswith("_s")]:
                r[k.replace("_s", "_tok_s")] = batch * NEW / r[k]
            r["kv_bytes_per_token"] = kv.bytes_per_token
            rows.append(r)
            print(json.dumps(r), flush=True)
        m.close()
        del hf
        torch.cuda.empty_cache()
    rep = {"gpu": torch.cuda.get_device_name(0), "commit": os.environ.get("RAGGED_COMMIT", "?"),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "prompt": PROMPT,
           "new_tokens": NEW, "rows": rows}
    with open(out_path, "w") as f:
        json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
