#!/usr/bin/env python3
"""One `ragged serve` over several GPUs (issue 9, item 17), checked on a 2-GPU machine.

1. Correctness: `ragged serve --devices 0,1` embeds 96 texts of 5-250 words, sent as 12 requests
   of 8 at once (so the pieces of one request land on both GPUs), with "normalize": false.
   Reference: HF transformers BertModel in float32 on the first GPU, mean pooling over the
   attention mask, on the ids the HF tokenizers library gives. Each vector's cosine and relative
   error are recorded; the check passes at cosine >= 0.999 (fp16 compute).
2. Both GPUs worked: /metrics ragged_device_batches_total{device="cuda:0"} and "cuda:1" > 0.
3. Throughput, one server at a time on the same GPUs: `--devices 0` and then `--devices 0,1`,
   each saturated by `ragged loadgen` (--requests token-id requests on /v1/embeddings, lengths
   uniform 5-250, 256 in flight, all offered at once). completion_rps = requests / time to
   answer them; the ratio is the scaling of one process over two GPUs (ideal 2.0; the HTTP
   threads and the one queue are shared).

Usage: multi_gpu.py --bin build/ragged --model DIR --out DIR [--devices 0,1] [--dtype fp16]
                    [--requests N] [--cpu N]   (--cpu N: dry run on the CPU with --cpu-replicas N)
Writes OUT/multi_gpu.json and prints a summary; exit status 0 when every check passed."""
import argparse
import concurrent.futures as cf
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np


def start(bin_path, model, args, log):
    f = open(log, "w")
    p = subprocess.Popen([bin_path, "serve", "--model", model, "--host", "127.0.0.1", "--port",
                          "0", *args], stdout=subprocess.PIPE, stderr=f, text=True,
                         start_new_session=True)
    line = p.stdout.readline()
    m = re.search(r"on http://[^:]+:(\d+) ", line)
    if not m:
        p.kill()
        raise SystemExit(f"server did not start: {line!r}; see {log}")
    return p, int(m.group(1))


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        return -9


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        return r.read().decode()


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def metrics(port):
    out = {}
    for ln in get(port, "/metrics").splitlines():
        if ln and not ln.startswith("#"):
            k, v = ln.rsplit(" ", 1)
            out[k] = float(v)
    return out


def texts(n, seed=7):
    rng = random.Random(seed)
    words = ("serving variable length requests without padding keeps the accelerator busy "
             "while batches of short and long sentences arrive together from many clients").split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 250))) for _ in range(n)]


def reference(model, sents, cpu):
    import torch
    from tokenizers import Tokenizer
    from transformers import BertModel
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    dev = "cpu" if cpu else "cuda:0"
    m = BertModel.from_pretrained(model, torch_dtype=torch.float32, add_pooling_layer=False)
    m = m.to(dev).eval()
    out = []
    with torch.inference_mode():
        for s in sents:
            ids = torch.tensor([tok.encode(s).ids], device=dev)
            h = m(input_ids=ids).last_hidden_state[0]
            out.append(h.mean(0).double().cpu().numpy())
    return np.array(out)


def loadgen(bin_path, port, n, log_json, dist="uniform:5:250"):
    """n requests offered at once (rate far above capacity): a saturated server; the result's
    completion_rps is n / the time to answer them."""
    cmd = [bin_path, "loadgen", "--url", f"http://127.0.0.1:{port}", "--route", "/v1/embeddings",
           "--rate", "1000000", "--requests", str(n), "--dist", dist,
           "--connections", "256", "--timeout-ms", "60000", "--json", log_json, "--quiet"]
    subprocess.run(cmd, check=True, timeout=300)
    with open(log_json) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/ragged")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--devices", default="0,1")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--requests", type=int, default=30000)
    ap.add_argument("--dist", default="uniform:5:250")
    ap.add_argument("--cpu", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    devs = a.devices.split(",")
    if a.cpu:
        multi = ["--device", "cpu", "--cpu-replicas", str(a.cpu), "--dtype", "fp32"]
        single = ["--device", "cpu", "--dtype", "fp32"]
        names = [f"cpu:{i}" for i in range(a.cpu)]
    else:
        multi = ["--devices", a.devices, "--dtype", a.dtype]
        single = ["--devices", devs[0], "--dtype", a.dtype]
        names = [f"cuda:{d}" for d in devs]
    common = ["--cache-entries", "0", "--max-queue", "65536"]
    res = {"argv": sys.argv[1:], "checks": {}}
    ok = True

    # 1 + 2: correctness over both devices, and both worked
    sents = texts(96)
    p, port = start(a.bin, a.model, multi + common, os.path.join(a.out, "server_multi.log"))
    try:
        res["info_devices"] = json.loads(get(port, "/info"))["devices"]
        with cf.ThreadPoolExecutor(12) as ex:
            parts = list(ex.map(lambda i: post(port, "/embed", {"inputs": sents[i:i + 8],
                                                                 "normalize": False}),
                                range(0, 96, 8)))
        got = np.array([v for part in parts for v in part], np.float64)
        m = metrics(port)
    finally:
        rc = stop(p)
    ref = reference(a.model, sents, bool(a.cpu))
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
    per_dev = {n: m.get(f'ragged_device_batches_total{{device="{n}"}}', 0) for n in names}
    res["checks"]["correctness"] = {"n": len(sents), "min_cosine": float(cos.min()),
                                    "max_rel_err": float(rel.max()),
                                    "pass": bool(cos.min() >= 0.999)}
    res["checks"]["both_devices_worked"] = {"batches": per_dev,
                                            "pass": bool(min(per_dev.values()) > 0)}
    res["checks"]["info_devices"] = {"got": res["info_devices"],
                                     "pass": res["info_devices"] == names}
    res["checks"]["clean_exit"] = {"rc": rc, "pass": rc == 0}

    # 3: throughput, one device then all
    tp = {}
    for label, args in (("one", single), ("all", multi)):
        p, port = start(a.bin, a.model, args + common,
                        os.path.join(a.out, f"server_{label}.log"))
        try:
            r = loadgen(a.bin, port, a.requests, os.path.join(a.out, f"loadgen_{label}.json"), a.dist)
            mm = metrics(port)
        finally:
            stop(p)
        tp[label] = {"loadgen": r, "device_batches": {n: mm.get(
            f'ragged_device_batches_total{{device="{n}"}}') for n in names},
            "device_tokens": {n: mm.get(f'ragged_device_tokens_total{{device="{n}"}}')
                              for n in names}}
    res["throughput"] = tp
    if "one" in tp and "all" in tp:
        res["scaling"] = tp["all"]["loadgen"]["completion_rps"] / \
            tp["one"]["loadgen"]["completion_rps"]
    for label in tp:
        r = tp[label]["loadgen"]
        print(label, {k: r.get(k) for k in ("completion_rps", "tokens_per_s", "elapsed_s")},
              r["requests"], tp[label]["device_tokens"])
        res["checks"][f"throughput_{label}_all_ok"] = {
            "requests": r["requests"], "pass": r["requests"]["ok"] == r["requests"]["scheduled"]}
    for c in res["checks"].values():
        ok &= c["pass"]
    res["pass"] = bool(ok)
    with open(os.path.join(a.out, "multi_gpu.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res["checks"]), "\nscaling", res.get("scaling"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
