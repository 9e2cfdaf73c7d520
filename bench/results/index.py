#!/usr/bin/env python3
"""The index of the recorded results: writes bench/results/README.md (one row per file: its name,
what it measures, the GPU or CPU, the commit, the headline number) and tests/gpu/results/README.md
(one row per test log: the test, the GPU, the commit, pass/fail), and prints the files it could
not classify (a name off the scheme, an unknown <what>, no commit, no headline, no result).

  python3 bench/results/index.py            # rewrite both READMEs
  python3 bench/results/index.py --check    # rewrite nothing; exit 1 when a README is stale
                                            # or a name is off the scheme (tests/py's
                                            # test_bench_results.py runs it)

Names: <what>_<device>_<YYYYMMDD-HHMM>[-<qualifier>...].<ext> (NAME_RX; the README says more).
Headlines and results come from the file itself (its JSON fields, its markdown tables and
target lines, the PASS/FAIL lines of a log); headlines.tsv (NAME-or-glob TAB field TAB value,
field = headline | commit | result | what) overrides them where the file has none to read or the one
read is not the number that matters. Standard library only.
"""
import fnmatch
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LOGS = os.path.join(ROOT, "tests", "gpu", "results")
OVERRIDES = os.path.join(HERE, "headlines.tsv")
NOT_INDEXED = {"README.md", "index.py", "headlines.tsv"}

NAME_RX = re.compile(
    r"^(?P<what>[a-z][a-z0-9]*(?:_[a-z0-9]+)*?)"
    r"_(?P<device>cpu_\d+core-[a-z0-9]+(?:-[a-z0-9]+)*|[a-z][a-z0-9]*\d[a-z0-9]*(?:-[a-z0-9]+)*)"
    r"_(?P<stamp>20\d\d[01]\d[0-3]\d-[0-2]\d[0-5]\d)"
    r"(?P<tail>(?:[-_][a-z0-9][a-z0-9.]*)*)"
    r"\.(?P<ext>json\.xz|jsonl|json|md|log|png|txt)$")

GPUS = {"h100-80gb-hbm3": "H100 80GB HBM3", "h200": "H200", "h200x2": "2 x H200"}
CPUS = {"cpu_16core-xeon": "16-core Xeon (Sapphire Rapids)", "cpu_2core-xeon": "2-core Xeon",
        "cpu_2core-amd-epyc": "2-core AMD EPYC (the development VMs: Zen 5 in some sessions, Zen 3 on 2026-12-03)"}

# <what> -> what it measures; a dict picks by device kind ("cpu" / "gpu")
WHAT = {
    "overload": "issue 28: goodput under overload with no deadlines, per-request deadlines and "
                "the server-wide defaults (bench/serving/overload.py)",
    "entry_points": "issue 27: per-token time of ragged generate, ragged.Generator and ragged "
                    "serve on one engine (bench/peer/entry_points.py)",
    "attn": "attention alone: ragged rg_op_attention vs torch varlen_attn "
            "(bench/peer/attn_bench.py)",
    "attn_split_ab": "A/B (not landed): CPU attention's query blocks cut when a batch has few "
                     "tasks",
    "gguf_cpu": "issue 30: CPU decode on GGUF files, ragged vs llama.cpp on the same file, each "
                "in its own process (bench/peer/gguf_cpu.py)",
    "spec_lookup": "issue 30: prompt-lookup speculative decoding on the real SmolLM2, batch 1, "
                   "acceptance and speed-up (bench/peer/spec_bench.py)",
    "spec_draft": "issue 30: draft-model speculative decoding (--draft-model) on the real "
                  "SmolLM2, batch 1, acceptance and speed-up (bench/peer/spec_bench.py "
                  "SPEC_DRAFT)",
    "qgemv": "issue 30: the quantized decode GEMMs per call (qmv_kernel, the tensor-core "
             "kernel, fp16 gemv) on 1B / 8B shapes (bench/kernels/qgemv_bench.c)",
    "grammar_overhead": "issue 31: structured-output masking overhead per decode step "
                        "(bench/peer/grammar_overhead.py)",
    "decode_quant": "issue 30: decode with GGUF weights kept quantized on the GPU against the F16 "
                    "file and the dequantized load (tests/gpu/issue30_gq.py)",
    "gemm_pad_ab": "A/B (not landed): odd-N GEMM outputs (LM heads of vocab 58101 / 50257) "
                   "through a 16-byte-aligned scratch and one strided copy",
    "attn_wgmma": "attention alone: the wgmma kernel vs mma.sync vs varlen_attn (issue 21 item 1)",
    "chunked_prefill": "chunked prefill under load: 32 streams' token gaps when a 2,000-token "
                       "prompt joins (bench/serving/chunked_prefill.py)",
    "cpu_speed": "summary of issue 7: CPU speed vs PyTorch and ONNX Runtime, what landed, what not",
    "deberta": "DeBERTa-v3 vs ragged's RoBERTa / DistilBERT and HF eager "
               "(bench/peer/deberta_bench.py)",
    "decode": {"cpu": "greedy decode vs HF generate, each in its own process "
                      "(bench/peer/decode_cpu.py)",
               "gpu": "summary of issue 19: the decoder on the GPU (parity, decode speed, traces)"},
    "decode_bench": "greedy decode tok/s: ragged vs a graphed PyTorch loop vs HF generate "
                    "(bench/peer/decode_bench.py)",
    "decode_modes": "decode step cost per decoding mode (beam 4, top-k/top-p) against greedy "
                    "(bench/peer/decode_modes.py)",
    "decode_trace": "kernel trace of decode steps (bench/peer/decode_trace.py)",
    "encoder_gpu": "summary of issue 21 on the H200: each item's measurements, trace and plan",
    "gemm_libs": "CPU GEMM libraries for the fp32 linear layers (bench/kernels/cpu_gemm_libs.sh)",
    "gemm_small_m": "oneDNN 2.6 vs oneDNN 3.2 vs ORT MLAS, one pinned core, a sentence's row "
                    "counts",
    "gemm_tiles_ab": "A/B (not landed): the committed GEMM tiles vs a cost-model tile planner",
    "gen_serving": "generation serving: continuous batching vs static batching "
                   "(bench/serving/gen_serving.py)",
    "gpu_session": "summary of one GPU session: what ran, on which commit, what it showed",
    "gpu_speed": "summary of issue 6: GPU speed vs the strongest PyTorch peer, H100 and H200",
    "kernels": {"cpu": "per-op CPU kernel snapshot (build/bench_ops --cpu)",
                "gpu": "per-op kernel benchmark against the copy and GEMM ceilings (bench_ops)"},
    "memory": "memory soak: RSS over 10,000 batches (bench/soak.py)",
    "multi_gpu": "one `ragged serve --devices 0,1` over two GPUs (issue 9 item 17, "
                 "tests/gpu/multi_gpu.sh)",
    "pad_tiles_ab": "A/B (not landed): zero-padded one-call GEMM tiles vs the committed row split",
    "peer": {"cpu": "ragged vs PyTorch vs ONNX Runtime on the CPU, each in its own process "
                    "(bench/peer/bench_cpu.py)",
             "gpu": "ragged vs HF transformers (SDPA, padded, eager), a weak peer "
                    "(bench/peer/bench_vs_torch.py)"},
    "peer_graphed": "end to end vs the graphed packed PyTorch peer (varlen_attn, a CUDA graph per "
                    "batch; bench/peer/bench_graphed.py)",
    "regression_check": "GPU speed after a day's changes, against the graphed peer",
    "serving": "serving sweep: saturation and latency per scheduler and length distribution "
               "(bench/serving/sweep.py)",
    "serving_gen": "summary of issue 20: generation serving, continuous vs static batching",
    "short_requests": "short embedding requests through `ragged serve` (issue 21 item 4)",
    "single_floor": "one sentence: each runtime's GEMMs against its whole forward "
                    "(bench/peer/single_floor.py)",
    "single_sentence": "one sentence: ragged vs PyTorch vs ONNX Runtime per thread count "
                       "(bench/peer/single_sentence.py)",
    "topk_bench": "hierarchical top-k vs a full sort vs torch.topk (bench/kernels/topk_bench.py)",
    "trace": "CUPTI kernel trace: ragged vs the graphed packed PyTorch peer (bench/peer/trace.py)",
    "translate_bench": "translation throughput: ragged vs CTranslate2 and HF generate "
                       "(bench/peer/translate_gpu.sh, issue 29)",
    "translate_graphs": "encoder-decoder decode steps as CUDA graphs, A/B beside HF generate "
                        "(bench/peer/translate_graphs.sh, issue 29)",
    "graphs_ab": "decode-step graphs above 64 rows, A/B beside the graphed PyTorch peer "
                 "(tests/gpu/graphs_ab.sh)",
    "translate_trace": "kernel trace of one Translator call, greedy and 4 beams "
                       "(bench/peer/translate_trace.py, issue 29)",
}
TESTS = {
    "decoder_embed_cuda": "tests/gpu/decoder_embed_cuda.py: decoder embeddings on CUDA against the float64 reference (issue 31 item 3)",
    "qgemv": "tests/gpu/issue30_gq.sh: test_ops_cuda --qgemm (issue 30)",
    "grammar_overhead": "tests/gpu/issue30_31.py (issue 31 structured outputs on CUDA)",
    "decode_quant": "tests/gpu/issue30_gq.sh / issue31_embed_qgemm.sh: test_ops_cuda --qgemm (issue 30)",
    "gemm_pad_ab": "test_ops_cuda --quick --no-gemm fp16 of the padded-GEMM A/B (a04dc2b)",
    "gpu_test": "tests/gpu/run.sh",
    "issue19": "tests/gpu/issue19.sh (decoder parity, sampling, memcheck; bench stages)",
    "decoder_gpu": "tests/gpu/decoder.sh (now issue19.sh): decoder parity, memcheck, bench",
    "decoder_hf": "tests/gpu/decoder_hf.py: transformers parity, greedy and beam ids",
    "decoder_hf_qwen3_phi3": "tests/gpu/decoder_hf.py qwen3,phi3: Qwen3 / Phi-3 (LongRoPE) at "
                             "public widths against transformers (issue 27)",
    "decoder_cuda_cpu": "tests/gpu/decoder_cuda_cpu.py: CUDA decoder logits against the CPU's "
                        "(Qwen3 q/k norm, Phi-3 LongRoPE among them)",
    "translate_hf_public": "tests/gpu/translate_hf_public.py: fp32 ids against transformers "
                          "generate() at the public shapes (issue 29)",
    "translate_bench": "bench/peer/translate_gpu.sh's log (issue 29)",
    "translate_graphs": "tests/gpu/issue29.sh and bench/peer/translate_graphs.sh's log (issue 29)",
    "graphs_ab": "tests/gpu/graphs_ab.sh's log: graphs above 64 rows, decode and translate",
    "issue30_31": "tests/gpu/issue30_31.py: structured outputs, prompt-lookup speculative decoding "
                  "and a GGUF Q8_0 model on CUDA against the CPU",
    "translate_memcheck": "tests/gpu/translate_memcheck.py under compute-sanitizer memcheck: "
                          "enc-dec CUDA paths, KV blocks back to 0 (issue 29)",
    "issue29": "tests/gpu/issue29.sh: build, translate_cuda.py, translate_hf_public.py",
    "translate_cuda": "tests/gpu/translate_cuda.py: ragged.Translator on CUDA against the "
                      "float64 reference (issue 29)",
    "generate_cuda": "tests/gpu/generate_cuda.py: rg_generate on CUDA equals the CPU (greedy, "
                     "seeded samples, beams) through the one engine (issue 27)",
    "sample_cuda": "tests/gpu/sample_cuda.py: device sampling / top-k / argmax and the model's "
                   "sampler step against the CPU twin",
    "ref_vs_hf": "tests/gpu/ref_vs_hf.py: the float64 reference vs transformers float64",
    "encoder_quick": "tests/gpu/encoder_quick.sh: build, test_ops_cuda, encoder families",
    "families": "tests/gpu/families.py: every encoder family vs the float64 reference",
    "model_errors": "tests/gpu/model_errors.py: model-level errors vs the float64 reference",
    "multi_gpu": "tests/gpu/multi_gpu.sh: the run's log",
}
PARTS = {  # the last qualifier of a tests/gpu/run.sh file -> what it holds
    "run": "run.log, every stage", "verification": "run.log, every stage", "build": "the build",
    "ops": "test_ops_cuda, every op row", "soak": "memory soak, 10,000 graphed batches",
    "families": "families.py", "sanitizer": "compute-sanitizer", "pytest-fp16": "pytest, CUDA fp16",
    "pytest-bf16": "pytest, CUDA bf16", "pytest-fp32": "pytest, CUDA fp32",
    "san-initcheck": "compute-sanitizer initcheck", "san-memcheck": "compute-sanitizer memcheck",
    "san-racecheck": "compute-sanitizer racecheck", "san-synccheck": "compute-sanitizer synccheck",
    "test-ops-cuda": "test_ops_cuda", "model-errors": "model_errors.py",
}


def parse(name):
    m = NAME_RX.match(name)
    return m.groupdict() if m else None


def device_label(dev):
    m = re.match(r"cpu_(\d+)core-(.*)", dev)
    if m:
        return "CPU, " + CPUS.get(dev, f"{m[1]}-core {m[2]}")
    return GPUS.get(dev, dev)


def read_text(path):
    if path.endswith((".png", ".xz")):
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_json(path):
    if not path.endswith(".json"):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError:
        return None


def find_key(d, key, depth=0):
    """The first value of `key` in a JSON tree, breadth first (meta before runs)."""
    if depth > 4:
        return None
    if isinstance(d, dict):
        if key in d and isinstance(d[key], (str, bool, int, float)):
            return d[key]
        kids = list(d.values())
    elif isinstance(d, list):
        kids = d[:3]
    else:
        return None
    for v in kids:
        r = find_key(v, key, depth + 1)
        if r is not None:
            return r
    return None


COMMIT_RX = [re.compile(p) for p in (
    r"commit[:=]?\s+`?([0-9a-f]{7,40})((?:[+-]dirty)?)`?",
    r"ragged at `([0-9a-f]{7,40})((?:\+dirty)?)`",
    r"at commit `?([0-9a-f]{7,40})()",
    r"at ragged commit ([0-9a-f]{7,40})()",
    r"commit: `([0-9a-f]{7,40})()`",
)]


def commit_of(path, text, js):
    c = None
    if js is not None:
        c = find_key(js, "commit")
        if isinstance(c, str) and not re.match(r"[0-9a-f]{7}", c):
            c = None
    if not c and text:
        head = "\n".join(text.splitlines()[:40])
        for rx in COMMIT_RX:
            m = rx.search(head)
            if m:
                c = m[1] + m[2]
                break
    if not c:
        return None
    c = str(c)
    dirty = "+dirty" if "dirty" in c else ""
    return c[:7] + dirty


# ---- markdown tables --------------------------------------------------------------------------
def md_tables(text):
    """(heading, header cells, rows of cells) per markdown table."""
    out, heading, header, rows = [], "", None, []
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                rows.append(cells)
            continue
        if header is not None:
            out.append((heading, header, rows))
        header, rows = None, []
    return out


def num(cell):
    m = re.search(r"-?\d[\d,]*\.?\d*(?:e-?\d+)?", cell.replace("**", ""))
    if not m:
        return None
    try:
        return float(m[0].replace(",", ""))
    except ValueError:
        return None


def column(text, pat, heading=None):
    """Every number of the columns whose header matches pat."""
    vals = []
    for h, header, rows in md_tables(text):
        if heading and not re.search(heading, h):
            continue
        for i, c in enumerate(header):
            if re.search(pat, c):
                vals += [v for v in (num(r[i]) for r in rows if i < len(r)) if v is not None]
    return vals


def span(vals, unit="x"):
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    g = math.exp(sum(math.log(v) for v in vals) / len(vals)) if lo > 0 else None
    s = f"{lo:.2f}-{hi:.2f}{unit}" if lo != hi else f"{lo:.2f}{unit}"
    tail = f", geomean {g:.2f}{unit})" if g and len(vals) > 2 else ")"
    return s + f" ({len(vals)} cells" + tail


def targets(text):
    """Target lines, '- name: value (target ...): met | MISSED' and '| target | measured | met |'
    tables."""
    out = []
    for m in re.finditer(r"^- ([a-z_]+): ([\d.]+) \(target ([^)]*)\): (met|MISSED)", text, re.M):
        out.append(f"{m[1]} {m[2]} ({m[4].lower()})")
    for h, header, rows in md_tables(text):
        if header and header[0] == "target" and len(header) >= 3:
            for r in rows:
                if len(r) >= 3:
                    out.append(f"{r[1]} ({r[2].replace('*', '')})")
    return out


# ---- headlines per kind -----------------------------------------------------------------------
def h_ratio(label, pat, heading=None, unit="x"):
    def f(p, text, js):
        s = span(column(text, pat, heading), unit)
        return f"{label} {s}" if s else None
    return f


def h_peer_cpu(p, text, js):
    parts = []
    for lab, pat in (("vs torch", r"^ragged/torch$"), ("vs ORT", r"^ragged/ort$")):
        s = span(column(text, pat))
        if s:
            parts.append(f"{lab} {s}")
    return "speed-up " + "; ".join(parts) if parts else None


def h_attn_ab(p, text, js):
    """attn_bench --ragged-env VAR=0,1: the A/B table's speed-up of =1 and both against varlen."""
    a = span(column(text, r"^speedup \w+=1$"))
    b = span(column(text, r"^vs varlen \w+=1$"))
    var = re.search(r"speedup (\w+)=1", text)
    return f"{var[1]}=1 vs =0 {a}; =1 vs varlen_attn {b}" if a and b else None


def h_decode_modes(p, text, js):
    for h, header, rows in md_tables(text):
        if "vs greedy" in header:
            i = header.index("vs greedy")
            got = [f"{r[0]} {num(r[i]):.2f}x" for r in rows if r[0] != "greedy" and num(r[i])]
            if got:
                return "step time vs greedy: " + ", ".join(got)
    return None


def h_serving(p, text, js):
    for h, header, rows in md_tables(text):
        if h.startswith("Saturation") and header and header[0] == "scheduler":
            dists = [c.split(" ")[0] for c in header[1:]]
            got = []
            for r in rows:
                vals = [num(re.sub(r"\(.*?\)", "", c).split("·")[0]) for c in r[1:]]
                got.append((r[0], vals))
            best = []
            for j, d in enumerate(dists):
                cand = [(v[j], s) for s, v in got if j < len(v) and v[j] is not None]
                if cand:
                    v, s = max(cand)
                    best.append(f"{d} {v:,.0f} req/s ({s})")
            return "saturation: " + ", ".join(best) if best else None
    return None


def h_targets(p, text, js):
    t = targets(text)
    return "; ".join(t) if t else None


def h_kernels(p, text, js):
    vals = column(text, r"^%$", r"^Ops")
    if not vals:
        return None
    return f"{len(vals)} op rows at {min(vals):.0f}-{max(vals):.0f}% of their ceiling"


def h_single_floor(p, text, js):
    s = span(column(text, r"^ragged/torch$"))
    return f"one sentence, ragged/torch {s}" if s else None


def h_deberta(p, text, js):
    a = span(column(text, r"DeBERTa / RoBERTa"))
    b = span(column(text, r"HF / DeBERTa"))
    return f"DeBERTa/RoBERTa time {a}; HF eager/DeBERTa {b}" if a and b else None


def h_trace(p, text, js):
    got = []
    for h, header, rows in md_tables(text):
        for r in rows:
            if r and r[0] == "wall ms" and len(r) >= 3 and num(r[1]) and num(r[2]):
                got.append(num(r[2]) / num(r[1]))
    return f"wall time, peer/ragged {span(got)}" if got else None


def h_decode_cpu(p, text, js):
    s = span(column(text, r"^x static$"))
    return f"tok/s vs HF generate (static cache) {s}" if s else None


def h_chunked(p, text, js):
    m = re.search(r"## Check[^\n]*\n+- (.+?)(?:\n- |\n\n|\Z)", text, re.S)
    return " ".join(m[1].split()) if m else None


def h_decode_bench(p, text, js):
    rows = (js or {}).get("rows") or []
    got = []
    for r in rows:
        rg = r.get("ragged_generate_tok_s") or r.get("ragged_tok_s")
        pt = r.get("torch_graphed_tok_s")
        if rg and pt:
            got.append(rg / pt)
    return f"tok/s, ragged / graphed PyTorch {span(got)}" if got else None


def h_decode_trace(p, text, js):
    every = (js or {}).get("rows") or []
    rows = [r for r in every if r.get("graphs")] or every
    if not rows:
        return None
    r = rows[0]
    return (f"{r.get('model')} batch {r.get('batch')}{' graphed' if r.get('graphs') else ''}: "
            f"{r.get('wall_us_per_step', 0):.0f} us wall, "
            f"{r.get('gpu_busy_us_per_step', 0):.0f} us GPU busy, "
            f"{r.get('kernels_per_step', 0):.0f} kernels per step ({len(every)} rows)")


def h_topk(p, text, js):
    rows = (js or {}).get("rows") or []
    by = {}
    for r in rows:
        by.setdefault((r["rows"], r["vocab"], r["k"]), {})[r["method"]] = r["ms"]
    sp = [v["CUB full sort"] / v["hierarchical"] for v in by.values()
          if "hierarchical" in v and "CUB full sort" in v]
    return f"hierarchical vs full sort: {span(sp)} faster" if sp else None


def h_memory(p, text, js):
    if js and "rss_growth_mib" in js:
        return f"RSS growth {js['rss_growth_mib']} MiB over {js.get('batches')} batches"
    return None


def h_multi_gpu(p, text, js):
    if js and "scaling" in js:
        return f"2 GPUs / 1 GPU throughput {js['scaling']:.2f}x; checks pass: {js.get('pass')}"
    return None


HEADLINE = {
    "attn": h_ratio("speed-up vs varlen_attn (its time / ragged's)", r"^ratio$"),
    "attn_wgmma": h_attn_ab,
    "peer_graphed": h_ratio("speed-up vs the peer (its time / ragged's)", r"^ratio$"),
    "peer": {"cpu": h_peer_cpu, "gpu": h_ratio("speed-up vs HF (its time / ragged's)",
                                                r"^speedup$")},
    "decode_modes": h_decode_modes,
    "serving": h_serving,
    "short_requests": h_targets,
    "gen_serving": h_targets,
    "kernels": h_kernels,
    "single_floor": h_single_floor,
    "single_sentence": h_peer_cpu,
    "deberta": h_deberta,
    "trace": h_trace,
    "decode": {"cpu": h_decode_cpu},
    "chunked_prefill": h_chunked,
    "decode_bench": h_decode_bench,
    "decode_trace": h_decode_trace,
    "topk_bench": h_topk,
    "memory": h_memory,
    "multi_gpu": h_multi_gpu,
}


# ---- test results -----------------------------------------------------------------------------
def test_result(name, text, js):
    if isinstance(js, dict) and isinstance(js.get("stages"), dict):
        st = {k: v for k, v in js["stages"].items() if "informational" not in k}
        vals = [v for s in st.values() for v in (s.values() if isinstance(s, dict) else [s])]
        bad = [v for v in map(str, vals)
               if "FAIL" in v or re.search(r"\b[1-9]\d* (failed|errors?|hazards?)", v)]
        info = len(js["stages"]) - len(st)
        return (f"{'FAIL' if bad else 'PASS'}: {len(st)} stages"
                + (f" ({info} informational not counted)" if info else ""))
    if js is not None:
        if isinstance(js, dict):
            ok = js.get("pass", js.get("pass_"))
            if "device_growth_bytes" in js:
                s = (f"device +{js['device_growth_bytes']} B, RSS "
                     f"+{js.get('rss_growth_bytes', 0) / 2**20:.1f} MiB over "
                     f"{js.get('batches')} batches")
                return ("PASS: " if ok is not False else "FAIL: ") + s
            if ok is not None:
                extra = ""
                if "error_failures" in js:
                    extra = (f" ({len(js.get('rows', []))} op rows, {js['error_checks']} "
                             f"error checks, {js['error_failures']} failed)")
                elif "models" in js:
                    extra = f" ({len(js['models'])} models)"
                elif "checks" in js:
                    extra = f" ({len(js['checks'])} checks)"
                elif "rows" in js:
                    extra = f" ({len(js['rows'])} rows)"
                return ("PASS" if ok else "FAIL") + extra
        return None
    if not text:
        return None
    if name.endswith(".md"):
        m = re.search(r"^## Result: (.+)$", text, re.M)
        return f"PASS: {m[1].lower()}" if m and "pass" in m[1].lower() else (m[1] if m else None)
    stages = re.findall(r"^--- (.+?): (PASS|FAIL)", text, re.M)
    if stages:
        bad = [s for s, r in stages if r == "FAIL"]
        if bad:
            return f"FAIL: {len(bad)} of {len(stages)} stages ({', '.join(bad)[:120]})"
        return f"PASS: {len(stages)} stages"
    m = re.findall(r"^=* ?(\d+ (?:passed|failed)[^\n]*?) in [\d.]+s", text, re.M)
    if m:
        return ("FAIL: " if "failed" in m[-1] else "PASS: ") + m[-1]
    errs = [int(x) for x in re.findall(
        r"(?:ERROR|RACECHECK) SUMMARY: (?:\d+ hazards displayed \()?(\d+) error", text)]
    ops = re.findall(r"^test_ops_cuda: (PASS|FAIL)", text, re.M)
    if errs or ops:
        verdict = "FAIL: " if sum(errs) or "FAIL" in ops else "PASS: "
        if not errs:
            return verdict + "test_ops_cuda"
        runs = f"{len(errs)} run{'s' if len(errs) > 1 else ''}"
        return (verdict + f"{sum(errs)} sanitizer errors in {runs}"
                + (f", test_ops_cuda {ops[-1]}" if ops else ""))
    if name.endswith("-build.log") and not re.search(r": error:|\*\*\*.*Error", text):
        return "PASS: built (no compiler errors)"
    m = re.findall(r'"pass": (true|false)', text)
    if m:
        return "PASS" if m[-1] == "true" else "FAIL"
    return None


# ---- the index --------------------------------------------------------------------------------
def load_overrides():
    out = []
    if os.path.exists(OVERRIDES):
        for ln in open(OVERRIDES, encoding="utf-8"):
            ln = ln.rstrip("\n")
            if not ln.strip() or ln.startswith("#"):
                continue
            pat, field, value = ln.split("\t", 2)
            out.append((pat, field, value))
    return out


def override(ovr, name, field):
    val = None
    for pat, f, v in ovr:
        if f == field and fnmatch.fnmatchcase(name, pat):
            val = v  # the last match wins: a file's own line after a glob
    return val


def pick(table, what, kind):
    v = table.get(what)
    return v.get(kind) if isinstance(v, dict) else v


def twin(d, name, ext):
    """The same run's file with another extension (x.json -> x.md), or None."""
    p = parse(name)
    base = name[: -len(p["ext"]) - 1]
    if p["ext"] == "png":
        base = re.sub(r"_[a-z0-9]+_[0-9]+$", "", base)
    if p["ext"] == "jsonl":
        base = re.sub(r"-noise$", "", base)
    cand = os.path.join(d, f"{base}.{ext}")
    return cand if os.path.exists(cand) and os.path.basename(cand) != name else None


def md_cell(s):
    return (s or "-").replace("|", "/").replace("\n", " ")


def index(d, logs, ovr, problems):
    rows = []
    names = sorted(n for n in os.listdir(d) if n not in NOT_INDEXED and not n.startswith("."))
    for n in names:
        p = parse(n)
        if not p:
            problems.append(f"{os.path.relpath(os.path.join(d, n), ROOT)}: name off the scheme")
            rows.append((n, "?", "?", "?", "?"))
            continue
        path = os.path.join(d, n)
        kind = "cpu" if p["device"].startswith("cpu_") else "gpu"
        text, js = read_text(path), read_json(path)
        md = twin(d, n, "md") if p["ext"] != "md" else None
        jsn = twin(d, n, "json") if p["ext"] != "json" else None
        mdtext = read_text(md) if md else ""
        commit = (override(ovr, n, "commit")
                  or (commit_of(jsn, "", read_json(jsn)) if jsn and p["ext"] == "md" else None)
                  or commit_of(path, text, js)
                  or (commit_of(md, mdtext, None) if md else None)
                  or (commit_of(jsn, "", read_json(jsn)) if jsn else None))
        quals = [q for q in re.split(r"[-_]", p["tail"]) if q]
        if logs:
            what = override(ovr, n, "what") or TESTS.get(p["what"])
            if p["what"] == "gpu_test" and not override(ovr, n, "what"):
                label, part = p["tail"].strip("-"), "notes"
                for k in sorted(PARTS, key=len, reverse=True):
                    if label == k or label.endswith("-" + k):
                        label, part = label[: -len(k)].strip("-"), PARTS[k]
                        break
                if p["ext"] != "log" and part.startswith("run.log"):
                    part = "every stage's result" + (" (JSON)" if p["ext"] == "json" else "")
                if p["ext"] == "md":
                    part = "hand-written notes on the run"
                what = f"{what}{' (' + label + ')' if label else ''}: {part}"
            elif p["ext"] == "md" and what:
                what += " (hand-written notes)"
            res = override(ovr, n, "result") or test_result(n, text, js)
            if not what:
                problems.append(f"tests/gpu/results/{n}: unknown test `{p['what']}`")
            if not res:
                problems.append(f"tests/gpu/results/{n}: no pass/fail found")
            rows.append((n, what, device_label(p["device"]), commit, res))
            continue
        what = override(ovr, n, "what") or pick(WHAT, p["what"], kind)
        if what and "summary" in quals and not what.startswith("summary"):
            what = "summary of runs: " + what
        if what and quals and p["ext"] != "png":
            what += f" [{p['tail'].strip('-_')}]"
        if p["ext"] == "png":
            dist = "_".join(n[:-4].split("_")[-2:])
            what = f"plot of `{os.path.basename(md) if md else '?'}`, {dist}"
        head = override(ovr, n, "headline")
        if head is None:
            fn = pick(HEADLINE, p["what"], kind)
            if p["ext"] in ("png", "jsonl", "json.xz", "log") or (p["ext"] == "json" and md):
                head = None
                if md:
                    head = (override(ovr, os.path.basename(md), "headline")
                            or (fn(md, mdtext, read_json(jsn) if jsn else None) if fn else None))
                if head and p["ext"] != "png":
                    head = f"as the .md: {head}"
                elif p["ext"] == "png":
                    head = "(the plot)"
            elif fn:
                head = fn(path, text, js)
        if not what:
            problems.append(f"bench/results/{n}: unknown <what> `{p['what']}`")
        if not head:
            problems.append(f"bench/results/{n}: no headline")
        rows.append((n, what, device_label(p["device"]), commit, head))
    rows = fill_commits(rows)
    where = os.path.relpath(d, ROOT)
    problems += [f"{where}/{n}: no commit found" for n, w, g, c, h in rows if not c]
    return rows


def fill_commits(rows):
    """A file without a commit of its own takes its run's: the commit another file of the same
    <what>_<device>_<stamp> names (a tests/gpu/run.sh run's pytest and sanitizer logs)."""
    known = {}
    # the run's log first: it records the commit the run was at
    logs_first = sorted(rows, key=lambda r: not r[0].endswith(("run.log", "verification.log")))
    for n, w, g, c, h in logs_first:
        p = parse(n)
        if p and c and c != "?":
            known.setdefault((p["what"], p["device"], p["stamp"]), c)
    out = []
    for n, w, g, c, h in rows:
        p = parse(n)
        if p and not c:
            c = known.get((p["what"], p["device"], p["stamp"]))
        out.append((n, w, g, c, h))
    return out


HEAD_RESULTS = """# Recorded results (`bench/results/`)

Benchmarks and the notes that sum them up, one file per run, as they came from the machine
(a note added by hand says so). The correctness-test logs are in `tests/gpu/results/`
(`tests/gpu/results/README.md`). This file is written by `python3 bench/results/index.py`; run
it after adding a result (hand-set headlines go in `headlines.tsv`, not here).
`tests/py/test_bench_results.py` checks that every file follows the scheme and has a row.

## Naming scheme

`<what>_<device>_<YYYYMMDD-HHMM>[-<qualifier>...].<ext>`

- `<what>`: the benchmark, lowercase words joined by `_` (`peer_graphed`, `decode_modes`);
- `<device>`: the GPU's name as the scripts slug it (`h100-80gb-hbm3`, `h200`; `h200x2` for two),
  or the CPU as `cpu_<N>core-<cpu>` (`cpu_16core-xeon`, `cpu_2core-amd-epyc`);
- `<YYYYMMDD-HHMM>`: UTC start of the run; a hand-written summary with no run of its own has the
  time of the commit that added it;
- qualifiers: a model, variant, commit or `--tag` (`-gpt2-pdl0`, `-tiny-1017237`, `-summary`),
  each after `-`; plots of a sweep add `_<distribution>` (`_u5_500.png`); `.json` / `.md` (and
  `.json.xz`, `.jsonl`, `.log`) of one run share the name.

The scripts write these names themselves (`bench_graphed.result_base`, `sweep.device_slug`);
files copied from a device's `$OUT` are renamed to the scheme.

## Files

| file | what it measures | device | commit | headline |
|---|---|---|---|---|
"""

HEAD_LOGS = """# GPU test logs (`tests/gpu/results/`)

The output of the correctness tests run on lent GPU machines (`tests/gpu/*.sh`): logs of the
build, `test_ops_cuda`, pytest per dtype, compute-sanitizer, the parity scripts' JSON and the
hand-written notes on those runs. Benchmarks are in `bench/results/` (its README has the naming
scheme, which these files follow too: `<what>_<gpu>_<YYYYMMDD-HHMM>[-<qualifier>...].<ext>`; a
`tests/gpu/run.sh` run is `gpu_test_<gpu>_<run start>-<label>-<file>`). Written by
`python3 bench/results/index.py`.

| file | test | GPU | commit | result |
|---|---|---|---|---|
"""


def render(head, rows):
    return head + "".join(f"| `{n}` | {md_cell(w)} | {md_cell(g)} | {md_cell(c)} | {md_cell(h)} |\n"
                          for n, w, g, c, h in rows)


def main(argv):
    check = "--check" in argv
    ovr, problems = load_overrides(), []
    out = {os.path.join(HERE, "README.md"): render(HEAD_RESULTS, index(HERE, False, ovr, problems)),
           os.path.join(LOGS, "README.md"): render(HEAD_LOGS, index(LOGS, True, ovr, problems))}
    for pat, field, _ in ovr:
        if not any(fnmatch.fnmatchcase(n, pat) for d in (HERE, LOGS) for n in os.listdir(d)):
            problems.append(f"headlines.tsv: `{pat}` ({field}) matches no file")
    stale = []
    for path, body in out.items():
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old != body:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(body)
    for p in problems:
        print("unclassified:", p)
    if check:
        for s in stale:
            print(f"stale: {s} (run python3 bench/results/index.py)")
        return 1 if stale or any("off the scheme" in p for p in problems) else 0
    print(f"wrote {', '.join(stale) or 'nothing (up to date)'}; {len(problems)} unclassified")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
