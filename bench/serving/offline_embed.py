#!/usr/bin/env python3
"""Offline tokens/s of ragged's encoder on the serving benchmark's own short requests.

Issue 21, item 4 compares what `ragged serve` delivers on 2-100-token requests with what the same
engine does offline on batches of the same size. This is the offline side:

  * requests: exactly those `ragged loadgen --dist SPEC --seed S` sends first (request 0, 1, ...):
    its xoshiro256** streams are reimplemented below (loadgen_requests; checked against the binary
    by tests/py/test_loadgen.py), so lengths and token ids are the loadgen's, [CLS] and [SEP]
    included;
  * per batch size B (default 64, 128, 256, 512): K (--batches-per-size) packed batches of B
    consecutive requests (requests 0 .. K*B-1), rotated;
  * one timed call = rg_model_embed through tests/py/ragged_ctypes.py on prebuilt int32 ids +
    cu_seqlens into a preallocated float32 (B, output_dim) host array: the ids' copy to the device,
    the encoder, pooling, and the copy of the pooled vectors back to the host (a server has to
    make it), synchronised (rg_model_embed returns when the vectors are in host memory). Time is
    wall clock (time.perf_counter) around the call;
  * warm-up: every batch --warmup times (CUDA graph captures happen there; the captures counted
    by rg_model_graph_captures during the timed rounds are reported, and should be 0);
  * a round runs the K batches once; tokens/s of a round = its tokens / the sum of its K call
    times; reported: the median round (and min / max), requests/s likewise, and the median call.
    Rounds stop at --rounds or when the batch size's share of --budget-s is spent (after at
    least --min-rounds, or one once the whole budget is spent; the warm-up likewise stops after
    one pass); a batch size reached with the budget spent is skipped (exit status 1).

The model is loaded once with max_batch_tokens = max(16384, the largest batch's tokens), so a
batch of 512 requests fits in one call; a server with the default --max-batch-tokens 16384
cannot form batches over 16384 tokens (about 320 of these requests).

Output: a table on stdout and, with --json, the results (meta + one row per batch size);
tokens_per_s_at(doc, b) interpolates a result file at any batch size.
Importable without torch and without loading the library (numpy + ctypes only).

Usage:
  python3 bench/serving/offline_embed.py --model DIR [--device cuda] [--dtype fp16]
      [--batches 64,128,256,512] [--dist uniform:2:100] [--seed 1] [--batches-per-size 4]
      [--warmup 3] [--rounds 20] [--min-rounds 3] [--budget-s 30] [--json OUT]
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, HERE)

import sweep  # noqa: E402  (git_commit, cpu_name, gpu_names: stdlib only)

M64 = (1 << 64) - 1
CLS_ID, SEP_ID = 101, 102          # app/loadgen/loadgen.c LG_CLS_ID / LG_SEP_ID
TOKEN_LO, TOKEN_HI = 1000, 29000   # loadgen --token-ids default: ids uniform in [LO, HI)


# ------------------------------------------------------------------ loadgen's request stream

def splitmix64(x):
    """One splitmix64 step (app/loadgen/loadgen.c lg_splitmix64): (new state, output)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


class Xoshiro:
    """xoshiro256** (Blackman & Vigna) seeded through splitmix64, as loadgen's lg_rng."""

    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x, z = splitmix64(x)
            self.s.append(z)

    def next(self):
        s = self.s
        r = (((s[1] * 5) & M64) << 7 | ((s[1] * 5) & M64) >> 57) & M64
        r = (r * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = ((s[3] << 45) | (s[3] >> 19)) & M64
        return r

    def unit(self):
        """Uniform double in [0, 1): the top 53 bits (lg_rng_unit)."""
        return float(self.next() >> 11) * (1.0 / 9007199254740992.0)

    def range(self, lo, hi):
        """Uniform integer in [lo, hi] (lg_rng_range: truncation of unit * (hi - lo + 1))."""
        return lo + int(self.unit() * float(hi - lo + 1))

    def normal(self):
        """Standard normal by Box-Muller (lg_rng_normal)."""
        u1 = 1.0 - self.unit()
        u2 = self.unit()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def parse_dist(spec):
    """loadgen --dist: 'uniform:LO:HI' or 'normal:MEAN:SD:LO:HI' (lengths in tokens, [CLS] and
    [SEP] included, LO >= 2). Returns a callable rng -> length. ValueError on anything else
    (file: distributions send text, not ids)."""
    p = spec.split(":")
    if p[0] == "uniform" and len(p) == 3:
        lo, hi = int(p[1]), int(p[2])
        if not 2 <= lo <= hi:
            raise ValueError(f"bad --dist {spec}")
        return lambda r: r.range(lo, hi)
    if p[0] == "normal" and len(p) == 5:
        mean, sd, lo, hi = float(p[1]), float(p[2]), int(p[3]), int(p[4])
        if not 2 <= lo <= hi:
            raise ValueError(f"bad --dist {spec}")

        def draw(r):
            x = round(mean + sd * r.normal())  # nearbyint: ties to even, as Python's round
            return int(min(max(x, lo), hi))
        return draw
    raise ValueError(f"unsupported --dist {spec} (uniform:LO:HI or normal:MEAN:SD:LO:HI)")


def loadgen_lengths(spec, seed, n):
    """Lengths of loadgen's requests 0 .. n-1: its schedule draws an arrival gap, then a length,
    per request, from one stream seeded with --seed (lg_schedule). The gap's value does not
    matter here, only that it takes one draw."""
    draw = parse_dist(spec)
    r = Xoshiro(seed)
    out = []
    for _ in range(n):
        r.unit()
        out.append(draw(r))
    return out


def loadgen_ids(seed, i, length, token_lo=TOKEN_LO, token_hi=TOKEN_HI):
    """Token ids loadgen sends as request i of a token-id embedding run: [CLS], length - 2 ids
    uniform in [token_lo, token_hi) from a stream seeded by (seed, i) (lg_build_request), [SEP]."""
    x = ((seed * 0x100000001B3) & M64) ^ i
    _, z = splitmix64(x)
    r = Xoshiro(z)
    mid = [r.range(token_lo, token_hi - 1) for _ in range(max(length - 2, 0))]
    return [CLS_ID] + mid + [SEP_ID]


def loadgen_requests(spec, seed, n, token_lo=TOKEN_LO, token_hi=TOKEN_HI):
    """Requests 0 .. n-1 of `ragged loadgen --dist spec --seed seed`: a list of id lists."""
    return [loadgen_ids(seed, i, L, token_lo, token_hi)
            for i, L in enumerate(loadgen_lengths(spec, seed, n))]


def pack(reqs):
    """(ids (T,) int32, cu_seqlens (n+1,) int32) of a list of id lists."""
    cu = np.zeros(len(reqs) + 1, np.int32)
    cu[1:] = np.cumsum([len(q) for q in reqs])
    ids = np.ascontiguousarray(np.concatenate([np.asarray(q, np.int32) for q in reqs]), np.int32)
    return ids, cu


# ------------------------------------------------------------------ results

def tokens_per_s_at(doc, batch):
    """Offline tokens/s at a batch size of `batch` requests from a result doc: linear in
    log(batch) between the two measured sizes around it, the nearest measured size outside
    their range. Returns (tokens/s, how) or (None, reason)."""
    rows = sorted((r["batch"], r["tokens_per_s"]) for r in doc.get("sizes", [])
                  if r.get("tokens_per_s"))
    if not rows or batch is None or not batch > 0:
        return None, "no offline result"
    if batch <= rows[0][0]:
        return rows[0][1], (f"measured at {rows[0][0]}" if batch == rows[0][0] else
                            f"below the smallest measured size: {rows[0][0]}'s value")
    if batch >= rows[-1][0]:
        return rows[-1][1], (f"measured at {rows[-1][0]}" if batch == rows[-1][0] else
                             f"above the largest measured size: {rows[-1][0]}'s value")
    for (b0, v0), (b1, v1) in zip(rows, rows[1:]):
        if b0 <= batch <= b1:
            w = math.log(batch / b0) / math.log(b1 / b0)
            return v0 + w * (v1 - v0), f"interpolated between {b0} and {b1}"
    return None, "not bracketed"


def render_table(doc):
    L = ["| batch (requests) | tokens / batch | ms / call (median) | tokens/s (median, min-max) |"
         " requests/s | rounds | graph captures (warm-up / timed) |",
         "|---|---|---|---|---|---|---|"]
    for r in doc["sizes"]:
        if r.get("error"):
            L.append(f"| {r['batch']} | - | - | {r['error']} | - | - | - |")
            continue
        mt = lambda k: f"{r[k] / 1e6:.3f}"  # noqa: E731  (M tokens/s)
        L.append(f"| {r['batch']} | {r['tokens_per_batch_mean']:.0f} |"
                 f" {r['ms_per_call_median']:.3f} | {mt('tokens_per_s')} M"
                 f" ({mt('tokens_per_s_min')}-{mt('tokens_per_s_max')}) |"
                 f" {r['requests_per_s']:.0f} | {r['rounds']} |"
                 f" {r['graph_captures_warmup']} / {r['graph_captures_timed']} |")
    return "\n".join(L)


# ------------------------------------------------------------------ measurement

def measure_size(model, bs, batches, warmup, rounds, min_rounds, deadline, hard_end, captures):
    """Warm-up, then timed rounds of the K batches; returns the size's row. Past `deadline`
    (the size's share of the budget) the warm-up stops after one pass and the rounds after
    min_rounds; past `hard_end` (the whole budget) the rounds stop after one."""
    import ragged_ctypes as rc
    lib = rc.lib()
    dim = model.info().output_dim
    outs = [np.empty((len(cu) - 1, dim), np.float32) for _, cu in batches]

    def call(k):
        ids, cu = batches[k]
        st = lib.rg_model_embed(model._h, ids.ctypes.data, cu.ctypes.data, len(cu) - 1,
                                outs[k].ctypes.data)
        if st != rc.RG_OK:
            raise rc._err(st)

    g0 = captures()
    passes = 0
    for w in range(warmup):
        if w and time.monotonic() >= deadline:
            break
        for k in range(len(batches)):
            call(k)
        passes += 1
    for k, o in enumerate(outs):  # the vectors must be real numbers, not a silent failure
        if not np.isfinite(o).all() or not np.abs(o).sum() > 0:
            raise RuntimeError(f"batch {k} of size {bs}: non-finite or zero embeddings")
    g1 = captures()
    tokens = [int(cu[-1]) for _, cu in batches]
    round_tps, round_rps, calls = [], [], []
    while len(round_tps) < rounds:
        now = time.monotonic()
        if round_tps and (now >= hard_end or (len(round_tps) >= min_rounds and now >= deadline)):
            break
        dt = []
        for k in range(len(batches)):
            t0 = time.perf_counter()
            call(k)
            dt.append(time.perf_counter() - t0)
        calls += dt
        round_tps.append(sum(tokens) / sum(dt))
        round_rps.append(bs * len(batches) / sum(dt))
    g2 = captures()
    return {
        "batch": bs, "batches": len(batches), "warmup_passes": passes, "rounds": len(round_tps),
        "tokens_per_batch": tokens, "tokens_per_batch_mean": sum(tokens) / len(tokens),
        "tokens_per_request_mean": sum(tokens) / (bs * len(batches)),
        "tokens_per_s": statistics.median(round_tps), "tokens_per_s_min": min(round_tps),
        "tokens_per_s_max": max(round_tps), "requests_per_s": statistics.median(round_rps),
        "ms_per_call_median": 1e3 * statistics.median(calls),
        "ms_per_call_min": 1e3 * min(calls), "ms_per_call_max": 1e3 * max(calls),
        "round_tokens_per_s": round_tps,
        "graph_captures_warmup": g1 - g0, "graph_captures_timed": g2 - g1,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default="fp16", choices=("fp32", "fp16", "bf16"))
    ap.add_argument("--batches", default="64,128,256,512", help="batch sizes, requests")
    ap.add_argument("--dist", default="uniform:2:100", help="loadgen --dist (default u2_100)")
    ap.add_argument("--seed", type=int, default=1, help="loadgen --seed (sweep.py's default 1)")
    ap.add_argument("--batches-per-size", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls per batch")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--min-rounds", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=30.0,
                    help="wall time for the whole run, model load included")
    ap.add_argument("--max-batch-tokens", type=int, default=None,
                    help="model's max_batch_tokens (default max(16384, the largest batch))")
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args(argv)
    t_start = time.monotonic()
    sizes = [int(x) for x in a.batches.split(",")]
    k = a.batches_per_size
    if min(sizes) < 1 or k < 1 or a.rounds < 1:
        ap.error("batch sizes, --batches-per-size and --rounds must be >= 1")
    reqs = loadgen_requests(a.dist, a.seed, max(sizes) * k)
    work = {bs: [pack(reqs[j * bs:(j + 1) * bs]) for j in range(k)] for bs in sizes}
    biggest = max(int(cu[-1]) for bl in work.values() for _, cu in bl)
    mbt = a.max_batch_tokens or max(16384, -(-biggest // 1024) * 1024)

    gpus = sweep.gpu_names() if a.device == "cuda" else []
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    doc = {"meta": {
        "tool": "bench/serving/offline_embed.py",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": os.environ.get("RAGGED_COMMIT") or sweep.git_commit(),
        "device": a.device, "dtype": a.dtype,
        "device_name": gpus[0].split(",")[0].strip() if gpus else sweep.cpu_name(),
        "gpus": gpus, "cpu": sweep.cpu_name(), "cpu_count": os.cpu_count(),
        "host": platform.node(), "model": a.model,
        "model_config": {x: cfg.get(x) for x in ("hidden_size", "num_hidden_layers",
                                                  "num_attention_heads", "intermediate_size")},
        "dist": a.dist, "seed": a.seed, "requests": f"loadgen requests 0..{max(sizes) * k - 1}",
        "batches_per_size": k, "warmup": a.warmup, "rounds_max": a.rounds,
        "min_rounds": a.min_rounds, "budget_s": a.budget_s, "max_batch_tokens": mbt,
        "timed": "rg_model_embed on prebuilt ids + cu_seqlens: ids to the device, encoder, "
                 "pooling, the pooled (B, output_dim) float32 vectors copied to the host, "
                 "synchronised; wall clock per call",
    }, "sizes": []}

    def save():
        doc["meta"]["wall_s"] = time.monotonic() - t_start
        if a.json:
            with open(a.json, "w") as f:
                json.dump(doc, f, indent=1)

    import ragged_ctypes as rc
    t0 = time.monotonic()
    try:
        model = rc.Model(a.model, device=a.device, dtype=a.dtype, max_batch_tokens=mbt)
    except (rc.RaggedError, OSError) as e:
        doc["error"] = f"model load failed: {e}"
        save()
        print(f"offline_embed: {doc['error']}", file=sys.stderr)
        return 1
    doc["meta"]["load_s"] = time.monotonic() - t0
    save()
    lib = rc.lib()
    lib.rg_model_graph_captures.restype = ctypes.c_longlong  # public API, not in ragged_ctypes
    lib.rg_model_graph_captures.argtypes = [ctypes.c_void_p]

    def captures():
        return int(lib.rg_model_graph_captures(model._h))

    print(f"offline_embed: {doc['meta']['device_name']} {a.device} {a.dtype}, model loaded in "
          f"{doc['meta']['load_s']:.1f} s, max_batch_tokens {mbt}", flush=True)
    status = 0
    for i, bs in enumerate(sizes):
        left = a.budget_s - (time.monotonic() - t_start)
        if left <= 0:
            doc["sizes"].append({"batch": bs, "error": "skipped: --budget-s spent"})
            status = 1
            continue
        deadline = time.monotonic() + left / (len(sizes) - i)
        try:
            row = measure_size(model, bs, work[bs], a.warmup, a.rounds, a.min_rounds,
                               deadline, t_start + a.budget_s, captures)
        except (rc.RaggedError, RuntimeError) as e:
            row = {"batch": bs, "error": str(e)}
            status = 1
        doc["sizes"].append(row)
        save()
        if "error" in row:
            print(f"  batch {bs}: {row['error']}", flush=True)
        else:
            print(f"  batch {bs:4d}: {row['tokens_per_s'] / 1e6:.3f} M tokens/s, "
                  f"{row['requests_per_s']:.0f} requests/s, {row['ms_per_call_median']:.3f} ms "
                  f"per call, {row['rounds']} rounds", flush=True)
    model.close()
    save()
    print(render_table(doc))
    return status


if __name__ == "__main__":
    sys.exit(main())
