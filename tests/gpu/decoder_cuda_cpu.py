"""CUDA against CPU for ragged's decoder step (issue 19), with no torch in the process so that
compute-sanitizer can watch it: random-weight tiny GPT-2 / Llama (GQA, both RoPE layouts through
Llama and GPT-2) / Qwen2 / Qwen3 (q/k norm) / Phi-3 (fused projections, LongRoPE) checkpoints from tests/py/make_decoder.py; mixed steps of prefill chunks
and decode tokens on shuffled KV blocks, contexts long enough to split the KV (flash-decoding
path) and short ones; the CUDA logits (fp32) must match the CPU backend's within 1e-4 of the
row's max, fp16 / bf16 within 3e-2 / 8e-2; then one step of many fresh 384-token prompts (the
tensor-core prefill's 128-query tiles) and two decode steps. Exit status 0 when every case passes.
Usage: RAGGED_LIB=build/libragged.so python3 tests/gpu/decoder_cuda_cpu.py"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "py"))
sys.path.insert(0, os.path.dirname(__file__))
import make_decoder  # noqa: E402
from dec_util import Seqs  # noqa: E402
from ragged_ctypes import Model  # noqa: E402

TOL = {"fp32": 1e-4, "fp16": 3e-2, "bf16": 8e-2}
# DCC_DEVICE=cpu: the script against itself on a machine without a GPU (fp32 only)
DEVICE = os.environ.get("DCC_DEVICE", "cuda")
DTYPES = ("fp32", "fp16", "bf16") if DEVICE == "cuda" else ("fp32", "fp32")
SPECS = {
    "gpt2": ("gpt2", dict(H=128, heads=4, layers=2, vocab=97, n_pos=1024)),
    # 4 query heads per KV head (head_dim 32); the CUDA kernels take head_dim 32..128
    "llama_gqa": ("llama", dict(H=256, heads=8, kv_heads=2, layers=2, inter=96, vocab=101,
                                max_pos=2048)),
    "qwen2": ("llama", dict(H=64, heads=2, kv_heads=2, layers=2, inter=64, vocab=83,
                            model_type="qwen2", tie=True, max_pos=2048)),
    # rg_op_qk_norm on CUDA: head_dim 64 != 128 / 4
    "qwen3": ("llama", dict(H=128, heads=4, kv_heads=2, layers=2, inter=96, vocab=79,
                            model_type="qwen3", tie=True, head_dim=64, rope_theta=1000000.0,
                            max_pos=2048)),
    # rg_op_rope_table_scaled on CUDA: LongRoPE, positions on both sides of original_max 512
    "phi3_longrope": ("llama", dict(H=256, heads=8, kv_heads=4, layers=2, inter=96, vocab=73,
                                    model_type="phi3", max_pos=2048,
                                    original_max_position_embeddings=512,
                                    rope_scaling=make_decoder.longrope(32))),
}


def run(m, plan, seed):
    s = Seqs(m.kv_info().n_blocks, seed)
    outs = []
    for parts in plan:
        outs.append(s.step(m, parts))
    return outs


def main():
    rng = np.random.default_rng(0)
    ok = True
    for name, (fam, spec) in SPECS.items():
        d = tempfile.mkdtemp(prefix=f"dcc_{name}_")
        make_decoder.make(d, fam, seed=3, **spec)
        V = spec["vocab"]
        lens = [1, 5, 300, 700]
        prompts = [list(rng.integers(0, V, n)) for n in lens]
        # step 1: the two short prompts whole and the long ones' first chunks; step 2: the long
        # prompts' rest; then 6 decode steps of all four (random next ids)
        plan = [[(0, prompts[0]), (1, prompts[1]), (2, prompts[2][:100]), (3, prompts[3][:200])],
                [(2, prompts[2][100:]), (3, prompts[3][200:])]]
        for _ in range(6):
            plan.append([(i, [int(rng.integers(0, V))]) for i in range(4)])
        cpu = Model(d, device="cpu", dtype="fp32", max_batch_tokens=1024)
        cpu.kv_init(16, 128)
        ref = run(cpu, plan, 5)
        cpu.close()
        for dt in DTYPES:
            g = Model(d, device=DEVICE, dtype=dt, max_batch_tokens=1024)
            g.kv_init(16, 128)
            got = run(g, plan, 9)
            g.close()
            ok &= report(f"{name} {dt}", got, ref, dt)
        # one step of many fresh 384-token prompts: >= 1,056 64-query tiles, so the tensor-core
        # prefill takes its 128-query tiles (MT = 2) in fp16 / bf16; then 2 decode steps
        heads = spec["heads"]
        if heads >= 4:
            n_wide = -(-1100 // (heads * 6))
            wide = [list(rng.integers(0, V, 384)) for _ in range(n_wide)]
            plan = [[(i, p) for i, p in enumerate(wide)]]
            for _ in range(2):
                plan.append([(i, [int(rng.integers(0, V))]) for i in range(n_wide)])
            cpu = Model(d, device="cpu", dtype="fp32", max_batch_tokens=384 * n_wide)
            cpu.kv_init(16, 25 * n_wide)
            ref = run(cpu, plan, 5)
            cpu.close()
            for dt in DTYPES[1:]:
                g = Model(d, device=DEVICE, dtype=dt, max_batch_tokens=384 * n_wide)
                g.kv_init(16, 25 * n_wide)
                got = run(g, plan, 9)
                g.close()
                ok &= report(f"{name} {dt} {n_wide} x 384 fresh", got, ref, dt)
    sys.exit(0 if ok else 1)


def report(what, got, ref, dt):
    worst = max(float(np.max(np.abs(a - b)) / np.max(np.abs(b))) for a, b in zip(got, ref))
    good = bool(np.isfinite(worst) and worst <= TOL[dt])
    print(f"{what}: max rel err {worst:.3g} (tol {TOL[dt]}) {'PASS' if good else 'FAIL'}",
          flush=True)
    return good


if __name__ == "__main__":
    main()
