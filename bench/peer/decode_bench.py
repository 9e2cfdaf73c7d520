"""Greedy decode throughput, ragged against HF transformers `generate`, side by side in one process
on the lent GPU (issue 19's benchmark shape): prompts of 32 tokens, 128 new tokens, greedy,
random weights at GPT-2 small's and SmolLM2-135M's public shapes.

ragged runs through its step API (include/ragged.h rg_model_step) from Python: one packed
prefill step of every prompt, then one decode step per token for the whole batch, on the paged
KV cache; the host loop (argmax on the returned logits rows) is part of the time, as a server's
would be. HF: `generate(do_sample=False)` with the dynamic cache and with
`cache_implementation="static"`. Each cell: the median of REPEATS timed runs after one warm-up.
tok/s = batch * 128 / seconds (prefill included, as in the issue's table).

The report is rewritten after every row, so a run stopped at its time limit keeps what it measured.

Usage: RAGGED_LIB=build/libragged.so python3 bench/peer/decode_bench.py OUT.json [fp16]
       (DECODE_BENCH_REPEATS, DECODE_BENCH_SKIP: see below)"""
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "gpu"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "py"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from dec_util import Seqs  # noqa: E402
from decoder_hf import build  # noqa: E402
from ragged_ctypes import Model  # noqa: E402

PROMPT, NEW = 32, 128
REPEATS = int(os.environ.get("DECODE_BENCH_REPEATS", "3"))
# DECODE_BENCH_SKIP: comma list of columns left out (e.g. "hf_dynamic,ragged" to save device
# time); recorded in the report
SKIP = set(filter(None, os.environ.get("DECODE_BENCH_SKIP", "").split(",")))
# DECODE_BENCH_BATCHES: comma list of batch sizes (default 1,16); DECODE_BENCH_IDS: a path where
# rg_generate's greedy ids of every row go (a graphs-on / graphs-off A/B compares them)
BATCHES = [int(b) for b in os.environ.get("DECODE_BENCH_BATCHES", "1,16").split(",")]
IDS_PATH = os.environ.get("DECODE_BENCH_IDS")


def ragged_run(m, prompts):
    s = Seqs(m.kv_info().n_blocks, 0)
    lg = s.step(m, [(i, list(p)) for i, p in enumerate(prompts)])
    for _ in range(NEW - 1):
        lg = s.step(m, [(i, [int(np.argmax(lg[i]))]) for i in range(len(prompts))])


def ragged_run_device(m, prompts):
    """Greedy with the choice on the device (rg_model_step's greedy path): only ids cross to the
    host, and the decode steps run as CUDA graphs."""
    s = Seqs(m.kv_info().n_blocks, 0)
    ids, _ = s.step(m, [(i, list(p)) for i, p in enumerate(prompts)], argmax=True)
    for _ in range(NEW - 1):
        ids, _ = s.step(m, [(i, [int(ids[i])]) for i in range(len(prompts))], argmax=True)


class GraphedTorch:
    """The strongest PyTorch decoder we could write in the time: transformers' model with a
    StaticCache, prefill eager, and the decode step (forward + argmax) captured in one CUDA graph
    per batch size, replayed per token with the next ids and position copied into static
    inputs."""

    def __init__(self, hf, batch, max_len):
        from transformers import StaticCache
        self.hf, self.B = hf, batch
        self.cache = StaticCache(config=hf.config, max_cache_len=max_len)
        self.ids = torch.zeros((batch, 1), dtype=torch.long, device="cuda")
        self.pos = torch.zeros((1,), dtype=torch.long, device="cuda")
        self.graph = None

    def _decode(self):
        out = self.hf(input_ids=self.ids, past_key_values=self.cache, cache_position=self.pos,
                      use_cache=True)
        return out.logits[:, -1].argmax(-1)

    def run(self, x):
        with torch.no_grad():
            self.cache.reset()
            P = x.shape[1]
            out = self.hf(input_ids=x, past_key_values=self.cache,
                          cache_position=torch.arange(P, device="cuda"), use_cache=True)
            nxt = out.logits[:, -1].argmax(-1)
            if self.graph is None:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):  # warm-up outside the graph, as torch requires
                    self.ids.copy_(nxt[:, None])
                    self.pos.fill_(P)
                    self._decode()
                torch.cuda.current_stream().wait_stream(s)
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph):
                    self.next = self._decode()
                self.cache.reset()  # the warm-up and capture wrote position P: redo the prefill
                out = self.hf(input_ids=x, past_key_values=self.cache,
                              cache_position=torch.arange(P, device="cuda"), use_cache=True)
                nxt = out.logits[:, -1].argmax(-1)
            for t in range(NEW - 1):
                self.ids.copy_(nxt[:, None])
                self.pos.fill_(P + t)
                self.graph.replay()
                nxt = self.next
            return nxt


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
    rows, ids_all = [], {}
    for kind in ("gpt2", "llama"):
        d = tempfile.mkdtemp(prefix=f"bench_{kind}_")
        hf = build(kind, d).to(tdt).cuda()
        hf.generation_config.eos_token_id = None
        import ragged
        gen = ragged.Generator(d, device="cuda", dtype=dt, max_batch_tokens=2048)
        m = Model(d, device="cuda", dtype=dt, max_batch_tokens=2048)
        m.kv_init(16, 0)
        kv = m.kv_info()
        for batch in BATCHES:
            rng = np.random.default_rng(batch)
            prompts = rng.integers(0, hf.config.vocab_size, (batch, PROMPT))
            x = torch.tensor(prompts, device="cuda")
            r = {"model": kind, "batch": batch, "dtype": dt}
            t_row = time.perf_counter()

            def cell(name, fn):
                if name in SKIP:
                    return
                try:
                    r[name + "_s"] = timed(fn)
                except Exception as e:  # recorded, not hidden
                    r[name + "_error"] = repr(e)[:300]

            cell("ragged", lambda: ragged_run(m, prompts.tolist()))
            cell("ragged_device_greedy", lambda: ragged_run_device(m, prompts.tolist()))
            # rg_generate: the whole request in C (rg_gen_run's loop; greedy on the device)
            cell("ragged_generate", lambda: gen.generate(prompts.tolist(), max_tokens=NEW,
                                                         ignore_eos=True))
            if IDS_PATH and "ragged_generate" not in SKIP:
                outs = gen.generate(prompts.tolist(), max_tokens=NEW, ignore_eos=True)
                ids_all[f"{kind}_{batch}"] = [o["ids"] if isinstance(o, dict) else list(o.ids)
                                              for o in outs]
                with open(IDS_PATH, "w") as f:
                    json.dump(ids_all, f)
            if "torch_graphed" not in SKIP:
                try:
                    gt = GraphedTorch(hf, batch, PROMPT + NEW + 8)
                    cell("torch_graphed", lambda: gt.run(x))
                except Exception as e:  # recorded, not hidden
                    r["torch_graphed_error"] = repr(e)[:300]
            cell("hf_dynamic", lambda: hf_run(hf, x, False))
            cell("hf_static", lambda: hf_run(hf, x, True))
            for k in [k for k in r if k.endswith("_s")]:
                r[k[:-2] + "_tok_s"] = batch * NEW / r[k]
            r["kv_bytes_per_token"] = kv.bytes_per_token
            r["row_wall_seconds"] = time.perf_counter() - t_row
            rows.append(r)
            print(json.dumps(r), flush=True)
            write(out_path, rows)
        m.close()
        gen.close()
        del hf
        torch.cuda.empty_cache()
    write(out_path, rows)


def write(out_path, rows):
    rep = {"gpu": torch.cuda.get_device_name(0), "commit": os.environ.get("RAGGED_COMMIT", "?"),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "prompt": PROMPT,
           "new_tokens": NEW, "repeats": REPEATS, "skipped": sorted(SKIP), "rows": rows}
    with open(out_path, "w") as f:
        json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
