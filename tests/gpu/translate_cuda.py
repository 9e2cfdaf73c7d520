"""Issue 29 on a GPU: ragged.Translator on CUDA against the float64 NumPy reference
(tests/py/ref_seq2seq.py, transformers' generate semantics) on tiny random MarianMT, BART,
mBART, M2M100, T5 and T5 v1.1 checkpoints, fp32 (ids must be equal, greedy and 4-beam, one source at a time
and all at once; the BART and T5 families also against transformers' generate() where torch and
transformers are installed, and its forced BOS first), and the fp16 run's
agreement with the fp32 one on the opus-mt-en-de shape (reported: random weights make near-ties
that fp16 may flip). Prints PASS / FAIL lines; exit status 1 on any FAIL.

Usage: RAGGED_LIB=build/libragged.so python3 tests/gpu/translate_cuda.py OUT.json"""
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import make_seq2seq  # noqa: E402
import ragged  # noqa: E402
import ref_seq2seq  # noqa: E402


def sources(cfg, seed, lens):
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(3, cfg["vocab_size"] - 1, size=n))) +
            [cfg["eos_token_id"]] for n in lens]


def family_sources(cfg, seed, lens):
    """Sources without the BART family's special ids (0-3) or language codes (the top)."""
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(4, cfg["vocab_size"] - 5, size=n))) +
            [cfg["eos_token_id"]] for n in lens]


def hf_generate(d, srcs):
    """transformers' generate() ids (greedy, 12 new tokens; 4 beams, 10), without the decoder
    start, or None where torch / transformers are not installed."""
    try:
        import torch
        from transformers import AutoModelForSeq2SeqLM
    except ImportError:
        return None
    m = AutoModelForSeq2SeqLM.from_pretrained(d).eval()
    out = []  # one source per call: generate() pads nothing
    for kw in (dict(max_new_tokens=12), dict(max_new_tokens=10, num_beams=4)):
        rows = []
        for s in srcs:
            with torch.no_grad():
                g = m.generate(torch.tensor([s]), do_sample=False, **kw)[0].tolist()[1:]
            rows.append(g)
        out.append(rows)
    return out


def main():
    out = {"gpu": os.environ.get("RAGGED_GPU", ""), "commit": os.environ.get("RAGGED_COMMIT", ""),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "checks": []}
    fails = 0

    def check(name, ok, **kw):
        nonlocal fails
        fails += not ok
        print(("PASS " if ok else "FAIL ") + name, flush=True)
        out["checks"].append(dict(name=name, ok=bool(ok), **kw))

    with tempfile.TemporaryDirectory() as t:
        d = os.path.join(t, "tiny")
        # head_dim 16: the smallest the CUDA paged attention takes
        cfg, _ = make_seq2seq.make(d, "marian", seed=3,
                                   **dict(make_seq2seq._TINY, d_model=64, max_pos=64))
        ref = ref_seq2seq.Seq2Seq(d)
        srcs = sources(cfg, 0, (5, 9, 3, 12, 1, 30))
        with ragged.Translator(d, device="cuda", dtype="fp32") as tr:
            want = [ref.greedy(s, 12)[1:] for s in srcs]
            check("tiny marian cuda fp32 greedy, one at a time",
                  [tr.translate(s, max_tokens=12)[0]["ids"] for s in srcs] == want)
            check("tiny marian cuda fp32 greedy, batched",
                  [o["ids"] for o in tr.translate(srcs, max_tokens=12)] == want)
            wb = [[w[1:] for w in ref.beam_search(s, 4, 10, num_return_sequences=2)]
                  for s in srcs]
            gb = tr.translate(srcs, max_tokens=10, num_beams=4, n=2)
            check("tiny marian cuda fp32 4-beam, batched",
                  [[o["ids"] for o in gb[2 * i:2 * i + 2]] for i in range(len(srcs))] == wb)
        # the BART family (issue 29): tiny BART, mBART, M2M100 at head_dim 16, fp32, against the
        # reference and, where transformers is installed, against its generate() itself; T5 and
        # T5 v1.1 (d_kv 16: the relative position bias in the paged kernel's score phase)
        for fam in ("bart", "mbart", "m2m100", "t5", "t5v11"):
            d = os.path.join(t, "tiny-" + fam)
            cfg, _ = make_seq2seq.make(d, fam, seed=5,
                                       **dict(make_seq2seq._TINY, d_model=64, max_pos=64))
            ref = ref_seq2seq.Seq2Seq(d)
            srcs = family_sources(cfg, 2, (5, 9, 3, 12, 1, 30))
            want = [ref.greedy(s, 12)[1:] for s in srcs]
            wb = [ref.beam_search(s, 4, 10)[0][1:] for s in srcs]
            hf = hf_generate(d, srcs)
            with ragged.Translator(d, device="cuda", dtype="fp32") as tr:
                g1 = [tr.translate(s, max_tokens=12)[0]["ids"] for s in srcs]
                gb = [tr.translate(s, max_tokens=10, num_beams=4)[0]["ids"] for s in srcs]
                check(f"tiny {fam} cuda fp32 greedy, one at a time", g1 == want)
                check(f"tiny {fam} cuda fp32 greedy, batched",
                      [o["ids"] for o in tr.translate(srcs, max_tokens=12)] == want)
                check(f"tiny {fam} cuda fp32 4-beam, one at a time", gb == wb)
                check(f"tiny {fam} cuda fp32 4-beam, batched",
                      [o["ids"] for o in tr.translate(srcs, max_tokens=10, num_beams=4)] == wb)
                fb = ref.gen.get("forced_bos_token_id")
                if fb is not None:
                    check(f"tiny {fam} cuda forced_bos_token_id first",
                          all(g[0] == fb for g in g1 + gb))
            if hf is not None:
                check(f"tiny {fam} cuda fp32 greedy == transformers generate", g1 == hf[0])
                check(f"tiny {fam} cuda fp32 4-beam == transformers generate", gb == hf[1])
        # the public shape: fp16 against fp32 on the same GPU
        d = os.path.join(t, "opus")
        cfg, _ = make_seq2seq.make_spec("opus-mt-en-de", d)
        srcs = sources(cfg, 1, (7, 19, 33, 60, 120, 12, 45, 90))
        res = {}
        for dt in ("fp32", "fp16"):
            with ragged.Translator(d, device="cuda", dtype=dt) as tr:
                tr.translate(srcs[:2], max_tokens=8)  # warm-up
                t0 = time.perf_counter()
                res[dt] = [o["ids"] for o in tr.translate(srcs, max_tokens=64, num_beams=4)]
                res[dt + "_s"] = time.perf_counter() - t0
        same = sum(a == b for a, b in zip(res["fp32"], res["fp16"]))
        first = sum(a[:8] == b[:8] for a, b in zip(res["fp32"], res["fp16"]))
        print(f"opus-mt-en-de shape, 8 sources, 4 beams, 64 tokens: fp16 equals fp32 on "
              f"{same}/8 (first 8 tokens: {first}/8); fp32 {res['fp32_s']:.3f} s, "
              f"fp16 {res['fp16_s']:.3f} s", flush=True)
        out["opus_fp16_vs_fp32"] = {"equal": same, "first8_equal": first, "n": len(srcs),
                                    "fp32_s": res["fp32_s"], "fp16_s": res["fp16_s"]}
        check("opus-mt shape cuda fp16 runs (4 beams)", all(len(x) >= 1 for x in res["fp16"]))
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
