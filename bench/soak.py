"""Memory soak: N batches (default 10,000) of random ragged lengths through rg_model_embed
(tests/py/ragged_ctypes.py) on one model, recording host RSS and, on CUDA, the device memory in use
(rg_model_memory -> cudaMemGetInfo) every --every batches. Asserts that neither grows after the
first checkpoint (the activation arena is sized at load; nothing may be allocated per batch), that
every output is finite, and that the output of one fixed probe batch does not drift.

usage: python3 bench/soak.py [MODEL_DIR] [--device cpu|cuda] [--dtype fp32|fp16|bf16]
                             [--batches 10000] [--max-seqs 32] [--max-len 128] [--json OUT]
MODEL_DIR defaults to the default model (`ragged info`). Exit status 0 on success, 1 on a failed
assertion. tests/gpu/run.sh runs it on CUDA; on CPU use small batches (--max-seqs 4 --max-len 32)."""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
import ragged_ctypes as rc  # noqa: E402

RSS_SLACK = 8 << 20   # bytes of host RSS growth tolerated after the first checkpoint (allocator noise)
DEV_SLACK = 0         # device memory must not move at all


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def default_model():
    out = subprocess.run([rc.BIN_PATH, "info"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["model_dir"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--batches", type=int, default=10000)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--max-seqs", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--max-batch-tokens", type=int, default=16384)
    ap.add_argument("--json")
    a = ap.parse_args()
    model_dir = a.model_dir or default_model()

    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    H, vocab, max_pos = cfg["hidden_size"], cfg["vocab_size"], cfg["max_position_embeddings"]
    rng = np.random.default_rng(1234)
    m = rc.Model(model_dir, device=a.device, dtype=a.dtype,
                 max_batch_tokens=max(a.max_batch_tokens, a.max_seqs * a.max_len + max_pos))

    def rand_batch():
        n = int(rng.integers(1, a.max_seqs + 1))
        lens = rng.integers(1, a.max_len + 1, size=n)
        if rng.random() < 0.05:  # now and then a maximum-length sequence
            lens[0] = max_pos
        return [[101] + rng.integers(999, vocab, size=int(L) - 1).tolist() for L in lens]

    probe = [[101] + rng.integers(999, vocab, size=L - 1).tolist() for L in (1, 7, min(300, max_pos), 64)]
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
            used, total = m.memory()
            cp = dict(batch=i, rss=rss_bytes(), device_used=used, device_total=total,
                      seconds=round(time.time() - t0, 2), tokens=n_tok)
            checkpoints.append(cp)
            print(json.dumps(cp), flush=True)
    probe_end = m.embed_ids(probe, H)
    drift = float(np.abs(probe_end - probe_ref).max())
    m.close()

    first = checkpoints[0]
    rss_growth = max(c["rss"] for c in checkpoints) - first["rss"]
    # on CPU rg_model_memory reports RSS, already covered by the RSS check
    dev_growth = (max(c["device_used"] for c in checkpoints) - first["device_used"]
                  if a.device == "cuda" else 0)
    ok = rss_growth <= RSS_SLACK and dev_growth <= DEV_SLACK and drift == 0.0
    # the carry's COMMIT first: the GPU machine's copy of the tree may hold a stale .git
    carry = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".gpu_carry", "COMMIT")
    commit = (open(carry).read().strip() if os.path.exists(carry) else
              subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True).stdout.strip())
    res = dict(what="memory soak", model_dir=model_dir, device=a.device, dtype=a.dtype,
               commit=commit, date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               batches=a.batches, max_seqs=a.max_seqs, max_len=a.max_len, tokens=n_tok,
               seconds=round(time.time() - t0, 2), rss_growth_bytes=rss_growth,
               device_growth_bytes=dev_growth, probe_max_abs_drift=drift, checkpoints=checkpoints,
               pass_=ok)
    print(f"soak {a.device} {a.dtype}: {a.batches} batches, {n_tok} tokens in {res['seconds']} s; "
          f"RSS growth {rss_growth} B (limit {RSS_SLACK}), device growth {dev_growth} B "
          f"(limit {DEV_SLACK}), probe drift {drift}: {'PASS' if ok else 'FAIL'}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
