"""Memory soak on the CUDA backend: N batches (default 10,000) of random ragged lengths through
rg_model_embed (tests/py/ragged_ctypes.py), recording host RSS and the device memory in use
(rg_model_memory -> cudaMemGetInfo) every 1,000 batches. Asserts that neither grows after the
first checkpoint (the activation arena is sized at load; nothing may be allocated per batch), that
every output is finite, and that the output of one fixed probe batch does not drift.

Usage: python3 tests/gpu/soak.py MODEL_DIR [--dtype fp16] [--batches 10000] [--json OUT.json]
Exit status 0 on success, 1 on a failed assertion."""
import argparse
import ctypes
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py"))
import ragged_ctypes as rc  # noqa: E402

RSS_SLACK = 8 << 20   # bytes of host RSS growth tolerated after the first checkpoint (allocator noise)
DEV_SLACK = 0         # device memory must not move at all


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def device_used(model):
    used, total = ctypes.c_size_t(), ctypes.c_size_t()
    l = rc.lib()
    l.rg_model_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                  ctypes.POINTER(ctypes.c_size_t)]
    st = l.rg_model_memory(model._h, ctypes.byref(used), ctypes.byref(total))
    if st != rc.RG_OK:
        raise RuntimeError(f"rg_model_memory failed: {st}")
    return used.value, total.value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--batches", type=int, default=10000)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--max-batch-tokens", type=int, default=16384)
    ap.add_argument("--json")
    a = ap.parse_args()

    cfg = json.load(open(os.path.join(a.model_dir, "config.json")))
    H, vocab, max_pos = cfg["hidden_size"], cfg["vocab_size"], cfg["max_position_embeddings"]
    rng = np.random.default_rng(1234)
    m = rc.Model(a.model_dir, device="cuda", dtype=a.dtype, max_batch_tokens=a.max_batch_tokens)

    def rand_batch():
        n = int(rng.integers(1, 33))
        lens = rng.integers(1, 129, size=n)
        if rng.random() < 0.05:  # now and then a maximum-length sequence
            lens[0] = max_pos
        return [[101] + rng.integers(999, vocab, size=int(L) - 1).tolist() for L in lens]

    probe = [[101] + rng.integers(999, vocab, size=L - 1).tolist() for L in (1, 7, 300, 64)]
    probe_ref = m.embed_ids(probe, H)
    checkpoints = []
    t0 = time.time()
    n_tok = 0
    for i in range(1, a.batches + 1):
        seqs = rand_batch()
        n_tok += sum(len(s) for s in seqs)
        out = m.embed_ids(seqs, H)
        if not np.isfinite(out).all():
            print(f"batch {i}: non-finite output", flush=True)
            return 1
        if i % a.every == 0:
            used, total = device_used(m)
            cp = dict(batch=i, rss=rss_bytes(), device_used=used, device_total=total,
                      seconds=round(time.time() - t0, 2), tokens=n_tok)
            checkpoints.append(cp)
            print(json.dumps(cp), flush=True)
    probe_end = m.embed_ids(probe, H)
    drift = float(np.abs(probe_end - probe_ref).max())
    m.close()

    first = checkpoints[0]
    rss_growth = max(c["rss"] for c in checkpoints) - first["rss"]
    dev_growth = max(c["device_used"] for c in checkpoints) - first["device_used"]
    ok = rss_growth <= RSS_SLACK and dev_growth <= DEV_SLACK and drift == 0.0
    res = dict(dtype=a.dtype, batches=a.batches, tokens=n_tok, seconds=round(time.time() - t0, 2),
               rss_growth_bytes=rss_growth, device_growth_bytes=dev_growth,
               probe_max_abs_drift=drift, checkpoints=checkpoints, pass_=ok)
    print(f"soak {a.dtype}: {a.batches} batches, {n_tok} tokens in {res['seconds']} s; "
          f"RSS growth {rss_growth} B (limit {RSS_SLACK}), device growth {dev_growth} B "
          f"(limit {DEV_SLACK}), probe drift {drift}: {'PASS' if ok else 'FAIL'}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
