#!/usr/bin/env python3
"""The static-batching baseline of issue 20's generation benchmark: HF transformers `generate`
with a static cache, fixed batches of --batch (16) requests, each batch run to its longest output,
fed the SAME arrival schedule as `ragged loadgen --mode generate` sent to `ragged serve`.

Input: one or more loadgen `--per-request` files (one JSON line per scheduled request: sched_ms,
measured, len = prompt tokens sent incl. the shared prefix, prefixed, max_tokens), i.e. the exact
arrival times and length draws of the ragged run at that rate. Prompts are rebuilt as token ids of
those lengths (the shared-prefix requests start with one common 256-token prefix, as loadgen's;
transformers has no prefix cache, so the ids' values do not change its cost).

Schedule (virtual time, in the ms of the schedule): the device runs one batch at a time.
  full       the issue's rule: batches are the next --batch requests in arrival order (the last
             one may be smaller); a batch starts when the previous one has ended and its last
             member has arrived;
  available  a stronger static server: when the device is free, it takes the requests that have
             arrived (at most --batch, in arrival order), or waits for the next arrival.
Each batch runs for real: `model.generate(left-padded prompts, attention_mask,
max_new_tokens = the batch's longest max_tokens, min_new_tokens = the same, do_sample=False,
cache_implementation="static")`; its measured duration places it on the virtual timeline (the
device is idle between batches, so waiting needs no real sleeping). A streamer records the time
of every decoding step (the put() after each new token; on CUDA it copies the ids to the host,
which synchronises, as generate's own stopping check does every step).
The forward runs eagerly (generation_config.disable_compile; transformers would otherwise
compile the static-cache forward on CUDA and recompile it for every new batch shape, compile time
inside the batches); --hf-compile allows it.
Per request (the loadgen's rules, as if the batch streamed): TTFT = batch start + time to the
first new token - arrival; TPOT = (time of its own last token - its first) / (max_tokens - 1);
done (end-to-end) = the batch's end, when generate returns. A request done later than
--timeout-ms after its arrival is a failure ("timeout"), as the loadgen's client would count it.
On a shared host, --batch-quiet-s waits for other processes to calm down before each batch
and --batch-retries runs a batch again when they did not (the batch's kept time is then its
time alone; every batch records the cores others used meanwhile and its tries).
--budget-s caps the real compute spent per schedule: requests not run by then are reported as
"cut" (failures) and the schedule is marked cut; so are the requests left once the virtual clock
passes every measured request's arrival + timeout (all of them would time out).

Output (--out JSON): per schedule, a list of per-request records in the loadgen's field names
(sched_ms, send_ms, done_ms, status, error, measured, prefixed, len, max_tokens, ttft_ms,
tpot_ms, output_tokens) plus the batches (start, size, prompt width, new tokens, seconds,
prefill seconds), the device, dtype, torch and transformers versions and the measured memory
bandwidth (a device copy on CUDA; a CPU tensor copy on the CPU) for the napkin math.

Needs torch + transformers (not in scripts/install-deps.sh; benchmarks are not part of
`make test`). On the development CPU: a venv under /tmp, e.g.
    python3 -m venv --system-site-packages /tmp/genbench_venv
    /tmp/genbench_venv/bin/pip install torch transformers
and gen_serving.py --torch-python /tmp/genbench_venv/bin/python. On the GPU machine the system
python3 has them.

Usage: python3 static_baseline.py --model DIR --device cpu|cuda --dtype fp32|fp16|bf16
         --fill full,available --out OUT.json SCHED1.jsonl [SCHED2.jsonl ...]"""
import argparse
import json
import math
import os
import time

import numpy as np

torch = None  # imported by main(): gen_serving.py imports this module without torch

PREFIX_SEED = 20


def load_schedule(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    rows.sort(key=lambda r: (r["sched_ms"], r["i"]))
    return rows


class StepClock:
    """A generate() streamer that timestamps every put(): the first is the prompt, each later
    one a new token for the whole batch."""

    def __init__(self):
        self.t = []

    def put(self, value):
        if value.is_cuda:  # never true: generate hands the streamer CPU ids; kept for safety
            value.cpu()
        self.t.append(time.perf_counter())

    def end(self):
        pass


def make_prompts(rows, vocab, prefix_len, seed):
    """Token ids per request: the common prefix (prefixed requests) + uniform random ids."""
    rng = np.random.default_rng(seed)
    prefix = np.random.default_rng(PREFIX_SEED).integers(3, vocab, prefix_len)
    out = []
    for r in rows:
        n = int(r["len"])
        if r.get("prefixed"):
            body = rng.integers(3, vocab, max(n - prefix_len, 0))
            out.append(np.concatenate([prefix[:n], body]).astype(np.int64))
        else:
            out.append(rng.integers(3, vocab, n).astype(np.int64))
    return out


def run_batch(model, dev, prompts, new_tokens):
    """One static batch: left-pad, generate to new_tokens, return (seconds, step times from the
    call's start: times[k] = the moment token k+1 of every row existed)."""
    width = max(len(p) for p in prompts)
    ids = np.zeros((len(prompts), width), dtype=np.int64)
    mask = np.zeros((len(prompts), width), dtype=np.int64)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = p
        mask[i, width - len(p):] = 1
    x = torch.from_numpy(ids).to(dev)
    m = torch.from_numpy(mask).to(dev)
    clock = StepClock()
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        model.generate(x, attention_mask=m, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=False, cache_implementation="static", streamer=clock,
                       pad_token_id=0)
    if dev == "cuda":
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    steps = [t - t0 for t in clock.t[1:]]
    return t1 - t0, steps, width


def plan_batches(rows, fill, bsz, t_free):
    """Yield the next batch (indices into rows) and its start time, given the device is free at
    t_free (ms); generator protocol: send() the batch's end time back."""
    i, n = 0, len(rows)
    while i < n:
        if fill == "full":
            idx = list(range(i, min(i + bsz, n)))
            start = max(t_free, rows[idx[-1]]["sched_ms"])
        else:
            start = max(t_free, rows[i]["sched_ms"])
            j = i
            while j < n and j - i < bsz and rows[j]["sched_ms"] <= start:
                j += 1
            idx = list(range(i, j))
        t_free = yield idx, start
        i = idx[-1] + 1


def timed_batch(model, dev, prompts, new, quiet_s, retries):
    """run_batch on a quiet host: before each try wait (up to quiet_s) for other processes to
    use < 0.3 cores, and run the batch again (up to `retries` times) when they used more during
    it. The timeline is virtual, so the waiting costs the baseline nothing; the kept time is the
    batch alone on the host. Returns run_batch's result + (other cores during it, tries)."""
    for k in range(retries + 1):
        if quiet_s > 0:
            wait_quiet(quiet_s, window_s=1.0)
        b0, c0 = sys_busy_s(), time.process_time()
        secs, steps, width = run_batch(model, dev, prompts, new)
        other = (((sys_busy_s() - b0) - (time.process_time() - c0)) / secs
                 if b0 is not None else None)
        if other is None or other < 0.3:
            break
    return secs, steps, width, other, k + 1


def simulate(model, dev, rows, prompts, fill, bsz, timeout_ms, budget_s, quiet_s=0, retries=0):
    recs = [None] * len(rows)
    batches = []
    measured_last = max((r["sched_ms"] for r in rows if r.get("measured")), default=0.0)
    spent, cut_reason = 0.0, None
    gen = plan_batches(rows, fill, bsz, 0.0)
    try:
        idx, start = next(gen)
        while True:
            if spent > budget_s:
                cut_reason = f"budget: {spent:.1f} s of compute spent (--budget-s {budget_s})"
                break
            if start > measured_last + timeout_ms:
                cut_reason = ("every request left would time out (virtual clock past the last "
                              "measured arrival + timeout)")
                break
            new = max(int(rows[k]["max_tokens"]) for k in idx)
            secs, steps, width, other, tries = timed_batch(
                model, dev, [prompts[k] for k in idx], new, quiet_s, retries)
            spent += secs
            end = start + secs * 1e3
            batches.append({"start_ms": start, "size": len(idx), "width": width,
                            "new_tokens": new, "seconds": secs,
                            "useful_tokens": sum(int(rows[k]["max_tokens"]) for k in idx),
                            "prefill_s": steps[0] if steps else secs,
                            "other_cpu_cores": other, "tries": tries})
            for k in idx:
                r = rows[k]
                mt = int(r["max_tokens"])
                first = start + steps[0] * 1e3
                last = start + steps[min(mt, len(steps)) - 1] * 1e3
                ok = end - r["sched_ms"] <= timeout_ms
                recs[k] = {"ttft_ms": first - r["sched_ms"] if ok else None,
                           "tpot_ms": ((last - first) / (mt - 1) if mt > 1 else 0.0) if ok else None,
                           "done_ms": end, "status": 200 if ok else 0,
                           "error": None if ok else "timeout",
                           "output_tokens": mt if ok else 0}
            idx, start = gen.send(end)
    except StopIteration:
        pass
    out = []
    for k, r in enumerate(rows):
        rec = {"i": r["i"], "measured": r.get("measured", True), "sched_ms": r["sched_ms"],
               "send_ms": r["sched_ms"], "len": r["len"], "prefixed": r.get("prefixed", False),
               "max_tokens": r["max_tokens"]}
        rec.update(recs[k] or {"ttft_ms": None, "tpot_ms": None, "done_ms": None, "status": 0,
                               "error": "cut", "output_tokens": 0})
        out.append(rec)
    return out, batches, spent, cut_reason


def sys_busy_s():
    """CPU seconds all processes of the host have run (/proc/stat: every state but idle and
    iowait), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def wait_quiet(max_s, thresh=0.3, window_s=5.0):
    """Wait (up to max_s) until the host's other processes keep < thresh cores busy over
    window_s (this process's own CPU time, e.g. spinning worker threads, left out); returns
    [seconds waited, last window's cores]."""
    t0 = time.monotonic()
    while True:
        b0, c0 = sys_busy_s(), time.process_time()
        if b0 is None:
            return [0.0, None]
        time.sleep(window_s)
        busy = ((sys_busy_s() - b0) - (time.process_time() - c0)) / window_s
        if busy < thresh or time.monotonic() - t0 >= max_s:
            return [time.monotonic() - t0, busy]


def bandwidth_gbs(dev):
    """Copy bandwidth (read + write bytes / s): 1 GiB on CUDA, 256 MiB on the CPU; best of 5."""
    n = (1 << 30 if dev == "cuda" else 1 << 28) // 4
    a = torch.empty(n, dtype=torch.float32, device=dev).fill_(1.0)
    b = torch.empty_like(a)
    best = math.inf
    for _ in range(6):
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        b.copy_(a)
        if dev == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * a.numel() * 4 / best / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("schedules", nargs="+")
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--fill", default="full,available")
    ap.add_argument("--prefix-len", type=int, default=256)
    ap.add_argument("--timeout-ms", type=float, default=30000)
    ap.add_argument("--budget-s", type=float, default=120)
    ap.add_argument("--threads", type=int, default=0, help="torch threads on the CPU (0: torch's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--wait-quiet-s", type=float, default=0,
                    help="before each schedule and rule, wait up to this long for a quiet host")
    ap.add_argument("--batch-quiet-s", type=float, default=0,
                    help="before each batch, wait up to this long for a quiet host")
    ap.add_argument("--batch-retries", type=int, default=0,
                    help="run a batch again when other processes used >= 0.3 cores during it")
    ap.add_argument("--hf-compile", action="store_true",
                    help="let transformers auto-compile the static-cache forward (CUDA)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    global torch
    import torch
    from transformers import AutoModelForCausalLM
    import transformers
    dt = a.dtype or ("fp16" if a.device == "cuda" else "fp32")
    tdt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    t0 = time.perf_counter()
    try:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=tdt)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=tdt)
    model = model.to(a.device).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    # transformers compiles the forward of a static-cache generate on CUDA by itself, and
    # recompiles for every new (batch, width, cache length): that would put compile time into
    # every batch. Eager by default; --hf-compile lets it compile (and counts the time).
    model.generation_config.disable_compile = not a.hf_compile
    load_s = time.perf_counter() - t0
    vocab = model.config.vocab_size
    # warm-up: one small batch (allocator, kernels)
    run_batch(model, a.device, [np.arange(3, 40), np.arange(3, 20)], 8)
    rep = {"device": a.device, "dtype": dt, "batch": a.batch, "torch": torch.__version__,
           "transformers": transformers.__version__, "threads": torch.get_num_threads(),
           "load_s": load_s, "hf_compile": a.hf_compile, "gpu": torch.cuda.get_device_name(0) if a.device == "cuda" else None,
           "bandwidth_gbs": bandwidth_gbs(a.device), "runs": []}
    for path in a.schedules:
        rows = load_schedule(path)
        prompts = make_prompts(rows, vocab, a.prefix_len, a.seed)
        for fill in a.fill.split(","):
            quiet = None
            if a.wait_quiet_s > 0:
                quiet = wait_quiet(a.wait_quiet_s)
            t1, c1, b1 = time.perf_counter(), time.process_time(), sys_busy_s()
            recs, batches, spent, cut = simulate(model, a.device, rows, prompts, fill, a.batch,
                                                 a.timeout_ms, a.budget_s, a.batch_quiet_s,
                                                 a.batch_retries)
            wall = time.perf_counter() - t1
            b2 = sys_busy_s()
            # cores kept busy by other processes meanwhile: the shared host's noise
            other = ((b2 - b1) - (time.process_time() - c1)) / wall if b1 is not None else None
            rep["runs"].append({"schedule": path, "fill": fill, "requests": recs,
                                "batches": batches, "compute_s": spent, "wall_s": wall,
                                "other_cpu_cores": other, "cut": cut,
                                "quiet_wait": quiet})
            print(f"static_baseline: {os.path.basename(path)} fill={fill}: {len(batches)} batches,"
                  f" {spent:.1f} s compute, other processes {other or 0:.2f} cores"
                  f"{', CUT: ' + cut if cut else ''}", flush=True)
            with open(a.out, "w") as f:
                json.dump(rep, f)


if __name__ == "__main__":
    main()
