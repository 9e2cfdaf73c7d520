"""Prompt-lookup speculative decoding on the real SmolLM2-135M-Instruct GGUF (issue 30 item 4's
target: >= 1.8x tok/s at batch 1 on copy-heavy prompts, <= 5% slower where drafts are rejected).

One process, ragged.Generator on the file the default generation model ships (Q4_1, CPU weights
kept quantized), greedy, chat-formatted prompts, MAX_NEW new tokens, batch 1. Two prompt sets:
COPY (repeat, edit or extract a given text: the output copies spans of the prompt) and OPEN
(questions whose answers copy little). Per prompt and per mode (no speculation; k draft tokens
for each k of SPEC_K): tok/s = completion tokens / (time_total_s - time_first_token_s) after
the first token (decode only; the prefill is the same in both modes), the median of REPEATS
runs, modes interleaved run by run so that a machine's drift hits them alike; the acceptance
rate spec_accepted / spec_drafted; and whether the ids equal those without speculation (they
must: greedy speculation changes the steps, not the tokens).

With SPEC_DRAFT (a model path, or "self" for the target's file loaded a second time) the drafts
come from that draft model (Generator(draft_model=...), rg_model_set_draft) instead of prompt
lookup; SPEC_WEIGHTS dequantize / SPEC_DRAFT_WEIGHTS quantized pick how the target's and the
draft's GGUF weights are held (e.g. a dequantized fp32 target drafted by its own file kept in
Q4_1 blocks: the quantized self-draft llama.cpp users run as an F16 target with a Q4 draft).

Usage: python3 bench/peer/spec_bench.py OUT.json   (env SPEC_DEVICE cpu|cuda, SPEC_K "4,8",
       SPEC_REPEATS 3, SPEC_MAX_NEW 128, SPEC_MODEL, SPEC_DRAFT, SPEC_WEIGHTS,
       SPEC_DRAFT_WEIGHTS, RAGGED_NUM_THREADS for the CPU pool)"""
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import ragged  # noqa: E402
from ragged.generate import Generator, default_model_path  # noqa: E402

TEXT = ("The committee met on Tuesday to review the budget for the new library. After a long "
        "discussion, the members agreed to fund the children's reading room, to repair the roof "
        "before winter, and to extend the opening hours on weekends. The vote was seven to two.")
CODE = ("def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n"
        "    return total / len(xs)\n")
COPY = [
    f"Repeat the following text exactly, word for word:\n\n{TEXT}",
    f"Rewrite this text with every sentence on its own line, changing nothing else:\n\n{TEXT}",
    f"Copy this Python function and add a docstring to it:\n\n{CODE}",
    f"Fix the spelling in this text and return it whole: {TEXT.replace('the ', 'teh ')}",
    f"List every sentence of this text that mentions the roof or the hours:\n\n{TEXT}",
    f"Translate nothing; just quote this paragraph back to me in quotation marks:\n\n{TEXT}",
]
OPEN = [
    "What is the capital of France? Answer in one sentence, then name three museums there.",
    "Write a short poem about autumn leaves.",
    "Give me three tips for learning to cook.",
    "Why is the sky blue? Explain briefly.",
]


def main():
    out_path = sys.argv[1]
    device = os.environ.get("SPEC_DEVICE", "cpu")
    ks = [int(k) for k in os.environ.get("SPEC_K", "4,8").split(",")]
    repeats = int(os.environ.get("SPEC_REPEATS", "3"))
    max_new = int(os.environ.get("SPEC_MAX_NEW", "128"))
    model = os.environ.get("SPEC_MODEL") or default_model_path()
    draft = os.environ.get("SPEC_DRAFT")
    weights = os.environ.get("SPEC_WEIGHTS", "quantized")
    if draft:
        d = Generator(model if draft == "self" else draft, device=device,
                      weights=os.environ.get("SPEC_DRAFT_WEIGHTS", "quantized"))
        g = Generator(model, device=device, weights=weights, draft_model=d)
    else:
        g = Generator(model, device=device, weights=weights)
    modes = [0] + ks
    rows = []
    g.generate(COPY[0], max_tokens=8, chat=True)  # warm-up
    for kind, prompts in (("copy", COPY), ("open", OPEN)):
        for pi, prompt in enumerate(prompts):
            times = {k: [] for k in modes}
            res = {}
            for _ in range(repeats):
                for k in modes:
                    r = g.generate(prompt, max_tokens=max_new, chat=True,
                                   num_speculative_tokens=k)[0]
                    dec = r["time_total_s"] - r["time_first_token_s"]
                    n = r["completion_tokens"]
                    times[k].append((n - 1) / dec if dec > 0 and n > 1 else float("nan"))
                    res[k] = r
            base = res[0]
            row = {"set": kind, "prompt": pi, "prompt_tokens": base["prompt_tokens"],
                   "completion_tokens": base["completion_tokens"],
                   "tok_s": {str(k): statistics.median(times[k]) for k in modes}}
            for k in ks:
                r = res[k]
                row[f"k{k}_ids_equal"] = r["ids"] == base["ids"]
                row[f"k{k}_drafted"] = r["spec_drafted"]
                row[f"k{k}_accepted"] = r["spec_accepted"]
                row[f"k{k}_accept_rate"] = (r["spec_accepted"] / r["spec_drafted"]
                                           if r["spec_drafted"] else 0.0)
                row[f"k{k}_speedup"] = row["tok_s"][str(k)] / row["tok_s"]["0"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            write(out_path, rows, device, model, ks, repeats, max_new)
    g.close()
    if draft:
        d.close()
    summary = {}
    for kind in ("copy", "open"):
        for k in ks:
            sp = [r[f"k{k}_speedup"] for r in rows if r["set"] == kind]
            summary[f"{kind}_k{k}_geomean_speedup"] = statistics.geometric_mean(sp)
            summary[f"{kind}_k{k}_ids_equal"] = all(r[f"k{k}_ids_equal"] for r in rows
                                                    if r["set"] == kind)
    print(json.dumps(summary), flush=True)
    write(out_path, rows, device, model, ks, repeats, max_new, summary)


def write(path, rows, device, model, ks, repeats, max_new, summary=None):
    draft = os.environ.get("SPEC_DRAFT")
    rep = {"what": ("draft-model" if draft else "prompt-lookup")
           + " speculative decoding, batch 1, greedy",
           "draft": draft, "weights": os.environ.get("SPEC_WEIGHTS", "quantized"),
           "draft_weights": os.environ.get("SPEC_DRAFT_WEIGHTS", "quantized") if draft else None,
           "commit": os.environ.get("RAGGED_COMMIT", "?"), "device": device,
           "host": platform.processor() or platform.machine(),
           "threads": os.environ.get("RAGGED_NUM_THREADS", "default"),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "model": os.path.basename(model), "k": ks, "repeats": repeats, "max_new": max_new,
           "rows": rows, "summary": summary}
    with open(path, "w") as f:
        json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
