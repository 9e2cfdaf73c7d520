"""Issue 29 on a GPU, under compute-sanitizer: tiny Marian, BART, T5 and T5 v1.1 on CUDA (the
paged kernel's relative position bias, the cross-attention K/V, act_mul, beams forking self-KV),
fp32 and fp16, greedy and 4 beams, sources of mixed lengths at once; after every call the model's
KV blocks in use must be back to 0. Exit status 1 on a leaked block; compute-sanitizer's own
exit code (--error-exitcode) on a memory error.

Usage: compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/gpu/translate_memcheck.py"""
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import make_seq2seq  # noqa: E402
import ragged  # noqa: E402

fails = 0
with tempfile.TemporaryDirectory() as t:
    for fam in ("marian", "bart", "t5", "t5v11"):
        d = os.path.join(t, fam)
        cfg, _ = make_seq2seq.make(d, fam, seed=5, **dict(make_seq2seq._TINY, d_model=64,
                                                             max_pos=64))
        rng = np.random.default_rng(1)
        srcs = [list(map(int, rng.integers(4, cfg["vocab_size"] - 5, size=n))) +
                [cfg["eos_token_id"]] for n in (3, 17, 40, 9)]
        for dt in ("fp32", "fp16"):
            with ragged.Translator(d, device="cuda", dtype=dt) as tr:
                for beams in (1, 4):
                    out = tr.translate(srcs, max_tokens=12, num_beams=beams)
                    left = tr.kv_blocks_in_use()
                    ok = len(out) == len(srcs) and left == 0
                    fails += not ok
                    print(("PASS " if ok else "FAIL ") +
                          f"{fam} {dt} beams {beams}: {len(out)} outputs, KV blocks in use "
                          f"after: {left}", flush=True)
sys.exit(1 if fails else 0)
