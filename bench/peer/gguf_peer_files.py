#!/usr/bin/env python3
"""Random-weight F16 GGUF files at public decoder shapes that llama.cpp loads as well as ragged
(issue 30's side-by-side on the GPU; the device has no network, so no real checkpoint): the shapes
of tests/gpu/issue30_gq.py (SHAPES: the public config.json widths), written by
tests/py/hf_to_gguf.py as llama.cpp's convert_hf_to_gguf.py --outtype f16 writes them, with a
vocabulary llama.cpp accepts: a "gpt2" tokenizer whose first 256 tokens are GPT-2's byte alphabet
(so "\\n" has a token, which llama.cpp's loader asserts) and one merge ("Ġ Ġ" into token
256: llama.cpp wants the key, the gguf package drops an empty array, and ragged checks that each
merge's product is a token). llama-quantize
then makes the quantized files from these, as a llama.cpp user makes them.

Usage: python3 bench/peer/gguf_peer_files.py OUTDIR smollm2-135m[,llama-3.2-1b] -> prints the
paths, one per line (OUTDIR/<shape>-F16.gguf)."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import hf_to_gguf  # noqa: E402
import make_decoder  # noqa: E402
from issue30_gq import SHAPES  # noqa: E402
from byte_chars import byte_chars as byte_alphabet  # noqa: E402


def main():
    outdir, names = sys.argv[1], sys.argv[2].split(",")
    os.makedirs(outdir, exist_ok=True)
    for name in names:
        shape = SHAPES[name]
        cfg, w, _ = make_decoder.llama(np.random.default_rng(30), **shape)
        toks = byte_alphabet() + ["\u0120\u0120"] + [f"t{i}" for i in range(257, shape["vocab"])]
        path = hf_to_gguf.write(os.path.join(outdir, f"{name}-F16.gguf"), cfg, w, f16=True,
                                tokens=toks, merges=["\u0120 \u0120"],
                                eos_id=shape["vocab"] - 1)
        print(path, flush=True)


if __name__ == "__main__":
    main()
