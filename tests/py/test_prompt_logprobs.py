"""Prompt scoring in `ragged serve` (issue 31 item 5): OpenAI legacy completions' echo with
logprobs (the choice's logprobs start with the prompt tokens, the first one's token_logprob and
top_logprobs null), max_tokens 0 with echo (lm-eval-harness's loglikelihood requests), and
vLLM's prompt_logprobs on completions (per choice) and chat (beside usage), as
[null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}]: the prompt token itself, then the
top K.

The model is make_chat_decoder.py's tiny random GPT-2 with a real byte-level BPE tokenizer. The
independent reference is ref_decoder.py's float64 NumPy forward (written from transformers'
GPT2LMHeadModel), its logits log-softmaxed in float64; the server runs fp32 on the CPU, so the
tolerance is 1e-4 on log-probabilities. Prompts longer than --max-num-batched-tokens (16) are
prefilled in chunks, so their prompt log-probs are gathered over several steps; a prompt sent
twice must not take its prefix from the prefix cache (those rows would have no logits)."""
import json
import os

import numpy as np
import pytest

import make_chat_decoder
import ref_decoder
from server_util import Server, hf_tokenizer

TOL = 1e-4
PROMPTS = ["Hello, world! How are you today?", "The quick brown fox",
           "A language model predicts the next token from the tokens before it."]
LONG = "Streams of tokens are sent to the client as server-sent events. " * 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_chat_decoder.make(str(tmp_path_factory.mktemp("plog") / "m"), seed=11)


@pytest.fixture(scope="module")
def tok(model_dir):
    return hf_tokenizer(model_dir)


@pytest.fixture(scope="module")
def ref(model_dir):
    """ids -> (len(ids), vocab) float64 log-softmax of the reference forward."""
    from safetensors.numpy import load_file
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = load_file(os.path.join(model_dir, "model.safetensors"))

    def logsoftmax(ids):
        x = ref_decoder.forward(cfg, w, np.asarray(ids))
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))
    return logsoftmax


@pytest.fixture(scope="module")
def srv(model_dir):
    # steps of 16 tokens: LONG (> 40 tokens) is prefilled in chunks
    s = Server(model_dir, "--max-num-seqs", 8, "--max-num-batched-tokens", 16, "--block-size",
               4, "--kv-cache-bytes", 4 << 20)
    yield s
    s.stop()


def check_rank(lps_row, tid, rank):
    """rank is 1 + the tokens more probable than tid in the reference row (ties within TOL
    either way)."""
    x = lps_row[tid]
    lo = 1 + int((lps_row > x + TOL).sum())
    hi = 1 + int((lps_row > x - TOL).sum()) - 1
    assert lo <= rank <= max(hi, lo), (tid, rank, lo, hi)


def check_prompt_logprobs(pl, ids, lps, k):
    """vLLM's prompt_logprobs list against the reference log-softmax lps of ids."""
    assert len(pl) == len(ids)
    assert pl[0] is None
    srt = np.sort(lps, axis=-1)[:, ::-1]
    for i in range(1, len(ids)):
        d = pl[i]
        keys = list(d)
        assert keys[0] == str(ids[i]), (i, keys, ids[i])  # the prompt token first
        row = lps[i - 1]
        for key, e in d.items():
            assert set(e) == {"logprob", "rank", "decoded_token"}
            assert abs(e["logprob"] - row[int(key)]) <= TOL, (i, key, e, row[int(key)])
            assert isinstance(e["decoded_token"], str)
        check_rank(row, ids[i], d[keys[0]]["rank"])
        # the top k, the prompt token once: k entries when it is among them, else k + 1;
        # each alternative the reference's rank-th best
        others = [e for key, e in d.items() if key != keys[0]]
        ranks = sorted(e["rank"] for e in others)
        assert len(d) in (k, k + 1) if k else len(d) == 1, (i, d)
        assert len(set(ranks)) == len(ranks) and all(1 <= r <= k for r in ranks), (i, d)
        if len(d) == k:
            assert d[keys[0]]["rank"] <= k, (i, d)
        for e in others:
            assert abs(srt[i - 1, e["rank"] - 1] - e["logprob"]) <= TOL, (i, e)


def test_echo_logprobs_prompt_list(srv, tok, ref):
    """echo + logprobs on a list of prompts: each choice's logprobs are the prompt's tokens
    (first token_logprob / top_logprobs null, the rest the reference's log-softmax and its top
    2), then the 3 generated ones; the text is the prompt then the completion."""
    st, out = srv.post_json("/v1/completions", {
        "prompt": PROMPTS, "echo": True, "logprobs": 2, "max_tokens": 3, "temperature": 0,
        "ignore_eos": True})
    assert st == 200, out
    chs = sorted(out["choices"], key=lambda c: c["index"])
    assert len(chs) == len(PROMPTS)
    for p, ch in zip(PROMPTS, chs):
        ids = tok.encode(p).ids
        n = len(ids)
        lps = ref(ids)
        lp = ch["logprobs"]
        assert ch["text"].startswith(p)
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == n + 3
        assert len(lp["top_logprobs"]) == len(lp["text_offset"]) == n + 3
        assert "".join(lp["tokens"][:n]) == tok.decode(ids)
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        for i in range(1, n):
            assert abs(lp["token_logprobs"][i] - lps[i - 1, ids[i]]) <= TOL, (p, i)
            top = lp["top_logprobs"][i]
            assert len(top) <= 2
            want = np.sort(lps[i - 1])[::-1][:2]
            # keys are pieces: two tokens of one piece (byte fragments: U+FFFD) share a key
            assert all(np.abs(want - v).min() <= TOL for v in top.values()), (i, top, want)
            assert len(top) == 2 or len({lp_tok for lp_tok in top}) < 2
        # the generated tokens: greedy, so each is its position's best
        for i in range(n, n + 3):
            assert lp["token_logprobs"][i] <= 0
            assert lp["top_logprobs"][i] is not None
        assert lp["text_offset"][0] == 0
        assert lp["text_offset"] == sorted(lp["text_offset"])
        assert ch["finish_reason"] == "length"
        # echo with logprobs only: no prompt_logprobs field asked
        assert "prompt_logprobs" not in ch
    assert out["usage"]["completion_tokens"] == 3 * len(PROMPTS)


def test_echo_max_tokens_zero(srv, tok, ref):
    """max_tokens 0 with echo scores the prompt alone (lm-eval-harness's loglikelihood): the
    text is the prompt, the logprobs are its tokens', nothing is generated."""
    for p in PROMPTS + [LONG]:
        ids = tok.encode(p).ids
        lps = ref(ids)
        st, out = srv.post_json("/v1/completions", {
            "prompt": p, "echo": True, "logprobs": 0, "max_tokens": 0, "temperature": 0})
        assert st == 200, out
        ch = out["choices"][0]
        assert ch["text"] == p
        assert ch["finish_reason"] == "length"
        lp = ch["logprobs"]
        assert len(lp["tokens"]) == len(ids)
        assert lp["token_logprobs"][0] is None
        got = np.asarray(lp["token_logprobs"][1:], np.float64)
        want = lps[np.arange(len(ids) - 1), ids[1:]]
        assert np.abs(got - want).max() <= TOL, (p, np.abs(got - want).max())
        assert out["usage"]["completion_tokens"] == 0
        assert out["usage"]["prompt_tokens"] == len(ids)
    # without logprobs: the prompt's text alone
    st, out = srv.post_json("/v1/completions", {"prompt": PROMPTS[0], "echo": True,
                                                "max_tokens": 0})
    assert st == 200, out
    assert out["choices"][0]["text"] == PROMPTS[0]
    assert out["choices"][0]["logprobs"] is None


def test_prompt_logprobs_completions(srv, tok, ref):
    """vLLM's prompt_logprobs on completions: per choice, null then {id: {logprob, rank,
    decoded_token}} with the prompt token first and the top 3; n 2 choices share it."""
    for p in PROMPTS:
        ids = tok.encode(p).ids
        st, out = srv.post_json("/v1/completions", {
            "prompt": p, "prompt_logprobs": 3, "max_tokens": 2, "temperature": 0, "n": 2,
            "ignore_eos": True})
        assert st == 200, out
        assert len(out["choices"]) == 2
        pls = [c["prompt_logprobs"] for c in out["choices"]]
        assert pls[0] == pls[1]
        check_prompt_logprobs(pls[0], ids, ref(ids), 3)
        # the text is the completion alone (no echo)
        assert not out["choices"][0]["text"].startswith(p) or not p
    # prompt_logprobs 0: the prompt token alone
    ids = tok.encode(PROMPTS[0]).ids
    st, out = srv.post_json("/v1/completions", {"prompt": ids, "prompt_logprobs": 0,
                                                "max_tokens": 1})
    assert st == 200, out
    pl = out["choices"][0]["prompt_logprobs"]
    assert pl[0] is None and all(len(d) == 1 for d in pl[1:])
    lps = ref(ids)
    for i in range(1, len(ids)):
        (key, e), = pl[i].items()
        assert int(key) == ids[i] and abs(e["logprob"] - lps[i - 1, ids[i]]) <= TOL


def test_prompt_logprobs_chat(srv, tok, ref):
    """prompt_logprobs on chat: the answer's prompt_logprobs (beside usage) score the rendered
    template's tokens (vLLM's /tokenize of the same messages)."""
    msgs = [{"role": "user", "content": "Hello, world! How are you today?"}]
    st, t = srv.post_json("/tokenize", {"messages": msgs})
    assert st == 200, t
    ids = t["tokens"]
    st, out = srv.post_json("/v1/chat/completions", {
        "messages": msgs, "prompt_logprobs": 2, "max_tokens": 2, "temperature": 0})
    assert st == 200, out
    assert "prompt_logprobs" not in out["choices"][0]
    check_prompt_logprobs(out["prompt_logprobs"], ids, ref(ids), 2)
    assert out["usage"]["prompt_tokens"] == len(ids)
    # not asked: no field
    st, out = srv.post_json("/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
    assert st == 200 and "prompt_logprobs" not in out


def test_long_prompt_chunked(srv, tok, ref):
    """A prompt of more than 2 steps of 16 tokens: its prompt log-probs are gathered over the
    chunks, every position scored."""
    ids = tok.encode(LONG).ids
    assert len(ids) > 32
    st, out = srv.post_json("/v1/completions", {"prompt": LONG, "prompt_logprobs": 1,
                                                "max_tokens": 1, "temperature": 0})
    assert st == 200, out
    check_prompt_logprobs(out["choices"][0]["prompt_logprobs"], ids, ref(ids), 1)


def test_prefix_cache_does_not_skip_scoring(srv, tok, ref):
    """The same prompt twice: the second answer still scores every prompt token (no prefix
    taken from the cache), equal to the first; a plain request after it does hit the cache
    those two filled."""
    p = LONG + "Prefix "
    ids = tok.encode(p).ids
    body = {"prompt": p, "prompt_logprobs": 2, "echo": True, "logprobs": 1, "max_tokens": 2,
            "temperature": 0, "ignore_eos": True}
    st, a = srv.post_json("/v1/completions", body)
    st2, b = srv.post_json("/v1/completions", body)
    assert st == st2 == 200, (a, b)
    ca, cb = a["choices"][0], b["choices"][0]
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert ca["prompt_logprobs"] == cb["prompt_logprobs"]
    assert ca["logprobs"] == cb["logprobs"]
    check_prompt_logprobs(cb["prompt_logprobs"], ids, ref(ids), 2)
    lp = cb["logprobs"]["token_logprobs"]
    assert lp[0] is None and all(x is not None for x in lp[1:])
    # echo's prompt entries agree with prompt_logprobs' own
    for i in range(1, len(ids)):
        assert lp[i] == cb["prompt_logprobs"][i][str(ids[i])]["logprob"]
    st, c = srv.post_json("/v1/completions", {"prompt": p, "max_tokens": 2, "temperature": 0,
                                              "ignore_eos": True})
    assert st == 200
    assert c["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    # the same greedy completion with and without scoring
    assert cb["text"] == p + c["choices"][0]["text"]


@pytest.mark.parametrize("route,body,param", [
    ("/v1/completions", {"prompt_logprobs": -1}, "prompt_logprobs"),
    ("/v1/completions", {"prompt_logprobs": 21}, "prompt_logprobs"),
    ("/v1/completions", {"prompt_logprobs": "3"}, "prompt_logprobs"),
    ("/v1/completions", {"prompt_logprobs": 2.5}, "prompt_logprobs"),
    ("/v1/completions", {"prompt_logprobs": True}, "prompt_logprobs"),
    ("/v1/chat/completions", {"prompt_logprobs": 99}, "prompt_logprobs"),
    ("/v1/completions", {"max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {"max_tokens": -1, "echo": True}, "max_tokens"),
    ("/v1/completions", {"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ("/v1/chat/completions", {"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ("/v1/completions", {"echo": True, "max_tokens": 0, "use_beam_search": True,
                         "temperature": 0}, "max_tokens"),
])
def test_bad_values(srv, route, body, param):
    base = ({"prompt": "Hello"} if route == "/v1/completions" else
            {"messages": [{"role": "user", "content": "Hello"}]})
    st, out = srv.post_json(route, {**base, **body})
    assert st == 400, out
    assert out["error"]["param"] == param, out
    assert param in out["error"]["message"], out


def post_stream(srv, body):
    """The chunks of a completions stream (the JSON of each event before [DONE])."""
    c = srv.conn(60)
    c.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    assert r.status == 200, data
    ev = [b[len("data: "):] for b in data.split("\n\n") if b.strip()]
    assert ev[-1] == "[DONE]"
    return [json.loads(e) for e in ev[:-1]]


@pytest.mark.parametrize("max_tokens,logprobs,n", [(3, 2, 1), (0, 1, 1), (2, None, 1),
                                                   (2, 0, 2)])
def test_echo_stream(srv, tok, ref, max_tokens, logprobs, n):
    """A stream with echo sends each choice's prompt first, in a chunk of its own (vLLM's), with
    the prompt tokens' logprobs when asked (the first null); the rest is the completion the
    whole answer has."""
    ids = tok.encode(LONG).ids
    body = {"prompt": LONG, "echo": True, "max_tokens": max_tokens, "temperature": 0, "n": n,
            "ignore_eos": True}
    if logprobs is not None:
        body["logprobs"] = logprobs
    chunks = post_stream(srv, body)
    st, whole = srv.post_json("/v1/completions", body)
    assert st == 200, whole
    lps = ref(ids)
    for q in range(n):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == q]
        first = mine[0]
        assert first["text"] == LONG
        if logprobs is None:
            assert first["logprobs"] is None
        else:
            lp = first["logprobs"]
            assert len(lp["tokens"]) == len(ids)
            assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
            for i in range(1, len(ids)):
                assert abs(lp["token_logprobs"][i] - lps[i - 1, ids[i]]) <= TOL, i
        text = "".join(c["text"] for c in mine)
        want = next(c for c in whole["choices"] if c["index"] == q)
        assert text == want["text"]
        assert [c["finish_reason"] for c in mine if c["finish_reason"]] == ["length"]
        if logprobs is not None:
            toks = [t for c in mine if c["logprobs"] for t in c["logprobs"]["tokens"]]
            assert toks == want["logprobs"]["tokens"]


@pytest.mark.parametrize("max_rows,batch", [(1, 512), (3, 512), (128, 7), (5, 16)])
def test_python_score_row_limits(model_dir, tok, ref, max_rows, batch):
    """ragged.Generator.score (the library engine, max_tokens 0 with prompt_logprobs): the same
    log-probabilities, ranks and top 4 whatever the host's row limit and the step budget cut
    the prefill into."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))), "python"))
    import ragged
    ids = tok.encode(LONG).ids
    lps = ref(ids)
    srt = np.sort(lps, axis=-1)[:, ::-1]
    with ragged.Generator(model_dir) as g:
        r = g.score(ids, top_n=4, max_rows=max_rows, max_batch_tokens=batch)
    assert r["ids"] == ids
    assert r["logprobs"][0] is None and r["top"][0] is None and r["ranks"][0] is None
    for i in range(1, len(ids)):
        assert abs(r["logprobs"][i] - lps[i - 1, ids[i]]) <= TOL, (i, max_rows, batch)
        check_rank(lps[i - 1], ids[i], r["ranks"][i])
        assert len(r["top"][i]) == 4
        for k, (tid, lp) in enumerate(r["top"][i]):
            assert abs(lp - lps[i - 1, tid]) <= TOL and abs(lp - srt[i - 1, k]) <= TOL
    with ragged.Generator(model_dir) as g:
        with pytest.raises(ValueError):
            g.score(ids, top_n=21)


def test_tgi_prefill_logprobs(srv, tok, ref):
    """TGI's decoder_input_details: the prefill tokens carry their log-probabilities (the first
    null), as TGI's answer has them."""
    ids = tok.encode(PROMPTS[0]).ids
    lps = ref(ids)
    st, out = srv.post_json("/generate", {"inputs": PROMPTS[0], "parameters": {
        "max_new_tokens": 2, "details": True, "decoder_input_details": True}})
    assert st == 200, out
    pre = out["details"]["prefill"]
    assert [t["id"] for t in pre] == ids
    assert pre[0]["logprob"] is None
    for i in range(1, len(ids)):
        assert abs(pre[i]["logprob"] - lps[i - 1, ids[i]]) <= TOL, i


def test_scoring_survives_preemption(model_dir, tok, ref):
    """A KV cache of 40 blocks of 4 tokens for 8 scored requests of up to 60 tokens at once
    (test_serve_gen.py's preemption setup): sequences are preempted and prefilled again, and
    every answer's prompt log-probabilities (echo's and prompt_logprobs') still equal the
    reference (prefix caching on: a scored sequence prefilled again takes nothing from it)."""
    import threading
    s = Server(model_dir, "--max-num-seqs", 8, "--max-num-batched-tokens", 32, "--block-size",
               4, "--kv-cache-bytes", 40 * 4 * 2 * 2 * 32 * 4, "--max-model-len", 128,
               "--step-delay-ms", 10)
    try:
        texts = PROMPTS + [PROMPTS[0] * 2, LONG[:120], PROMPTS[2] + " " + PROMPTS[1],
                           PROMPTS[1] * 3, PROMPTS[2]]
        res = [None] * len(texts)

        def run(k):
            res[k] = s.post_json("/v1/completions", {
                "prompt": texts[k], "max_tokens": 24, "temperature": 0, "ignore_eos": True,
                "echo": True, "logprobs": 1, "prompt_logprobs": 1})
        th = [threading.Thread(target=run, args=(k,)) for k in range(len(texts))]
        for t in th:
            t.start()
        for t in th:
            t.join(120)
        for k, text in enumerate(texts):
            st, out = res[k]
            assert st == 200, out
            ids = tok.encode(text).ids
            ch = out["choices"][0]
            check_prompt_logprobs(ch["prompt_logprobs"], ids, ref(ids), 1)
            lp = ch["logprobs"]["token_logprobs"]
            assert lp[0] is None and len(lp) == len(ids) + 24
        m = s.metrics()
        assert m["ragged_gen_preemptions_total"] > 0
        assert m["ragged_gen_num_requests_running"] == 0
    finally:
        s.stop()


def test_server_row_limit_option(model_dir, tok, ref):
    """--max-prompt-logprob-rows: 3 scores a long prompt over many steps (still every position,
    equal to the reference); 0 refuses scoring requests with 400 and serves the rest."""
    ids = tok.encode(LONG).ids
    s = Server(model_dir, "--max-num-batched-tokens", 16, "--max-prompt-logprob-rows", 3)
    try:
        st, out = s.post_json("/v1/completions", {"prompt": LONG, "prompt_logprobs": 2,
                                                  "max_tokens": 1, "temperature": 0})
        assert st == 200, out
        check_prompt_logprobs(out["choices"][0]["prompt_logprobs"], ids, ref(ids), 2)
    finally:
        s.stop()
    s = Server(model_dir, "--max-prompt-logprob-rows", 0)
    try:
        st, out = s.post_json("/v1/completions", {"prompt": "abc", "echo": True, "logprobs": 1,
                                                  "max_tokens": 1})
        assert st == 400, out
        assert "prompt" in json.dumps(out).lower(), out
        st, out = s.post_json("/v1/completions", {"prompt": "abc", "max_tokens": 1})
        assert st == 200, out
    finally:
        s.stop()
