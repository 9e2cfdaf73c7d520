"""Preemption thrash (issue 28, "five failures" item 5): six requests through one generation
engine whose KV pool holds 43 blocks of 16 positions (each request fits alone, together they do
not), against the same six run one at a time and together on a large pool. Prints the engine's
preemption count and the wall time of each run, and checks that every answer equals its
large-pool answer. CPU, a small random Llama (tests/py/make_decoder.py).

    RAGGED_LIB=build/libragged.so python3 bench/serving/preempt_six.py [--out result.json]
"""
import argparse
import ctypes
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
import make_decoder  # noqa: E402
import ragged  # noqa: E402
from ragged import generate as rgen  # noqa: E402
from ragged._lib import lib  # noqa: E402


class EngineStats(ctypes.Structure):
    """include/ragged.h rg_gen_engine_stats."""
    _fields_ = [("n_running", ctypes.c_int), ("n_waiting", ctypes.c_int),
                ("n_steps", ctypes.c_longlong), ("n_preemptions", ctypes.c_longlong),
                ("n_refused", ctypes.c_longlong), ("blocks_used", ctypes.c_int),
                ("blocks_free", ctypes.c_int), ("blocks_total", ctypes.c_int),
                ("prefix_query_blocks", ctypes.c_longlong),
                ("prefix_hit_blocks", ctypes.c_longlong), ("max_context", ctypes.c_int),
                ("max_num_seqs", ctypes.c_int), ("last_step_tokens", ctypes.c_int),
                ("n_eos", ctypes.c_int), ("eos_ids", ctypes.c_void_p)]


def run(g, prompts, max_tokens, n_blocks, block_size=16):
    """The prompts through one engine over a cache of n_blocks: (answers, preemptions, steps,
    seconds)."""
    l = rgen._bind_engine(lib())
    l.rg_gen_engine_get_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(EngineStats)]
    l.rg_gen_engine_get_stats.restype = None
    h = g._handle()
    assert l.rg_model_kv_init(h, block_size, n_blocks) == 0
    ep = rgen.EngineParams()
    l.rg_gen_engine_params_default(ctypes.byref(ep))
    ep.max_num_batched_tokens = 256
    ep.prefix_caching = False
    ep.kv_fraction = 0.0
    ep.kv_bytes = 0
    st = ctypes.c_int(0)
    e = l.rg_gen_engine_create(h, ctypes.byref(ep), ctypes.byref(st))
    assert e, st.value
    try:
        p = rgen.GenParams()
        l.rg_gen_params_default(ctypes.byref(p))
        p.max_tokens = max_tokens
        p.n_eos = -1
        ids = []
        t0 = time.monotonic()
        for pr in prompts:
            arr = (ctypes.c_int32 * len(pr))(*pr)
            rid = ctypes.c_uint64(0)
            assert l.rg_gen_engine_add(e, arr, len(pr), ctypes.byref(p), None,
                                       l.rg_gen_engine_now_ms(), ctypes.byref(rid), None) == 0
            ids.append(rid.value)
        ev = ctypes.POINTER(rgen.GenEvent)()
        n_ev = ctypes.c_int(0)
        while l.rg_gen_engine_has_work(e):
            assert l.rg_gen_engine_step(e, l.rg_gen_engine_now_ms(), ctypes.byref(ev),
                                        ctypes.byref(n_ev)) == 0
        secs = time.monotonic() - t0
        out = rgen.GenOutput()
        answers = []
        for rid in ids:
            assert l.rg_gen_engine_output(e, rid, 0, ctypes.byref(out)) == 0
            answers.append([out.ids[t] for t in range(out.n_ids)])
        s = EngineStats()
        l.rg_gen_engine_get_stats(e, ctypes.byref(s))
        return answers, s.n_preemptions, s.n_steps, secs
    finally:
        l.rg_gen_engine_free(e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="preempt6_")
    make_decoder.make(d, "llama", seed=3, H=256, heads=4, kv_heads=2, layers=4, inter=768,
                      vocab=512, max_pos=1024)
    g = ragged.Generator(d, max_batch_tokens=256)
    lens = [90, 140, 60, 200, 120, 170]
    prompts = [[(7 * i + 31 * k) % 500 + 3 for i in range(n)] for k, n in enumerate(lens)]
    mt = 160  # each request needs at most (200 + 160) / 16 = 23 of the 43 blocks
    want, _, _, t_big = run(g, prompts, mt, 512)
    res = {"blocks": 43, "block_size": 16, "prompt_lens": lens, "max_tokens": mt,
           "large_pool_s": round(t_big, 3), "rounds": []}
    t_one = 0.0
    for k, pr in enumerate(prompts):
        ans, _, _, t = run(g, [pr], mt, 43)
        assert ans[0] == want[k]
        t_one += t
    res["one_at_a_time_s"] = round(t_one, 3)
    for r in range(a.rounds):
        ans, pre, steps, t = run(g, prompts, mt, 43)
        same = all(x == y for x, y in zip(ans, want))
        res["rounds"].append({"preemptions": pre, "steps": steps, "seconds": round(t, 3),
                              "answers_equal": same})
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    g.close()


if __name__ == "__main__":
    main()
