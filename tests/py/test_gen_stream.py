"""ragged.Generator.stream: the Python streaming iterator over the library's generation engine
(include/ragged.h rg_gen_engine_*), the loop generate() and `ragged serve` run too. Its tokens
equal generate()'s for greedy, seeded sampling (n samples) and beam search on tiny random
decoders (generate() itself is checked against the float64 reference in test_generate.py), its
text pieces concatenate to generate()'s text on the real SmolLM2 GGUF (stop strings included),
and an early close aborts the request and gives every KV block back."""
import os
import sys

import pytest

import make_decoder

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import ragged  # noqa: E402

PROMPTS = [[5, 17, 3, 9, 22, 1, 40], [7], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("stream") / "llama")
    make_decoder.make(d, "llama", seed=901, H=64, heads=4, kv_heads=2, layers=2, inter=96,
                      vocab=101, max_pos=64)
    g = ragged.Generator(d, max_batch_tokens=64)
    yield g
    g.close()


def collect(events, n):
    ids, texts, fins = [[] for _ in range(n)], ["" for _ in range(n)], [None] * n
    for ev in events:
        k = ev["index"]
        assert fins[k] is None, "an event after the output ended"
        ids[k] += ev["ids"]
        if ev["ids"]:
            assert ev["token"] == ev["ids"][-1]
        texts[k] += ev["text"]
        fins[k] = ev["finish_reason"]
    assert all(f is not None for f in fins)
    return ids, texts, fins


@pytest.mark.parametrize("opts", [
    dict(max_tokens=9, ignore_eos=True),
    dict(max_tokens=8, temperature=0.9, top_k=20, top_p=0.9, seed=5, n=2),
    dict(max_tokens=6, num_beams=3, n=2),
    dict(max_tokens=7, temperature=0.7, repetition_penalty=1.3, no_repeat_ngram_size=2,
         seed=3),
], ids=["greedy", "sampled", "beams", "host_chain"])
def test_stream_equals_generate(llama, opts):
    n = opts.get("n", 1)
    for prompt in PROMPTS:
        want = llama.generate([prompt], **opts)
        ids, _, fins = collect(llama.stream(prompt, **opts), n)
        assert ids == [o["ids"] for o in want]
        assert fins == [o["finish_reason"] for o in want]
        assert llama.kv_blocks_in_use() == 0


def test_stream_early_close_aborts(llama):
    it = llama.stream(PROMPTS[0], max_tokens=30, ignore_eos=True)
    first = next(it)
    assert len(first["ids"]) == 1 and first["finish_reason"] is None
    it.close()  # the engine is freed with the request in it
    again = collect(llama.stream(PROMPTS[0], max_tokens=5, ignore_eos=True), 1)[0]
    assert again[0][:1] == first["ids"]
    with pytest.raises(ValueError):
        next(llama.stream(PROMPTS[0], on_token=print))
    with pytest.raises(ragged.RaggedError):
        next(llama.stream([1000], max_tokens=2))  # outside the vocabulary


def test_stream_text_on_smollm2():
    g = ragged.Generator(max_batch_tokens=256)
    try:
        for opts in (dict(max_tokens=24), dict(max_tokens=40, stop=[".", "\n"]),
                     dict(max_tokens=20, chat=True)):
            text = "The capital of France is" if not opts.get("chat") else "Say hello."
            want = g.generate(text, **opts)[0]
            ids, texts, fins = collect(g.stream(text, **opts), 1)
            assert ids[0] == want["ids"]
            assert texts[0] == want["text"]
            assert fins[0] == want["finish_reason"]
    finally:
        g.close()
