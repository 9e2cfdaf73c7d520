"""The BERT runtime (rg_model_* in src/model/bert.c) against the independent float64 NumPy model
in ref_bert.py: tiny random-weight configs, the real all-MiniLM-L6-v2 and (slow) the real
all-mpnet-base-v2, ragged batch shapes,
length limits, batch invariance, the padded / concat / slotted layouts, input errors (the model
must keep working after each) and load-time validation. Device and dtype come from
RAGGED_TEST_DEVICE / RAGGED_TEST_DTYPE; the tolerance metric is documented in conftest.py."""
import ctypes
import json
import os
import shutil

import numpy as np
import pytest

import ragged_ctypes as rc
from conftest import ASAN, DEVICE, DTYPE, assert_embeddings_close, row_cosine, row_rel_err
from ref_bert import RefBert

TINY = ["h32_gelu", "h64_relu_norm", "h48_gelunew_cls", "h128_max_norm", "short_pos64",
        "prefixed", "f16", "bf16"]
FAMILIES = ["roberta", "xlmr_prefixed", "distilbert", "mpnet",
            "mpnet_prefixed", "deberta", "deberta_v2abs"]  # make_tiny configs of the other families
# batch invariance / layout equivalence: same math, different batch composition (fp32 CPU)
INVARIANCE_TOL = 1e-6 if (DEVICE == "cpu" and DTYPE == "fp32") else None


def load(path, max_batch_tokens=16384):
    return rc.Model(path, device=DEVICE, dtype=DTYPE, max_batch_tokens=max_batch_tokens)


def info(model):
    return model.info()


def random_seqs(rng, lens, vocab=30522):
    """[CLS] random ids [SEP] for each length (length 1: just [CLS])."""
    out = []
    for n in lens:
        s = rng.integers(999, vocab, size=n).tolist()
        s[0] = 101
        if n > 1:
            s[-1] = 102
        out.append(s)
    return out


def embed_raw(model, tokens, cu, n_seq, H, layout=None, extra_rows=1):
    """Call the C API directly with an output buffer that has NaN guard rows after n_seq rows.
    Returns (status, out[:n_seq], guard)."""
    tokens = np.ascontiguousarray(tokens, np.int32)
    cu = np.ascontiguousarray(cu, np.int32)
    out = np.full((max(n_seq, 0) + extra_rows, H), np.nan, np.float32)
    if layout is None:
        st = rc.lib().rg_model_embed(model._h, tokens.ctypes.data, cu.ctypes.data, n_seq,
                                     out.ctypes.data)
    else:
        st = rc.lib().rg_model_embed_layout(model._h, tokens.ctypes.data, cu.ctypes.data, n_seq,
                                            ctypes.byref(layout), out.ctypes.data)
    return st, out[:max(n_seq, 0)], out[max(n_seq, 0):]


def status_name(st):
    return rc.lib().rg_status_name(st).decode()


def last_error():
    return rc.lib().rg_last_error().decode(errors="replace")


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def tiny_models(tiny_dirs):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = (load(tiny_dirs[name]), RefBert(tiny_dirs[name]))
        return cache[name]
    yield get
    for m, _ in cache.values():
        m.close()


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    m = load(minilm_dir)
    yield m, RefBert(minilm_dir)
    m.close()


def mpnet_dir():
    """The real all-mpnet-base-v2: RAGGED_MPNET_DIR, else where scripts/fetch-mpnet.sh puts it."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.environ.get("RAGGED_MPNET_DIR") or os.path.join(cache, "ragged", "all-mpnet-base-v2")


@pytest.fixture(scope="module")
def mpnet():
    """(model, reference, directory) of the real all-mpnet-base-v2, loaded as shipped. Absent:
    the test fails (it runs in the release pass; fetch it with scripts/fetch-mpnet.sh)."""
    d = mpnet_dir()
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        pytest.fail(f"all-mpnet-base-v2 not found in {d}: run scripts/fetch-mpnet.sh "
                    "(or set RAGGED_MPNET_DIR to a directory holding it)")
    m = load(d)
    yield m, RefBert(d), d
    m.close()


# ------------------------------------------------------------------ parity

@pytest.mark.parametrize("name", TINY + FAMILIES)
def test_tiny_parity_ragged_shapes(tiny_models, name):
    model, ref = tiny_models(name)
    H = ref.H
    max_pos = ref.max_seq_len
    rng = np.random.default_rng(hash(name) % 2**32)
    for lens in ([1], [7, 3], [128, 1, 64, 33], [max_pos, max_pos, 1, 2]):
        lens = [min(n, max_pos) for n in lens]
        seqs = random_seqs(rng, lens)
        got = model.embed_ids(seqs, H)
        assert_embeddings_close(got, ref.embed_batch(seqs), f"{name} lens={lens}")


def test_tiny_info_matches_config(tiny_models, tiny_dirs):
    model, ref = tiny_models("h48_gelunew_cls")
    i = info(model)
    cfg = ref.cfg
    assert i.model_type == b"bert"
    assert (i.vocab_size, i.hidden_size, i.num_attention_heads, i.num_hidden_layers,
            i.intermediate_size, i.max_position_embeddings) == (
        cfg["vocab_size"], cfg["hidden_size"], cfg["num_attention_heads"],
        cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["max_position_embeddings"])
    assert i.hidden_act == b"gelu_new"
    assert i.pooling == 1 and not i.normalize  # CLS
    assert os.path.samefile(i.model_dir.decode(), tiny_dirs["h48_gelunew_cls"])
    assert i.max_batch_tokens == 16384
    model2, _ = tiny_models("h128_max_norm")
    assert info(model2).pooling == 2 and info(model2).normalize


def test_minilm_parity_random_ids(minilm):
    model, ref = minilm
    rng = np.random.default_rng(7)
    for lens in ([1], [7, 3], [128, 1, 64, 33]):
        seqs = random_seqs(rng, lens)
        assert_embeddings_close(model.embed_ids(seqs, 384), ref.embed_batch(seqs),
                                f"MiniLM lens={lens}")


def test_minilm_parity_max_length(minilm):
    model, ref = minilm
    seqs = random_seqs(np.random.default_rng(8), [512, 2])
    assert_embeddings_close(model.embed_ids(seqs, 384), ref.embed_batch(seqs), "MiniLM 512")


@pytest.mark.slow
def test_minilm_real_sentences(minilm, minilm_dir, sentences):
    """>= 200 real sentences tokenized by HF tokenizers, several ragged batches, cosine >= 0.99999
    (fp32) against float64."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(512)
    model, ref = minilm
    sents = sentences[:200]
    assert len(sents) >= 200
    ids = [e.ids for e in tok.encode_batch(sents)]
    got = np.concatenate([model.embed_ids(ids[i:i + 64], 384) for i in range(0, len(ids), 64)])
    want = ref.embed_batch(ids)
    cos = row_cosine(got, want)
    if DTYPE == "fp32":
        assert cos.min() >= 0.99999, f"sentence {int(np.argmin(cos))}: cosine {cos.min():.7f}"
    assert_embeddings_close(got, want, "MiniLM sentences")
    # sanity of the reference semantics: paraphrases closer than unrelated text
    a, b, c = (tok.encode(s).ids for s in ("A man is eating food.", "A man is eating a piece of bread.",
                                            "The new movie is awesome."))
    e = model.embed_ids([a, b, c], 384)
    assert e[0] @ e[1] > e[0] @ e[2] + 0.2


@pytest.mark.slow
def test_mpnet_real_sentences(mpnet, sentences):
    """The real all-mpnet-base-v2 on 50 real sentences tokenized by HF tokenizers with the
    model's own tokenizer.json (WordPiece + RobertaProcessing: <s> ... </s>), plus one of 512
    tokens (the longest; distances far past the buckets' 128), in ragged batches and in the
    concat layout, against the float64 reference: cosine >= 0.99999 and max row-relative error
    <= 1e-5 in fp32; paraphrases closer than unrelated text."""
    tokenizers = pytest.importorskip("tokenizers")
    model, ref, d = mpnet
    i = info(model)
    assert i.model_type == b"mpnet" and i.hidden_size == 768 and i.max_seq_len == 512
    assert i.pooling == 0 and i.normalize  # MEAN, Normalize
    tok = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    sents = sentences[:50]
    ids = [e.ids for e in tok.encode_batch(sents)]
    assert all(s[0] == 0 and s[-1] == 2 for s in ids)
    assert [model.tokenize(t) for t in sents] == ids  # ragged's own tokenizer, as shipped
    long_ids = tok.encode(" ".join(sentences[50:120])).ids
    assert len(long_ids) > 512
    ids.append(long_ids[:511] + [2])
    got = np.concatenate([model.embed_ids(ids[k:k + 16], 768) for k in range(0, len(ids), 16)])
    want = ref.embed_batch(ids)
    cos, rel = row_cosine(got, want), row_rel_err(got, want)
    if DTYPE == "fp32":
        assert cos.min() >= 0.99999, f"sentence {int(np.argmin(cos))}: cosine {cos.min():.7f}"
        if DEVICE == "cpu":
            assert rel.max() <= 1e-5, f"sentence {int(np.argmax(rel))}: rel err {rel.max():.3g}"
    assert_embeddings_close(got, want, "all-mpnet-base-v2 sentences")
    short = [s for s in ids if len(s) <= 32][:8]
    assert len(short) >= 3
    lay = layouts([len(s) for s in short])["concat"]
    assert_embeddings_close(model.embed_ids(short, 768, layout=lay), ref.embed_batch(short),
                            "all-mpnet-base-v2 concat")
    a, b, c = (tok.encode(s).ids for s in ("A man is eating food.",
                                            "A man is eating a piece of bread.",
                                            "The new movie is awesome."))
    e = model.embed_ids([a, b, c], 768)
    assert e[0] @ e[1] > e[0] @ e[2] + 0.3, (e[0] @ e[1], e[0] @ e[2])


def test_minilm_tokenize_matches_hf_and_embeds(minilm, minilm_dir):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    model, ref = minilm
    texts = ["Hello world!", "ragged packs variable-length requests without padding.", "a"]
    ids = [model.tokenize(t) for t in texts]
    assert ids == [tok.encode(t).ids for t in texts]
    assert_embeddings_close(model.embed_ids(ids, 384), ref.embed_batch(ids), "tokenized text")


# ------------------------------------------------------------------ families

@pytest.mark.parametrize("name", ["roberta", "xlmr_prefixed", "mpnet"])
def test_roberta_positions(tiny_models, name):
    """RoBERTa-style positions: the first token sits at padding_idx + 1, the longest sequence is
    max_position_embeddings - padding_idx - 1 tokens, and a pad id inside a sequence takes
    position padding_idx without advancing the others (transformers'
    create_position_ids_from_input_ids), in the packed path and in every layout."""
    model, ref = tiny_models(name)
    i = info(model)
    assert i.max_seq_len == ref.cfg["max_position_embeddings"] - ref.cfg["pad_token_id"] - 1
    assert i.model_type.decode() == ref.cfg["model_type"]
    rng = np.random.default_rng(5)
    seqs = random_seqs(rng, [9, 3, i.max_seq_len, 16])
    seqs[0][3] = seqs[0][5] = ref.pad
    seqs[3][1] = ref.pad
    want = ref.embed_batch(seqs)
    assert_embeddings_close(model.embed_ids(seqs, ref.H), want, f"{name} pad inside")
    # the rule matters: the same ids with plain 0, 1, ... positions are far off
    assert not np.allclose(want[0], ref.embed_batch([[t if t != ref.pad else 999
                                                      for t in seqs[0]]])[0], atol=1e-3)
    lays = layouts([9, 3, 16], slotted_row=64)
    short = [seqs[0], seqs[1], seqs[3]]
    for mode, lay in lays.items():
        assert_embeddings_close(model.embed_ids(short, ref.H, layout=lay),
                                ref.embed_batch(short), f"{name} {mode}")
    with pytest.raises(rc.RaggedError) as e:
        model.embed_ids(random_seqs(rng, [i.max_seq_len + 1]), ref.H)
    assert e.value.status == "RG_ERR_TOO_LONG" and str(i.max_seq_len) in e.value.message


def test_xlmr_text_end_to_end(tiny_models, tiny_dirs, sentences):
    """An XLM-R model whose tokenizer.json is SentencePiece Unigram (Precompiled charsmap,
    Metaspace, <s> A </s>): ragged's ids equal HF tokenizers', the embeddings of the texts equal
    the float64 reference's, and truncation keeps <s> ... </s> within max_seq_len."""
    tokenizers = pytest.importorskip("tokenizers")
    model, ref = tiny_models("xlmr_unigram")
    hf = tokenizers.Tokenizer.from_file(os.path.join(tiny_dirs["xlmr_unigram"], "tokenizer.json"))
    hf.no_padding()
    hf.no_truncation()
    texts = [t for t in sentences[:80] if len(hf.encode(t).ids) <= ref.max_seq_len]
    texts += ["Ünïcödé tëxt, 全角文字 and emoji 🙂", "", "a"]
    ids = [model.tokenize(t) for t in texts]
    assert ids == [hf.encode(t).ids for t in texts]
    assert all(s[0] == 0 and s[-1] == 2 for s in ids)  # <s> ... </s>
    assert_embeddings_close(model.embed_ids(ids, ref.H), ref.embed_batch(ids), "xlmr texts")
    long = " ".join(sentences[:20])
    cut = model.tokenize(long, truncate=True)
    assert len(cut) == ref.max_seq_len and cut[0] == 0 and cut[-1] == 2
    assert cut[:-1] == hf.encode(long).ids[:ref.max_seq_len - 1]
    with pytest.raises(rc.RaggedError) as e:
        model.tokenize(long)
    assert e.value.status == "RG_ERR_TOO_LONG"


def test_albert(tiny_models, tiny_dirs, sentences):
    """ALBERT: factorised embeddings (E = 16 mapped to H = 48) and one layer's weights run
    num_hidden_layers (3) times, from its SentencePiece tokenizer.json: ids equal HF's, the
    embeddings equal the float64 reference's on texts, pairs (token types) and ragged random
    shapes up to max_seq_len, packed and in every layout."""
    tokenizers = pytest.importorskip("tokenizers")
    model, ref = tiny_models("albert")
    i = info(model)
    assert (i.model_type, i.hidden_size, i.num_hidden_layers) == (b"albert", 48, 3)
    hf = tokenizers.Tokenizer.from_file(os.path.join(tiny_dirs["albert"], "tokenizer.json"))
    hf.no_padding()
    hf.no_truncation()
    texts = [t for t in sentences[:60] if len(hf.encode(t).ids) <= i.max_seq_len]
    ids = [model.tokenize(t) for t in texts]
    assert ids == [hf.encode(t).ids for t in texts]
    assert_embeddings_close(model.embed_ids(ids, 48), ref.embed_batch(ids), "albert texts")
    e = hf.encode(texts[0], texts[1])
    pid, pty = model.tokenize_pair(texts[0], texts[1])
    assert (pid, pty) == (e.ids, e.type_ids)
    assert_embeddings_close(model.run([pid], [pty]), ref.embed_batch([pid], [pty]), "pair")
    rng = np.random.default_rng(4)
    for lens in ([1], [7, 3], [i.max_seq_len, 1, 33]):
        seqs = random_seqs(rng, lens, vocab=2500)
        assert_embeddings_close(model.embed_ids(seqs, 48), ref.embed_batch(seqs), f"{lens}")
    seqs = random_seqs(rng, LENS, vocab=2500)
    for mode, lay in layouts(LENS, slotted_row=64).items():
        assert_embeddings_close(model.embed_ids(seqs, 48, layout=lay), ref.embed_batch(seqs),
                                mode)


CLASSIFIERS = ["bert_rerank", "roberta_cls3", "distilbert_cls2", "deberta_rerank"]
# classifier logits: |got - ref| <= tol * max(1, |ref|) (a logit near 0 makes a relative error
# meaningless, and one score has no cosine); fp16 / bf16 as tests/gpu/families.py
SCORE_TOL = {"fp32": 1e-5 if DEVICE == "cpu" else 1e-4, "fp16": 1e-2, "bf16": 5e-2}


def assert_scores_close(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= SCORE_TOL[DTYPE], f"{what}: scaled error {err:.3g} > {SCORE_TOL[DTYPE]}"


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_classifier_scores(tiny_models, name):
    """*ForSequenceClassification: raw scores (n_seq, num_labels) equal the float64 reference's
    head (BERT pooler + tanh, RoBERTa classifier.dense + tanh, DistilBERT pre_classifier + ReLU)
    on ragged shapes, packed and in every layout, with id2label in info."""
    model, ref = tiny_models(name)
    i = info(model)
    nl = len(ref.cfg["id2label"])
    assert (i.num_labels, i.output_dim) == (nl, nl)
    assert [i.labels[k].decode() for k in range(nl)] == [ref.cfg["id2label"][str(k)]
                                                         for k in range(nl)]
    rng = np.random.default_rng(9)
    for lens in ([1], [7, 3], [ref.max_seq_len, 1, 64, 33]):
        seqs = random_seqs(rng, lens)
        assert_scores_close(model.run(seqs), ref.embed_batch(seqs), f"{name} {lens}")
    seqs = random_seqs(rng, LENS)
    want = ref.embed_batch(seqs)
    for mode, lay in layouts(LENS, slotted_row=min(128, ref.max_seq_len)).items():
        assert_scores_close(model.run(seqs, layout=lay), want, f"{name} {mode}")
    # rg_model_embed is the same run
    assert np.array_equal(model.embed_ids(seqs, nl), model.run(seqs))


def test_token_types_pairs(tiny_models, tiny_dirs):
    """Sentence pairs: token type ids reach the embeddings (BERT: token_type_embeddings[1] for
    segment B), packed and in every layout; rg_model_tokenize_pair equals HF's pair encoding;
    a type outside type_vocab_size is refused, and RoBERTa (one type) accepts only 0."""
    tokenizers = pytest.importorskip("tokenizers")
    model, ref = tiny_models("bert_rerank")
    hf = tokenizers.Tokenizer.from_file(os.path.join(tiny_dirs["bert_rerank"], "tokenizer.json"))
    hf.no_padding()
    hf.no_truncation()
    pairs = [("what is ragged?", "ragged packs variable-length requests without padding."),
             ("a", "b"), ("query", "")]
    seqs, types = [], []
    for a, b in pairs:
        ids, ty = model.tokenize_pair(a, b)
        e = hf.encode(a, b)
        assert (ids, ty) == (e.ids, e.type_ids)
        seqs.append(ids)
        types.append(ty)
    want = ref.embed_batch(seqs, types)
    assert_embeddings_close(model.run(seqs, types), want, "pairs")
    assert not np.allclose(want, ref.embed_batch(seqs), atol=1e-3)  # the types matter
    lens = [len(s) for s in seqs]
    for mode, lay in layouts(lens).items():
        assert_embeddings_close(model.run(seqs, types, layout=lay), want, f"pairs {mode}")
    long = " ".join(["word"] * 200)
    ids, ty = model.tokenize_pair("short query", long, truncate=True)
    assert len(ids) == ref.max_seq_len and ty[-1] == 1
    with pytest.raises(rc.RaggedError) as e:
        model.tokenize_pair("short query", long)
    assert e.value.status == "RG_ERR_TOO_LONG"
    with pytest.raises(rc.RaggedError) as e:
        model.run([seqs[1]], [[0, 0, 2, 1, 1][:len(seqs[1])]])
    assert e.value.status == "RG_ERR_INVALID_INPUT" and "type_vocab_size" in e.value.message
    rob, _ = tiny_models("roberta")
    with pytest.raises(rc.RaggedError) as e:
        rob.run([[0, 1000, 2]], [[0, 1, 0]])
    assert e.value.status == "RG_ERR_INVALID_INPUT"


def test_distilbert_info(tiny_models):
    model, ref = tiny_models("distilbert")
    i = info(model)
    assert i.model_type == b"distilbert"
    assert (i.hidden_size, i.num_attention_heads, i.num_hidden_layers, i.intermediate_size) == (
        ref.cfg["dim"], ref.cfg["n_heads"], ref.cfg["n_layers"], ref.cfg["hidden_dim"])
    assert i.type_vocab_size == 0 and i.max_seq_len == ref.cfg["max_position_embeddings"]


@pytest.mark.slow  # pure Python (no ragged code): importing torch under the ASan preload takes 10 s
def test_mpnet_bucket_reference():
    """The reference's bucket function (ref_bert.mpnet_bucket, key - query): hand-checked values
    of T5's bidirectional buckets at every boundary (8 exact distances per side, then
    logarithmic to 128, where they saturate), and transformers' own function when it is
    installed."""
    from ref_bert import mpnet_bucket
    known = {0: 0, -1: 1, -7: 7, -8: 8, -11: 8, -12: 9, -15: 9, -16: 10, -22: 10, -23: 11,
             -32: 12, -45: 12, -46: 13, -64: 14, -90: 14, -91: 15, -128: 15, -5000: 15,
             1: 17, 7: 23, 8: 24, 16: 26, 64: 30, 91: 31, 5000: 31}
    got = {r: int(mpnet_bucket(r)) for r in known}
    assert got == known
    try:
        import torch
        from transformers.models.mpnet.modeling_mpnet import MPNetEncoder
    except ImportError:
        return  # the hand-checked values above stand alone
    rel = np.arange(-3000, 3001)
    hf = MPNetEncoder.relative_position_bucket(torch.tensor(rel)).numpy()
    assert np.array_equal(mpnet_bucket(rel), hf)


@pytest.mark.parametrize("name", ["mpnet", "mpnet_prefixed"])
def test_mpnet_relative_bias_matters(tiny_models, tiny_dirs, tmp_path, name):
    """MPNet's relative position bias reaches the scores of every layer: with the bias table
    zeroed the reference changes by far more than the tolerance, and ragged follows it both
    ways (so the bias is neither ignored nor applied where it does not belong), in the packed
    path and the concat layout (distances within a request, not within a row)."""
    model, ref = tiny_models(name)
    i = info(model)
    assert i.model_type == b"mpnet" and i.type_vocab_size == 0
    assert i.max_seq_len == ref.cfg["max_position_embeddings"] - 2
    rng = np.random.default_rng(41)
    seqs = random_seqs(rng, [9, 1, 30, min(200, i.max_seq_len), 3])
    want = ref.embed_batch(seqs)
    assert_embeddings_close(model.embed_ids(seqs, ref.H), want, f"{name} with bias")
    short = [s for s in seqs if len(s) <= 32]
    concat = layouts([len(s) for s in short])["concat"]
    assert_embeddings_close(model.embed_ids(short, ref.H, layout=concat), ref.embed_batch(short),
                            f"{name} concat")
    d = _copy(tiny_dirs[name], tmp_path / "zero")
    _rewrite_weights(d, lambda w: {k: (np.zeros_like(v) if k.endswith(
        "relative_attention_bias.weight") else v) for k, v in w.items()})
    ref0 = RefBert(d)
    assert not ref0.rel_bias.any()
    want0 = ref0.embed_batch(seqs)
    # a single token attends only to itself: no bias can change it; every longer one changes
    err = row_rel_err(want0, want)
    assert err[1] < 1e-12 and np.delete(err, 1).min() > 1e-3, err
    m0 = load(d)
    try:
        assert_embeddings_close(m0.embed_ids(seqs, ref.H), want0, f"{name} zero bias")
        assert_embeddings_close(m0.embed_ids(short, ref.H, layout=concat),
                                ref0.embed_batch(short), f"{name} zero bias concat")
    finally:
        m0.close()


def test_mpnet_padding_idx_is_one(tiny_dirs, tmp_path):
    """MPNetEmbeddings fixes padding_idx = 1: positions skip token id 1 even when config.json's
    pad_token_id says otherwise; and a config with fewer than the 32 bias rows transformers
    looks up, or a checkpoint without the bias, is refused by name."""
    d = _copy(tiny_dirs["mpnet"], tmp_path / "pad0")
    cfg = _edit_config(d, pad_token_id=0)
    ref = RefBert(d)
    assert ref.pad == 1
    m = load(d)
    try:
        seqs = random_seqs(np.random.default_rng(43), [12, 40])
        seqs[0][3] = seqs[1][5] = 1
        seqs[1][7] = 0
        assert_embeddings_close(m.embed_ids(seqs, ref.H), ref.embed_batch(seqs), "pad_token_id 0")
        assert info(m).max_seq_len == cfg["max_position_embeddings"] - 2
    finally:
        m.close()
    _edit_config(d, relative_attention_num_buckets=16)
    e = _load_err(d)
    assert e.status == "RG_ERR_FORMAT" and "relative_attention_num_buckets 16" in e.message
    d2 = _copy(tiny_dirs["mpnet"], tmp_path / "nobias")
    _rewrite_weights(d2, lambda w: {k: v for k, v in w.items()
                                    if not k.endswith("relative_attention_bias.weight")})
    e = _load_err(d2)
    assert e.status == "RG_ERR_FORMAT" and "encoder.relative_attention_bias.weight" in e.message


# ------------------------------------------------------------------ limits and truncation

def test_max_length_and_one_past(tiny_models):
    model, ref = tiny_models("short_pos64")
    H = ref.H
    rng = np.random.default_rng(3)
    seqs = random_seqs(rng, [64, 64, 1, 2])
    assert_embeddings_close(model.embed_ids(seqs, H), ref.embed_batch(seqs), "max length")
    for lens, bad in (([65], 0), ([3, 65, 2], 1)):
        seqs = random_seqs(rng, lens)
        with pytest.raises(rc.RaggedError) as e:
            model.embed_ids(seqs, H)
        assert e.value.status == "RG_ERR_TOO_LONG"
        assert f"sequence {bad}" in e.value.message and "65" in e.value.message
        assert "64" in e.value.message
    # still works afterwards
    seqs = random_seqs(rng, [5, 9])
    assert_embeddings_close(model.embed_ids(seqs, H), ref.embed_batch(seqs), "after TOO_LONG")


def test_small_max_batch_tokens_many_sequences(tiny_dirs):
    """max_batch_tokens that is not a power of two, filled with one-token sequences: the CUDA
    bucket of 9 sequences must not round past the 10 rows the staging buffers hold."""
    name = "h32_gelu"
    ref = RefBert(tiny_dirs[name])
    m = load(tiny_dirs[name], max_batch_tokens=10)
    try:
        rng = np.random.default_rng(5)
        for lens in ([1] * 9, [1] * 10, [2, 1, 1, 1, 1, 1, 1, 1, 1], [3, 7]):
            seqs = random_seqs(rng, lens)
            assert_embeddings_close(m.embed_ids(seqs, ref.H), ref.embed_batch(seqs),
                                    f"max_batch_tokens=10 lens={lens}")
    finally:
        m.close()


def test_batch_over_max_batch_tokens(tiny_dirs):
    d = tiny_dirs["short_pos64"]
    model = load(d, max_batch_tokens=100)
    ref = RefBert(d)
    rng = np.random.default_rng(4)
    ok = random_seqs(rng, [64, 36])
    assert_embeddings_close(model.embed_ids(ok, ref.H), ref.embed_batch(ok), "exactly max_batch_tokens")
    with pytest.raises(rc.RaggedError) as e:
        model.embed_ids(random_seqs(rng, [64, 37]), ref.H)
    assert e.value.status == "RG_ERR_TOO_LONG" and "100" in e.value.message
    assert info(model).max_batch_tokens == 100
    model.close()


def test_tokenize_truncation(tiny_models, minilm_dir):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    model, ref = tiny_models("short_pos64")
    text = " ".join(f"word{i} apple" for i in range(80))
    full = tok.encode(text).ids
    assert len(full) > 64
    with pytest.raises(rc.RaggedError) as e:
        model.tokenize(text)
    assert e.value.status == "RG_ERR_TOO_LONG"
    assert str(len(full)) in e.value.message and "64" in e.value.message
    ids = model.tokenize(text, truncate=True)
    assert len(ids) == 64 and ids[-1] == 102 and ids[:63] == full[:63]
    # HF's own truncation agrees
    tok.enable_truncation(64)
    assert ids == tok.encode(text).ids
    # a short text is not changed either way
    short = model.tokenize("hello there")
    assert short == model.tokenize("hello there", truncate=True) == tok.encode("hello there").ids
    assert_embeddings_close(model.embed_ids([ids], ref.H), ref.embed_batch([ids]), "truncated")


# ------------------------------------------------------------------ batch invariance

@pytest.mark.parametrize("name", ["h64_relu_norm", "h48_gelunew_cls", "h128_max_norm", "roberta",
                                  "distilbert", "mpnet", "deberta", "deberta_v2abs"])
def test_batch_invariance(tiny_models, name):
    model, ref = tiny_models(name)
    rng = np.random.default_rng(11)
    seqs = random_seqs(rng, [min(n, ref.max_seq_len) for n in [17, 1, 128, 5, 64, 33, 2]])
    alone = np.concatenate([model.embed_ids([s], ref.H) for s in seqs])
    mixed = model.embed_ids(seqs, ref.H)
    rev = model.embed_ids(seqs[::-1], ref.H)[::-1]
    if INVARIANCE_TOL is not None:
        assert row_rel_err(mixed, alone).max() <= INVARIANCE_TOL
        assert row_rel_err(rev, alone).max() <= INVARIANCE_TOL
    else:
        assert_embeddings_close(mixed, ref.embed_batch(seqs), "mixed")
        assert_embeddings_close(alone, ref.embed_batch(seqs), "alone")


def test_minilm_batch_invariance(minilm):
    model, ref = minilm
    seqs = random_seqs(np.random.default_rng(12), [40, 3, 100, 1, 77])
    alone = np.concatenate([model.embed_ids([s], 384) for s in seqs])
    mixed = model.embed_ids(seqs, 384)
    if INVARIANCE_TOL is not None:
        assert row_rel_err(mixed, alone).max() <= INVARIANCE_TOL
    assert_embeddings_close(mixed, ref.embed_batch(seqs), "MiniLM mixed")


# ------------------------------------------------------------------ layouts

def make_layout(mode, n_rows, row_len, rows, offsets, slot_len=0):
    rows = np.ascontiguousarray(rows, np.int32)
    offs = np.ascontiguousarray(offsets, np.int32)
    lay = rc.Layout(mode, n_rows, row_len, slot_len,
                    rows.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                    offs.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)))
    lay._keep = (rows, offs)
    return lay


LENS = [7, 3, 30, 1, 12, 20, 5, 16]


def layouts(lens, slotted_row=128):
    """PADDED (one request per row), CONCAT (first-fit into rows of 32, with an empty row) and
    SLOTTED (slots of 32 in rows of slotted_row) placements of lens."""
    per_row = slotted_row // 32
    out = {}
    n = len(lens)
    out["padded"] = make_layout(1, n + 1, max(lens), list(range(n)), [0] * n)
    rows, offs, fill = [], [], []
    for L in lens:
        for r, f in enumerate(fill):
            if f + L <= 32:
                rows.append(r), offs.append(f)
                fill[r] += L
                break
        else:
            rows.append(len(fill)), offs.append(0)
            fill.append(L)
    out["concat"] = make_layout(2, len(fill) + 1, 32, rows, offs)
    rows, offs, slot_fill = [], [], []  # per slot fill; slots numbered across rows
    for L in lens:
        for s, f in enumerate(slot_fill):
            if f + L <= 32:
                rows.append(s // per_row), offs.append((s % per_row) * 32 + f)
                slot_fill[s] += L
                break
        else:
            s = len(slot_fill)
            rows.append(s // per_row), offs.append((s % per_row) * 32)
            slot_fill.append(L)
    out["slotted"] = make_layout(3, (len(slot_fill) + per_row - 1) // per_row, slotted_row, rows,
                                 offs, slot_len=32)
    return out


@pytest.mark.parametrize("name", ["h32_gelu", "h64_relu_norm", "h48_gelunew_cls"] + FAMILIES)
def test_layouts_equal_packed(tiny_models, name):
    model, ref = tiny_models(name)
    seqs = random_seqs(np.random.default_rng(21), LENS)
    packed = model.embed_ids(seqs, ref.H)
    want = ref.embed_batch(seqs)
    assert_embeddings_close(packed, want, "packed")
    packed_mode = make_layout(0, 0, 0, [0] * len(seqs), [0] * len(seqs))
    assert np.array_equal(model.embed_ids(seqs, ref.H, layout=packed_mode), packed)
    for mode, lay in layouts(LENS, slotted_row=min(128, ref.max_seq_len)).items():
        got = model.embed_ids(seqs, ref.H, layout=lay)
        assert_embeddings_close(got, want, mode)
        if INVARIANCE_TOL is not None:
            err = row_rel_err(got, packed).max()
            assert err <= INVARIANCE_TOL, f"{mode} vs packed: {err:.3g}"


def test_minilm_layouts_equal_packed(minilm):
    model, ref = minilm
    seqs = random_seqs(np.random.default_rng(22), LENS)
    want = ref.embed_batch(seqs)
    for mode, lay in layouts(LENS).items():
        assert_embeddings_close(model.embed_ids(seqs, 384, layout=lay), want, f"MiniLM {mode}")


def test_layout_errors(tiny_models):
    model, ref = tiny_models("short_pos64")
    H = ref.H
    seqs = random_seqs(np.random.default_rng(23), [5, 4])
    bad = {
        "overlap": make_layout(2, 1, 16, [0, 0], [0, 3]),
        "leaves row": make_layout(2, 2, 16, [0, 1], [0, 13]),
        "row out of range": make_layout(2, 2, 16, [0, 2], [0, 0]),
        "negative offset": make_layout(2, 2, 16, [0, 1], [0, -1]),
        "crosses slot": make_layout(3, 1, 16, [0, 0], [0, 6], slot_len=8),
        "slot does not divide": make_layout(3, 1, 16, [0, 0], [0, 8], slot_len=5),
        "padded shares row": make_layout(1, 2, 16, [0, 0], [0, 8]),
        "zero rows": make_layout(2, 0, 16, [0, 0], [0, 8]),
        "unknown mode": make_layout(9, 1, 16, [0, 0], [0, 8]),
    }
    for what, lay in bad.items():
        with pytest.raises(rc.RaggedError) as e:
            model.embed_ids(seqs, H, layout=lay)
        assert e.value.status == "RG_ERR_INVALID_INPUT", what
    for lay in (make_layout(2, 2, 65, [0, 1], [0, 0]),   # row longer than max_position_embeddings
                make_layout(2, 300, 64, [0, 1], [0, 0])):  # 19200 tokens > max_batch_tokens
        with pytest.raises(rc.RaggedError) as e:
            model.embed_ids(seqs, H, layout=lay)
        assert e.value.status == "RG_ERR_TOO_LONG"
    # the model still works
    assert_embeddings_close(model.embed_ids(seqs, H, layout=make_layout(2, 1, 16, [0, 0], [0, 5])),
                            ref.embed_batch(seqs), "after layout errors")


# ------------------------------------------------------------------ bad input, guards

def test_bad_input_then_model_still_works(tiny_models):
    model, ref = tiny_models("h32_gelu")
    H = ref.H
    seqs = random_seqs(np.random.default_rng(31), [6, 4])
    toks = np.concatenate([np.asarray(s, np.int32) for s in seqs])
    cases = [
        ("cu[0] != 0", toks, [1, 6, 10], 2),
        ("decreasing", toks, [0, 6, 4], 2),
        ("zero length", toks, [0, 6, 6], 2),
        ("negative length", toks, [0, -1, 10], 2),
        ("n_seq 0", toks, [0], 0),
        ("n_seq -1", toks, [0], -1),
        ("id == vocab", np.r_[toks[:-1], 30522], [0, 6, 10], 2),
        ("id < 0", np.r_[-1, toks[1:]], [0, 6, 10], 2),
    ]
    want = ref.embed_batch(seqs)
    for what, t, cu, n in cases:
        st, _, _ = embed_raw(model, t, cu, n, H)
        assert status_name(st) == "RG_ERR_INVALID_INPUT", what
        assert last_error(), what
        assert_embeddings_close(model.embed_ids(seqs, H), want, f"after {what}")
    st, _, _ = embed_raw(model, np.r_[toks[:-1], 30522], [0, 6, 10], 2, H)
    assert "30522" in last_error() and "token 9" in last_error()


def test_output_guard_rows_untouched(tiny_models):
    model, ref = tiny_models("h64_relu_norm")
    seqs = random_seqs(np.random.default_rng(32), [9, 1, 20])
    toks = np.concatenate([np.asarray(s, np.int32) for s in seqs])
    cu = np.r_[0, np.cumsum([len(s) for s in seqs])]
    st, out, guard = embed_raw(model, toks, cu, 3, ref.H, extra_rows=2)
    assert st == rc.RG_OK
    assert np.isfinite(out).all(), "every output value written"
    assert np.isnan(guard).all(), "nothing written past n_seq rows"
    assert_embeddings_close(out, ref.embed_batch(seqs), "guarded")
    for mode, lay in layouts([9, 1, 20]).items():
        st, out, guard = embed_raw(model, toks, cu, 3, ref.H, layout=lay, extra_rows=2)
        assert st == rc.RG_OK and np.isfinite(out).all() and np.isnan(guard).all(), mode


def test_memory_report(tiny_models):
    model, _ = tiny_models("h32_gelu")
    used, total = model.memory()
    assert 0 < used <= total


def _arena_lower_bound(T, S, H, I, e):
    """Largest sum of simultaneously live activations over the ops of one layer (what any plan
    needs): lifetimes as documented in bert.c (op 0 embed .. 10 download)."""
    rnd = lambda b: (b + 255) // 256 * 256  # noqa: E731 - the plan's alignment
    sizes = {"hidden": (T * H * e, 0, 9), "qkv": (T * 3 * H * e, 1, 2), "ctx": (T * H * e, 2, 3),
             "attn_out": (T * H * e, 3, 4), "inter": (T * I * e, 5, 6),
             "ffn_out": (T * H * e, 6, 7), "gathered": (T * H * e, 8, 9),
             "pooled": (S * H * 4, 9, 10)}
    return max(sum(rnd(b) for b, f, l in sizes.values() if f <= op <= l) for op in range(11))


def test_arena_plan_bytes(tiny_models, minilm):
    """The activation arena planned with TurboTransformers' Algorithm 1 (rg_mem_plan) over the
    lifetimes of one layer: never below the peak of simultaneously live tensors, exactly that peak
    for BERT's shapes (intermediate = 4H: hidden + FFN intermediate + FFN output = 6H per token),
    and well under one buffer per tensor."""
    e = 4 if DEVICE == "cpu" else {"fp32": 4, "fp16": 2, "bf16": 2}[DTYPE]  # bf16 CPU: f32 act.
    cases = [(tiny_models("h32_gelu"), False), (minilm, True)]
    for (model, ref), exact in cases:
        H, I = ref.H, ref.cfg["intermediate_size"]
        for T, S in ((1, 1), (7, 3), (1000, 10), (16384, 16384)):
            planned, naive = model.arena_bytes(T, S)
            lb = _arena_lower_bound(T, S, H, I, e)
            assert lb <= planned <= (lb if exact else 1.25 * lb), (H, T, S, planned, lb)
            assert planned < naive
        with pytest.raises(rc.RaggedError):
            model.arena_bytes(0, 1)
        with pytest.raises(rc.RaggedError):
            model.arena_bytes(16385, 1)


@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs exist only on the CUDA backend")
def test_graph_replay_matches_eager_and_reference(tiny_dirs, monkeypatch):
    """A bucket's first two batches run eagerly, the second is then captured (a bucket seen once
    is not worth a capture); later batches of the same bucket replay the graph with new ids,
    lengths and sequence counts written into its buffers. A replay of the same batch must equal
    its eager run bitwise (same kernels, same GEMM plans); other
    batches of the bucket must match a model without graphs (its own autotuned GEMM plans: equal to
    the dtype's tolerance) and the float64 reference."""
    name = "h64_relu_norm"
    ref = RefBert(tiny_dirs[name])
    graphed = load(tiny_dirs[name])
    monkeypatch.setenv("RAGGED_CUDA_GRAPHS", "0")
    eager = load(tiny_dirs[name])
    try:
        rng = np.random.default_rng(11)
        # batches of 49..64 tokens in 3..4 sequences share the bucket (T=64, S=4, L=64); [100, 7]
        # is another bucket; then back to the first
        shapes = [[20, 20, 10, 4], [30, 20, 9], [1, 50, 3, 10], [100, 7], [25, 25, 12]]
        first = {}
        for lens in shapes:
            seqs = random_seqs(rng, lens)
            a = graphed.embed_ids(seqs, ref.H)
            again = graphed.embed_ids(seqs, ref.H)
            third = graphed.embed_ids(seqs, ref.H)  # a replay, whichever call captured
            assert np.array_equal(a, again) and np.array_equal(a, third), \
                f"graph replay differs from the eager run, lens {lens}"
            first[tuple(lens)] = a
            assert_embeddings_close(a, eager.embed_ids(seqs, ref.H), f"graphed vs eager {lens}",
                                    fp32_tol=1e-5)
            assert_embeddings_close(a, ref.embed_batch(seqs), f"graphed lens={lens}")
    finally:
        graphed.close()
        eager.close()


def test_graph_warmup_covers_served_batches(tiny_dirs, monkeypatch):
    """rg_model_graph_warmup captures, before serving, the graph of every bucket a server's batch
    can fall in (model/bucket.h's envelope: here up to 64 sequences, 2048 tokens): afterwards
    batches as the token scheduler forms them from 2-100-token requests replay a warm graph each
    -- no capture, no eager run, no GEMM plan autotuned while serving -- and still equal a model
    without graphs and the float64 reference (the padding sequences the envelope adds are empty).
    A batch outside the envelope (more sequences than tokens / 8) still runs, eagerly at first.
    On the CPU there are no graphs: the warm-up captures nothing and changes no answer."""
    name = "h64_relu_norm"
    ref = RefBert(tiny_dirs[name])
    warm = load(tiny_dirs[name], max_batch_tokens=2048)
    monkeypatch.setenv("RAGGED_CUDA_GRAPHS", "0")
    eager = load(tiny_dirs[name], max_batch_tokens=2048)
    try:
        n = warm.graph_warmup(64, 512)  # capped at the model's 128 positions
        st = warm.stats()
        if DEVICE == "cuda":
            # 44 token buckets up to 2048; lengths 64 and 128 where a batch reaches them
            assert n > 44 and n == st["graph_captures"] == st["graphs_pinned"], (n, st)
            assert st["graph_eager"] == 0 and st["gemm_plans"] > 0, st
        else:
            assert n == 0 and all(v == 0 for v in st.values()), (n, st)
        rng = np.random.default_rng(21)
        batches = 0
        for k in list(range(1, 65, 3)) + [64, 40, 1, 2]:
            lens = rng.integers(2, 101, size=k)
            lens = lens[np.cumsum(lens) <= 2048].tolist()
            seqs = random_seqs(rng, lens)
            a = warm.embed_ids(seqs, ref.H)
            batches += 1
            assert_embeddings_close(a, eager.embed_ids(seqs, ref.H), f"warm vs eager {lens}",
                                    fp32_tol=1e-5)
            assert_embeddings_close(a, ref.embed_batch(seqs), f"warm lens={lens}")
        after = warm.stats()
        if DEVICE == "cuda":
            assert after["graph_captures"] == n and after["graph_eager"] == 0, after
            assert after["graph_replays"] == batches, after
            assert after["gemm_plans"] == st["gemm_plans"], (st, after)
        # outside the envelope: 40 one-token sequences in a 48-token bucket
        seqs = random_seqs(rng, [1] * 40)
        assert_embeddings_close(warm.embed_ids(seqs, ref.H), ref.embed_batch(seqs), "40 x 1")
        if DEVICE == "cuda":
            assert warm.stats()["graph_eager"] == 1
        with pytest.raises(rc.RaggedError):
            warm.graph_warmup(0, 128)
    finally:
        warm.close()
        eager.close()


# ------------------------------------------------------------------ load-time validation

def _copy(src, dst):
    shutil.copytree(src, dst)
    return str(dst)


def _edit_config(d, **keys):
    """Set keys in d/config.json; returns the new config."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(keys)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    return cfg


def _rewrite_weights(d, fn):
    from safetensors.numpy import load_file, save_file
    p = os.path.join(d, "model.safetensors")
    w = fn(load_file(p))
    save_file(w, p)


def _load_err(d):
    with pytest.raises(rc.RaggedError) as e:
        load(d)
    return e.value


def test_load_missing_tensor(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["h32_gelu"], tmp_path / "m")
    _rewrite_weights(d, lambda w: {k: v for k, v in w.items()
                                   if k != "encoder.layer.0.intermediate.dense.bias"})
    e = _load_err(d)
    assert e.status == "RG_ERR_FORMAT"
    assert "encoder.layer.0.intermediate.dense.bias" in e.message


def test_load_wrong_shape(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["h32_gelu"], tmp_path / "m")
    k = "encoder.layer.0.attention.self.key.weight"
    _rewrite_weights(d, lambda w: {**w, k: np.zeros((32, 31), np.float32)})
    e = _load_err(d)
    assert e.status == "RG_ERR_FORMAT"
    assert k in e.message and "32, 31" in e.message and "32, 32" in e.message


def test_load_vocab_smaller_than_tokenizer(tiny_dirs, tmp_path):
    d = _copy(tiny_dirs["h32_gelu"], tmp_path / "m")
    _edit_config(d, vocab_size=1000)
    k = "embeddings.word_embeddings.weight"
    _rewrite_weights(d, lambda w: {**w, k: w[k][:1000].copy()})
    e = _load_err(d)
    assert e.status == "RG_ERR_FORMAT" and "1000" in e.message and "30522" in e.message


def test_load_missing_dir(tmp_path):
    e = _load_err(str(tmp_path / "nope"))
    assert e.status == "RG_ERR_IO"


def test_load_bad_max_batch_tokens(tiny_dirs):
    with pytest.raises(rc.RaggedError) as e:
        load(tiny_dirs["h32_gelu"], max_batch_tokens=0)
    assert e.value.status == "RG_ERR_INVALID_INPUT"


@pytest.mark.skipif(DEVICE != "cpu", reason="CPU-only refusal")
def test_cpu_refuses_low_precision(tiny_dirs):
    with pytest.raises(rc.RaggedError) as e:
        rc.Model(tiny_dirs["h32_gelu"], device="cpu", dtype="fp16")
    assert e.value.status == "RG_ERR_UNSUPPORTED"


# ------------------------------------------------------------------ DeBERTa-v2

def test_deberta_bucket_reference():
    """The reference's make_log_bucket_position twin (float64 NumPy) equals transformers' (torch
    float32 arithmetic) on every distance up to 3000, for v3's sizes and the tiny models'."""
    from ref_bert import deberta_log_bucket
    assert deberta_log_bucket(np.array([0, 3, -3, 4, -4, 5, 63, -63]), 8, 64).tolist() == \
        [0, 3, -3, 4, -4, 5, 7, -7]
    try:
        import torch
        from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position
    except ImportError:
        return
    rel = np.arange(-3000, 3001)
    for b, mp in [(256, 512), (8, 64), (16, 128), (256, 1024), (6, 40)]:
        hf = make_log_bucket_position(torch.tensor(rel), b, mp).long().numpy()
        assert np.array_equal(deberta_log_bucket(rel, b, mp), hf), (b, mp)


@pytest.mark.parametrize("name", ["deberta", "deberta_v2abs"])
def test_deberta_reference_matches_transformers(tiny_dirs, name):
    """ref_bert's DeBERTa equals transformers' DebertaV2Model in float64 (last hidden states,
    sequences alone, lengths up to the model's maximum so the buckets saturate); runs only where
    torch and transformers import."""
    try:
        import torch
        from transformers import DebertaV2Model
    except ImportError:
        pytest.skip("torch / transformers not installed")
    d = tiny_dirs[name]
    ref = RefBert(d)
    hf = DebertaV2Model.from_pretrained(d, torch_dtype=torch.float64).eval()
    rng = np.random.default_rng(5)
    worst = 0.0
    for n in (1, 2, 9, 33, ref.max_seq_len):
        ids = random_seqs(rng, [n])[0]
        tt = [0] * (n // 2) + [1] * (n - n // 2) if ref.cfg.get("type_vocab_size", 0) > 1 else None
        with torch.no_grad():
            kw = {"token_type_ids": torch.tensor([tt])} if tt else {}
            want = hf(torch.tensor([ids]), **kw).last_hidden_state[0].numpy()
        got = ref.encode_packed([ids], [tt] if tt else None)[0]
        worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
    assert worst < 1e-12, worst


@pytest.mark.parametrize("name", ["deberta", "deberta_v2abs"])
def test_deberta_c2p_and_p2c_matter(tiny_models, tiny_dirs, name):
    """Each disentangled term reaches the scores: leaving c2p or p2c out of the reference moves
    every multi-token embedding by far more than the tolerance (a one-token sequence keeps its
    row: it attends to itself only); ragged follows the full reference, packed and concat."""
    model, ref = tiny_models(name)
    assert info(model).model_type == b"deberta-v2"
    rng = np.random.default_rng(47)
    seqs = random_seqs(rng, [9, 1, 30, ref.max_seq_len, 3])
    want = ref.embed_batch(seqs)
    assert_embeddings_close(model.embed_ids(seqs, ref.H), want, f"{name} packed")
    short = [s for s in seqs if len(s) <= 32]
    concat = layouts([len(s) for s in short])["concat"]
    assert_embeddings_close(model.embed_ids(short, ref.H, layout=concat), ref.embed_batch(short),
                            f"{name} concat")
    for term in ("c2p", "p2c"):
        ref.disable = {term}
        try:
            err = row_rel_err(ref.embed_batch(seqs), want)
        finally:
            ref.disable = set()
        assert err[1] < 1e-12 and np.delete(err, 1).min() > 1e-3, (term, err)


def test_deberta_refusals(tiny_dirs, tmp_path):
    """What ragged does not compute is refused at load, by name."""
    cases = [({"pos_att_type": ["c2p", "p2p"]}, "RG_ERR_UNSUPPORTED", "p2p"),
             ({"pos_att_type": "c2p|p2p"}, "RG_ERR_UNSUPPORTED", "p2p"),
             ({"share_att_key": False}, "RG_ERR_UNSUPPORTED", "share_att_key"),
             ({"conv_kernel_size": 3}, "RG_ERR_UNSUPPORTED", "conv_kernel_size"),
             ({"embedding_size": 32}, "RG_ERR_UNSUPPORTED", "embedding_size"),
             ({"attention_head_size": 8}, "RG_ERR_UNSUPPORTED", "attention_head_size"),
             ({"norm_rel_ebd": "batch_norm"}, "RG_ERR_UNSUPPORTED", "norm_rel_ebd"),
             ({"architectures": ["DebertaV2ForSequenceClassification"]}, "RG_ERR_FORMAT",
              "pooler.dense.weight"),  # its head's weights are missing from a base model
             ({"architectures": ["DebertaV2ForSequenceClassification"],
               "pooler_hidden_act": "relu"}, "RG_ERR_UNSUPPORTED", "pooler_hidden_act")]
    for i, (edit, status, word) in enumerate(cases):
        d = _copy(tiny_dirs["deberta"], tmp_path / f"c{i}")
        _edit_config(d, **edit)
        e = _load_err(d)
        assert e.status == status and word in e.message, (edit, e.status, e.message)
    d = _copy(tiny_dirs["deberta"], tmp_path / "norel")
    _rewrite_weights(d, lambda w: {k: v for k, v in w.items()
                                   if not k.endswith("rel_embeddings.weight")})
    e = _load_err(d)
    assert e.status == "RG_ERR_FORMAT" and "encoder.rel_embeddings.weight" in e.message
