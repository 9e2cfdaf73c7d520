#!/usr/bin/env python3
"""Plot a serving benchmark JSON written by bench/serving/sweep.py.

For each length distribution one PNG with two panels, one line per scheduler:
  (a) serving throughput (successful responses/s) against offered request rate, with the y = x
      line: where a curve leaves it the server is saturated (TurboTransformers PPoPP'21
      Fig. 15/16, TCB ICPP'22 Fig. 10/11);
  (b) p99 (solid) and p50 (dotted) latency against achieved throughput, log scale: the
      latency-throughput trade-off of each scheduler.
The title carries the device (GPU or CPU name), model, dtype, git commit and date.

Usage: python3 tools/plot_serving.py RESULT.json [--out-prefix PREFIX]
Writes PREFIX_<dist>.png (PREFIX defaults to RESULT without .json). Needs matplotlib; without it
prints a note and exits 0 so a benchmark run never fails for want of plots.
"""
import argparse
import json
import os
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json_path")
    ap.add_argument("--out-prefix", default=None)
    a = ap.parse_args(argv)
    with open(a.json_path) as f:
        doc = json.load(f)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_serving: matplotlib not installed, no plots written", file=sys.stderr)
        return 0
    meta, runs = doc["meta"], doc["runs"]
    prefix = a.out_prefix or os.path.splitext(a.json_path)[0]
    scheds = meta["schedulers"]
    cmap = plt.get_cmap("tab20" if len(scheds) > 10 else "tab10")
    colors = {s: cmap(i % cmap.N) for i, s in enumerate(scheds)}
    markers = "os^vD<>phX*P"
    written = []
    for dname in meta["dists"]:
        rs = [r for r in runs if r["dist"] == dname and r.get("steps")]
        if not rs:
            continue
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
        top = 0.0
        for r in rs:
            st = sorted(r["steps"], key=lambda s: s["offered_rps"])
            off = [s["offered_rps"] for s in st]
            thr = [s["throughput_rps"] for s in st]
            top = max(top, max(off), max(thr))
            c, m = colors[r["scheduler"]], markers[scheds.index(r["scheduler"]) % len(markers)]
            sat = r["saturation"]["throughput_rps"] if r.get("saturation") else None
            label = r["scheduler"] + (f" (sat {sat:.0f}/s)" if sat else "")
            ax1.plot(off, thr, marker=m, color=c, label=label)
            # In offered-rate order: past saturation the curve bends back (throughput stalls or
            # drops while latency climbs), as in the papers' figures.
            pts = [(s["throughput_rps"], s["latency_ms"]["p99"], s["latency_ms"]["p50"])
                   for s in st if s["latency_ms"]["p99"] is not None]
            if pts:
                ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker=m, color=c,
                         label=r["scheduler"])
                ax2.plot([p[0] for p in pts], [p[2] for p in pts], linestyle=":", color=c)
        ax1.plot([0, top], [0, top], "k--", linewidth=0.8, label="y = x")
        ax1.set_xlabel("offered request rate (req/s, Poisson)")
        ax1.set_ylabel("serving throughput (responses/s)")
        ax1.set_title("(a) throughput vs request rate")
        ax1.grid(alpha=0.3)
        ax1.legend(fontsize=7)
        ax2.set_xlabel("achieved throughput (responses/s)")
        ax2.set_ylabel("latency ms (p99 solid, p50 dotted)")
        ax2.set_yscale("log")
        ax2.set_title("(b) latency vs throughput")
        ax2.grid(alpha=0.3, which="both")
        ax2.legend(fontsize=7)
        spec = meta.get("dist_specs", {}).get(dname, dname)
        hw = f"GPU {'; '.join(meta['gpus'])}; host CPU {meta['cpu']}" if meta.get("gpus") \
            else f"CPU {meta['cpu']} ({meta.get('cpu_count', '?')} cores)"
        fig.suptitle(f"ragged serving, {meta['model_name']}, lengths {spec} tokens, "
                     f"{meta['device']} {meta['dtype']}\n{hw}; commit {meta['commit']}; "
                     f"{meta['date']}", fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 0.9))
        out = f"{prefix}_{dname}.png"
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    for w in written:
        print(f"plot_serving: wrote {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
