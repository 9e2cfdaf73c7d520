"""Encoder-decoder translation (issue 29): a random MarianMT (tests/py/make_seq2seq.py, the
transformers checkpoint layout) run by ragged.Translator -- the encoder pass into cross blocks
of the KV cache (rg_model_encode_cross), decoder steps in the one generation engine -- against
the independent float64 NumPy reference of tests/py/ref_seq2seq.py, which follows transformers'
generate() (forced EOS at the length limit, the pad token banned, beam search's length penalty
and early stopping). Token ids must be equal."""
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "python"))
import make_seq2seq  # noqa: E402
import ragged  # noqa: E402
import ref_seq2seq  # noqa: E402


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("marian") / "m")
    make_seq2seq.make_spec("tiny-marian", d, seed=3)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return d, cfg, ref_seq2seq.Seq2Seq(d)


@pytest.fixture(scope="module")
def tr(marian):
    t = ragged.Translator(marian[0])
    yield t
    t.close()


def sources(cfg, seed, lens):
    rng = np.random.default_rng(seed)
    V = cfg["vocab_size"]
    return [list(map(int, rng.integers(3, V - 1, size=n))) + [cfg["eos_token_id"]]
            for n in lens]


def test_info(tr, marian):
    d, cfg, _ = marian
    assert tr.model_type == "marian"
    assert tr.decoder_start_token_id == cfg["decoder_start_token_id"]
    assert tr.max_source_positions == cfg["max_position_embeddings"]


def test_greedy_equals_reference(tr, marian):
    """One source at a time and all in one call (continuous batching: sources of different
    lengths encoded together, decoders stepping together); max_tokens short enough that some
    stop at the limit, where the forced EOS applies."""
    _, cfg, ref = marian
    srcs = sources(cfg, 0, (5, 9, 3, 12, 1, 30))
    for max_new in (4, 12):
        want = [ref.greedy(s, max_new)[1:] for s in srcs]
        assert [tr.translate(s, max_tokens=max_new)[0]["ids"] for s in srcs] == want
        assert [o["ids"] for o in tr.translate(srcs, max_tokens=max_new)] == want
    assert any(len(w) == 4 for w in [ref.greedy(s, 4)[1:] for s in srcs])


@pytest.mark.parametrize("num_beams,length_penalty,early_stopping", [
    (4, 1.0, False), (3, 0.6, True), (2, 1.3, "never"), (5, 2.0, False)])
def test_beams_equal_reference(tr, marian, num_beams, length_penalty, early_stopping):
    _, cfg, ref = marian
    n_ret = 2 if num_beams > 2 else 1
    for s in sources(cfg, 1, (5, 9, 3, 20)):
        want = [w[1:] for w in ref.beam_search(s, num_beams, 10, length_penalty=length_penalty,
                                               early_stopping=early_stopping,
                                               num_return_sequences=n_ret)]
        got = tr.translate(s, max_tokens=10, num_beams=num_beams, n=n_ret,
                           length_penalty=length_penalty, early_stopping=early_stopping)
        assert [o["ids"] for o in got] == want


def test_beams_of_several_sources_at_once(tr, marian):
    """Beam groups of different sources in the same steps: each group's cross blocks are its
    own (beams fork self-KV and share their source's cross-KV)."""
    _, cfg, ref = marian
    srcs = sources(cfg, 2, (4, 11, 7))
    want = [[w[1:] for w in ref.beam_search(s, 3, 8, num_return_sequences=3)] for s in srcs]
    got = tr.translate(srcs, max_tokens=8, num_beams=3, n=3)
    assert [[o["ids"] for o in got[3 * i:3 * i + 3]] for i in range(3)] == want


def test_pad_never_generated(tmp_path, marian):
    """generation_config's bad_words_ids [[pad]] (Marian's): with the pad token's embedding
    row (the tied LM head's) scaled up so that it would win most steps, it is never generated,
    and the ids still equal the reference's, which bans it the way transformers does."""
    import shutil
    from safetensors.numpy import load_file, save_file
    d, cfg, _ = marian
    e = str(tmp_path / "padheavy")
    shutil.copytree(d, e)
    w = load_file(os.path.join(e, "model.safetensors"))
    pad = cfg["pad_token_id"]
    for k in w:
        if k.endswith("shared.weight") or k.endswith("embed_tokens.weight"):
            w[k] = w[k].copy()
            w[k][pad] *= 6
    save_file(w, os.path.join(e, "model.safetensors"))
    ref = ref_seq2seq.Seq2Seq(e)
    srcs = sources(cfg, 4, (3, 8, 5, 13))
    with ragged.Translator(e) as t:
        got = [o["ids"] for o in t.translate(srcs, max_tokens=8)]
    assert got == [ref.greedy(s, 8)[1:] for s in srcs]
    assert all(pad not in g for g in got)
    # without the ban the pad token would have come: the reference's raw logits say so
    start = cfg["decoder_start_token_id"]
    wins = 0
    for s_, g in zip(srcs, got):
        z = ref.decoder_logits(ref.encode(s_), [start] + g[:-1])
        wins += int(np.sum(np.argmax(z, axis=-1) == pad))
    assert wins >= 1


def test_bad_input(tr, marian):
    d, cfg, _ = marian
    with pytest.raises(ragged.RaggedError, match="source has 65 tokens"):
        tr.translate([5] * 65, max_tokens=4)
    with pytest.raises(ragged.RaggedError):
        tr.translate([cfg["vocab_size"] + 3, 0], max_tokens=4)
    # the model still translates
    assert tr.translate(sources(cfg, 5, (4,))[0], max_tokens=3)[0]["ids"]


def test_decoder_only_is_not_a_translator(tmp_path):
    import make_decoder
    make_decoder.make(str(tmp_path / "g"), "gpt2", seed=1, H=32, heads=4, layers=1, vocab=64,
                      n_pos=32)
    with pytest.raises(ValueError, match="not an encoder-decoder"):
        ragged.Translator(str(tmp_path / "g"))


def test_unsupported_config_refused(tmp_path, marian):
    """What the forward does not compute is refused by name at load."""
    d, cfg, _ = marian
    import shutil
    for key, value, msg in (("encoder_ffn_dim", cfg["decoder_ffn_dim"] + 8, "encoder_ffn_dim"),
                            ("share_encoder_decoder_embeddings", False, "separate source"),
                            ("activation_function", "mish", "activation_function")):
        e = tmp_path / key
        shutil.copytree(d, e)
        c = dict(cfg, **{key: value})
        (e / "config.json").write_text(json.dumps(c))
        with pytest.raises(ragged.RaggedError, match=msg):
            ragged.Translator(str(e))


def test_cli_translate(marian):
    """`ragged translate`: one source text per line (tokenized by the model's tokenizer.json,
    which appends </s>), one JSON line each; the ids equal the reference's on the ids HF
    `tokenizers` gives for the same text; prompt_tokens counts the source."""
    import subprocess
    from tokenizers import Tokenizer
    d, cfg, ref = marian
    texts = ["hello world", "abc", "the quick brown fox"]
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    binp = os.environ.get("RAGGED_BIN", os.path.join(HERE, "..", "..", "build", "ragged"))
    for beams in (1, 3):
        r = subprocess.run([binp, "translate", "--model", d, "--max-tokens", "8",
                            "--num-beams", str(beams)], input="\n".join(texts) + "\n",
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
        assert [x["prompt"] for x in rows] == texts
        for x, t in zip(rows, texts):
            src = tok.encode(t).ids
            assert src[-1] == cfg["eos_token_id"]
            want = ref.greedy(src, 8) if beams == 1 else ref.beam_search(src, 3, 8)[0]
            assert x["ids"] == want[1:]
            assert x["usage"]["prompt_tokens"] == len(src)
    r = subprocess.run([binp, "translate", "--model", os.path.join(HERE, "no-such-model")],
                       input="x\n", capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and r.stderr


def test_info_and_serve(marian):
    """`ragged info` names the kind; `ragged serve` serves an encoder-decoder (its routes are
    tests/py/test_serve_translate.py's), naming what translates at start."""
    import subprocess
    d, cfg, _ = marian
    binp = os.environ.get("RAGGED_BIN", os.path.join(HERE, "..", "..", "build", "ragged"))
    r = subprocess.run([binp, "info", "--model", d], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)["model"]
    assert info["kind"] == "encoder-decoder"
    assert info["decoder_start_token_id"] == cfg["decoder_start_token_id"]
    from server_util import Server
    import time
    s = Server(d)
    try:
        t_end = time.time() + 10  # stderr is read by a thread
        while "/translate" not in s.stderr() and time.time() < t_end:
            time.sleep(0.05)
        assert "encoder-decoder" in s.stderr() and "/translate" in s.stderr()
    finally:
        s.stop()
