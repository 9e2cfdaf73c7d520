"""`ragged serve` as TEI and OpenAI clients use it (issue 9, items 1-4), against independent
references: HF `tokenizers` (ids, byte offsets, decode, truncation side), the float64 NumPy BERT of
ref_bert.py (pooled and per-token vectors), NumPy on vectors the server returned from another
route (dimensions, similarity), and huggingface_hub's own request body.

  1. POST / and /invocations embed (huggingface_hub's InferenceClient(url).feature_extraction);
  2. OpenAI's error shape on /v1 (TEI's elsewhere); Retry-After on 429 and 503;
  3. normalize false -> the raw pooled vector, truncation_direction left, prompt_name (prompts of
     config_sentence_transformers.json, its default_prompt_name), dimensions, encoding_format;
  4. /embed_all, /similarity, /decode, /tokenize token objects, /info, GET /v1/models,
     /openapi.json, and their /metrics route labels.
The library calls behind them (rg_model_run_ex's raw vectors and per-token outputs in every
execution layout, rg_tokenizer_encode_ex's offsets and truncation, rg_tokenizer_decode) are
checked here too, on the device of RAGGED_TEST_DEVICE (the CUDA graph path on a GPU)."""
import base64
import ctypes
import json
import os
import shutil
import threading
import time

import numpy as np
import pytest

import corpus
import ragged_ctypes as rc
from conftest import ASAN, DEVICE, DTYPE, assert_embeddings_close
from server_util import Server, hf_tokenizer, tiny_model

H = 32
PROMPTS = {"query": "query: ", "passage": "passage: ", "empty": ""}
TEXTS = ["Hello world!", "The quick brown fox jumps over the lazy dog.", "a",
         "Ünïcödé: 東京 — naïve café ✓", "it's   spaced\tout\nand [SEP] typed"]
LONG = " ".join(f"w{i % 7} tok{i}" for i in range(120))  # > 128 tokens of the tiny model


# ---- fixtures ---------------------------------------------------------------------------------

def write_prompts(d, default=None):
    with open(os.path.join(d, "config_sentence_transformers.json"), "w") as f:
        json.dump({"prompts": PROMPTS, "default_prompt_name": default,
                   "__version__": {"sentence_transformers": "3.0.0"}}, f)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tiny_model(str(tmp_path_factory.mktemp("compat_tiny")), "h32_gelu")
    write_prompts(d)
    return d


@pytest.fixture(scope="module")
def hub_dir(tiny_dir, tmp_path_factory):
    """The same model laid out as a Hugging Face hub cache snapshot, with a default prompt."""
    d = tmp_path_factory.mktemp("hub") / "models--acme--tiny-embed" / "snapshots" / "0123abcd"
    shutil.copytree(tiny_dir, str(d))
    write_prompts(str(d), default="query")
    return str(d)


@pytest.fixture(scope="module")
def srv(tiny_dir):
    s = Server(tiny_dir, "--max-inputs", 16, "--cache-entries", 64)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ref64(tiny_dir):
    from ref_bert import RefBert
    return RefBert(tiny_dir)


@pytest.fixture(scope="module")
def hf_tok(tiny_dir):
    return hf_tokenizer(tiny_dir)


def raw_pooled(ref, ids):
    """The float64 reference's pooled vector without its Normalize module."""
    norm, ref.normalize = ref.normalize, False
    try:
        return ref.embed(ids)
    finally:
        ref.normalize = norm


def l2n(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def byte_off(text, c):
    return len(text[:c].encode("utf-8"))


# ---- 1. huggingface_hub's routes --------------------------------------------------------------

# The bodies huggingface_hub 2.4 InferenceClient(url).feature_extraction posts to "/" (captured
# from the client against a local socket): only the parameters given are sent.
HF_HUB_BODIES = [
    {"inputs": "hello"},
    {"inputs": ["a", "b"], "normalize": False, "prompt_name": "query", "truncate": True,
     "truncation_direction": "left", "dimensions": 8, "encoding_format": "float"},
]


@pytest.mark.parametrize("path", ["/", "/invocations", "/embed"])
def test_hf_hub_body_on_embed_routes(srv, ref64, hf_tok, path):
    st, out = srv.post_json(path, HF_HUB_BODIES[0])
    assert st == 200, out
    assert_embeddings_close(np.array(out, np.float32),
                            l2n(np.array([raw_pooled(ref64, hf_tok.encode("hello").ids)])), "hello",
                            fp32_tol=1e-4)
    st, out = srv.post_json(path, HF_HUB_BODIES[1])
    assert st == 200, out
    want = np.stack([raw_pooled(ref64, hf_tok.encode("query: " + t).ids)[:8] for t in "ab"])
    assert np.array(out).shape == (2, 8)
    assert_embeddings_close(np.array(out, np.float32), want, "hf_hub body", fp32_tol=1e-4)


def test_get_root_is_health(srv):
    st, h, body = srv.request("GET", "/")
    assert st == 200 and json.loads(body) == {"status": "ok"}
    st, h, body = srv.request("PUT", "/invocations", body=b"{}")
    assert st == 405 and h["allow"] == "POST"


def test_huggingface_hub_client(srv, ref64, hf_tok, monkeypatch):
    """The real client, when installed: InferenceClient(url).feature_extraction."""
    hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    client = hub.InferenceClient(f"http://{srv.host}:{srv.port}")
    got = client.feature_extraction(["hello", "a"], normalize=False, truncate=True)
    want = np.stack([raw_pooled(ref64, hf_tok.encode(t).ids) for t in ("hello", "a")])
    assert got.dtype == np.float32 and got.shape == (2, H)
    assert_embeddings_close(got, want, "InferenceClient", fp32_tol=1e-4)


# ---- 2. error shapes, Retry-After -------------------------------------------------------------

def assert_openai_error(out, param, code):
    assert set(out) == {"error"}, out
    e = out["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"]
    assert e["param"] == param and e["code"] == code, e
    return e


@pytest.mark.parametrize("path,body,status,param,code", [
    ("/v1/embeddings", {"inputs": "a"}, 400, "input", "validation"),
    ("/v1/embeddings", {"input": [""]}, 400, "input", "validation"),
    ("/v1/embeddings", {"input": "a", "dimensions": 0}, 400, "dimensions", "validation"),
    ("/v1/embeddings", {"input": "a", "dimensions": H + 1}, 400, "dimensions", "validation"),
    ("/v1/embeddings", {"input": "a", "dimensions": "8"}, 400, "dimensions", "validation"),
    ("/v1/embeddings", {"input": "a", "encoding_format": "hex"}, 400, "encoding_format",
     "validation"),
    ("/v1/embeddings", {"input": "a", "model": 3}, 400, "model", "validation"),
    ("/v1/embeddings", {"input": "a", "prompt_name": "nope"}, 400, "prompt_name", "validation"),
    ("/v1/embeddings", {"input": "a", "truncation_direction": "up"}, 400,
     "truncation_direction", "validation"),
    ("/v1/embeddings", {"input": ["x"] * 17}, 413, "input", "payload_too_large"),
    ("/v1/embeddings", {"input": LONG}, 422, "input", "validation"),
    ("/embeddings", {"input": "a", "dimensions": -1}, 400, "dimensions", "validation"),
    ("/v1/nope", {"input": "a"}, 404, None, "not_found"),
])
def test_openai_error_shape(srv, path, body, status, param, code):
    st, h, data = srv.post(path, body)
    assert st == status, data
    e = assert_openai_error(json.loads(data), param, code)
    assert e["type"] == "invalid_request_error"


def test_openai_error_shape_405_and_tei_elsewhere(srv):
    st, h, data = srv.request("GET", "/v1/embeddings")
    assert st == 405 and h["allow"] == "POST"
    assert_openai_error(json.loads(data), None, "method_not_allowed")
    # TEI's routes keep TEI's shape: {"error": str, "error_type": str}
    for path, body in (("/embed", {"inputs": "a", "dimensions": 0}), ("/embed", {"input": "a"}),
                       ("/similarity", {"inputs": "a"}), ("/decode", {"ids": "x"})):
        st, out = srv.post_json(path, body)
        assert st == 400 and set(out) == {"error", "error_type"}, out
        assert isinstance(out["error"], str) and out["error_type"] == "validation"
    st, out = srv.post_json("/embed", {"inputs": "a", "dimensions": 0})
    assert "dimensions" in out["error"]


def _post_in_thread(s, path, body, results, i):
    try:
        results[i] = s.post(path, body, timeout=60)
    except Exception as e:  # noqa: BLE001
        results[i] = (None, None, repr(e).encode())


def test_retry_after_on_429_and_503(tiny_dir):
    """Queue full (429) and shutting down with requests queued (503): both carry Retry-After, in
    OpenAI's error shape on /v1 and TEI's elsewhere."""
    s = Server(tiny_dir, "--scheduler", "nobatch", "--max-queue", 2, "--max-inputs", 2,
               "--batch-delay-ms", 300,
               "--cache-entries", 0)
    try:
        res = [None] * 8
        ths = [threading.Thread(target=_post_in_thread,
                                args=(s, "/v1/embeddings" if i % 2 else "/embed",
                                      {"input" if i % 2 else "inputs": f"q {i}"}, res, i))
               for i in range(8)]
        for t in ths:
            t.start()
            time.sleep(0.02)
        for t in ths:
            t.join()
        busy = [(i, r) for i, r in enumerate(res) if r[0] == 429]
        assert len(busy) >= 3, [r[0] for r in res]
        for i, (st, h, data) in busy:
            assert int(h["retry-after"]) >= 1
            out = json.loads(data)
            if i % 2:
                assert assert_openai_error(out, None, "overloaded")["type"] == "rate_limit_error"
            else:
                assert out["error_type"] == "overloaded"
        assert all("retry-after" not in r[1] for r in res if r[0] == 200)
    finally:
        s.stop()
    s = Server(tiny_dir, "--scheduler", "nobatch", "--batch-delay-ms", 400, "--cache-entries", 0,
               "--shutdown-timeout-s", 0)  # no drain: the queued requests get 503
    res = [None] * 3
    ths = [threading.Thread(target=_post_in_thread,
                            args=(s, "/v1/embeddings", {"input": f"sig {i}"}, res, i))
           for i in range(3)]
    for t in ths:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and s.metrics()["ragged_queue_depth"] < 2:
        time.sleep(0.01)
    s.stop()
    for t in ths:
        t.join()
    stopped = [r for r in res if r[0] == 503]
    assert stopped, [r[0] for r in res]
    for st, h, data in stopped:
        assert int(h["retry-after"]) >= 1
        assert assert_openai_error(json.loads(data), None, "unhealthy")["type"] == "server_error"


# ---- 3. parameters ------------------------------------------------------------------------------

def test_normalize_false_is_the_raw_pooled_vector(tmp_path_factory):
    """A model with a Normalize module: normalize true gives its unit vectors, false the pooled
    vector before it (TEI: normalization is the request's choice); the cache holds raw vectors,
    so a cached input answers both ways."""
    from ref_bert import RefBert
    d = tiny_model(str(tmp_path_factory.mktemp("compat_norm")), "h64_relu_norm")
    ref = RefBert(d)
    assert ref.normalize
    tok = hf_tokenizer(d)
    ids = [tok.encode(t).ids for t in TEXTS[:3]]
    ref.normalize = False
    raw = np.stack([ref.embed(i) for i in ids])
    s = Server(d, "--cache-entries", 16)
    try:
        for _ in range(2):  # computed, then from the cache
            st, out = s.post_json("/embed", {"inputs": TEXTS[:3], "normalize": False})
            assert st == 200
            assert_embeddings_close(np.array(out, np.float32), raw, "raw", fp32_tol=1e-4)
            assert np.abs(np.linalg.norm(out, axis=1) - 1).max() > 1e-2
            st, out = s.post_json("/embed", {"inputs": TEXTS[:3]})
            assert st == 200
            assert_embeddings_close(np.array(out, np.float32), l2n(raw), "unit", fp32_tol=1e-4)
        assert s.metrics()["ragged_cache_hits_total"] >= 6
    finally:
        s.stop()


def test_truncation_direction_left_matches_hf(srv, ref64, tiny_dir):
    """truncation_direction "left" (or "Left") keeps the last tokens, [CLS] / [SEP] kept at the
    ends, as HF tokenizers' truncation direction left on the real MiniLM tokenizer.json."""
    hf = hf_tokenizer(tiny_dir)
    hf.enable_truncation(max_length=128, direction="left")
    left = hf.encode(LONG).ids
    hf.enable_truncation(max_length=128, direction="right")
    right = hf.encode(LONG).ids
    assert len(left) == 128 and left[0] == 101 and left[-1] == 102 and left != right
    for d in ("left", "Left"):
        st, out = srv.post_json("/tokenize", {"inputs": LONG, "truncate": True,
                                              "truncation_direction": d})
        assert st == 200 and [t["id"] for t in out[0]] == left
    st, out = srv.post_json("/tokenize", {"inputs": LONG, "truncate": True,
                                          "truncation_direction": "right"})
    assert st == 200 and [t["id"] for t in out[0]] == right
    for path, key in (("/embed", "inputs"), ("/v1/embeddings", "input")):
        st, out = srv.post_json(path, {key: LONG, "truncate": True, "normalize": False,
                                       "truncation_direction": "left"})
        assert st == 200, out
        vec = out[0] if path == "/embed" else out["data"][0]["embedding"]
        assert_embeddings_close(np.array([vec], np.float32), np.array([raw_pooled(ref64, left)]),
                                path, fp32_tol=1e-4)
    # OpenAI token arrays: the last 128 ids
    ids = list(range(1000, 1200))
    st, out = srv.post_json("/v1/embeddings", {"input": ids, "truncate": True, "normalize": False,
                                               "truncation_direction": "left"})
    assert st == 200
    assert_embeddings_close(np.array([out["data"][0]["embedding"]], np.float32),
                            np.array([raw_pooled(ref64, ids[-128:])]), "ids left", fp32_tol=1e-4)
    st, out = srv.post_json("/embed", {"inputs": LONG, "truncation_direction": "sideways"})
    assert st == 400 and "truncation_direction" in out["error"]


def test_prompt_name(srv, hf_tok, tiny_dir):
    st, a = srv.post_json("/embed", {"inputs": ["what is it?", "x"], "prompt_name": "query"})
    st2, b = srv.post_json("/embed", {"inputs": ["query: what is it?", "query: x"]})
    assert st == st2 == 200
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # fp32, not bit for bit
    st, a = srv.post_json("/v1/embeddings", {"input": "x", "prompt_name": "passage"})
    st2, b = srv.post_json("/v1/embeddings", {"input": "passage: x"})
    assert st == st2 == 200 and a["data"] == b["data"]
    st, a = srv.post_json("/embed", {"inputs": "x", "prompt_name": "empty"})
    st2, b = srv.post_json("/embed", {"inputs": "x"})
    assert st == st2 == 200
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # fp32, not bit for bit
    # the prompt's tokens are counted, and offsets refer to the prompted text (TEI)
    st, toks = srv.post_json("/tokenize", {"inputs": "hello", "prompt_name": "query"})
    assert st == 200
    assert [t["id"] for t in toks[0]] == hf_tok.encode("query: hello").ids
    assert toks[0][-2] == {"id": hf_tok.token_to_id("hello"), "text": "hello", "special": False,
                           "start": 7, "stop": 12}
    st, out = srv.post_json("/embed", {"inputs": "x", "prompt_name": "nope"})
    assert st == 400 and "nope" in out["error"] and "query" in out["error"]
    st, out = srv.post_json("/embed", {"inputs": "x", "prompt_name": 3})
    assert st == 400 and "prompt_name" in out["error"]


def test_default_prompt_and_hub_name(hub_dir, srv):
    """default_prompt_name applies when the request names none; a hub cache snapshot is served
    under its repository id."""
    s = Server(hub_dir)
    try:
        # two servers, the same texts: equal within fp32 rounding (a CPU GEMM's blocking can
        # differ with the other work on the machine, so not bit for bit)
        st, a = s.post_json("/embed", {"inputs": ["x", "y"]})
        st2, b = srv.post_json("/embed", {"inputs": ["query: x", "query: y"]})
        assert st == st2 == 200
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        st, a = s.post_json("/embed", {"inputs": "x", "prompt_name": "passage"})
        st2, b = srv.post_json("/embed", {"inputs": "passage: x"})
        assert st == st2 == 200
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        # and the prompt really applied: without it the vector differs
        st3, c = srv.post_json("/embed", {"inputs": "x"})
        assert st3 == 200 and not np.allclose(a, c, rtol=1e-5, atol=1e-6)
        st, h, body = s.request("GET", "/info")
        info = json.loads(body)
        assert info["model_id"] == "acme/tiny-embed" and info["default_prompt_name"] == "query"
        assert info["model_sha"] == "0123abcd"  # the snapshot's revision (TEI's model_sha)
        assert sorted(info["prompts"]) == sorted(PROMPTS)
        st, h, body = s.request("GET", "/v1/models")
        assert json.loads(body)["data"][0]["id"] == "acme/tiny-embed"
    finally:
        s.stop()


def test_bad_prompts_file_refused(tiny_dir, tmp_path):
    d = tmp_path / "bad"
    shutil.copytree(tiny_dir, str(d))
    with open(d / "config_sentence_transformers.json", "w") as f:
        json.dump({"prompts": {"q": "q: "}, "default_prompt_name": "missing"}, f)
    with pytest.raises(AssertionError, match="default_prompt_name"):
        Server(str(d), start_timeout=60)


def test_dimensions_matryoshka(srv):
    texts = TEXTS[:3]
    st, raw = srv.post_json("/embed", {"inputs": texts, "normalize": False})
    raw = np.array(raw, np.float64)
    for d in (1, 8, H):
        st, out = srv.post_json("/embed", {"inputs": texts, "dimensions": d})
        assert st == 200 and np.array(out).shape == (3, d)
        np.testing.assert_allclose(out, l2n(raw[:, :d]), rtol=1e-5, atol=1e-6)
        st, out = srv.post_json("/embed", {"inputs": texts, "dimensions": d, "normalize": False})
        np.testing.assert_allclose(out, raw[:, :d], rtol=1e-6, atol=1e-7)
        st, out = srv.post_json("/v1/embeddings", {"input": texts, "dimensions": d,
                                                   "encoding_format": "base64"})
        assert st == 200
        dec = np.stack([np.frombuffer(base64.b64decode(x["embedding"]), "<f4")
                        for x in out["data"]])
        assert dec.shape == (3, d)
        np.testing.assert_allclose(dec, l2n(raw[:, :d]), rtol=1e-5, atol=1e-6)


def test_encoding_format_and_user(srv):
    st, a = srv.post_json("/embed", {"inputs": "x", "encoding_format": "float"})
    st2, b = srv.post_json("/embed", {"inputs": "x"})
    assert st == st2 == 200
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # fp32, not bit for bit
    st, out = srv.post_json("/embed", {"inputs": "x", "encoding_format": "base64"})
    assert st == 400 and "encoding_format" in out["error"] and "/v1/embeddings" in out["error"]
    name = os.path.basename(srv.args[3])
    st, out = srv.post_json("/v1/embeddings", {"input": "x", "user": "someone", "model": name})
    assert st == 200 and out["model"] == name
    # vLLM's check: another model is 404 model_not_found (OpenAI's shape), then serving goes on
    st, out = srv.post_json("/v1/embeddings", {"input": "x", "model": "text-embedding-3-small"})
    assert st == 404 and set(out["error"]) == {"message", "type", "param", "code"}
    assert out["error"]["code"] == "model_not_found" and out["error"]["param"] == "model"
    st, out = srv.post_json("/v1/embeddings", {"input": "x", "model": srv.args[3]})
    assert st == 200 and out["model"] == srv.args[3]
    st, out = srv.post_json("/v1/embeddings", {"input": "x"})
    assert st == 200 and out["model"] == os.path.basename(srv.args[3])
    st, out = srv.post_json("/v1/embeddings", {"input": "x", "user": 5})
    assert st == 400 and out["error"]["param"] == "user"


# ---- 4. routes ----------------------------------------------------------------------------------

def test_embed_all_matches_reference(srv, ref64, hf_tok):
    texts = [TEXTS[1], TEXTS[2], TEXTS[3]]
    st, h, body = srv.post("/embed_all", {"inputs": texts})
    assert st == 200, body
    out = json.loads(body)
    assert len(out) == 3
    for t, rows in zip(texts, out):
        ids = hf_tok.encode(t).ids
        got = np.array(rows, np.float32)
        assert got.shape == (len(ids), H)
        assert_embeddings_close(got, ref64.encode(ids), "embed_all " + t, fp32_tol=1e-4)
    st, one = srv.post_json("/embed_all", {"inputs": TEXTS[2]})
    # alone vs in the batch: equal to fp32's tolerance (a text of at most 4 tokens alone runs
    # the CPU's GEMV path for small M, the batch the blocked GEMM; the sums differ in order)
    assert st == 200 and len(one) == 1 and len(one[0]) == len(out[1])
    a, b = np.array(one[0], np.float64), np.array(out[1], np.float64)
    assert np.max(np.abs(a - b)) <= 1e-5 * np.max(np.abs(b)), np.max(np.abs(a - b))
    st, out = srv.post_json("/embed_all", {"inputs": LONG, "truncate": True,
                                           "truncation_direction": "left"})
    assert st == 200 and len(out[0]) == 128
    hf = hf_tokenizer(None, srv.args[3] + "/tokenizer.json")
    hf.enable_truncation(max_length=128, direction="left")
    assert_embeddings_close(np.array(out[0], np.float32), ref64.encode(hf.encode(LONG).ids),
                            "embed_all left", fp32_tol=1e-4)
    for body in ({"inputs": "a", "normalize": True}, {"inputs": "a", "dimensions": 4},
                 {"inputs": LONG}, {"inputs": []}):
        st, out = srv.post_json("/embed_all", body)
        assert st in (400, 422) and out["error"], (body, out)


def test_similarity_is_the_cosine_of_the_embeddings(srv):
    src, sents = "a cat sits", ["a cat sits", "a dog runs", "Ünïcödé", "a"]
    st, sim = srv.post_json("/similarity", {"inputs": {"source_sentence": src,
                                                       "sentences": sents}})
    assert st == 200 and len(sim) == 4
    st, emb = srv.post_json("/embed", {"inputs": [src] + sents, "normalize": False})
    e = l2n(emb)
    np.testing.assert_allclose(sim, e[1:] @ e[0], rtol=1e-5, atol=1e-6)
    assert abs(sim[0] - 1) < 1e-5
    st, sim2 = srv.post_json("/similarity", {
        "inputs": {"source_sentence": src, "sentences": sents[1:2]},
        "parameters": {"prompt_name": "query", "truncate": False, "truncation_direction": "left"}})
    st, emb = srv.post_json("/embed", {"inputs": ["query: " + src, "query: " + sents[1]]})
    assert st == 200 and abs(sim2[0] - np.dot(emb[0], emb[1])) < 1e-5
    for body in ({"inputs": {"source_sentence": "a", "sentences": []}},
                 {"inputs": {"sentences": ["a"]}}, {"inputs": ["a", "b"]},
                 {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": 3},
                 {"inputs": {"source_sentence": "a", "sentences": ["b"] * 16}}):
        st, out = srv.post_json("/similarity", body)
        assert st in (400, 413) and out["error"], (body, out)


def test_decode_matches_hf(srv, hf_tok):
    ids = [hf_tok.encode(t).ids for t in TEXTS]
    st, out = srv.post_json("/decode", {"ids": ids})
    assert st == 200 and out == [hf_tok.decode(i) for i in ids]
    st, out = srv.post_json("/decode", {"ids": ids[0], "skip_special_tokens": False})
    assert st == 200 and out == [hf_tok.decode(ids[0], skip_special_tokens=False)]
    st, out = srv.post_json("/decode", {"ids": [[], [101, 102]]})
    assert st == 200 and out == ["", ""]
    for body in ({"ids": [1, 30522]}, {"ids": [-1]}, {"ids": "x"}, {"ids": [[1], 2]}, {}):
        st, out = srv.post_json("/decode", body)
        assert st == 400 and out["error"], (body, out)


def test_tokenize_token_objects_match_hf_offsets(srv, hf_tok):
    st, out = srv.post_json("/tokenize", {"inputs": TEXTS})
    assert st == 200 and len(out) == len(TEXTS)
    for t, toks in zip(TEXTS, out):
        e = hf_tok.encode(t)
        assert [x["id"] for x in toks] == e.ids
        for x, sp, tok, (a, z) in zip(toks, e.special_tokens_mask, e.tokens, e.offsets):
            assert set(x) == {"id", "text", "special", "start", "stop"}
            assert x["special"] == bool(sp)
            if sp:  # TEI: the token's string, no offsets
                assert x["text"] == tok and x["start"] is None and x["stop"] is None
            else:  # byte offsets into the input, the text between them
                assert (x["start"], x["stop"]) == (byte_off(t, a), byte_off(t, z))
                assert x["text"] == t.encode()[x["start"]:x["stop"]].decode()
    st, out = srv.post_json("/tokenize", {"inputs": TEXTS[0], "add_special_tokens": False})
    assert st == 200
    assert [x["id"] for x in out[0]] == hf_tok.encode(TEXTS[0], add_special_tokens=False).ids
    assert not any(x["special"] for x in out[0])
    st, out = srv.post_json("/tokenize", {"inputs": LONG})  # no length limit on /tokenize
    assert st == 200 and len(out[0]) == len(hf_tok.encode(LONG).ids) > 128


def test_info_models_openapi(srv, tiny_dir):
    st, h, body = srv.request("GET", "/info")
    info = json.loads(body)
    assert info["model_id"] == os.path.basename(tiny_dir) == info["served_model_name"]
    assert info["model_dir"] == tiny_dir
    assert info["model_dtype"] == "float32" and info["auto_truncate"] is False
    assert info["max_client_batch_size"] == 16 and info["max_input_length"] == 128
    assert info["version"] and info["hidden_size"] == H and info["max_batch_tokens"] == 16384
    assert sorted(info["prompts"]) == sorted(PROMPTS) and info["default_prompt_name"] is None
    st, h, body = srv.request("GET", "/v1/models")
    models = json.loads(body)
    assert st == 200 and models["object"] == "list" and len(models["data"]) == 1
    m = models["data"][0]
    assert m["id"] == info["model_id"] and m["object"] == "model" and m["owned_by"]
    assert isinstance(m["created"], int) and abs(m["created"] - time.time()) < 3600


# Every route the server answers, with its methods (the rows of routes.c).
ROUTES = {"/": ["post", "get"], "/invocations": ["post"], "/embed": ["post"],
          "/embed_all": ["post"], "/v1/embeddings": ["post"], "/embeddings": ["post"],
          "/similarity": ["post"], "/predict": ["post"], "/rerank": ["post"],
          "/tokenize": ["post"], "/decode": ["post"], "/health": ["get"], "/ping": ["get"],
          "/info": ["get"], "/metrics": ["get"], "/v1/models": ["get"],
          "/v1/models/{model}": ["get"], "/openapi.json": ["get"],
          # the generation routes (decoder models, issue 20)
          "/generate": ["post"], "/generate_stream": ["post"], "/v1/completions": ["post"],
          "/completions": ["post"], "/v1/chat/completions": ["post"],
          "/chat/completions": ["post"], "/detokenize": ["post"],
          "/translate": ["post"]}


def test_openapi_describes_every_route(srv):
    st, h, body = srv.request("GET", "/openapi.json")
    assert st == 200 and h["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["openapi"].startswith("3.") and doc["info"]["version"]
    assert set(doc["paths"]) == set(ROUTES)
    for path, methods in ROUTES.items():
        assert set(doc["paths"][path]) == set(methods), path
        for m in methods:
            op = doc["paths"][path][m]
            assert op["summary"] and "200" in op["responses"]
            if m == "post":
                ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                assert ref.split("/")[-1] in doc["components"]["schemas"]
            for r in op["responses"].values():
                if "$ref" in r:
                    assert r["$ref"].split("/")[-1] in doc["components"]["responses"]
    # and the server answers each described route (no 404), while others are 404
    model = json.loads(srv.request("GET", "/v1/models")[2])["data"][0]["id"]
    for path, methods in doc["paths"].items():
        path = path.replace("{model}", model)
        for m in methods:
            st, h, body = srv.request(m.upper(), path, body=b"{}" if m == "post" else None,
                                      headers={"Content-Type": "application/json"})
            assert st != 404, (path, m)
    st, h, body = srv.request("GET", "/docs")
    assert st == 404
    # the request schemas name what the OpenAI clients send for structured outputs and tools
    sch = doc["components"]["schemas"]
    for name in ("CompletionRequest", "ChatCompletionRequest"):
        props = sch[name]["properties"]
        for key in ("response_format", "structured_outputs", "guided_json", "guided_regex",
                    "guided_choice"):
            assert key in props, (name, key)
    chat = sch["ChatCompletionRequest"]["properties"]
    assert {"tools", "tool_choice", "parallel_tool_calls"} <= set(chat)
    assert chat["tools"]["items"]["properties"]["function"]["required"] == ["name"]
    assert {"tool_calls", "tool_call_id", "name"} <= set(chat["messages"]["items"]["properties"])
    assert "tools" not in sch["CompletionRequest"]["properties"]


def test_metrics_route_labels(srv):
    for path, body in (("/embed_all", {"inputs": "a"}), ("/decode", {"ids": [101]}),
                       ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]}}),
                       ("/", {"inputs": "a"})):
        assert srv.post(path, body)[0] == 200
    for path in ("/v1/models", "/openapi.json"):
        assert srv.request("GET", path)[0] == 200
    m = srv.metrics()
    for route in ("embed_all", "decode", "similarity", "v1_models", "openapi", "embed"):
        assert m[f'ragged_requests_total{{route="{route}",code="200"}}'] >= 1, route


# ---- the library behind them --------------------------------------------------------------------

class RunOptions(ctypes.Structure):
    """include/ragged.h rg_run_options."""
    _fields_ = [("raw", ctypes.c_bool), ("hidden_out", ctypes.c_void_p)]


class TokParams(ctypes.Structure):
    """src/tokenizer/tokenizer.h rg_tok_params."""
    _fields_ = [("truncation", ctypes.c_int), ("max_len", ctypes.c_size_t),
                ("add_special_tokens", ctypes.c_bool), ("offsets", ctypes.c_bool),
                ("plain", ctypes.POINTER(ctypes.c_size_t)), ("n_plain", ctypes.c_size_t),
                ("lang_set", ctypes.c_bool), ("lang_slot", ctypes.c_int),
                ("lang_id", ctypes.c_int32)]


class Encoding(ctypes.Structure):
    """include/ragged.h rg_encoding."""
    _fields_ = [("n", ctypes.c_size_t), ("ids", ctypes.POINTER(ctypes.c_int32)),
                ("types", ctypes.POINTER(ctypes.c_int32)),
                ("special", ctypes.POINTER(ctypes.c_uint8)),
                ("start", ctypes.POINTER(ctypes.c_uint32)),
                ("stop", ctypes.POINTER(ctypes.c_uint32)), ("truncated", ctypes.c_bool)]


def _lib():
    lib = rc.lib()
    lib.rg_model_run_ex.argtypes = [ctypes.c_void_p, ctypes.POINTER(rc.ModelBatch),
                                    ctypes.POINTER(RunOptions), ctypes.c_void_p]
    lib.rg_tokenizer_encode_ex.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                           ctypes.c_char_p, ctypes.c_size_t,
                                           ctypes.POINTER(TokParams), ctypes.POINTER(Encoding)]
    lib.rg_encoding_free.argtypes = [ctypes.POINTER(Encoding)]
    lib.rg_tokenizer_decode.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32),
                                        ctypes.c_size_t, ctypes.c_bool,
                                        ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_size_t)]
    return lib


def run_ex(model, seqs, raw, hidden, layout=None):
    """rg_model_run_ex -> (pooled (n, H), hidden (tokens, H) or None); NaN guards checked."""
    info = model.info()
    tokens = np.ascontiguousarray(np.concatenate([np.asarray(s, np.int32) for s in seqs]))
    cu = np.zeros(len(seqs) + 1, np.int32)
    cu[1:] = np.cumsum([len(s) for s in seqs])
    out = np.full((len(seqs) + 1, info.output_dim), np.nan, np.float32)
    hid = np.full((len(tokens) + 1, info.hidden_size), np.nan, np.float32) if hidden else None
    b = rc.ModelBatch(tokens.ctypes.data, None, cu.ctypes.data, len(seqs),
                      ctypes.addressof(layout) if layout is not None else None)
    o = RunOptions(raw, hid.ctypes.data if hidden else None)
    st = _lib().rg_model_run_ex(model._h, ctypes.byref(b), ctypes.byref(o), out.ctypes.data)
    assert st == 0, rc._err(st)
    assert np.isnan(out[-1]).all() and (not hidden or np.isnan(hid[-1]).all())
    return out[:-1], (hid[:-1] if hidden else None)


def make_layout(mode, n_rows, row_len, rows, offs):
    rows = np.ascontiguousarray(rows, np.int32)
    offs = np.ascontiguousarray(offs, np.int32)
    lay = rc.Layout(mode, n_rows, row_len, 0,
                    rows.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                    offs.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)))
    lay._keep = (rows, offs)
    return lay


@pytest.mark.parametrize("name", ["h64_relu_norm", "h32_gelu"])
def test_lib_run_ex_raw_and_hidden(tmp_path_factory, name):
    """rg_model_run_ex: raw pooled vectors (no Normalize) and every token's last hidden state, the
    same in the packed path (the CUDA graph buckets on a GPU) and the PADDED / CONCAT layouts;
    rg_model_run still normalizes."""
    from ref_bert import RefBert
    d = tiny_model(str(tmp_path_factory.mktemp("lib_" + name)), name)
    ref = RefBert(d)
    model = rc.Model(d, device=DEVICE, dtype=DTYPE)
    try:
        rng = np.random.default_rng(5)
        lens = [7, 1, 30, 12]
        seqs = [[101] + rng.integers(999, 30522, n - 1).tolist() for n in lens]
        want_hidden = np.concatenate([ref.encode(s) for s in seqs])
        norm = ref.normalize
        want_norm = np.stack([ref.embed(s) for s in seqs])
        ref.normalize = False
        want_raw = np.stack([ref.embed(s) for s in seqs])
        assert_embeddings_close(model.run(seqs), want_norm, "rg_model_run", dtype=DTYPE)
        packed = make_layout(0, 0, 0, [0] * 4, [0] * 4)
        padded = make_layout(1, 5, 30, [0, 1, 2, 3], [0, 0, 0, 0])
        concat = make_layout(2, 3, 32, [0, 0, 1, 0], [0, 7, 0, 8])
        for what, lay in (("packed", None), ("packed mode", packed), ("padded", padded),
                          ("concat", concat)):
            pooled, hidden = run_ex(model, seqs, raw=True, hidden=True, layout=lay)
            assert_embeddings_close(pooled, want_raw, what + " raw", dtype=DTYPE)
            assert_embeddings_close(hidden, want_hidden, what + " hidden", dtype=DTYPE)
            pooled, _ = run_ex(model, seqs, raw=False, hidden=False, layout=lay)
            assert_embeddings_close(pooled, want_norm, what + " normalized", dtype=DTYPE)
        if norm:
            assert np.abs(np.linalg.norm(want_raw, axis=1) - 1).max() > 1e-2
        # the same batch twice: a graph replay (CUDA) gives the same rows
        a = run_ex(model, seqs, raw=True, hidden=True)
        b = run_ex(model, seqs, raw=True, hidden=True)
        assert np.array_equal(a[1], b[1]) and np.array_equal(a[0], b[0])
    finally:
        model.close()


def test_lib_widen16_in_place():
    """The CUDA per-token path downloads fp16 / bf16 rows into the second half of the f32
    output and widens them in place (rg_widen16_tail): every value, subnormals, inf and NaN
    included, equals NumPy's conversion."""
    lib = _lib()
    lib.rg_widen16_tail.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    rng = np.random.default_rng(3)
    bits = np.concatenate([np.arange(65536, dtype=np.uint16),
                           rng.integers(0, 65536, 1001).astype(np.uint16)])
    for dt, want in ((1, bits.view(np.float16).astype(np.float32)),
                     (2, (bits.astype(np.uint32) << 16).view(np.float32))):
        n = len(bits)
        buf = np.zeros(n, np.float32)
        buf.view(np.uint16)[n:] = bits
        lib.rg_widen16_tail(buf.ctypes.data, n, dt)
        assert np.array_equal(buf.view(np.uint32)[~np.isnan(want)],
                              want.view(np.uint32)[~np.isnan(want)]), dt
        assert np.isnan(buf[np.isnan(want)]).all()


def _tokenizer_dirs(tmp_path_factory, minilm_dir):
    fx = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "tokenizers")
    dirs = {"minilm (WordPiece, BertNormalizer)": minilm_dir,
            "mpnet (WordPiece, RobertaProcessing)": os.path.join(fx, "all-mpnet-base-v2"),
            "xlmr-style (Unigram, Precompiled, Metaspace)": os.path.join(fx, "spm-xlmr-style"),
            "albert-style (Unigram, NFKD, StripAccents)": os.path.join(fx, "spm-albert-style")}
    import tokenizers as tk
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=1200, min_frequency=2,
                                     special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False)
    tok.train_from_iterator(corpus.build_corpus()[:600], trainer)
    tok.normalizer = tk.normalizers.Sequence([tk.normalizers.NFKC()])
    tok.post_processor = tk.processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.add_special_tokens([tk.AddedToken("<mask>", lstrip=True, special=True,
                                          normalized=False)])
    d = tmp_path_factory.mktemp("bytelevel")
    tok.save(os.path.join(str(d), "tokenizer.json"))
    dirs["byte-level BPE (NFKC, RobertaProcessing trim_offsets)"] = str(d)
    return dirs


@pytest.fixture(scope="module")
def tok_dirs(tmp_path_factory, minilm_dir):
    return _tokenizer_dirs(tmp_path_factory, minilm_dir)


def tok_texts():
    t = corpus.build_corpus()[::11] + [
        "", " ", "a", "  a  b  ", "café naïve Ångström e\u0301 ﬁ ½", "中文字符 日本語 한국어",
        "emoji 😀👍🏽 🇫🇷", "it's don't", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ", "tab\there\nnl", "™ © ℃ ㎏",
        "hello <mask> world", "hello   <mask>   world", "[CLS] x [SEP]", "<s>x</s>",
        "brown\u30004.5  ǅ-÷", "İstanbul ß ẞ", "x" * 300]
    return t[::3] if ASAN else t


def _space_counts(tok):
    def sp(c):
        return c == "\u0120" or c.isspace()
    lead = next((i for i, c in enumerate(tok) if not sp(c)), len(tok))
    trail = next((i for i, c in enumerate(reversed(tok)) if not sp(c)), len(tok))
    return lead, trail


class HFByteOffsets:
    """HF's offsets in bytes as its Rust library (and so TEI) gives them: the Python binding
    reports chars and trims ByteLevel offsets in chars, so take the untrimmed char offsets
    (exact char ranges) to bytes and apply process_offsets (byte_level.rs) in bytes."""

    def __init__(self, d):
        from tokenizers import Tokenizer
        j = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
        pp = j.get("post_processor") or {}
        self.trim = [p for p in [pp] + (pp.get("processors") or [])
                     if p.get("type") in ("ByteLevel", "RobertaProcessing")
                     and p.get("trim_offsets", True)]
        self.aps = any(p.get("add_prefix_space", True) for p in self.trim)
        for p in self.trim:
            p["trim_offsets"] = False
        self.hf = Tokenizer.from_str(json.dumps(j))
        self.hf.no_padding()
        self.hf.no_truncation()

    def __call__(self, text):
        e = self.hf.encode(text)
        out, i = [], 0
        for tid, spec, tok, (a, z) in zip(e.ids, e.special_tokens_mask, e.tokens, e.offsets):
            a, z = byte_off(text, a), byte_off(text, z)
            if self.trim and not spec:
                lead, trail = _space_counts(tok)
                if lead:
                    if (i == 0 or a == 0) and self.aps and lead == 1:
                        lead = 0
                    a = min(a + lead, z)
                if trail and z >= trail:
                    z = max(z - trail, a)
            i += not spec
            out.append((tid, spec, a, z))
        return out


def lib_encode(rt, text, truncation=0, max_len=0, special=True):
    data = text.encode()
    e = Encoding()
    p = TokParams(truncation, max_len, special, True)
    st = _lib().rg_tokenizer_encode_ex(rt._h, data, len(data), None, 0, ctypes.byref(p),
                                       ctypes.byref(e))
    assert st == 0, rc._err(st)
    out = [(e.ids[k], e.special[k], e.start[k], e.stop[k]) for k in range(e.n)]
    _lib().rg_encoding_free(ctypes.byref(e))
    return out


def lib_decode(rt, ids, skip):
    arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
    p, n = ctypes.c_void_p(), ctypes.c_size_t()
    st = _lib().rg_tokenizer_decode(rt._h, arr, len(ids), skip, ctypes.byref(p), ctypes.byref(n))
    assert st == 0, rc._err(st)
    s = ctypes.string_at(p, n.value).decode()
    rc._libc.free(p)
    return s


def test_lib_offsets_decode_truncation_match_hf(tok_dirs):
    """Byte offsets, the special-tokens mask, decode (skip special or not) and truncation (both
    sides, with and without special tokens) equal HF's on WordPiece, Unigram/Metaspace (with a
    precompiled charsmap) and byte-level BPE tokenizers."""
    texts = tok_texts()
    for what, d in tok_dirs.items():
        hf = hf_tokenizer(None, os.path.join(d, "tokenizer.json"))
        ref = HFByteOffsets(d)
        rt = rc.Tokenizer(d)
        for t in texts:
            assert lib_encode(rt, t) == ref(t), (what, t)
            ids = hf.encode(t).ids
            for skip in (True, False):
                assert lib_decode(rt, ids, skip) == hf.decode(ids, skip_special_tokens=skip), \
                    (what, t, skip)
        for side, code in (("right", 1), ("left", 2)):
            for ml in (3, 9):
                hf.enable_truncation(max_length=ml, direction=side)
                for t in texts[::4]:
                    for special in (True, False):
                        got = [x[0] for x in lib_encode(rt, t, code, ml, special)]
                        assert got == hf.encode(t, add_special_tokens=special).ids, \
                            (what, side, ml, special, t)
        hf.no_truncation()
        rt.close()


def test_lib_pair_truncation_matches_hf(minilm_dir):
    """Sentence pairs (/predict, /rerank) truncated as HF's longest_first does, on both sides."""
    from tokenizers import Tokenizer
    rt = rc.Tokenizer(minilm_dir)
    texts = ["one two three four five six seven eight", "alpha beta", "x " * 14, "single"]
    hfs = {}
    for side in ("right", "left"):
        for ml in (6, 9, 12, 20):
            hf = Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
            hf.no_padding()
            hf.enable_truncation(max_length=ml, direction=side)
            hfs[side, ml] = hf
    try:
        for a in texts:
            for b in texts:
                for side, code in (("right", 1), ("left", 2)):
                    for ml in (6, 9, 12, 20):
                        hf = hfs[side, ml]
                        e = Encoding()
                        p = TokParams(code, ml, True, False)
                        st = _lib().rg_tokenizer_encode_ex(rt._h, a.encode(), len(a), b.encode(),
                                                           len(b), ctypes.byref(p),
                                                           ctypes.byref(e))
                        assert st == 0, rc._err(st)
                        got = ([e.ids[k] for k in range(e.n)], [e.types[k] for k in range(e.n)])
                        _lib().rg_encoding_free(ctypes.byref(e))
                        h = hf.encode(a, b)
                        assert got == (h.ids, h.type_ids), (a, b, side, ml)
    finally:
        rt.close()
