"""Machine translation throughput: ragged.Translator against CTranslate2 (issue 29's peer), one
runtime per process, on the same random-weight checkpoint and the same sources.

HF (--runtime hf): transformers' generate() on the padded batch (attention_mask), with
cache_implementation="static" where the model takes it (else the default cache, recorded).

Workload (WMT-like lengths): a pool of 256 sources of 5-80 tokens (uniform), token ids clear of
the specials, each ending with eos; batches of 1, 32 and 128 sentences (batch b takes b sources
of the pool, rotated over the repetitions); greedy and 4-beam; every output is NEW tokens long
(random weights almost never emit eos; both sides stop at NEW). CTranslate2 gets the same ids
as token strings through a synthetic vocabulary ("t<id>", the specials by name), built by
--convert, which writes the CTranslate2 model directory from the HF checkpoint with its
TransformersConverter (float32 weights; the compute type is chosen at load).

Timing: a warm-up call per (batch, beams), then repetitions until --budget-s per cell (at least
3), median wall time of translate_batch / Translator.translate, host lists in, ids out.
Correctness: the ids of both runtimes on batch 32 are written (--ids-out) so the driver can
report their agreement (--convert makes the checkpoint one both runtimes read the same way:
Marian's decoder start row zeroed, forced_eos_token_id dropped).

Usage:
  translate_bench.py --convert HF_DIR CT2_DIR
  translate_bench.py --runtime ragged|ct2|hf --model DIR --device cuda|cpu --dtype fp16|fp32|int8
                     [--threads N] [--batches 1,32,128] [--beams 1,4] [--new 48]
                     [--budget-s 4] --out JSON
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def pool(cfg, n=256, seed=7):
    rng = np.random.default_rng(seed)
    lens = rng.integers(5, 81, size=n)
    return [list(map(int, rng.integers(4, cfg["vocab_size"] - 5, size=int(k)))) +
            [cfg["eos_token_id"]] for k in lens]


def vocab_tokens(cfg, model_dir=None):
    """The synthetic vocabulary: id -> token string ("t<id>"; the special tokens by the names in
    the model's tokenizer.json where it has one, else by the config's special ids)."""
    names = {}
    tj = os.path.join(model_dir, "tokenizer.json") if model_dir else None
    if tj and os.path.exists(tj):
        for t in json.load(open(tj)).get("added_tokens", []):
            if t.get("special") and t["id"] < cfg["vocab_size"]:
                names[t["id"]] = t["content"]
    for key, name in (("bos_token_id", "<s>"), ("eos_token_id", "</s>"),
                      ("pad_token_id", "<pad>"), ("unk_token_id", "<unk>")):
        if cfg.get(key) is not None and cfg[key] not in names and name not in names.values():
            names[cfg[key]] = name
    return [names.get(i, f"t{i}") for i in range(cfg["vocab_size"])]


def convert(hf_dir, ct2_dir):
    """CTranslate2's TransformersConverter on HF_DIR with the synthetic vocabulary standing in
    for the tokenizer (the converter reads only its vocabulary and special token names).
    Rewrites HF_DIR: Marian's decoder start row zeroed, forced_eos_token_id dropped."""
    import ctranslate2.converters.transformers as ct
    from safetensors.numpy import load_file, save_file
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    if cfg["model_type"] == "marian":
        # CTranslate2 starts Marian's decoder from a zero embedding (start_from_zero_embedding),
        # as trained checkpoints have it for <pad>, the decoder start; random weights do not:
        # zero that row in the checkpoint both runtimes read
        path = os.path.join(hf_dir, "model.safetensors")
        w = load_file(path)
        w["model.shared.weight"][cfg["decoder_start_token_id"]] = 0
        save_file(w, path, metadata={"format": "pt"})
    # CTranslate2 has no forced eos at the length limit (HF's forced_eos_token_id, which ragged
    # applies as generate() does): drop it so that both runtimes run the same search
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(hf_dir, name)
        if os.path.exists(path):
            c = json.load(open(path))
            c.pop("forced_eos_token_id", None)
            json.dump(c, open(path, "w"), indent=1)
    toks = vocab_tokens(cfg, hf_dir)

    class Tok:
        bos_token, eos_token, unk_token, pad_token = "<s>", "</s>", "<unk>", "<pad>"

        def get_vocab(self):
            return {t: i for i, t in enumerate(toks)}

        def convert_ids_to_tokens(self, i):
            return toks[i]

    ct.TransformersConverter.load_tokenizer = lambda self, *a, **k: Tok()
    ct.TransformersConverter(hf_dir).convert(ct2_dir, force=True)


def run(args):
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    src = pool(cfg)
    toks = vocab_tokens(cfg, args.model)
    index = {t: i for i, t in enumerate(toks)}
    if args.runtime == "ragged":
        import ragged
        tr = ragged.Translator(args.model, device=args.device, dtype=args.dtype,
                               max_batch_tokens=args.max_batch_tokens)

        def call(batch, beams):
            return [o["ids"] for o in tr.translate(batch, max_tokens=args.new, num_beams=beams)]
        version = "ragged " + os.environ.get("RAGGED_COMMIT", "")
    elif args.runtime == "hf":
        import torch
        from transformers import AutoModelForSeq2SeqLM
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
        m = AutoModelForSeq2SeqLM.from_pretrained(args.model, dtype=dt).to(args.device).eval()
        pad = cfg.get("pad_token_id") or 0
        cache = {"impl": "static"}

        def call(batch, beams):
            n = max(len(s) for s in batch)
            x = torch.tensor([s + [pad] * (n - len(s)) for s in batch], device=args.device)
            a = torch.tensor([[1] * len(s) + [0] * (n - len(s)) for s in batch],
                             device=args.device)
            kw = dict(do_sample=False, num_beams=beams, max_new_tokens=args.new)
            with torch.inference_mode():
                if cache["impl"] == "static":
                    try:
                        g = m.generate(x, attention_mask=a, cache_implementation="static", **kw)
                    except Exception as e:  # noqa: BLE001 - recorded, then the default cache
                        print(f"hf: static cache refused ({type(e).__name__}: {e}); "
                              "the default dynamic cache", flush=True)
                        cache["impl"] = "dynamic"
                        g = m.generate(x, attention_mask=a, **kw)
                else:
                    g = m.generate(x, attention_mask=a, **kw)
            if args.device == "cuda":
                torch.cuda.synchronize()
            eos, rows = cfg["eos_token_id"], []
            for r in g.tolist():  # generate() pads finished rows: cut after the first eos
                r = r[1:]
                rows.append(r[:r.index(eos) + 1] if eos in r else r)
            return rows
        version = "transformers " + __import__("transformers").__version__
    else:
        import ctranslate2
        ct2_model = args.ct2_dir or args.model
        tr = ctranslate2.Translator(ct2_model, device=args.device, compute_type={
            "fp16": "float16", "fp32": "float32", "int8": "int8", "bf16": "bfloat16"}[args.dtype],
            intra_threads=args.threads if args.device == "cpu" else 0)

        def call(batch, beams):
            res = tr.translate_batch([[toks[i] for i in s] for s in batch], beam_size=beams,
                                     max_decoding_length=args.new, min_decoding_length=0,
                                     max_batch_size=len(batch), return_scores=False)
            return [[index[t] for t in r.hypotheses[0]] for r in res]
        version = "ctranslate2 " + ctranslate2.__version__
    out = dict(runtime=args.runtime, version=version, device=args.device, dtype=args.dtype,
               threads=args.threads, new_tokens=args.new, model=os.path.basename(args.model),
               cells=[])
    ids = {}
    for beams in args.beams:
        for b in args.batches:
            batches = [src[(k * b) % len(src):][:b] for k in range(max(1, len(src) // b))]
            batches = [x for x in batches if len(x) == b] or [src[:b]]
            res = call(batches[0], beams)  # warm-up (and the ids)
            if b == 32:
                ids[f"beam{beams}"] = res
            times, k, t_end = [], 0, time.perf_counter() + args.budget_s
            while len(times) < 3 or (time.perf_counter() < t_end and len(times) < 50):
                batch = batches[k % len(batches)]
                k += 1
                t0 = time.perf_counter()
                res = call(batch, beams)
                times.append(time.perf_counter() - t0)
            ntok = sum(len(r) for r in res)
            med = statistics.median(times)
            cell = dict(batch=b, beams=beams, reps=len(times), median_s=med,
                        p90_s=sorted(times)[int(0.9 * (len(times) - 1))],
                        sentences_per_s=b / med, tokens_per_s=ntok / med,
                        src_tokens=sum(len(s) for s in batches[(k - 1) % len(batches)]),
                        out_tokens=ntok)
            out["cells"].append(cell)
            print(f"{args.runtime:6s} {args.device} {args.dtype} beams {beams} batch {b:3d}: "
                  f"{med * 1e3:9.2f} ms  {cell['sentences_per_s']:9.1f} sent/s  "
                  f"{cell['tokens_per_s']:9.0f} tok/s", flush=True)
            with open(args.out, "w") as f:
                json.dump(out, f, indent=1)
    if args.runtime == "hf":
        out["cache"] = cache["impl"]
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    if args.ids_out:
        with open(args.ids_out, "w") as f:
            json.dump(ids, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--convert", nargs=2, metavar=("HF_DIR", "CT2_DIR"))
    ap.add_argument("--runtime", choices=("ragged", "ct2", "hf"))
    ap.add_argument("--model")
    ap.add_argument("--ct2-dir")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--beams", default="1,4")
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--budget-s", type=float, default=4.0)
    ap.add_argument("--max-batch-tokens", type=int, default=8192)
    ap.add_argument("--out")
    ap.add_argument("--ids-out")
    args = ap.parse_args()
    if args.convert:
        convert(*args.convert)
        return
    args.batches = [int(x) for x in args.batches.split(",")]
    args.beams = [int(x) for x in args.beams.split(",")]
    run(args)


if __name__ == "__main__":
    main()
