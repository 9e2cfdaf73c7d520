"""`ragged serve` with an encoder-decoder model (issue 29): a random MarianMT (make_seq2seq.py's
tiny-marian, a synthetic byte-level tokenizer.json) served by the generation engine -- the source
encoded once into the KV cache's cross blocks, the decoder in the same continuous batching as the
decoder-only models -- behind POST /translate, /v1/completions and TGI's /generate and
/generate_stream.

The independent reference for every greedy and beam output is tests/py/ref_seq2seq.py (float64
NumPy, transformers' generate() rules: forced EOS at the length limit, the pad token banned, beam
search's length penalty and early stopping); ragged.Translator (the library alone, no server)
must agree too. Token ids must be equal: the server's come from "details" (TGI's token list)."""
import json
import os
import socket
import sys
import threading
import time

import numpy as np
import pytest

import make_chat_decoder
import make_seq2seq
import ref_seq2seq
from server_util import Server, hf_tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
import ragged  # noqa: E402

TEXTS = ["hello world", "abc", "the quick brown fox jumps over the lazy dog", "x",
         "Numbers 12 and 345"]


from test_translate import marian, tr  # noqa: E402,F401  the same tiny Marian and Translator


@pytest.fixture(scope="module")
def tok(marian):
    return hf_tokenizer(marian[0])


@pytest.fixture(scope="module")
def srv(marian):
    # small steps and blocks: sources and decoders share steps, blocks fill quickly (a step
    # holds the longest source, 64 tokens, with its decoder's first token)
    s = Server(marian[0], "--max-num-seqs", 8, "--max-num-batched-tokens", 72, "--block-size",
               4, "--kv-cache-bytes", 4 << 20)
    yield s
    s.stop()


def sources(cfg, seed, lens):
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(3, cfg["vocab_size"] - 1, size=n))) +
            [cfg["eos_token_id"]] for n in lens]


def translate(s, inputs, **params):
    st, out = s.post_json("/translate", {"inputs": inputs,
                                         "parameters": dict(params, details=True)})
    assert st == 200, out
    return out


def ids_of(answer):
    return [t["id"] for t in answer["details"]["tokens"]]


def sse(raw):
    out = []
    for block in raw.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            out.append(json.loads(block[len("data: "):]))
    return out


def blocks_back_to_zero(s, timeout=20):
    t_end = time.time() + timeout
    while True:
        m = s.metrics()
        if m["ragged_gen_num_requests_running"] == 0 and m["ragged_gen_kv_blocks_used"] == 0:
            return m
        assert time.time() < t_end, m
        time.sleep(0.05)


def assert_error(st, out, code, *words):
    assert st == code, out
    msg = out["error"] if isinstance(out["error"], str) else out["error"]["message"]
    for w in words:
        assert w in msg, (w, msg)
    return msg


# ---- the model, /info, /openapi.json --------------------------------------------------------

def test_info_and_openapi(srv, marian):
    _, cfg, _ = marian
    st, info = srv.request("GET", "/info")[0], json.loads(srv.request("GET", "/info")[2])
    assert st == 200
    assert info["model_kind"] == "encoder-decoder"
    assert info["model_pipeline_tag"] == "translation"
    assert info["max_source_positions"] == cfg["max_position_embeddings"]
    assert info["max_input_tokens"] == cfg["max_position_embeddings"]
    assert info["decoder_start_token_id"] == cfg["decoder_start_token_id"]
    assert info["prefix_caching"] is False and info["chat_template"] is False
    assert "/translate" in info["routes"]
    doc = json.loads(srv.request("GET", "/openapi.json")[2])
    assert "post" in doc["paths"]["/translate"]
    schemas = doc["components"]["schemas"]
    assert "inputs" in schemas["TranslateRequest"]["properties"]
    assert "translation_text" in schemas["TranslateResponse"]["properties"]


# ---- /translate against the reference --------------------------------------------------------

def test_translate_ids_equal_reference(srv, marian, tr):
    """Greedy, one source per request, token ids in: the reference's ids and Translator's;
    max_new_tokens short enough that some stop at the limit (the forced EOS)."""
    _, cfg, ref = marian
    srcs = sources(cfg, 0, (5, 9, 3, 12, 1, 30))
    for n in (4, 12):
        want = [ref.greedy(s, n)[1:] for s in srcs]
        assert [o["ids"] for o in tr.translate(srcs, max_tokens=n)] == want
        for s, w in zip(srcs, want):
            out = translate(srv, s, max_new_tokens=n)
            assert ids_of(out) == w
            assert out["generated_tokens"] == len(w)
            assert out["finish_reason"] in ("eos_token", "length")


def test_translate_text_single_and_list(srv, marian, tr, tok):
    """Texts tokenized by the server (the checkpoint's tokenizer.json, eos appended) give the
    reference's ids for `tokenizers`' encoding; a list answers a list in order, each as alone;
    translation_text is Translator's text."""
    _, _, ref = marian
    enc = [tok.encode(t).ids for t in TEXTS]
    assert all(e[-1] == 0 for e in enc)  # the post-processor appends </s>
    want = [ref.greedy(e, 10)[1:] for e in enc]
    alone = [translate(srv, t, max_new_tokens=10) for t in TEXTS]
    assert [ids_of(a) for a in alone] == want
    lib = tr.translate(TEXTS, max_tokens=10)
    assert [a["translation_text"] for a in alone] == [o["text"] for o in lib]
    out = translate(srv, TEXTS, max_new_tokens=10)
    assert isinstance(out, list) and len(out) == len(TEXTS)
    assert [ids_of(o) for o in out] == want
    assert [o["translation_text"] for o in out] == [a["translation_text"] for a in alone]
    # without details: the pipeline's shape
    st, o = srv.post_json("/translate", {"inputs": TEXTS[0], "parameters": {"max_new_tokens": 10}})
    assert st == 200 and o["details"] is None
    assert o["translation_text"] == alone[0]["translation_text"]
    st, o = srv.post_json("/translate", {"inputs": [TEXTS[1]]})
    assert st == 200 and isinstance(o, list) and len(o) == 1


@pytest.mark.parametrize("num_beams,length_penalty,early_stopping", [
    (4, 1.0, False), (3, 0.6, True), (2, 1.3, "never")])
def test_translate_beams_equal_reference(srv, marian, tr, num_beams, length_penalty,
                                         early_stopping):
    _, cfg, ref = marian
    srcs = sources(cfg, 1, (5, 9, 3, 20))
    for s in srcs:
        want = ref.beam_search(s, num_beams, 10, length_penalty=length_penalty,
                               early_stopping=early_stopping)[0][1:]
        got = translate(srv, s, max_new_tokens=10, num_beams=num_beams,
                        length_penalty=length_penalty, early_stopping=early_stopping)
        assert ids_of(got) == want
        assert tr.translate(s, max_tokens=10, num_beams=num_beams,
                            length_penalty=length_penalty,
                            early_stopping=early_stopping)[0]["ids"] == want
    # several sources' beam groups in one request (the same steps)
    out = translate(srv, srcs, max_new_tokens=10, num_beams=num_beams,
                    length_penalty=length_penalty, early_stopping=early_stopping)
    assert [ids_of(o) for o in out] == [
        ref.beam_search(s, num_beams, 10, length_penalty=length_penalty,
                        early_stopping=early_stopping)[0][1:] for s in srcs]


def test_translate_no_repeat_ngram(srv, marian):
    _, cfg, ref = marian
    for s in sources(cfg, 2, (6, 15)):
        want = ref.greedy(s, 16, no_repeat_ngram_size=2)[1:]
        assert ids_of(translate(srv, s, max_new_tokens=16, no_repeat_ngram_size=2)) == want


def test_translate_sampling_is_seeded(srv):
    a = translate(srv, "hello world", max_new_tokens=8, do_sample=True, temperature=0.8,
                  top_k=20, seed=11)
    b = translate(srv, "hello world", max_new_tokens=8, do_sample=True, temperature=0.8,
                  top_k=20, seed=11)
    assert ids_of(a) == ids_of(b) and a["details"]["seed"] == 11


def test_translate_stream(srv, marian):
    """Server-sent events as /generate_stream's: one per token (the reference's ids), the last
    with the whole text (the non-streamed answer's) and details."""
    _, _, ref = marian
    for text in TEXTS[:3]:
        whole = translate(srv, text, max_new_tokens=12)
        st, h, raw = srv.post("/translate", {"inputs": text, "stream": True,
                                             "parameters": {"max_new_tokens": 12}})
        assert st == 200 and h["content-type"].startswith("text/event-stream")
        ev = sse(raw)
        assert [e["token"]["id"] for e in ev] == ids_of(whole)
        assert all(e["generated_text"] is None for e in ev[:-1])
        assert ev[-1]["generated_text"] == whole["translation_text"]
        assert ev[-1]["details"]["finish_reason"] == whole["finish_reason"]
        assert ev[-1]["details"]["generated_tokens"] == len(ev)
        assert "".join(e["token"]["text"] for e in ev if not e["token"]["special"]) == \
            whole["translation_text"]


# ---- the other generation routes on an encoder-decoder ----------------------------------------

def test_completions_translate(srv, marian, tok):
    """/v1/completions: the prompt is the source (text or ids), the completion its translation
    (no echo); greedy at temperature 0."""
    _, cfg, ref = marian
    for text in TEXTS[:3]:
        whole = translate(srv, text, max_new_tokens=8)
        st, out = srv.post_json("/v1/completions", {"prompt": text, "max_tokens": 8,
                                                    "temperature": 0})
        assert st == 200, out
        assert out["choices"][0]["text"] == whole["translation_text"]
        assert out["usage"]["prompt_tokens"] == len(tok.encode(text).ids)
        assert out["usage"]["completion_tokens"] == whole["generated_tokens"]
    srcs = sources(cfg, 3, (4, 11))
    st, out = srv.post_json("/v1/completions", {"prompt": srcs, "max_tokens": 6,
                                                "temperature": 0, "logprobs": 0})
    assert st == 200, out
    want = [ref.greedy(s, 6)[1:] for s in srcs]
    assert [len(c["logprobs"]["tokens"]) for c in out["choices"]] == [len(w) for w in want]
    st, out = srv.post_json("/v1/completions", {"prompt": "hello", "echo": True})
    assert_error(st, out, 400, "echo", "encoder-decoder")
    assert out["error"]["param"] == "echo"
    st, out = srv.post_json("/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "hello"}]})
    assert_error(st, out, 400, "encoder-decoder", "chat template")


def test_tgi_generate(srv):
    """TGI's /generate and /generate_stream: inputs = the source text (as TGI serves T5);
    the same tokens as /translate's."""
    for text in TEXTS[:3]:
        whole = translate(srv, text, max_new_tokens=9)
        st, out = srv.post_json("/generate", {"inputs": text, "parameters": {
            "max_new_tokens": 9, "details": True}})
        assert st == 200, out
        assert out["generated_text"] == whole["translation_text"]
        assert [t["id"] for t in out["details"]["tokens"]] == ids_of(whole)
        st, h, raw = srv.post("/generate_stream", {"inputs": text, "parameters": {
            "max_new_tokens": 9}})
        assert st == 200
        ev = sse(raw)
        assert [e["token"]["id"] for e in ev] == ids_of(whole)
        assert ev[-1]["generated_text"] == whole["translation_text"]
    st, out = srv.post_json("/generate", {"inputs": "hello", "parameters": {
        "return_full_text": True}})
    assert_error(st, out, 422, "return_full_text", "encoder-decoder")


# ---- bad input: a clear 400, the server keeps serving ------------------------------------------

def test_bad_input(srv, marian):
    _, cfg, _ = marian
    limit = cfg["max_position_embeddings"]
    eos = cfg["eos_token_id"]
    over = sources(cfg, 5, (limit,))[0]  # limit + 1 tokens with the eos
    st, out = srv.post_json("/translate", {"inputs": over})
    assert_error(st, out, 400, str(limit), "max_source_positions", str(limit + 1))
    st, out = srv.post_json("/translate", {"inputs": "a" * (limit + 5)})
    assert_error(st, out, 400, str(limit), "max_source_positions")
    st, out = srv.post_json("/v1/completions", {"prompt": over, "temperature": 0})
    assert_error(st, out, 400, "max_source_positions")
    assert out["error"]["code"] == "context_length_exceeded"
    st, out = srv.post_json("/generate", {"inputs": "a" * (limit + 5)})
    assert_error(st, out, 422, "max_source_positions")
    # exactly at the limit is served
    at = sources(cfg, 5, (limit - 1,))[0]
    assert translate(srv, at, max_new_tokens=3)["generated_tokens"] >= 1
    # a source of ids without the eos
    st, out = srv.post_json("/translate", {"inputs": [5, 6, 7]})
    assert_error(st, out, 400, "eos", str(eos))
    for body in ({"inputs": ""}, {"inputs": []}, {"inputs": [""]}, {}, {"inputs": [[]]}):
        st, out = srv.post_json("/translate", body)
        assert st == 400 and "inputs" in out["error"], (body, out)
    st, _, raw = srv.post("/translate", '{"inputs": "hello"')
    assert st == 400 and json.loads(raw)["error_type"] == "validation"
    st, _, raw = srv.post("/translate", "not json")
    assert st == 400
    for key in ("src_lang", "tgt_lang"):
        for body in ({"inputs": "hi", key: "de"}, {"inputs": "hi", "parameters": {key: "de"}}):
            st, out = srv.post_json("/translate", body)
            assert_error(st, out, 400, key, "takes no language codes")
    st, out = srv.post_json("/translate", {"inputs": "hi", "parameters": {"max_length": 5}})
    assert_error(st, out, 400, "max_length")
    st, out = srv.post_json("/translate", {"inputs": "hi", "parameters": {"temperature": 0.5}})
    assert_error(st, out, 400, "temperature", "do_sample")
    st, out = srv.post_json("/translate", {"inputs": ["a", "b"], "stream": True})
    assert_error(st, out, 400, "one input")
    st, out = srv.post_json("/translate", {"inputs": "a", "stream": True,
                                           "parameters": {"num_beams": 2}})
    assert_error(st, out, 400, "num_beams")
    st, out = srv.post_json("/translate", {"inputs": [1, 2, 1000]})
    assert_error(st, out, 400, "out of range")
    # still serving, and nothing held
    assert translate(srv, "hello world", max_new_tokens=4)["generated_tokens"] >= 1
    blocks_back_to_zero(srv)


def test_translate_on_other_kinds(tmp_path_factory):
    """/translate on a decoder-only model: 400 naming why, as /embed on a decoder is answered;
    the decoder's own routes are unchanged."""
    d = make_chat_decoder.make(str(tmp_path_factory.mktemp("dec") / "m"), seed=7)
    s = Server(d)
    try:
        st, out = s.post_json("/translate", {"inputs": "hello"})
        assert_error(st, out, 400, "encoder-decoder", "decoder-only")
        st, out = s.post_json("/embed", {"inputs": "hello"})
        assert st == 400
        info = json.loads(s.request("GET", "/info")[2])
        assert info["model_kind"] == "decoder" and "max_source_positions" not in info
        st, out = s.post_json("/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert st == 200
    finally:
        s.stop()


# ---- batching and memory ------------------------------------------------------------------------

def test_concurrent_mixed_lengths_equal_alone(srv, marian):
    """Sources of mixed lengths, greedy and beams, sent at once from threads (continuous
    batching: encoded together, decoding together, joining mid-way): each answer is the
    reference's, as alone; every KV block (self and cross) comes back."""
    _, cfg, ref = marian
    srcs = sources(cfg, 6, (1, 30, 7, 50, 3, 18, 9, 40, 2, 25, 12, 5))
    jobs = []
    for k, s in enumerate(srcs):
        beams = 3 if k % 4 == 3 else 1
        n = 6 + (k * 5) % 20
        want = (ref.beam_search(s, beams, n)[0] if beams > 1 else ref.greedy(s, n))[1:]
        jobs.append((s, beams, n, want))
    got = [None] * len(jobs)

    def run(i):
        s, beams, n, _ = jobs[i]
        got[i] = ids_of(translate(srv, s, max_new_tokens=n, num_beams=beams))

    th = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in th:
        t.start()
    for t in th:
        t.join(120)
    assert got == [j[3] for j in jobs]
    blocks_back_to_zero(srv)


def test_disconnects_and_errors_free_blocks(marian):
    """Clients that go away mid-stream (/translate, /v1/completions with ignore_eos) and whole
    answers whose clients close before the end (beams): the sequences are aborted, the KV blocks
    (self and cross) return to zero, the server still answers."""
    d, cfg, _ = marian
    s = Server(d, "--max-num-seqs", 16, "--step-delay-ms", 50, "--block-size", 4)
    try:
        src = sources(cfg, 7, (40,))[0]
        bodies = [("/v1/completions", {"prompt": src, "max_tokens": 60, "stream": True,
                                       "ignore_eos": True, "temperature": 0})] * 4
        bodies += [("/translate", {"inputs": src, "stream": True})] * 4
        bodies += [("/translate", {"inputs": src, "parameters": {"num_beams": 3}})] * 2
        socks = []
        for path, body in bodies:
            b = json.dumps(body).encode()
            so = socket.create_connection((s.host, s.port))
            so.sendall(b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                       b"application/json\r\nContent-Length: %d\r\n\r\n" % (path.encode(),
                                                                          len(b)) + b)
            socks.append((body.get("stream"), so))
        time.sleep(0.3)
        m = s.metrics()
        assert m["ragged_gen_kv_blocks_used"] > 0
        for stream, so in socks:
            if stream:
                assert so.recv(100)  # streaming started
            so.close()
        m = blocks_back_to_zero(s)
        assert m["ragged_gen_requests_aborted_total"] >= 1
        assert translate(s, "hello", max_new_tokens=3)["generated_tokens"] >= 1
        blocks_back_to_zero(s)
    finally:
        s.stop()
