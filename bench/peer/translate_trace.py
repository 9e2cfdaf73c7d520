"""A kernel trace of ragged.Translator on the GPU (issue 29: where a 4-beam call's time goes):
random weights at the opus-mt-en-de shape (tests/py/make_seq2seq.py, seed 3), fp16, the
translate_bench.py sources (5-80 tokens), 48 new tokens, batches 32 greedy and 32 x 4 beams, one
call each recorded with torch.profiler (CUPTI sees every kernel of the process, ragged's
included), in the process's graphs setting (RAGGED_CUDA_GRAPHS; graphed kernels are reported as
graph launches' kernels too). Reports per call: wall time, summed kernel time (GPU busy), busy
share, kernel count, and the kernels ranked by time. Usage: RAGGED_LIB=... python3
bench/peer/translate_trace.py MODEL_DIR OUT.json"""
import json
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import ragged  # noqa: E402
from translate_bench import pool  # noqa: E402


def main():
    model, out = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(model, "config.json")))
    src = pool(cfg)[:32]
    tr = ragged.Translator(model, device="cuda", dtype="fp16", max_batch_tokens=8192)
    rows = []
    for beams in (1, 4):
        for _ in range(2):  # warm-up: graphs captured on second sight
            tr.translate(src, max_tokens=48, num_beams=beams)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            tr.translate(src, max_tokens=48, num_beams=beams)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        k = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                d = k.setdefault(e.name, [0, 0.0])
                d[0] += 1
                d[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        busy = sum(v[1] for v in k.values()) / 1e3  # ms
        top = sorted(k.items(), key=lambda kv: -kv[1][1])[:15]
        r = {"beams": beams, "batch": 32, "wall_ms": wall * 1e3, "kernel_ms": busy,
             "busy_share": busy / (wall * 1e3), "kernels": sum(v[0] for v in k.values()),
             "graphs": os.environ.get("RAGGED_CUDA_GRAPHS", "1"),
             "top": [{"name": n[:120], "count": v[0], "ms": v[1] / 1e3} for n, v in top]}
        rows.append(r)
        print(json.dumps({x: r[x] for x in r if x != "top"}), flush=True)
        for t in r["top"][:8]:
            print(f"   {t['ms']:8.2f} ms {t['count']:6d}  {t['name']}")
    json.dump({"gpu": torch.cuda.get_device_name(0), "commit": os.environ.get("RAGGED_COMMIT"),
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows},
              open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
