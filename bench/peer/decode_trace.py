"""A kernel trace of ragged's greedy decode step on the GPU (issue 19: a missed speed target is
"explained with a trace"): random-weight GPT-2 small and SmolLM2-135M-shape Llama, fp16, batch 1
and 16, prompt 32; 16 decode steps (rg_model_step, greedy) recorded with torch.profiler (CUPTI sees
every kernel of the process, ragged's included), eager (RAGGED_CUDA_GRAPHS=0, so each kernel is its
own launch) and graphed; and eager prefill steps of 4 x 128, 1 x 512 and 32 x 512 fresh prompt
tokens (the chunks a serving step runs; issue 19's prefill shape is 32 x 512), with the tensor-core
prefill attention on and off (RAGGED_PREFILL_TC). Reports per step: wall time, summed kernel time (GPU busy), kernel count,
and the kernels ranked by time. Usage: RAGGED_LIB=... python3 bench/peer/decode_trace.py OUT.json"""
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "gpu"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "py"))
from dec_util import Seqs  # noqa: E402
from decoder_hf import build  # noqa: E402
from ragged_ctypes import Model  # noqa: E402

STEPS = 16


def trace(m, batch, vocab):
    rng = np.random.default_rng(batch)
    prompts = rng.integers(0, vocab, (batch, 32)).tolist()
    s = Seqs(m.kv_info().n_blocks, 0)
    ids, _ = s.step(m, [(i, p) for i, p in enumerate(prompts)], argmax=True)
    for _ in range(4):  # warm-up: graphs of these shapes captured
        ids, _ = s.step(m, [(i, [int(ids[i])]) for i in range(batch)], argmax=True)
    torch.cuda.synchronize()

    def decode():
        nonlocal ids
        ids, _ = s.step(m, [(i, [int(ids[i])]) for i in range(batch)], argmax=True)

    return profiled(decode, STEPS)


def profiled(fn, steps, per=None):
    """fn() run `steps` times under torch.profiler: wall and summed kernel time per step, kernel
    count, and the kernels ranked by time; per: the number of steps the runs make in all, when
    one call of fn is several steps (default: steps)."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        wall = time.perf_counter() - t0
    per = per or steps
    wall /= per
    kern = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kern.setdefault(e.name[:90], [0, 0.0])
            k[0] += 1
            k[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    busy = sum(v[1] for v in kern.values()) / per  # us
    top = sorted(kern.items(), key=lambda kv: -kv[1][1])[:25]
    return {"wall_us_per_step": wall * 1e6, "gpu_busy_us_per_step": busy,
            "kernels_per_step": sum(v[0] for v in kern.values()) / per,
            "top": [{"kernel": k, "calls_per_step": v[0] / per, "us_per_step": v[1] / per}
                    for k, v in top]}


def trace_prefill(m, n_seq, length, vocab, steps=4):
    """Eager prefill steps of n_seq fresh prompts of `length` tokens each (what a serving step
    with a prompt chunk runs), traced like trace()."""
    rng = np.random.default_rng(length)

    def one():
        s = Seqs(m.kv_info().n_blocks, 0)
        s.step(m, [(i, rng.integers(0, vocab, length).tolist()) for i in range(n_seq)],
               argmax=True)

    one()
    torch.cuda.synchronize()
    return profiled(one, steps)


def main():
    out = {"gpu": torch.cuda.get_device_name(0), "commit": os.environ.get("RAGGED_COMMIT", "?"),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": []}
    for kind in ("gpt2", "llama"):
        d = tempfile.mkdtemp(prefix=f"trace_{kind}_")
        hf = build(kind, d)
        vocab = hf.config.vocab_size
        del hf
        for graphs in ("0", "1"):
            os.environ["RAGGED_CUDA_GRAPHS"] = graphs
            m = Model(d, device="cuda", dtype="fp16", max_batch_tokens=16384)
            m.kv_init(16, 1400)  # 22,400 positions: one 32 x 512 prefill step fits
            cases = [("decode", b, None, None) for b in (1, 16)]
            if graphs == "0":  # prefill steps are never graphed; tensor-core prefill on and off
                cases += [("prefill", b, n, tc) for b, n in ((4, 128), (1, 512), (32, 512))
                          for tc in ("1", "paged", "0")]
            for what, batch, length, tc in cases:
                if what == "decode":
                    r = {"model": kind, "graphs": graphs == "1", "batch": batch,
                         **trace(m, batch, vocab)}
                else:
                    os.environ["RAGGED_PREFILL_TC"] = tc
                    r = {"model": kind, "graphs": False, "prefill": f"{batch}x{length}",
                         "prefill_tc": tc, **trace_prefill(m, batch, length, vocab)}
                    os.environ.pop("RAGGED_PREFILL_TC")
                out["rows"].append(r)
                print(json.dumps({k: v for k, v in r.items() if k != "top"}), flush=True)
                for t in r["top"][:8]:
                    print("   ", json.dumps(t), flush=True)
            m.close()
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
