"""Issue 28 on the GPU: does the deadline admission keep what it accepts under overload?

One `ragged serve` per admission mode on the same model, each driven by `ragged loadgen --mode
generate` at a ladder of Poisson rates (prompts uniform 16-512 tokens, outputs 16-256, 20% of the
requests behind one shared 256-token prefix: the issue's load), SLO TTFT <= 200 ms and TPOT <= 20
ms (from each request's scheduled send time):
  none     no deadlines (what the issue measured past the knee: TTFT grows to seconds);
  request  every body carries deadline_ms 200 and tpot_ms 20 (TCB's DAS admission, README
           "Admission");
  server   no deadline in the bodies, the server's --default-ttft-ms 200 --default-tpot-ms 20.
Per cell: requests sent, refused (429), served, TTFT p50 / p99 of the served, goodput (requests
per second meeting both SLOs), and of the admitted (200) the share meeting the TTFT target and
both targets. The knee is the highest rate of the `none` ladder at which >= 90% of the requests sent
meet both SLOs; the issue's targets read at 2x and 4x it: goodput >= 90% of the peak goodput with
deadlines, >= 99% of the admitted meeting TTFT, nobody refused below the knee.
Writes OUT.json and OUT_u16_512.png (goodput against offered rate, one line per mode; OUT.svg
where matplotlib is missing).

Usage: RAGGED_BIN=build/ragged python3 bench/serving/overload.py OUT --model DIR \
       [--rates 16,32,48,64,96,128,192] [--modes none,request,server] [--duration 10]
       python3 bench/serving/overload.py --merge OUT A.json B.json ...   (one result of several
       runs' cells)"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("RAGGED_BIN", os.path.join(ROOT, "build", "ragged"))
SLO_TTFT, SLO_TPOT = 200, 20


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(model, device, extra):
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="overload_srv_", suffix=".log", delete=False)
    p = subprocess.Popen([BIN, "serve", "--model", model, "--device", device, "--port",
                          str(port)] + extra, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p, port, log.name
        except OSError:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.5)
    p.kill()
    raise RuntimeError("server did not start: " + open(log.name).read()[-2000:])


def stop(p):
    p.terminate()
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()


def pct(v, q):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def cell(port, rate, duration, vocab, body_deadline, seed):
    with tempfile.TemporaryDirectory() as d:
        per = os.path.join(d, "per.jsonl")
        cmd = [BIN, "loadgen", "--mode", "generate", "--url", f"http://127.0.0.1:{port}",
               "--rate", str(rate), "--duration", str(duration), "--warmup", "2",
               "--connections", "1024", "--prompt-len", "uniform:16:512",
               "--output-len", "uniform:16:256", "--shared-prefix-frac", "0.2",
               "--shared-prefix-len", "256", "--token-ids", f"10:{vocab - 10}",
               "--slo-ttft-ms", str(SLO_TTFT), "--slo-tpot-ms", str(SLO_TPOT),
               "--timeout-ms", "30000", "--seed", str(seed), "--per-request", per, "--quiet"]
        if body_deadline:
            cmd += ["--deadline-ms", str(SLO_TTFT), "--tpot-ms", str(SLO_TPOT)]
        subprocess.run(cmd, check=True, timeout=duration + 120, stdout=subprocess.DEVNULL)
        rows = [json.loads(x) for x in open(per) if x.strip()]
    rows = [r for r in rows if r.get("measured")]
    ok = [r for r in rows if r["status"] == 200]
    ttft = [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None]
    met_ttft = [r for r in ok if r.get("ttft_ms") is not None and r["ttft_ms"] <= SLO_TTFT]
    met = [r for r in ok if r.get("slo_met")]
    refused = [r for r in rows if r["status"] == 429]
    return {"rate": rate, "sent": len(rows), "served": len(ok), "refused_429": len(refused),
            "other_errors": len(rows) - len(ok) - len(refused),
            "ttft_p50_ms": pct(ttft, 0.5), "ttft_p99_ms": pct(ttft, 0.99),
            "goodput_rps": round(len(met) / duration, 3),
            "goodput_frac": round(len(met) / len(rows), 4) if rows else None,
            "admitted_met_ttft": round(len(met_ttft) / len(ok), 4) if ok else None,
            "admitted_met_both": round(len(met) / len(ok), 4) if ok else None,
            "retry_after_s_mean": statistics.mean(r["retry_after_s"] for r in refused
                                                  if r.get("retry_after_s") is not None)
            if any(r.get("retry_after_s") is not None for r in refused) else None}


def svg(path, res):
    W, H, P = 640, 400, 50
    rates = sorted({c["rate"] for m in res.values() for c in m})
    top = max([c["goodput_rps"] for m in res.values() for c in m] + [max(rates)]) or 1
    X = lambda r: P + (W - 2 * P) * r / max(rates)
    Y = lambda g: H - P - (H - 2 * P) * g / top
    col = {"none": "#c0392b", "request": "#2471a3", "server": "#229954"}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<line x1="{P}" y1="{H-P}" x2="{W-P}" y2="{H-P}" stroke="black"/>',
           f'<line x1="{P}" y1="{P}" x2="{P}" y2="{H-P}" stroke="black"/>',
           f'<line x1="{X(0)}" y1="{Y(0)}" x2="{X(max(rates))}" y2="{Y(max(rates))}" '
           f'stroke="#999" stroke-dasharray="4"/>',
           f'<text x="{W/2}" y="{H-12}" text-anchor="middle">offered rate (req/s)</text>',
           f'<text x="14" y="{H/2}" transform="rotate(-90 14 {H/2})" text-anchor="middle">'
           f'goodput (req/s, TTFT&lt;=200 ms, TPOT&lt;=20 ms)</text>']
    for r in rates:
        out.append(f'<text x="{X(r)}" y="{H-P+16}" text-anchor="middle">{r}</text>')
    for k in range(5):
        g = top * k / 4
        out.append(f'<text x="{P-6}" y="{Y(g)+4}" text-anchor="end">{g:.0f}</text>')
    for i, (mode, cells) in enumerate(res.items()):
        pts = " ".join(f"{X(c['rate']):.1f},{Y(c['goodput_rps']):.1f}" for c in cells)
        out.append(f'<polyline fill="none" stroke="{col.get(mode, "black")}" stroke-width="2" '
                   f'points="{pts}"/>')
        out.append(f'<text x="{W-P-120}" y="{P+16*i}" fill="{col.get(mode, "black")}">'
                   f'{mode}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def summarize(res):
    """The knee of the `none` ladder and the issue's targets read at 2x and 4x it (the nearest
    rate run)."""
    none = res.get("none", [])
    knee = max([c["rate"] for c in none if (c["goodput_frac"] or 0) >= 0.9], default=None)
    peak = {m: max(c["goodput_rps"] for c in cs) for m, cs in res.items()}
    summary = {"knee_rps": knee, "peak_goodput_rps": peak}
    if knee:
        for m, cs in res.items():
            for mult in (2, 4):
                c = min(cs, key=lambda c: abs(c["rate"] - mult * knee))
                summary[f"{m}_at_{mult}x_knee"] = {
                    "rate": c["rate"],
                    "goodput_of_peak": round(c["goodput_rps"] / max(peak[m], 1e-9), 3),
                    "goodput_of_none_peak": round(c["goodput_rps"] / max(peak.get("none", 0),
                                                                          1e-9), 3),
                    "admitted_met_ttft": c["admitted_met_ttft"]}
            summary[f"{m}_refused_below_knee"] = sum(c["refused_429"] for c in cs
                                                    if c["rate"] <= knee)
    return summary


def png(path, res, title):
    """The goodput curve as a PNG (matplotlib, when installed; bench/results takes PNG plots)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    col = {"none": "#c0392b", "request": "#2471a3", "server": "#229954"}
    lab = {"none": "no deadlines", "request": "deadline_ms 200 + tpot_ms 20 per request",
           "server": "--default-ttft-ms 200 --default-tpot-ms 20"}
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    top = 0
    for m, cs in res.items():
        ax.plot([c["rate"] for c in cs], [c["goodput_rps"] for c in cs], "o-",
                color=col.get(m), label=lab.get(m, m))
        top = max([top] + [c["rate"] for c in cs])
    ax.plot([0, top], [0, top], ":", color="#999", label="offered")
    ax.set_xlabel("offered rate (requests/s, Poisson)")
    ax.set_ylabel("goodput (req/s, TTFT<=200 ms, TPOT<=20 ms)", fontsize=9)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return True


def merge(out, paths):
    """Several runs' cells in one result (cells of a mode ordered by rate), summarized again."""
    res, meta = {}, None
    for p in paths:
        d = json.load(open(p))
        meta = meta or d
        for m, cs in d["cells"].items():
            res.setdefault(m, []).extend(cs)
    for m in res:
        res[m].sort(key=lambda c: c["rate"])
    meta = dict(meta, cells=res, summary=summarize(res), merged_from=[os.path.basename(p)
                                                                     for p in paths])
    meta.pop("server_log_tails", None)
    with open(out + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    title = f"{meta.get('gpu', '')} {meta.get('commit', '')[:7]}\n{meta['load']}"
    if not png(out + "_u16_512.png", res, title):
        svg(out + ".svg", res)
    print(json.dumps(meta["summary"]))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--merge":
        return merge(sys.argv[2], sys.argv[3:])
    a = argparse.ArgumentParser()
    a.add_argument("out")
    a.add_argument("--model", required=True)
    a.add_argument("--device", default="cuda")
    a.add_argument("--rates", default="16,32,48,64,96,128,192")
    a.add_argument("--modes", default="none,request,server")
    a.add_argument("--duration", type=float, default=10)
    a.add_argument("--server-args", default="")
    o = a.parse_args()
    # a GGUF file: the config.json beside it (make_gen_model.py --gguf writes it there)
    cfg_dir = os.path.dirname(o.model) if os.path.isfile(o.model) else o.model
    vocab = json.load(open(os.path.join(cfg_dir, "config.json")))["vocab_size"]
    rates = [float(x) for x in o.rates.split(",")]
    res, logs = {}, {}
    extra = {"none": [], "request": [],
             "server": ["--default-ttft-ms", str(SLO_TTFT), "--default-tpot-ms", str(SLO_TPOT)]}
    for mode in o.modes.split(","):
        p, port, logs[mode] = start(o.model, o.device, extra[mode] + o.server_args.split())
        try:
            res[mode] = []
            for i, r in enumerate(rates):
                c = cell(port, r, o.duration, vocab, mode == "request", seed=1 + i)
                print(json.dumps({"mode": mode, **c}), flush=True)
                res[mode].append(c)
        finally:
            stop(p)
    summary = summarize(res)
    tail = {m: open(f).read()[-1500:] for m, f in logs.items()}
    with open(o.out + ".json", "w") as f:
        json.dump({"what": "issue 28: goodput under overload, three admission modes",
                   "commit": os.environ.get("RAGGED_COMMIT", "unknown"),
                   "gpu": os.environ.get("RAGGED_GPU", ""),
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "model": o.model, "device": o.device, "slo_ttft_ms": SLO_TTFT,
                   "slo_tpot_ms": SLO_TPOT, "duration_s": o.duration,
                   "load": "Poisson; prompts uniform:16:512, outputs uniform:16:256, 20% behind "
                           "one 256-token prefix", "summary": summary, "cells": res,
                   "server_log_tails": tail}, f, indent=1)
    if not png(o.out + "_u16_512.png", res, os.environ.get("RAGGED_GPU", "")):
        svg(o.out + ".svg", res)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
