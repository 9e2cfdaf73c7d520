"""Memory soak: run many packed batches of random ragged lengths through one model and record host
RSS and device memory every `--every` batches. Memory must stay flat: the activation arena is sized
once at load and reused (no allocation per batch).

usage: python3 bench/soak.py [--model DIR] [--device cpu|cuda] [--dtype fp32] [--batches 10000]
                             [--json OUT] [--max-growth-mib 8]
Exits 1 when RSS (or device memory) grows more than --max-growth-mib between the first checkpoint
(after warm-up) and the last."""
import argparse
import ctypes
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
import ragged_ctypes as rc  # noqa: E402


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def default_model():
    out = subprocess.run([rc.BIN_PATH, "info"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["model_dir"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--batches", type=int, default=10000)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--max-seqs", type=int, default=8)
    ap.add_argument("--max-growth-mib", type=float, default=8.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    model_dir = a.model or default_model()
    m = rc.Model(model_dir, a.device, a.dtype, max_batch_tokens=a.max_len * a.max_seqs)
    used, total = ctypes.c_size_t(), ctypes.c_size_t()
    rc.lib().rg_model_memory.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(ctypes.c_size_t)] * 2

    def dev_mib():
        rc.lib().rg_model_memory(m._h, ctypes.byref(used), ctypes.byref(total))
        return used.value / 2**20

    rng = np.random.default_rng(0)
    info = json.loads(subprocess.run([rc.BIN_PATH, "info", "--model", model_dir], capture_output=True,
                                     text=True, check=True).stdout)
    H = info["model"]["hidden_size"]
    vocab = info["model"]["vocab_size"]
    points = []
    t0 = time.time()
    for b in range(1, a.batches + 1):
        n = int(rng.integers(1, a.max_seqs + 1))
        seqs = [[101] + rng.integers(1000, vocab, int(rng.integers(0, a.max_len - 1))).tolist() + [102]
                for _ in range(n)]
        out = m.embed_ids(seqs, H)
        if not np.all(np.isfinite(out)):
            print(f"non-finite output at batch {b}", file=sys.stderr)
            return 1
        if b % a.every == 0 or b == 1:
            points.append({"batch": b, "rss_mib": round(rss_mib(), 2), "device_used_mib": round(dev_mib(), 2),
                           "elapsed_s": round(time.time() - t0, 2)})
            print(points[-1], flush=True)
    first = points[1] if len(points) > 1 else points[0]  # after the first `every` batches (warm)
    last = points[-1]
    growth_rss = last["rss_mib"] - first["rss_mib"]
    growth_dev = last["device_used_mib"] - first["device_used_mib"] if a.device == "cuda" else 0.0
    ok = growth_rss <= a.max_growth_mib and growth_dev <= a.max_growth_mib
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    gpu = ""
    if a.device == "cuda":
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip()
    result = {"what": "memory soak", "model_dir": model_dir, "device": a.device, "dtype": a.dtype,
              "gpu": gpu, "cpu": platform.processor() or platform.machine(), "commit": commit,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "batches": a.batches, "max_len": a.max_len, "max_seqs": a.max_seqs, "points": points,
              "rss_growth_mib": round(growth_rss, 2), "device_growth_mib": round(growth_dev, 2),
              "max_growth_mib": a.max_growth_mib, "flat": ok}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    print(f"rss growth {growth_rss:.2f} MiB, device growth {growth_dev:.2f} MiB over batches "
          f"{first['batch']}..{last['batch']}: {'FLAT' if ok else 'GROWING'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
