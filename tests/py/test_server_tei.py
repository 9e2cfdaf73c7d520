"""`ragged serve` as a drop-in for TEI and OpenAI (issue 18, items 6-9), against independent
references: HF `tokenizers` (ids), the float64 NumPy BERT of ref_bert.py with a NumPy
sentence-transformers Dense layer (tanh(W x + b)) read from the module's own safetensors, and
json.loads on every answer and log line.

  6. a TEI launch line (text-embeddings-router's flags, or only its environment) starts ragged
     unchanged, and each flag does what TEI's does (--pooling, --auto-truncate,
     --default-prompt-name, --served-model-name, --max-client-batch-size, --payload-limit,
     --json-output, --dense-path);
  7. POST / and /invocations go to /embed, /predict or /rerank by the model's kind; GET /ping;
  8. unknown arguments: 400 on /v1/* (OpenAI), ignored on TEI's routes (TEI); token-id inputs on
     /embed; a 2_Dense module run; the Python package's normalize=False equals the server's;
  9. /info's model_type object and numeric fields, GET /v1/models/{id}, --max-inputs 2048, te_*
     metrics in seconds."""
import json
import os
import sys

import numpy as np
import pytest

import ragged_ctypes as rc
from conftest import DEVICE, DTYPE, assert_embeddings_close
from server_util import Server, hf_tokenizer, tiny_model

PROMPTS = {"query": "query: ", "passage": "passage: "}
LONG = " ".join(f"w{i % 7} tok{i}" for i in range(120))  # > 128 tokens of the tiny model
DENSE = dict(H=32, heads=2, layers=1, inter=64, act="gelu", pooling="mean", normalize=True,
             dense=dict(out=24, act="torch.nn.modules.activation.Tanh"))


def l2n(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def write_dense(d, path, out, act, bias, seed):
    """Another Dense module directory (for --dense-path / DENSE_PATH)."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(d, path), exist_ok=True)
    with open(os.path.join(d, path, "config.json"), "w") as f:
        json.dump({"in_features": 32, "out_features": out, "bias": bias,
                   "activation_function": act}, f)
    w = {"linear.weight": rng.standard_normal((out, 32)).astype(np.float32) / 6}
    if bias:
        w["linear.bias"] = rng.standard_normal(out).astype(np.float32) / 10
    save_file(w, os.path.join(d, path, "model.safetensors"))


class DenseRef:
    """float64 reference of the Dense model: the encoder (ref_bert), the pooling, then
    act(W x + b) with the module's weights as sentence-transformers' Dense computes it."""

    def __init__(self, d, module="2_Dense", act=np.tanh, pooling=None):
        from ref_bert import RefBert
        from safetensors.numpy import load_file
        self.ref = RefBert(d)
        self.ref.normalize = False
        if pooling:
            self.ref.pooling = pooling
        w = load_file(os.path.join(d, module, "model.safetensors"))
        self.W = w["linear.weight"].astype(np.float64)
        self.b = w.get("linear.bias", np.zeros(self.W.shape[0])).astype(np.float64)
        self.act = act

    def raw(self, ids):
        return np.stack([self.act(self.W @ self.ref.embed(x) + self.b) for x in ids])


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory):
    import make_tiny
    d = make_tiny.make_tiny(str(tmp_path_factory.mktemp("tei") / "dense"), DENSE,
                            make_tiny.minilm_dir(), seed=7)
    write_dense(d, "2_Dense_16", 16, "torch.nn.modules.linear.Identity", False, seed=8)
    with open(os.path.join(d, "config_sentence_transformers.json"), "w") as f:
        json.dump({"prompts": PROMPTS, "default_prompt_name": None}, f)
    return d


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("tei_plain")), "h32_gelu")


@pytest.fixture(scope="module")
def srv(tiny_dir):
    """A server with ragged's defaults (no --max-inputs)."""
    s = Server(tiny_dir)
    yield s
    s.stop()


# ---- 6. TEI's command line and environment ------------------------------------------------------

def test_tei_launch_line(dense_dir):
    """text-embeddings-router's flags only (the device from RAGGED_DEVICE so the line stays
    TEI's): each one does what TEI's does."""
    hf = hf_tokenizer(dense_dir)
    ref = DenseRef(dense_dir, pooling="cls")
    s = Server(None, env={"RAGGED_DEVICE": "cpu"}, raw_args=[
        "--model-id", dense_dir, "--hostname", "127.0.0.1", "-p", "0",
        "--max-client-batch-size", "3", "--auto-truncate", "--pooling", "cls",
        "--served-model-name", "tei-emb", "--default-prompt-name", "query",
        "--payload-limit", "100000", "--json-output", "--dtype", "float32",
        "--max-batch-tokens", "4096", "--max-concurrent-requests", "64",
        "--tokenization-workers", "2", "--uds-path", "/tmp/unused", "--prometheus-port", "9000",
        "--revision", "abc123"])
    try:
        st, h, body = s.request("GET", "/info")
        assert st == 200
        info = json.loads(body)
        assert info["served_model_name"] == "tei-emb" and info["model_id"] == "dense"
        assert info["model_sha"] == "abc123"  # TEI reports its --revision
        assert info["max_client_batch_size"] == 3 and info["auto_truncate"] is True
        assert info["model_type"] == {"embedding": {"pooling": "cls"}}
        assert info["default_prompt_name"] == "query" and info["max_body_bytes"] == 100000
        assert info["model_dtype"] == "float32" and info["max_batch_tokens"] == 4096
        assert info["max_concurrent_requests"] == 64 and info["output_dim"] == 24
        # --max-client-batch-size: 4 inputs are too many
        st, h, body = s.post("/embed", {"inputs": ["a", "b", "c", "d"]})
        assert st == 413, body
        # --default-prompt-name: the text is "query: " + input (HF tokenizer's ids)
        st, toks = s.post_json("/tokenize", {"inputs": "hello world"})
        assert st == 200 and [t["id"] for t in toks[0]] == hf.encode("query: hello world").ids
        # --pooling cls, then the Dense module; normalize false: the raw vector
        texts = ["hello world", "a b c"]
        st, got = s.post_json("/embed", {"inputs": texts, "normalize": False})
        assert st == 200
        want = ref.raw([hf.encode("query: " + t).ids for t in texts])
        assert_embeddings_close(np.array(got, np.float32), want, "tei flags", dtype="fp32")
        # --auto-truncate: a long input is cut, unless the request says "truncate": false
        st, got = s.post_json("/embed", {"inputs": LONG, "normalize": False})
        assert st == 200
        ids = hf.encode("query: " + LONG).ids
        want = ref.raw([ids[:127] + [ids[-1]]])
        assert_embeddings_close(np.array(got, np.float32), want, "auto truncate", dtype="fp32")
        st, h, body = s.post("/embed", {"inputs": LONG, "truncate": False})
        assert st == 422, body
        # --payload-limit
        st, h, body = s.post("/embed", {"inputs": "x" * 100001})
        assert st == 413
        # --served-model-name: OpenAI's model object and 404
        st, h, body = s.request("GET", "/v1/models/tei-emb")
        assert st == 200 and json.loads(body) == {"id": "tei-emb", "object": "model",
                                                  "created": json.loads(body)["created"],
                                                  "owned_by": "ragged"}
        st, out = s.post_json("/v1/embeddings", {"input": "a"})
        assert st == 200 and out["model"] == "tei-emb"
    finally:
        s.stop()
    # --json-output: every log line is a JSON object, the start-up line on stdout too
    sj = s.start_json
    assert set(sj) == {"timestamp", "level", "message", "target"}, sj
    assert sj["level"] == "INFO" and sj["message"].startswith("ragged serving ")
    assert f":{s.port} (" in sj["message"]
    lines = [ln for ln in s.stderr().splitlines() if ln.strip()]
    assert len(lines) >= 3
    for ln in lines:
        o = json.loads(ln)
        assert set(o) == {"timestamp", "level", "message", "target"}, o
        assert o["level"] in ("INFO", "WARN", "ERROR") and o["timestamp"].endswith("Z")
    assert any("answered" in json.loads(ln)["message"] for ln in lines)


def test_tei_environment_only(dense_dir):
    """No argument at all: TEI's variables (MODEL_ID, HOSTNAME, PORT, MAX_CLIENT_BATCH_SIZE,
    AUTO_TRUNCATE, SERVED_MODEL_NAME, DENSE_PATH, DEFAULT_PROMPT) set everything."""
    hf = hf_tokenizer(dense_dir)
    ref = DenseRef(dense_dir, module="2_Dense_16", act=lambda x: x)
    s = Server(None, raw_args=[], env={
        "MODEL_ID": dense_dir, "HOSTNAME": "127.0.0.1", "PORT": "0", "RAGGED_DEVICE": "cpu",
        "MAX_CLIENT_BATCH_SIZE": "2", "AUTO_TRUNCATE": "true", "SERVED_MODEL_NAME": "env-emb",
        "DENSE_PATH": "2_Dense_16", "DEFAULT_PROMPT": "passage: "})
    try:
        st, h, body = s.request("GET", "/info")
        info = json.loads(body)
        assert (info["served_model_name"], info["max_client_batch_size"], info["auto_truncate"],
                info["output_dim"]) == ("env-emb", 2, True, 16)
        assert s.post("/embed", {"inputs": ["a", "b", "c"]})[0] == 413
        # the Dense module of DENSE_PATH (Identity, no bias), then the model's Normalize
        st, got = s.post_json("/embed", {"inputs": ["hello world", LONG]})
        assert st == 200
        ids = [hf.encode("passage: " + t).ids for t in ("hello world", LONG)]
        ids[1] = ids[1][:127] + [ids[1][-1]]
        assert_embeddings_close(np.array(got, np.float32), l2n(ref.raw(ids)), "DENSE_PATH",
                                dtype="fp32")
    finally:
        s.stop()


def test_tei_start_errors(dense_dir, tmp_path):
    """What TEI refuses at start, ragged refuses too (exit 2, the option named)."""
    import subprocess
    from server_util import server_env
    for args, needle in ((["--pooling", "splade"], "--pooling"),
                         (["--default-prompt-name", "nope"], "nope"),
                         (["--default-prompt", "q: ", "--default-prompt-name", "query"],
                          "--default-prompt")):
        p = subprocess.run([rc.BIN_PATH, "serve", "--model-id", dense_dir, "--device", "cpu",
                            "-p", "0", *args], capture_output=True, env=server_env(),
                           timeout=120)
        assert p.returncode == 2, (args, p.stderr)
        assert needle in p.stderr.decode(), p.stderr


def test_max_concurrent_requests(tiny_dir):
    """TEI's --max-concurrent-requests: past that many requests queued or running, 429 with
    Retry-After; the ones admitted are answered."""
    import threading
    s = Server(tiny_dir, "--max-concurrent-requests", 2, "--batch-delay-ms", 400,
               "--cache-entries", 0, "--scheduler", "nobatch")
    try:
        out = {}

        def go(k):
            out[k] = s.post("/embed", {"inputs": f"text number {k}"})
        ts = [threading.Thread(target=go, args=(k,)) for k in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        codes = sorted(st for st, h, body in out.values())
        assert codes.count(200) >= 2 and codes.count(429) >= 1, codes
        assert set(codes) <= {200, 429}, codes
        assert all("retry-after" in h for st, h, body in out.values() if st == 429)
        assert s.post("/embed", {"inputs": "afterwards"})[0] == 200
    finally:
        s.stop()


# ---- 7. routes by kind, /ping -------------------------------------------------------------------

def test_post_root_and_invocations_embed(srv):
    st, want = srv.post_json("/embed", {"inputs": ["hello", "world"]})
    assert st == 200
    for path in ("/", "/invocations"):
        st, got = srv.post_json(path, {"inputs": ["hello", "world"]})
        assert st == 200 and got == want, path
    st, h, body = srv.request("GET", "/ping")
    assert st == 200 and json.loads(body) == {"status": "ok"}


@pytest.fixture(scope="module")
def cls_dirs(tmp_path_factory):
    import make_tiny
    root = str(tmp_path_factory.mktemp("tei_cls"))
    return make_tiny.build_all(root, make_tiny.minilm_dir(), ["bert_rerank", "roberta_cls3"])


def test_routes_by_kind_classifier_and_reranker(cls_dirs):
    """TEI: POST / and /invocations predict on a classifier and rerank on a reranker; /info's
    model_type says which, with id2label and label2id."""
    with open(os.path.join(cls_dirs["roberta_cls3"], "config.json")) as f:
        id2label = json.load(f)["id2label"]
    s = Server(cls_dirs["roberta_cls3"])
    try:
        body = {"inputs": [["the service was quick", "and right"], ["bad"]], "raw_scores": True}
        st, want = s.post_json("/predict", body)
        assert st == 200
        for path in ("/", "/invocations"):
            st, got = s.post_json(path, body)
            assert st == 200 and got == want, path
        st, h, raw = s.request("GET", "/info")
        mt = json.loads(raw)["model_type"]
        assert mt == {"classifier": {"id2label": id2label,
                                     "label2id": {v: int(k) for k, v in id2label.items()}}}
    finally:
        s.stop()
    s = Server(cls_dirs["bert_rerank"])
    try:
        body = {"query": "what is ragged?", "texts": ["a runtime", "bananas", "padding"]}
        st, want = s.post_json("/rerank", body)
        assert st == 200
        for path in ("/", "/invocations"):
            st, got = s.post_json(path, body)
            assert st == 200 and got == want, path
        st, h, raw = s.request("GET", "/info")
        assert json.loads(raw)["model_type"] == {"reranker": {"id2label": {"0": "LABEL_0"},
                                                              "label2id": {"LABEL_0": 0}}}
    finally:
        s.stop()


# ---- 8. parameters ------------------------------------------------------------------------------

def test_unknown_arguments(srv):
    """OpenAI answers an unknown argument with 400 naming it; TEI ignores unknown fields."""
    st, h, body = srv.post("/v1/embeddings", {"input": "a", "normalise": False})
    assert st == 400
    err = json.loads(body)["error"]
    assert err["param"] == "normalise" and "normalise" in err["message"]
    assert err["type"] == "invalid_request_error"
    st, out = srv.post_json("/v1/embeddings", {"input": "a", "user": "u",
                                               "encoding_format": "float", "dimensions": 8})
    assert st == 200 and len(out["data"][0]["embedding"]) == 8
    st, want = srv.post_json("/embed", {"inputs": "a"})
    st2, got = srv.post_json("/embed", {"inputs": "a", "normalise": False})
    assert st == st2 == 200 and got == want
    assert abs(np.linalg.norm(got[0]) - 1) < 1e-5  # the typo did not turn normalization off


def test_embed_token_ids(srv, tiny_dir):
    """/embed and /embed_all take token ids as TEI does (used as given): the same vectors as the
    texts the HF tokenizer turned into those ids."""
    hf = hf_tokenizer(tiny_dir)
    texts = ["hello world", "ragged packs requests"]
    ids = [hf.encode(t).ids for t in texts]
    st, want = srv.post_json("/embed", {"inputs": texts})
    assert st == 200
    st, got = srv.post_json("/embed", {"inputs": ids})
    assert st == 200
    np.testing.assert_allclose(got, want, atol=1e-6)
    st, one = srv.post_json("/embed", {"inputs": ids[0]})
    assert st == 200 and len(one) == 1
    np.testing.assert_allclose(one[0], want[0], atol=1e-6)
    st, h, body = srv.post("/embed", {"inputs": [[101, 99999999]]})
    assert st == 400 and b"out of range" in body
    # /embed_all too (TEI's EmbedAllRequest takes the same inputs)
    st, want = srv.post_json("/embed_all", {"inputs": texts})
    assert st == 200
    st, got = srv.post_json("/embed_all", {"inputs": ids})
    assert st == 200 and [len(x) for x in got] == [len(x) for x in ids]
    np.testing.assert_allclose(np.concatenate(got), np.concatenate(want), atol=1e-6)


def test_dense_module_and_python_normalize_false(dense_dir):
    """A 2_Dense module runs after the pooling (float64 NumPy reference), the model's Normalize
    after it; the Python package's encode(normalize=False) is the server's "normalize": false."""
    hf = hf_tokenizer(dense_dir)
    ref = DenseRef(dense_dir)
    texts = ["hello world", "a", "The quick brown fox jumps over the lazy dog."]
    want = ref.raw([hf.encode(t).ids for t in texts])
    s = Server(dense_dir)
    try:
        st, raw = s.post_json("/embed", {"inputs": texts, "normalize": False})
        assert st == 200
        st, unit = s.post_json("/embed", {"inputs": texts})
        assert st == 200
        st, h, body = s.request("GET", "/info")
        assert json.loads(body)["output_dim"] == 24
    finally:
        s.stop()
    raw, unit = np.array(raw, np.float32), np.array(unit, np.float32)
    assert_embeddings_close(raw, want, "dense raw", dtype="fp32")
    assert_embeddings_close(unit, l2n(want), "dense normalized", dtype="fp32")
    assert np.all(np.abs(np.linalg.norm(want, axis=1) - 1) > 1e-2)  # really not unit
    sys.path.insert(0, os.path.join(rc.ROOT, "python"))
    os.environ.setdefault("RAGGED_LIB", rc.PUBLIC_LIB_PATH)
    try:
        import ragged
        with ragged.Model(dense_dir, device="cpu", dtype="fp32") as m:
            assert m.output_dim == 24 and m.normalizes
            np.testing.assert_allclose(m.encode(texts, normalize=False, batch_size=2), raw,
                                       atol=1e-6)
            np.testing.assert_allclose(m.encode(texts), unit, atol=1e-6)
    finally:
        sys.path.remove(os.path.join(rc.ROOT, "python"))


def test_dense_library_and_errors(dense_dir, tmp_path):
    """rg_model_run on the Dense model, on the suite's device and dtype (the CUDA paths on a
    GPU): the float64 reference, alone and in a mixed batch; a broken Dense module is refused at
    load, naming the file and what is wrong."""
    import shutil
    hf = hf_tokenizer(dense_dir)
    ref = DenseRef(dense_dir)
    ids = [hf.encode(t).ids for t in ("hello world", "a", LONG[:200], "ragged " * 20)]
    m = rc.Model(dense_dir, device=DEVICE, dtype=DTYPE)
    try:
        assert m.info().output_dim == 24 and m.info().hidden_size == 32
        got = m.run(ids)
        assert_embeddings_close(got, l2n(ref.raw(ids)), "dense run")
        alone = np.concatenate([m.run([x]) for x in ids])
        assert_embeddings_close(alone, got.astype(np.float64), "dense alone vs batched")
    finally:
        m.close()
    cases = [
        ("2_Dense/model.safetensors", None, "RG_ERR_IO", "model.safetensors"),
        ("2_Dense/config.json", {"in_features": 31, "out_features": 24}, "RG_ERR_FORMAT",
         "in_features 31"),
        ("2_Dense/config.json", {"in_features": 32, "out_features": 24,
                                 "activation_function": "torch.nn.modules.activation.Softmax"},
         "RG_ERR_UNSUPPORTED", "Softmax"),
        ("2_Dense/config.json", {"in_features": 32, "out_features": 25}, "RG_ERR_FORMAT",
         "linear.weight"),
    ]
    for k, (path, content, status, needle) in enumerate(cases):
        d = str(tmp_path / f"bad{k}")
        shutil.copytree(dense_dir, d)
        if content is None:
            os.remove(os.path.join(d, path))
        else:
            with open(os.path.join(d, path), "w") as f:
                json.dump(content, f)
        with pytest.raises(rc.RaggedError) as e:
            rc.Model(d, device="cpu")
        assert e.value.status == status and needle in e.value.message, (path, e.value)


# ---- 9. shapes and defaults ---------------------------------------------------------------------

def test_info_shape_and_defaults(srv):
    st, h, body = srv.request("GET", "/info")
    info = json.loads(body)
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    for k in ("max_concurrent_requests", "max_input_length", "max_batch_tokens",
              "max_batch_requests", "max_client_batch_size", "tokenization_workers"):
        assert isinstance(info[k], int) and info[k] > 0, k
    # model_sha: TEI's --revision, or a hub snapshot's; neither here
    assert [k for k, v in info.items() if v is None] == ["model_sha", "default_prompt_name"]
    # OpenAI allows 2,048 inputs; LangChain sends 1,000
    assert info["max_inputs"] == info["max_client_batch_size"] == 2048
    st, out = srv.post_json("/v1/embeddings", {"input": [f"t{i}" for i in range(2048)]})
    assert st == 200 and len(out["data"]) == 2048
    st, h, body = srv.post("/v1/embeddings", {"input": [f"t{i}" for i in range(2049)]})
    assert st == 413
    # GET /v1/models/{id}: the listed id answers, another is OpenAI's 404
    st, h, body = srv.request("GET", "/v1/models")
    mid = json.loads(body)["data"][0]["id"]
    st, h, body = srv.request("GET", f"/v1/models/{mid}")
    assert st == 200 and json.loads(body)["id"] == mid and json.loads(body)["object"] == "model"
    st, h, body = srv.request("GET", "/v1/models/gpt-4")
    assert st == 404
    err = json.loads(body)["error"]
    assert err["code"] == "model_not_found" and "gpt-4" in err["message"]


def test_tei_metric_names(srv):
    """TEI's names beside ragged's: counts equal, durations in seconds."""
    for _ in range(3):
        assert srv.post("/embed", {"inputs": "x"})[0] == 200
    assert srv.post("/embed", {"inputs": ""})[0] == 400
    m = srv.metrics()
    ok = sum(v for k, v in m.items() if k.startswith('ragged_requests_total{route="embed",code="2'))
    ok += sum(v for k, v in m.items()
              if k.startswith('ragged_requests_total{route="v1_embeddings",code="2'))
    assert m["te_embed_success"] == ok and m["te_embed_failure"] >= 1
    assert m["te_request_count"] >= m["te_embed_count"] == m["te_embed_success"] + \
        m["te_embed_failure"]
    assert m["te_request_duration_count"] == m['ragged_total_time_ms_count{class="2xx"}']
    assert m["te_request_duration_sum"] == pytest.approx(
        m['ragged_total_time_ms_sum{class="2xx"}'] / 1000, rel=1e-3, abs=1e-6)
    assert m["te_batch_next_size_count"] == m["ragged_batch_size_count"] > 0
    assert "te_request_queue_duration_sum" in m and "te_request_inference_duration_sum" in m
    assert "te_queue_size" in m


def test_tei_tokenization_duration(srv):
    """TEI's te_request_tokenization_duration: one observation per request whose inputs were
    tokenized (embed and /tokenize; not a request refused before), a cumulative histogram in
    seconds."""
    def hist(m):
        b = sorted((float(k.split('le="')[1].rstrip('"}')), v) for k, v in m.items()
                   if k.startswith("te_request_tokenization_duration_bucket"))
        return b, m["te_request_tokenization_duration_count"]

    b0, n0 = hist(srv.metrics())
    assert srv.post("/embed", {"inputs": ["a b", "c"]})[0] == 200
    assert srv.post("/tokenize", {"inputs": "hello"})[0] == 200
    assert srv.post("/embed", {"inputs": 5})[0] in (400, 422)  # refused by the parser
    b1, n1 = hist(srv.metrics())
    assert n1 - n0 == 2
    assert b1[-1][0] == float("inf") and b1[-1][1] == n1
    assert all(x[1] <= y[1] for x, y in zip(b1, b1[1:]))  # cumulative
    assert [x[0] for x in b1] == [x[0] for x in b0] and b1[0][0] <= 0.001  # seconds


def test_root_sentence_similarity_huggingface_hub(srv):
    """huggingface_hub's InferenceClient(URL).sentence_similarity, unmodified: it posts
    {"inputs": {"source_sentence", "sentences"}} to the root URL, which TEI answers on an
    embedding model with the cosine similarities; checked against numpy's cosine of /embed's
    vectors. POST / with string inputs stays /embed; a bad similarity body is a 4xx and the
    server goes on."""
    hub = pytest.importorskip("huggingface_hub")
    src, others = "a cat sat on the mat", ["a dog sat on a rug", "stock prices fell", "cat"]
    c = hub.InferenceClient(f"http://{srv.host}:{srv.port}")
    got = c.sentence_similarity(src, other_sentences=others)
    st, vecs = srv.post_json("/embed", {"inputs": [src] + others, "normalize": False})
    assert st == 200
    v = np.array(vecs, np.float64)
    want = v[1:] @ v[0] / (np.linalg.norm(v[1:], axis=1) * np.linalg.norm(v[0]))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    st, out = srv.post_json("/invocations", {"inputs": {"source_sentence": src,
                                                        "sentences": others[:1]}})
    assert st == 200 and len(out) == 1
    st, out = srv.post_json("/", {"inputs": {"source_sentence": src, "sentences": []}})
    assert st == 400 and "sentences" in json.dumps(out)
    st, out = srv.post_json("/", {"inputs": src})
    assert st == 200 and np.allclose(np.array(out[0]), v[0] / np.linalg.norm(v[0]), atol=1e-5)
