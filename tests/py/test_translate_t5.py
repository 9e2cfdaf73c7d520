"""T5 / T5 v1.1 (FLAN-T5) / mT5 as encoder-decoders (issue 29): random tiny checkpoints from
tests/py/make_seq2seq.py run by ragged.Translator (src/model/t5.c), against the float64 NumPy
reference tests/py/ref_seq2seq.py (RMSNorm without bias, unscaled attention, relative position
buckets -- bidirectional in the encoder, unidirectional in the decoder's paged self-attention,
none in cross-attention --, relu or gated-gelu FFN, the tied head's d_model^-0.5 rescale or
v1.1's own lm_head). Token ids must be equal, alone and in mixed batches; one variant has
d_kv != d_model / heads and 16 buckets up to distance 20, so sources and targets run past the
distance where the buckets saturate."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "python"))
import make_seq2seq  # noqa: E402
import ragged  # noqa: E402
import ref_seq2seq  # noqa: E402
from server_util import Server  # noqa: E402
from test_translate_bart import _variant, check_beams  # noqa: E402

BIN = os.environ.get("RAGGED_BIN", os.path.join(HERE, "..", "..", "build", "ragged"))

# name -> (spec, overrides)
VARIANTS = {
    "t5": ("tiny-t5", {}),
    "t5v11": ("tiny-t5v11", {}),
    "t5-dkv": ("tiny-t5", dict(d_kv=12, buckets=16, max_distance=20)),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def model(request, tmp_path_factory):
    spec, over = VARIANTS[request.param]
    d = str(tmp_path_factory.mktemp(request.param) / "m")
    cfg, _ = make_seq2seq.make_spec(spec, d, seed=5, **over)
    ref = ref_seq2seq.Seq2Seq(d)
    t = ragged.Translator(d)
    yield request.param, d, cfg, ref, t
    t.close()


def sources(cfg, seed, lens):
    """Random sources ending in eos, without the special ids 0-2."""
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(3, cfg["vocab_size"], size=n))) + [cfg["eos_token_id"]]
            for n in lens]


def test_info(model):
    name, _, cfg, ref, t = model
    assert t.model_type == "t5"
    assert t.decoder_start_token_id == ref.decoder_start_token_id == cfg["pad_token_id"] == 0
    assert t.max_source_positions == cfg["n_positions"]
    assert t.eos_token_id == 1
    from ragged._lib import lib
    info = lib().rg_model_get_info(t._h).contents
    assert info.head_dim == cfg["d_kv"] and info.hidden_size == cfg["d_model"]
    assert info.num_attention_heads == cfg["num_heads"]
    assert info.tie_word_embeddings is (name != "t5v11")


def test_greedy_equals_reference(model):
    """Alone and all in one call (sources of different lengths encoded together, their decoders
    stepping together); max_tokens 4 stops some at the limit; 24 new tokens run the decoder past
    the 20-token max_distance of the t5-dkv variant."""
    _, _, cfg, ref, t = model
    srcs = sources(cfg, 0, (5, 9, 3, 12, 1, 30))
    for max_new in (4, 24):
        want = [ref.greedy(s, max_new)[1:] for s in srcs]
        assert [t.translate(s, max_tokens=max_new)[0]["ids"] for s in srcs] == want
        assert [o["ids"] for o in t.translate(srcs, max_tokens=max_new)] == want
    # outputs that depend on the source (a forward ignoring the encoder would give one answer)
    assert len({tuple(w) for w in want}) >= 4


def test_beams_equal_reference(model):
    _, _, cfg, ref, t = model
    check_beams(ref, t, sources(cfg, 1, (6, 2, 11, 25)))


def test_position_bias_and_rescale_matter(tmp_path):
    """The test above has power: a reference without the decoder's position bias, or without
    the tied head's d_model^-0.5 rescale, chooses other ids than ragged does."""
    d = str(tmp_path / "m")
    make_seq2seq.make_spec("tiny-t5", d, seed=5)
    ref = ref_seq2seq.Seq2Seq(d)
    srcs = sources(ref.cfg, 0, (5, 9, 12, 30))
    with ragged.Translator(d) as t:
        got = [o["ids"] for o in t.translate(srcs, max_tokens=16)]
    assert got == [ref.greedy(s, 16)[1:] for s in srcs]

    class NoDecoderBias(ref_seq2seq.Seq2Seq):
        def _t5_bias(self, stack, n, m):
            b = super()._t5_bias(stack, n, m)
            return b if stack == "encoder" else 0 * b
    other = NoDecoderBias(d)
    assert [other.greedy(s, 16)[1:] for s in srcs] != got
    unscaled = ref_seq2seq.Seq2Seq(d)
    unscaled.out_scale = 1.0
    assert [unscaled.beam_search(s, 4, 16)[0][1:] for s in srcs] != \
        [ref.beam_search(s, 4, 16)[0][1:] for s in srcs]


def test_mt5_model_type(tmp_path):
    """model_type "mt5" (MT5Config: gated-gelu and untied by default) loads the same weights as
    the T5 v1.1 checkpoint and gives the reference's ids; its defaults apply to missing keys."""
    d = str(tmp_path / "v11")
    make_seq2seq.make_spec("tiny-t5v11", d, seed=7)
    ref = ref_seq2seq.Seq2Seq(d)
    m = str(tmp_path / "mt5")
    shutil.copytree(d, m)
    p = os.path.join(m, "config.json")
    c = json.load(open(p))
    c["model_type"] = "mt5"
    del c["feed_forward_proj"], c["tie_word_embeddings"]  # MT5Config's defaults
    json.dump(c, open(p, "w"))
    srcs = sources(ref.cfg, 3, (4, 17, 8))
    with ragged.Translator(m) as t:
        assert t.model_type == "mt5"
        assert [o["ids"] for o in t.translate(srcs, max_tokens=12)] == \
            [ref.greedy(s, 12)[1:] for s in srcs]


@pytest.mark.parametrize("fam,update,drop,msg", [
    ("t5", None, ("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",),
     "missing tensor.*decoder.block.0.layer.0.SelfAttention.relative_attention_bias"),
    ("t5v11", None, ("encoder.block.1.layer.1.DenseReluDense.wi_1.weight",),
     "encoder.block.1.layer.1.DenseReluDense.wi_1.weight"),
    ("t5v11", None, ("lm_head.weight",), "lm_head.weight"),
    ("t5", {"d_kv": 16}, (), "SelfAttention.q.weight.*shape"),
    ("t5", {"relative_attention_num_buckets": 8}, (), "relative_attention_bias.*shape"),
    ("t5", {"feed_forward_proj": "gated-mish"}, (), "feed_forward_proj"),
    ("t5", {"feed_forward_proj": "dense-gated-relu"}, (), "feed_forward_proj"),
    ("t5", {"relative_attention_max_distance": 16}, (), "relative_attention_max_distance"),
    ("t5", {"num_heads": "four"}, (), "num_heads"),
    ("t5", {"decoder_start_token_id": 500}, (), "decoder_start_token_id"),
])
def test_bad_config_refused(tmp_path, fam, update, drop, msg):
    """A wrong or missing config key or tensor is refused at load, by name, not crashed on."""
    d = _variant(tmp_path, fam, "v", update, drop)
    with pytest.raises(ragged.RaggedError, match=msg):
        ragged.Translator(d)


def test_cli_and_server(tmp_path):
    """`ragged translate --model DIR` on text (the checkpoint's tokenizer.json appends </s>) and
    `ragged serve`'s /info and /translate pick T5 up through its arch: ids equal the
    reference's, the model kind is encoder-decoder."""
    from tokenizers import Tokenizer
    d = str(tmp_path / "t5")
    make_seq2seq.make_spec("tiny-t5", d, seed=2)
    ref = ref_seq2seq.Seq2Seq(d)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    texts = ["hello world", "abc de", "T5 text"]
    want = [ref.greedy(tok.encode(x).ids, 6)[1:] for x in texts]
    assert all(tok.encode(x).ids[-1] == 1 for x in texts)
    r = subprocess.run([BIN, "translate", "--model", d, "--max-tokens", "6"],
                       input="\n".join(texts) + "\n", capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert [x["ids"] for x in rows] == want
    s = Server(d)
    try:
        info = json.loads(s.request("GET", "/info")[2])
        assert info["model_kind"] == "encoder-decoder"
        assert info["model_pipeline_tag"] == "translation"
        assert info["max_source_positions"] == ref.cfg["n_positions"]
        assert info["decoder_start_token_id"] == 0
        st, out = s.post_json("/translate", {"inputs": texts[0],
                                             "parameters": {"max_new_tokens": 6,
                                                            "details": True}})
        assert st == 200, out
        out = out[0] if isinstance(out, list) else out
        assert [t["id"] for t in out["details"]["tokens"]] == want[0]
    finally:
        s.stop()
