"""The BART family of encoder-decoders (issue 29): random tiny BART, mBART and M2M100 (NLLB's
model_type m2m_100) checkpoints from tests/py/make_seq2seq.py run by ragged.Translator, against
the float64 NumPy reference tests/py/ref_seq2seq.py (learned positions at offset 2 and
layernorm_embedding for BART / mBART, pre-LN with final layer_norms for mBART / M2M100, M2M100's
fairseq sinusoid at padding_idx + 1, forced_bos_token_id and forced_eos_token_id as generate()
applies them). Token ids must be equal, alone and in mixed batches."""
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

FAMILIES = ("bart", "mbart", "m2m100")
BIN = os.environ.get("RAGGED_BIN", os.path.join(HERE, "..", "..", "build", "ragged"))


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, tmp_path_factory):
    fam = request.param
    d = str(tmp_path_factory.mktemp(fam) / "m")
    make_seq2seq.make_spec("tiny-" + fam, d, seed=5)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    ref = ref_seq2seq.Seq2Seq(d)
    t = ragged.Translator(d)
    yield fam, d, cfg, ref, t
    t.close()


def sources(cfg, seed, lens):
    """Random sources ending in eos, without special ids (0-3) or language codes (the top)."""
    rng = np.random.default_rng(seed)
    V = cfg["vocab_size"]
    return [list(map(int, rng.integers(4, V - 5, size=n))) + [cfg["eos_token_id"]]
            for n in lens]


def test_info(model):
    fam, _, cfg, ref, t = model
    assert t.model_type == cfg["model_type"]
    assert t.decoder_start_token_id == ref.decoder_start_token_id == 2
    assert t.max_source_positions == cfg["max_position_embeddings"]


def test_greedy_equals_reference(model):
    """Alone and all in one call (sources of different lengths encoded together, their
    decoders stepping together); max_tokens 4 stops some at the limit (forced EOS there)."""
    _, _, cfg, ref, t = model
    srcs = sources(cfg, 0, (5, 9, 3, 12, 1, 30))
    for max_new in (4, 14):
        want = [ref.greedy(s, max_new)[1:] for s in srcs]
        assert [t.translate(s, max_tokens=max_new)[0]["ids"] for s in srcs] == want
        assert [o["ids"] for o in t.translate(srcs, max_tokens=max_new)] == want
    # the outputs are not all alike (a broken forward that only emits forced tokens would be)
    assert len({tuple(w) for w in (ref.greedy(s, 14)[1:] for s in srcs)}) >= 3


def test_beams_equal_reference(model):
    _, _, cfg, ref, t = model
    check_beams(ref, t, sources(cfg, 1, (6, 2, 11, 17)))


def check_beams(ref, t, srcs):
    """4 beams of 10 new tokens, each source alone and all in one call, then n=2 with a length
    penalty and early stopping for srcs[2]: ids equal the reference's."""
    want = [ref.beam_search(s, 4, 10)[0][1:] for s in srcs]
    assert [t.translate(s, max_tokens=10, num_beams=4)[0]["ids"] for s in srcs] == want
    assert [o["ids"] for o in t.translate(srcs, max_tokens=10, num_beams=4)] == want
    s = srcs[2]
    want2 = [w[1:] for w in ref.beam_search(s, 4, 10, length_penalty=0.6, early_stopping=True,
                                            num_return_sequences=2)]
    got2 = t.translate(s, max_tokens=10, num_beams=4, n=2, length_penalty=0.6,
                       early_stopping=True)
    assert [o["ids"] for o in got2] == want2


def test_forced_bos_is_the_first_token(model):
    """generation_config's forced_bos_token_id comes first, greedy and beams, although the raw
    logits would choose another token there; a per-request override forces another id, or
    none, and still equals the reference run with the same override."""
    _, _, cfg, ref, t = model
    gen = json.load(open(os.path.join(t.model_path, "generation_config.json")))
    fb = gen["forced_bos_token_id"]
    srcs = sources(cfg, 2, (4, 8, 13))
    for o in t.translate(srcs, max_tokens=6) + t.translate(srcs, max_tokens=6, num_beams=4):
        assert o["ids"][0] == fb
    start = ref.decoder_start_token_id
    raw = [int(np.argmax(ref.decoder_logits(ref.encode(s), [start])[0])) for s in srcs]
    assert any(r != fb for r in raw)
    for over in (None, 7):
        want = [ref.greedy(s, 6, forced_bos_token_id=over)[1:] for s in srcs]
        got = [o["ids"] for o in t.translate(srcs, max_tokens=6, forced_bos_token_id=over)]
        assert got == want
        wantb = [ref.beam_search(s, 4, 6, forced_bos_token_id=over)[0][1:] for s in srcs]
        gotb = [o["ids"] for o in t.translate(srcs, max_tokens=6, num_beams=4,
                                              forced_bos_token_id=over)]
        assert gotb == wantb
    assert [g[0] for g in got] == [7, 7, 7]
    unforced = t.translate(srcs, max_tokens=6, forced_bos_token_id=None)
    assert [o["ids"][0] for o in unforced] == raw
    # max_tokens 1: forced EOS wins over forced BOS, as generate() applies it after
    one = ref.greedy(srcs[0], 1)[1:]
    assert t.translate(srcs[0], max_tokens=1)[0]["ids"] == one
    with pytest.raises(ragged.RaggedError, match="forced_bos_id"):
        t.translate(srcs[0], max_tokens=3, forced_bos_token_id=cfg["vocab_size"])


def test_m2m100_pad_in_the_target(tmp_path):
    """M2M100's positions: a pad token in the decoder input gets the zero padding_idx row (the
    sinusoid's) while the count goes on, as generate()'s cached decoding numbers them. The pad
    row of the tied embedding scaled up so that pad is generated; ids equal the reference's, and
    a reference that gave pad tokens their position rows would have chosen other ids."""
    from safetensors.numpy import load_file, save_file
    d = str(tmp_path / "m")
    make_seq2seq.make_spec("tiny-m2m100", d, seed=6, forced_bos=None)
    w = load_file(os.path.join(d, "model.safetensors"))
    w["model.shared.weight"] = w["model.shared.weight"].copy()
    w["model.shared.weight"][1] *= 2
    save_file(w, os.path.join(d, "model.safetensors"))
    ref = ref_seq2seq.Seq2Seq(d)
    srcs = sources(ref.cfg, 3, (3, 7, 10, 5))
    want = [ref.greedy(s, 10)[1:] for s in srcs]
    with ragged.Translator(d) as t:
        assert [o["ids"] for o in t.translate(srcs, max_tokens=10)] == want
        wantb = [ref.beam_search(s, 3, 8)[0][1:] for s in srcs]
        assert [o["ids"] for o in t.translate(srcs, max_tokens=8, num_beams=3)] == wantb
    assert sum(g[:-1].count(1) for g in want) >= 1

    class PadPositioned(ref_seq2seq.Seq2Seq):
        def _bart_positions(self, stack, ids, cached):
            pad = self.padding_idx
            return ref_seq2seq.m2m100_sinusoid(np.arange(1, len(ids) + 1) + pad, self.d, -1)
    other = PadPositioned(d)
    assert [other.greedy(s, 10)[1:] for s in srcs] != want



def test_m2m100_pad_in_the_source(tmp_path):
    """M2M100's encoder numbers a source's positions by a count of its non-pad tokens
    (create_position_ids_from_input_ids): pad ids inside a source take the zero row and do not
    advance the count. Sources with pads in the middle, alone and batched with others, equal the
    reference's ids; a reference numbering every token would have chosen other ids."""
    d = str(tmp_path / "m")
    make_seq2seq.make_spec("tiny-m2m100", d, seed=8, forced_bos=None)
    ref = ref_seq2seq.Seq2Seq(d)
    pad = ref.cfg["pad_token_id"]
    plain = sources(ref.cfg, 5, (6, 9, 4))
    padded = [s[:2] + [pad, pad] + s[2:] for s in plain[:2]] + [[pad] + plain[2]]
    srcs = padded + sources(ref.cfg, 6, (3, 11))
    want = [ref.greedy(s, 8)[1:] for s in srcs]
    with ragged.Translator(d) as t:
        assert [o["ids"] for o in t.translate(srcs, max_tokens=8)] == want
        assert [t.translate([s], max_tokens=8)[0]["ids"] for s in srcs[:3]] == want[:3]
        wantb = [ref.beam_search(s, 3, 6)[0][1:] for s in padded]
        assert [o["ids"] for o in t.translate(padded, max_tokens=6, num_beams=3)] == wantb

    class Arange(ref_seq2seq.Seq2Seq):
        def _bart_positions(self, stack, ids, cached):
            return super()._bart_positions(stack, ids, True)
    other = Arange(d)
    enc = [np.abs(other.encode(s) - ref.encode(s)).max() for s in padded]
    assert min(enc) > 1e-3  # the numbering matters to the encoder output


def _variant(tmp_path, fam, name, cfg_update=None, drop=()):
    from safetensors.numpy import load_file, save_file
    d = str(tmp_path / name)
    make_seq2seq.make_spec("tiny-" + fam, d, seed=1)
    if cfg_update:
        p = os.path.join(d, "config.json")
        c = json.load(open(p))
        c.update(cfg_update)
        json.dump(c, open(p, "w"))
    if drop:
        w = load_file(os.path.join(d, "model.safetensors"))
        for k in drop:
            del w[k]
        save_file(w, os.path.join(d, "model.safetensors"))
    return d


@pytest.mark.parametrize("fam,update,drop,msg", [
    ("bart", None, ("model.encoder.embed_positions.weight",),
     "missing tensor.*encoder.embed_positions.weight"),
    ("bart", {"max_position_embeddings": 80}, (), "embed_positions"),
    ("mbart", None, ("model.decoder.layer_norm.weight",), "decoder.layer_norm.weight"),
    ("bart", None, ("model.decoder.layernorm_embedding.bias",),
     "decoder.layernorm_embedding.bias"),
    ("bart", {"add_final_layer_norm": True}, (), "add_final_layer_norm true"),
    ("bart", {"normalize_before": True}, (), "normalize_before true"),
    ("mbart", {"normalize_before": False}, (), "normalize_before false"),
    ("m2m100", {"normalize_embedding": True}, (), "normalize_embedding"),
    ("mbart", {"encoder_ffn_dim": 72}, (), "encoder_ffn_dim"),
    ("m2m100", {"encoder_attention_heads": 2}, (), "encoder_attention_heads"),
    ("bart", {"activation_function": "mish"}, (), "activation_function"),
    ("m2m100", {"pad_token_id": 500}, (), "pad_token_id"),
])
def test_bad_config_refused(tmp_path, fam, update, drop, msg):
    """What the forward does not compute, or a file that lacks what it needs, is refused at
    load by name."""
    d = _variant(tmp_path, fam, "v", update, drop)
    with pytest.raises(ragged.RaggedError, match=msg):
        ragged.Translator(d)



@pytest.mark.parametrize("fam", FAMILIES)
def test_decoder_start_from_generation_config(tmp_path, fam):
    """generation_config.json's decoder_start_token_id replaces config.json's, as generate()
    reads it: Translator reports it and its ids equal the reference's started with it (a
    start of 0 where config.json says 2); one outside the vocabulary is refused at load."""
    d = str(tmp_path / fam)
    make_seq2seq.make_spec("tiny-" + fam, d, seed=7)
    gp = os.path.join(d, "generation_config.json")
    gen = json.load(open(gp))
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg["decoder_start_token_id"] == gen["decoder_start_token_id"] == 2
    gen["decoder_start_token_id"] = 0
    json.dump(gen, open(gp, "w"))
    ref = ref_seq2seq.Seq2Seq(d)
    assert ref.decoder_start_token_id == 0
    srcs = sources(cfg, 4, (5, 9, 3))
    want = [ref.greedy(s, 6)[1:] for s in srcs]
    wantb = [ref.beam_search(s, 4, 6)[0][1:] for s in srcs]
    with ragged.Translator(d) as t:
        assert t.decoder_start_token_id == 0
        assert [o["ids"] for o in t.translate(srcs, max_tokens=6)] == want
        assert [o["ids"] for o in t.translate(srcs, max_tokens=6, num_beams=4)] == wantb
    if fam == "bart":  # no forced_bos: the start token changes what comes first
        gen["decoder_start_token_id"] = 2
        json.dump(gen, open(gp, "w"))
        ref2 = ref_seq2seq.Seq2Seq(d)
        assert [ref2.greedy(s, 6)[1:] for s in srcs] != want
    gen["decoder_start_token_id"] = cfg["vocab_size"]
    json.dump(gen, open(gp, "w"))
    with pytest.raises(ragged.RaggedError, match="generation_config.json: decoder_start"):
        ragged.Translator(d)


def test_cli_tgt_lang(tmp_path):
    """`ragged translate --tgt-lang CODE`: the vocabulary token CODE is forced first in place of
    the model's forced_bos_token_id; the ids equal the reference's with that override; an
    unknown code is a usage error naming it."""
    from tokenizers import Tokenizer
    d = str(tmp_path / "nllb")
    make_seq2seq.make_spec("tiny-m2m100", d, seed=2)
    ref = ref_seq2seq.Seq2Seq(d)
    V = ref.cfg["vocab_size"]
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    code = tok.id_to_token(V - 4)  # the source language code, eng_Latn
    assert code == "eng_Latn" and ref.gen["forced_bos_token_id"] == V - 3
    texts = ["hello world", "abc de"]
    for args, forced in (([], V - 3), (["--tgt-lang", code], V - 4), (["--tgt-lang", "none"],
                                                                       None)):
        r = subprocess.run([BIN, "translate", "--model", d, "--max-tokens", "6"] + args,
                           input="\n".join(texts) + "\n", capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
        for x, t in zip(rows, texts):
            want = ref.greedy(tok.encode(t).ids, 6, forced_bos_token_id=forced)[1:]
            assert x["ids"] == want
            if forced is not None:
                assert x["ids"][0] == forced
    r = subprocess.run([BIN, "translate", "--model", d, "--tgt-lang", "xx_Nope"], input="a\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "xx_Nope" in r.stderr
