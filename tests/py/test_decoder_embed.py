"""Embeddings from decoder models (issue 31, item 3): Qwen3-Embedding-, gte-Qwen2- and
e5-mistral-shaped checkpoints with random weights, a real byte-level BPE tokenizer whose
post-processor appends the EOS (Qwen3-Embedding's "$A <|endoftext|>", e5-mistral's
"<s> $A </s>") and sentence-transformers files (modules.json, 1_Pooling/config.json, Normalize,
config_sentence_transformers.json prompts), through the library (rg_model_run and
rg_model_embed_decoder) and `ragged serve` (/embed, /v1/embeddings), against an independent
float64 NumPy reference: ref_decoder.py's forward to the final norm, then the pooling
sentence-transformers' Pooling does (lasttoken: the state of the last token of each text, the
appended EOS included; mean_tokens: the mean over the text's tokens) and its Normalize
(x / max(||x||, 1e-12)); token ids from HF tokenizers on the prompt prepended to the text, as
SentenceTransformer.encode(prompt_name=...) does.

Metric (fp32 CPU): max |got - ref| <= 1e-4 on unit vectors (2e-4 relative on raw ones), and a
text alone equals itself inside a mixed batch to 1e-5."""
import ctypes
import json
import os
import shutil

import numpy as np
import pytest

import make_decoder
import ref_decoder
from ragged_ctypes import RG_MODEL_DECODER, RG_OK, Model, RaggedError, _err, lib
from server_util import Server

TOL = 1e-4
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Variable-length requests are served without padding by packing them together.",
    "A query and a passage are embedded into the same space and compared by cosine.",
    "Instruct: Given a web search query, retrieve relevant passages that answer the query",
    "Numbers like 12, 345 and 6789 appear in text too; so do emoji like 🙂 and ünïcödé.",
]
TEXTS = ["hello", "What is the capital of France?",
         "Variable-length requests are served without padding by packing them together, "
         "sentence after sentence, and every one of them keeps its own causal attention.",
         "a", "ünïcödé 🙂 12345", "The quick brown fox"]
TASK = "Instruct: Given a web search query, retrieve relevant passages that answer the query"
QWEN_QUERY = TASK + "\nQuery:"
GTE_QUERY = TASK + "\nQuery: "
E5_QUERY = "Instruct: Retrieve semantically similar text.\nQuery: "

# name -> (make_decoder.llama spec, post-processor, pooling, normalize, prompts, default, how
# the weights are stored: "model." prefix or not, with the LM head or not)
MODELS = {
    # Qwen3-Embedding-0.6B's shape, narrowed: explicit head_dim != hidden / heads, tied, q/k norms,
    # saved from Qwen3Model (no "model." prefix)
    "qwen3": (dict(H=64, heads=4, kv_heads=2, layers=2, inter=96, head_dim=32,
                   model_type="qwen3", tie=True, max_pos=512),
              "qwen", "lasttoken", True, {"query": QWEN_QUERY, "document": ""}, None, ""),
    # gte-Qwen2-instruct: q/k/v biases, untied but no lm_head.weight (Qwen2Model)
    "qwen2": (dict(H=48, heads=4, kv_heads=2, layers=2, inter=80, model_type="qwen2",
                   tie=False, stored_head=False, max_pos=512),
              "qwen", "lasttoken", True, {"query": GTE_QUERY}, None, ""),
    # e5-mistral-7b-instruct: MistralModel ("model." names here), a sliding window (4096 there)
    # smaller than max_position_embeddings: the served context is the window
    "mistral": (dict(H=32, heads=4, kv_heads=1, layers=2, inter=64, model_type="mistral",
                     tie=False, stored_head=False, max_pos=256, sliding_window=96),
                "mistral", "lasttoken", True, {"query": E5_QUERY, "passage": ""}, "query",
                "model."),
    # Qwen3-Embedding-0.6B's public widths (hidden 1024, 16 heads, 8 KV heads, head_dim 128,
    # intermediate 3072), one layer and the small vocabulary
    "qwen3_0.6b_width": (dict(H=1024, heads=16, kv_heads=8, layers=1, inter=3072,
                              head_dim=128, model_type="qwen3", tie=True, max_pos=512),
                         "qwen", "lasttoken", True, {"query": QWEN_QUERY, "document": ""}, None,
                         ""),
    # mean pooling without a Normalize module (sentence-transformers mean_tokens)
    "qwen2_mean": (dict(H=48, heads=4, kv_heads=2, layers=2, inter=80, model_type="qwen2",
                        tie=True, max_pos=512),
                   "qwen", "mean_tokens", False, {}, None, "model."),
}


def _tokenizer(out_dir, style):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    special = ["<|endoftext|>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=360, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    ids = {t: tok.token_to_id(t) for t in special}
    if style == "qwen":  # Qwen3-Embedding's tokenizer.json: the EOS appended
        tok.post_processor = processors.TemplateProcessing(
            single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", ids["<|endoftext|>"])])
    else:  # e5-mistral: <s> text </s>
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", ids["<s>"]), ("</s>", ids["</s>"])])
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    return tok


def _st_files(d, pooling, normalize, prompts, default):
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        mods.append({"idx": 2, "name": "2", "path": "2_Normalize",
                     "type": "sentence_transformers.models.Normalize"})
        os.makedirs(os.path.join(d, "2_Normalize"), exist_ok=True)
    with open(os.path.join(d, "modules.json"), "w") as f:
        json.dump(mods, f)
    os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
    modes = {k: False for k in ("cls_token", "mean_tokens", "max_tokens",
                                "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")}
    modes[pooling] = True
    with open(os.path.join(d, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 0, **{"pooling_mode_" + k: v
                                                      for k, v in modes.items()},
                   "include_prompt": True}, f)
    with open(os.path.join(d, "config_sentence_transformers.json"), "w") as f:
        json.dump({"prompts": prompts, "default_prompt_name": default,
                   "similarity_fn_name": "cosine"}, f)


def _make(root, name):
    from safetensors.numpy import save_file
    spec, style, pooling, normalize, prompts, default, prefix = MODELS[name]
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    tok = _tokenizer(d, style)
    rng = np.random.default_rng(len(name))
    cfg, w, stored = make_decoder.llama(rng, vocab=tok.get_vocab_size(), **spec)
    stored = {(prefix + k[len("model."):] if k.startswith("model.") else k): v
              for k, v in stored.items()}
    cfg["eos_token_id"] = tok.token_to_id("<|endoftext|>" if style == "qwen" else "</s>")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    save_file(stored, os.path.join(d, "model.safetensors"))
    _st_files(d, pooling, normalize, prompts, default)
    return d, cfg, w, tok


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dec_embed"))
    return {n: _make(root, n) for n in MODELS}


def _ref(cfg, w, ids, pooling, normalize):
    h = ref_decoder.llama_forward(cfg, w, ids, hidden=True)
    v = h[-1] if pooling == "lasttoken" else h.mean(0)
    if normalize:
        v = v / max(np.linalg.norm(v), 1e-12)
    return v


def _close(got, ref, what, tol=TOL):
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(np.asarray(got, np.float64) - ref).max()) / scale
    assert err <= tol, f"{what}: max error {err:.3g} > {tol}"


@pytest.mark.parametrize("name", list(MODELS))
def test_library_matches_reference(models, name):
    """rg_model_run on a mixed batch (texts of 2..40 tokens and a one-token id sequence) equals
    the reference of each text; each text alone equals itself inside the batch."""
    d, cfg, w, tok = models[name]
    _, _, pooling, normalize, _, _, _ = MODELS[name]
    m = Model(d, max_batch_tokens=512)
    try:
        i = m.info()
        assert i.kind == RG_MODEL_DECODER
        assert i.output_dim == cfg["hidden_size"]
        assert i.normalize == normalize
        lib().rg_model_embeds.argtypes = [ctypes.c_void_p]
        lib().rg_model_embeds.restype = ctypes.c_bool
        assert lib().rg_model_embeds(m._h)
        seqs = [tok.encode(t).ids for t in TEXTS] + [[7]]
        assert len({len(s) for s in seqs}) >= 5
        # the tokenizer's post-processor appends the EOS: ragged tokenizes as HF does
        for t, s in zip(TEXTS, seqs):
            assert list(m.tokenize(t)) == s, t
        eos = cfg["eos_token_id"]
        assert all(s[-1] == eos for s in seqs[:-1])
        got = m.run(seqs)
        for k, s in enumerate(seqs):
            _close(got[k], _ref(cfg, w, s, pooling, normalize), f"{name} seq {k}")
            alone = m.run([s])[0]
            assert np.abs(alone - got[k]).max() <= 1e-5, (name, k)
        if normalize:
            assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    finally:
        m.close()


def _embed_decoder(m, seqs, pooling, normalize):
    l = lib()
    l.rg_model_embed_decoder.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                         ctypes.c_int, ctypes.c_int, ctypes.c_bool,
                                         ctypes.c_void_p]
    tokens = np.ascontiguousarray(np.concatenate([np.asarray(s, np.int32) for s in seqs]),
                                  np.int32)
    cu = np.zeros(len(seqs) + 1, np.int32)
    cu[1:] = np.cumsum([len(s) for s in seqs])
    out = np.full((len(seqs), m.info().hidden_size), np.nan, np.float32)
    st = l.rg_model_embed_decoder(m._h, tokens.ctypes.data, cu.ctypes.data, len(seqs), pooling,
                                  normalize, out.ctypes.data)
    if st != RG_OK:
        raise _err(st)
    return out


def test_embed_decoder_poolings(models):
    """rg_model_embed_decoder with each pooling, normalized or not, on the Qwen3 model; a batch
    of 70 sequences (more than one 64-row pooling chunk); bad input refused by name."""
    d, cfg, w, tok = models["qwen3"]
    m = Model(d, max_batch_tokens=4096)
    try:
        seqs = [tok.encode(TEXTS[k % len(TEXTS)] + " " * (k % 3)).ids for k in range(70)]
        ref_h = [ref_decoder.llama_forward(cfg, w, s, hidden=True) for s in seqs[:6]]
        for pool, fn in ((3, lambda h: h[-1]), (0, lambda h: h.mean(0)),
                         (1, lambda h: h[0]), (2, lambda h: h.max(0))):
            for norm in (False, True):
                got = _embed_decoder(m, seqs, pool, norm)
                for k in range(6):
                    v = fn(ref_h[k])
                    if norm:
                        v = v / np.linalg.norm(v)
                    _close(got[k], v, f"pooling {pool} normalize {norm} seq {k}")
                # sequence k and k + 6 * j are the same text: one answer wherever it sits
                assert np.abs(got[66] - got[0]).max() <= 1e-5
        with pytest.raises(RaggedError) as e:
            _embed_decoder(m, [[0, 1], [cfg["vocab_size"]]], 3, True)
        assert e.value.status == "RG_ERR_INVALID_INPUT" and "vocabulary" in e.value.message
        with pytest.raises(RaggedError) as e:
            _embed_decoder(m, [[1] * 513], 3, True)
        assert e.value.status == "RG_ERR_TOO_LONG"
        with pytest.raises(RaggedError) as e:
            _embed_decoder(m, [[1, 2]], 9, True)
        assert e.value.status == "RG_ERR_INVALID_INPUT"
        # the model still answers after the errors
        _close(_embed_decoder(m, [seqs[0]], 3, True)[0],
               ref_h[0][-1] / np.linalg.norm(ref_h[0][-1]), "after errors")
    finally:
        m.close()


def test_mistral_window_is_the_context(models):
    """e5-mistral's sliding_window (here 96 < max_position_embeddings 256) masks nothing within
    it: the served context is the window, and a 96-token text matches the full-causal reference."""
    d, cfg, w, tok = models["mistral"]
    m = Model(d, max_batch_tokens=512)
    try:
        assert m.info().max_seq_len == 96
        ids = [int(x) for x in np.random.default_rng(3).integers(3, cfg["vocab_size"], 96)]
        _close(m.run([ids])[0], _ref(cfg, w, ids, "lasttoken", True), "96 tokens")
        with pytest.raises(RaggedError) as e:
            m.run([ids + [5]])
        assert e.value.status == "RG_ERR_TOO_LONG"
    finally:
        m.close()


def test_no_lm_head_no_logits(models):
    """gte-Qwen2 / e5-mistral checkpoints saved from the base model have no lm_head.weight: they
    load and embed; a step that asks for logits is refused by name."""
    d, cfg, w, tok = models["qwen2"]
    m = Model(d, max_batch_tokens=64)
    try:
        m.kv_init(4, 8)
        with pytest.raises(RaggedError) as e:
            m.step([3, 4], [0, 1], [0, 2], [2], [[0]], [0, 1], [1])
        assert e.value.status == "RG_ERR_UNSUPPORTED" and "LM head" in e.value.message
    finally:
        m.close()


def test_encoder_refuses_lasttoken(tmp_path):
    """Last-token pooling is a decoder's: an encoder whose 1_Pooling says lasttoken is refused
    at load, by name."""
    import server_util
    src = server_util.tiny_model(str(tmp_path))
    d = str(tmp_path / "enc_last")
    shutil.copytree(src, d)
    _st_files(d, "lasttoken", True, {}, None)
    with pytest.raises(RaggedError) as e:
        Model(d)
    assert e.value.status == "RG_ERR_UNSUPPORTED" and "lasttoken" in e.value.message


@pytest.fixture(scope="module")
def qwen3_server(models):
    d = models["qwen3"][0]
    srv = Server(d, "--max-batch-tokens", "512")
    yield srv, models["qwen3"]
    srv.stop()


def test_serve_embed_and_prompts(qwen3_server):
    """/embed and /v1/embeddings on the Qwen3 embedding model equal the reference, with the
    prompt of prompt_name prepended to each text before tokenizing; normalize false gives the
    raw pooled vector; dimensions cuts and renormalizes; a bad prompt_name is a 400 naming the
    model's prompts; /info says embedding with last-token pooling; generation routes are 400."""
    srv, (d, cfg, w, tok) = qwen3_server
    texts = TEXTS[:4]
    st, got = srv.post_json("/embed", {"inputs": texts})
    assert st == 200, got
    for k, t in enumerate(texts):
        _close(got[k], _ref(cfg, w, tok.encode(t).ids, "lasttoken", True), f"/embed {k}")
    st, got = srv.post_json("/embed", {"inputs": texts, "prompt_name": "query"})
    assert st == 200, got
    for k, t in enumerate(texts):
        _close(got[k], _ref(cfg, w, tok.encode(QWEN_QUERY + t).ids, "lasttoken", True),
               f"/embed query {k}")
    st, got = srv.post_json("/embed", {"inputs": texts[1], "normalize": False})
    assert st == 200, got
    _close(got[0], _ref(cfg, w, tok.encode(texts[1]).ids, "lasttoken", False), "raw",
           tol=2e-4)
    st, got = srv.post_json("/v1/embeddings", {"input": texts, "dimensions": 16})
    assert st == 200, got
    for k, t in enumerate(texts):
        v = _ref(cfg, w, tok.encode(t).ids, "lasttoken", False)[:16]
        _close(got["data"][k]["embedding"], v / np.linalg.norm(v), f"/v1/embeddings {k}")
    assert got["usage"]["prompt_tokens"] == sum(len(tok.encode(t).ids) for t in texts)
    st, h, body = srv.post("/embed", {"inputs": "x", "prompt_name": "nope"})
    assert st == 400, body
    msg = body.decode()
    assert "nope" in msg and "query" in msg and "document" in msg, msg
    st, _, body = srv.request("GET", "/info")
    info = json.loads(body)
    assert info["model_type"] == {"embedding": {"pooling": "last_token"}}, info
    # /embed_all: every token's final-norm state, no pooling
    st, got = srv.post_json("/embed_all", {"inputs": texts[1]})
    assert st == 200, got
    ids = tok.encode(texts[1]).ids
    h = ref_decoder.llama_forward(cfg, w, ids, hidden=True)
    assert np.asarray(got).shape == (1, len(ids), cfg["hidden_size"])
    _close(np.asarray(got)[0], h, "/embed_all", tol=2e-4)
    st, _, body = srv.post("/v1/completions", {"prompt": "hello", "max_tokens": 2})
    assert st == 400, body
    assert b"embedding model" in body and b"/v1/embeddings" in body, body
    st, _, body = srv.post("/generate", {"inputs": "hello"})
    assert st == 400, body


def test_serve_default_prompt(models):
    """e5-mistral-shaped model with default_prompt_name "query": a request without prompt_name
    gets the query instruction prepended; prompt_name "passage" (empty) gets none."""
    d, cfg, w, tok = models["mistral"]
    srv = Server(d, "--max-batch-tokens", "512")
    try:
        texts = [TEXTS[0], TEXTS[1], TEXTS[3]]
        st, got = srv.post_json("/embed", {"inputs": texts})
        assert st == 200, got
        for k, t in enumerate(texts):
            _close(got[k], _ref(cfg, w, tok.encode(E5_QUERY + t).ids, "lasttoken", True),
                   f"default prompt {k}")
        st, got = srv.post_json("/embed", {"inputs": texts, "prompt_name": "passage"})
        assert st == 200, got
        for k, t in enumerate(texts):
            _close(got[k], _ref(cfg, w, tok.encode(t).ids, "lasttoken", True), f"passage {k}")
        # over the 96-token window: 422 without truncate; with it, cut as HF truncates (the
        # template's </s> kept last, so last-token pooling reads it)
        st, _, body = srv.post("/embed", {"inputs": TEXTS[2] * 2, "prompt_name": "passage"})
        assert st == 422, body
        st, got = srv.post_json("/embed", {"inputs": TEXTS[2] * 2, "prompt_name": "passage",
                                           "truncate": True})
        assert st == 200, got
        tok.enable_truncation(96)
        try:
            ids = tok.encode(TEXTS[2] * 2).ids
        finally:
            tok.no_truncation()
        assert len(ids) == 96 and ids[-1] == cfg["eos_token_id"]
        _close(got[0], _ref(cfg, w, ids, "lasttoken", True), "truncated")
    finally:
        srv.stop()


def test_cli_embed(models):
    """`ragged embed` on a decoder embedding model: one vector per line, the reference's."""
    import subprocess
    from ragged_ctypes import BIN_PATH
    d, cfg, w, tok = models["qwen2"]
    texts = [TEXTS[0], TEXTS[1]]
    r = subprocess.run([BIN_PATH, "embed", "--model", d, "--device", "cpu", "--no-progress"],
                       input="\n".join(texts) + "\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert len(rows) == 2
    for k, t in enumerate(texts):
        _close(rows[k], _ref(cfg, w, tok.encode(t).ids, "lasttoken", True), f"cli {k}")


def test_serve_refuses_row_schedulers(models):
    """A scheduler of padded or concatenated rows cannot run a decoder embedding model: refused
    at start with exit status 2, naming the scheduler."""
    import subprocess
    from ragged_ctypes import BIN_PATH
    r = subprocess.run([BIN_PATH, "serve", "--model", models["qwen3"][0], "--device", "cpu",
                        "--port", "0", "--scheduler", "concat"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "--scheduler concat" in r.stderr and "packed" in r.stderr, r.stderr


def test_serve_pooling_option_makes_a_decoder_embed(models, tmp_path):
    """TEI's --pooling last-token on a decoder without sentence-transformers files: an embedding
    model with that pooling (no Normalize module: the route's default normalize still applies,
    as TEI's); without the option the same directory is a generator."""
    src, cfg, w, tok = models["qwen2_mean"]
    d = str(tmp_path / "plain")
    os.makedirs(d)
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(os.path.join(src, f), d)
    srv = Server(d, "--pooling", "last-token")
    try:
        st, got = srv.post_json("/embed", {"inputs": TEXTS[:2]})
        assert st == 200, got
        for k, t in enumerate(TEXTS[:2]):
            _close(got[k], _ref(cfg, w, tok.encode(t).ids, "lasttoken", True), f"--pooling {k}")
    finally:
        srv.stop()
    m = Model(d, max_batch_tokens=64)
    try:
        lib().rg_model_embeds.argtypes = [ctypes.c_void_p]
        lib().rg_model_embeds.restype = ctypes.c_bool
        assert not lib().rg_model_embeds(m._h)
        assert m.info().output_dim == cfg["vocab_size"]
        with pytest.raises(RaggedError) as e:
            m.run([[1, 2]])
        assert e.value.status == "RG_ERR_UNSUPPORTED"
        # rg_model_embed_decoder still embeds any decoder, with the pooling asked for
        seq = tok.encode(TEXTS[1]).ids
        _close(_embed_decoder(m, [seq], 0, False)[0], _ref(cfg, w, seq, "mean_tokens", False),
               "any decoder, mean", tol=2e-4)
    finally:
        m.close()


def test_python_encode_with_prompts(models):
    """ragged.Model(DIR).encode on a decoder embedding model, with sentence-transformers'
    prompt precedence: prompt_name's text prepended, else prompt, else default_prompt_name; an
    unknown prompt_name is a ValueError naming the model's prompts."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    try:
        import ragged
    finally:
        sys.path.pop(0)
    d, cfg, w, tok = models["mistral"]  # default_prompt_name "query"
    with ragged.Model(d, device="cpu") as m:
        assert m.output_dim == cfg["hidden_size"] and m.normalizes
        assert m.prompts == {"query": E5_QUERY, "passage": ""}
        assert m.default_prompt_name == "query"
        t = TEXTS[1]
        _close(m.encode(t), _ref(cfg, w, tok.encode(E5_QUERY + t).ids, "lasttoken", True),
               "default prompt")
        _close(m.encode([t], prompt_name="passage")[0],
               _ref(cfg, w, tok.encode(t).ids, "lasttoken", True), "passage")
        _close(m.encode(t, prompt="Q: "), _ref(cfg, w, tok.encode("Q: " + t).ids, "lasttoken",
                                               True), "prompt")
        raw = m.encode(t, prompt_name="passage", normalize=False)
        _close(raw, _ref(cfg, w, tok.encode(t).ids, "lasttoken", False), "raw", tol=2e-4)
        with pytest.raises(ValueError) as e:
            m.encode(t, prompt_name="nope")
        assert "nope" in str(e.value) and "'query'" in str(e.value) and "'passage'" in str(e.value)


def test_run_types_and_layouts(models):
    """rg_model_run on a decoder embedding model: token types all 0 are what a decoder has (the
    same answer as none); a nonzero one, or a layout other than packed, is refused by name."""
    from ragged_ctypes import Layout
    d, cfg, w, tok = models["qwen3"]
    m = Model(d, max_batch_tokens=256)
    try:
        seqs = [tok.encode(TEXTS[0]).ids, tok.encode(TEXTS[1]).ids]
        base = m.run(seqs)
        same = m.run(seqs, types=[[0] * len(s) for s in seqs])
        assert np.array_equal(base, same)
        with pytest.raises(RaggedError) as e:
            m.run(seqs, types=[[0] * len(seqs[0]), [0] + [1] * (len(seqs[1]) - 1)])
        assert e.value.status == "RG_ERR_INVALID_INPUT" and "token type" in e.value.message
        rows = (ctypes.c_int32 * 2)(0, 1)
        offs = (ctypes.c_int32 * 2)(0, 0)
        lay = Layout(1, 2, 64, 0, rows, offs)  # RG_EXEC_PADDED
        with pytest.raises(RaggedError) as e:
            m.run(seqs, layout=lay)
        assert e.value.status == "RG_ERR_UNSUPPORTED" and "packed" in e.value.message
    finally:
        m.close()


def test_many_short_sequences_small_blocks(models):
    """40 one-token texts beside a 24-token one in a 64-token arena: the pass's blocks shrink
    (16 positions would not fit twice the arena) and every vector is still the reference's,
    and the same alone."""
    d, cfg, w, tok = models["qwen2"]
    m = Model(d, max_batch_tokens=64)
    try:
        rng = np.random.default_rng(9)
        seqs = [[int(rng.integers(3, cfg["vocab_size"]))] for _ in range(40)]
        seqs.insert(17, [int(x) for x in rng.integers(3, cfg["vocab_size"], 24)])
        got = m.run(seqs)
        for k in (0, 16, 17, 18, 40):
            _close(got[k], _ref(cfg, w, seqs[k], "lasttoken", True), f"seq {k}")
            assert np.abs(m.run([seqs[k]])[0] - got[k]).max() <= 1e-5
    finally:
        m.close()


def test_embedding_leaves_the_kv_cache(models):
    """Embedding between two generation steps of the same model (it has an LM head): the
    sequence's cached keys and values are untouched, its next logits the reference's."""
    d, cfg, w, tok = models["qwen2_mean"]
    m = Model(d, max_batch_tokens=512)
    try:
        m.kv_init(4, 8)
        ids = [int(x) for x in np.random.default_rng(4).integers(3, cfg["vocab_size"], 7)]
        ref = ref_decoder.forward(cfg, w, ids)
        bt = [[5, 2]]
        slots = [bt[0][p // 4] * 4 + p % 4 for p in range(7)]
        got = m.step(ids[:6], list(range(6)), [0, 6], [6], bt, slots[:6], [5])
        _close(got[0], ref[5], "prefill", tol=2e-4)
        m.run([tok.encode(t).ids for t in TEXTS])  # 6 sequences through the embedding pass
        got = m.step(ids[6:], [6], [0, 1], [7], bt, slots[6:], [0])
        _close(got[0], ref[6], "decode after embedding", tol=2e-4)
    finally:
        m.close()
