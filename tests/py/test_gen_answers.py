"""The generation routes' answers (app/server/gen_request.c), read by the real clients.

The C unit test build/tests/test_gen_request writes every answer it checks to a directory when
RG_DUMP_GEN_ANSWERS is set (<api>__<name>.json: a whole answer, .sse: a stream). Here those bytes
are served to the clients through a mock HTTP transport and parsed as a user's program would:
  - openai.OpenAI (completions.create / chat.completions.create, with and without stream), with
    _strict_response_validation so pydantic checks every field against the client's models
    (Completion, ChatCompletion, ChatCompletionChunk); plus model_validate of each answer;
  - huggingface_hub.InferenceClient.text_generation (details and stream), whose dataclasses parse
    permissively, so each answer is also checked field by field against their annotations
    (every field without a default present, every value of the annotated type).
The values are those the C test fed the writers (tokens "Hel", a half "€" b"\\xe2\\x82" with a
-inf logprob, "</s>"), so a client-side reading that differs fails too.
"""
import dataclasses
import os
import subprocess
import types
import typing

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("RAGGED_BIN", os.path.join(ROOT, "build", "ragged"))
UNIT = os.path.join(os.path.dirname(BIN), "tests", "test_gen_request")

EXPECTED = {
    "completion__logprobs.json", "completion__stream.sse", "chat__logprobs.json",
    "chat__plain.json", "chat__stream.sse", "chat__error.sse", "tgi__plain.json",
    "tgi__details.json", "tgi__details_eos.json", "tgi__stream.sse", "tgi__error.sse",
}
HALF_EURO = "\ufffd\ufffd"  # b"\xe2\x82" in a JSON string: one U+FFFD per stray byte


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """name -> bytes of every answer the C unit test wrote."""
    if not os.path.exists(UNIT):
        pytest.fail(f"{UNIT} not built: run `make` (or `make asan`)")
    out = tmp_path_factory.mktemp("gen_answers")
    env = dict(os.environ, RG_DUMP_GEN_ANSWERS=str(out))
    env.pop("LD_PRELOAD", None)  # the ASan pass preloads the runtime for Python, not for this
    r = subprocess.run([UNIT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = {p.name: p.read_bytes() for p in out.iterdir()}
    assert EXPECTED <= set(got), f"missing dumps: {sorted(EXPECTED - set(got))}"
    return got


# ---- OpenAI -------------------------------------------------------------------------------

def openai_client(body, content_type, strict=True):
    import httpx
    import openai

    def handler(request):
        return httpx.Response(200, content=body, headers={"content-type": content_type})

    return openai.OpenAI(api_key="test", base_url="http://127.0.0.1:9/v1", max_retries=0,
                         http_client=httpx.Client(transport=httpx.MockTransport(handler)),
                         _strict_response_validation=strict)


def sse_data(body):
    """The data of each event, split by openai's own SSE decoder; stops at [DONE]."""
    from openai._streaming import SSEDecoder
    import json

    out = []
    for sse in SSEDecoder().iter_bytes(iter([body])):
        if sse.data.startswith("[DONE]"):
            return out, True
        out.append(json.loads(sse.data))
    return out, False


MSGS = [{"role": "user", "content": "x"}]


def test_completion_whole(answers):
    from openai.types import Completion

    body = answers["completion__logprobs.json"]
    r = openai_client(body, "application/json").completions.create(
        model="tiny", prompt="x", logprobs=2)
    assert isinstance(r, Completion)
    Completion.model_validate_json(body, strict=False)
    c0, c1 = r.choices
    assert r.object == "text_completion" and r.id == "cmpl-abc" and r.created == 1700000000
    assert r.model == "tiny" and r.system_fingerprint == "fp_1"
    assert c0.text == "Hel" + HALF_EURO + "</s>" and c0.finish_reason == "stop"
    assert c0.logprobs.tokens == ["Hel", HALF_EURO, "</s>"]
    assert c0.logprobs.token_logprobs == [-0.25, -9999.0, -0.125]
    assert c0.logprobs.top_logprobs[0] == {"Hel": -0.25, "He": -1.5}
    assert c0.logprobs.text_offset == [0, 3, 5]
    assert c0.model_extra.get("stop_reason") == "\n\n"  # vLLM's extension
    assert c1.index == 1 and c1.text == 'ab"\\\n\x01' and c1.logprobs is None
    assert c1.finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (5, 19, 24)
    assert r.usage.prompt_tokens_details.cached_tokens == 2


def test_completion_stream(answers):
    from openai.types import Completion

    body = answers["completion__stream.sse"]
    # the client as users run it (its default, lenient parsing) ...
    chunks = list(openai_client(body, "text/event-stream", strict=False).completions.create(
        model="tiny", prompt="x", stream=True, stream_options={"include_usage": True}))
    assert [c.choices[0].text for c in chunks[:2]] == ["Hel", HALF_EURO]
    assert chunks[1].choices[0].finish_reason == "stop"
    assert chunks[2].choices == [] and chunks[2].usage.total_tokens == 7
    # ... and each chunk under pydantic's checks. OpenAI's spec types a choice's finish_reason
    # as never null, yet its own streams (and vLLM's) send null until the last chunk: only that
    # field is relaxed here.
    data, done = sse_data(body)
    assert done and len(data) == 3
    assert data[0]["choices"][0]["finish_reason"] is None
    for d in data:
        for ch in d["choices"]:
            if ch["finish_reason"] is None:
                ch["finish_reason"] = "stop"
        Completion.model_validate(d)


def test_chat_whole(answers):
    from openai.types.chat import ChatCompletion

    for name in ("chat__logprobs.json", "chat__plain.json"):
        body = answers[name]
        r = openai_client(body, "application/json").chat.completions.create(
            model="tiny", messages=MSGS, logprobs=True, top_logprobs=2)
        assert isinstance(r, ChatCompletion)
        ChatCompletion.model_validate_json(body)
        assert r.object == "chat.completion" and r.system_fingerprint is None
        m = r.choices[0].message
        assert m.role == "assistant" and m.content == "Hel" + HALF_EURO
        assert r.choices[0].finish_reason == "stop"
    r = openai_client(answers["chat__logprobs.json"], "application/json").chat.completions.create(
        model="tiny", messages=MSGS)
    lp = r.choices[0].logprobs.content
    assert [t.token for t in lp] == ["Hel", HALF_EURO]
    assert [t.logprob for t in lp] == [-0.25, -9999.0]
    assert lp[0].bytes == list(b"Hel") and lp[1].bytes == [0xE2, 0x82]
    assert [(t.token, t.logprob, t.bytes) for t in lp[0].top_logprobs] == [
        ("Hel", -0.25, list(b"Hel")), ("He", -1.5, list(b"He"))]
    assert r.choices[1].logprobs.content == [] and r.choices[1].finish_reason == "length"
    assert r.usage.total_tokens == 9


def test_chat_stream(answers):
    import openai
    from openai.types.chat import ChatCompletionChunk

    body = answers["chat__stream.sse"]
    chunks = list(openai_client(body, "text/event-stream").chat.completions.create(
        model="tiny", messages=MSGS, stream=True, stream_options={"include_usage": True},
        logprobs=True))
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks) and len(chunks) == 5
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:4]) == "Hel"
    assert [c.choices[0].finish_reason for c in chunks[:4]] == [None, None, None, "length"]
    assert chunks[2].choices[0].logprobs.content[0].bytes == [0xE2, 0x82]
    assert chunks[4].choices == [] and chunks[4].usage.completion_tokens == 2
    data, done = sse_data(body)
    assert done
    for d in data:
        ChatCompletionChunk.model_validate(d)
    # an error event mid-stream: the client raises with the message
    with pytest.raises(openai.APIError, match='model failed: "x"'):
        list(openai_client(answers["chat__error.sse"], "text/event-stream").chat.completions
             .create(model="tiny", messages=MSGS, stream=True))


# ---- TGI / huggingface_hub ----------------------------------------------------------------

def check_annotated(cls, data, path="$"):
    """data (JSON-decoded) against dataclass cls's annotations: required fields present, every
    value of its type. TGI's logprob is an f32 that serde writes as null for NaN (the first
    prefill token), so null is allowed there."""
    from huggingface_hub.inference._generated.types.base import BaseInferenceType

    def check(t, v, p):
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin in (typing.Union, types.UnionType):
            errs = []
            for a in args:
                try:
                    return check(a, v, p)
                except AssertionError as e:
                    errs.append(str(e))
            raise AssertionError(f"{p}: {v!r} matches none of {args}: {errs}")
        if origin is typing.Literal:
            assert v in args, f"{p}: {v!r} not in {args}"
        elif origin is list:
            assert isinstance(v, list), f"{p}: {v!r} is not a list"
            for i, x in enumerate(v):
                check(args[0], x, f"{p}[{i}]")
        elif t is type(None):
            assert v is None, f"{p}: {v!r} is not null"
        elif isinstance(t, type) and issubclass(t, BaseInferenceType):
            check_annotated(t, v, p)
        elif t is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            assert ok or (v is None and p.endswith(".logprob")), f"{p}: {v!r} is not a number"
        elif t is int:
            assert isinstance(v, int) and not isinstance(v, bool), f"{p}: {v!r} is not an int"
        elif t in (str, bool):
            assert isinstance(v, t), f"{p}: {v!r} is not {t.__name__}"
        else:
            raise AssertionError(f"{p}: no rule for {t}")

    assert isinstance(data, dict), f"{path}: {data!r} is not an object"
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            assert f.name in data, f"{path}.{f.name} missing ({cls.__name__})"
        if f.name in data:
            check(hints[f.name], data[f.name], f"{path}.{f.name}")


@pytest.fixture
def hf_client():
    """InferenceClient whose HTTP client answers each POST with hf_client.body (no network)."""
    from huggingface_hub import InferenceClient
    import huggingface_hub.utils._http as hfhttp

    # the HTTP library huggingface_hub's client is built on (httpx; httpx2 from 2.x on)
    httpx2 = getattr(hfhttp, "httpx2", None) or hfhttp.httpx

    state = {"body": b""}

    def handler(request):
        if request.method != "POST":
            return httpx2.Response(404, content=b"{}")
        return httpx2.Response(200, content=state["body"],
                               headers={"content-type": "application/json"})

    saved = hfhttp._GLOBAL_CLIENT_FACTORY
    hfhttp.close_session()
    hfhttp.set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(handler)))
    client = InferenceClient(base_url="http://127.0.0.1:9")
    client.state = state
    yield client
    hfhttp.close_session()
    hfhttp.set_client_factory(saved)


def test_tgi_whole(answers, hf_client):
    import json
    from huggingface_hub import TextGenerationOutput

    for name in ("tgi__plain.json", "tgi__details.json", "tgi__details_eos.json"):
        check_annotated(TextGenerationOutput, json.loads(answers[name]))
    hf_client.state["body"] = answers["tgi__plain.json"]
    assert hf_client.text_generation("Hi", max_new_tokens=2) == "Hi Hel" + HALF_EURO
    hf_client.state["body"] = answers["tgi__details.json"]
    out = hf_client.text_generation("Hi", details=True, max_new_tokens=2)
    assert isinstance(out, TextGenerationOutput)
    d = out.details
    assert d.finish_reason == "length" and d.generated_tokens == 2 and d.seed == 2**64 - 1
    assert [(t.id, t.text, t.logprob) for t in d.prefill] == [(1, "<s>", None), (5, "Hi", -2)]
    assert [(t.id, t.text, t.logprob, t.special) for t in d.tokens] == [
        (9, "Hel", -0.25, False), (12, HALF_EURO, -9999.0, False)]
    assert [[t["id"] for t in pos] for pos in d.top_tokens] == [[9, 7], [11, 12]]
    assert [(s.generated_text, s.finish_reason, s.seed) for s in d.best_of_sequences] == [
        ("Hi x", "eos_token", 3), ("Hi y", "stop_sequence", None)]


def test_tgi_stream(answers, hf_client):
    from huggingface_hub import TextGenerationStreamOutput
    from huggingface_hub.errors import OverloadedError
    from huggingface_hub.inference._common import _format_text_generation_stream_output

    body = answers["tgi__stream.sse"]
    # each event line as InferenceClient reads it, then the annotations
    import json
    lines = [ln for ln in body.decode().split("\n") if ln]
    assert all(ln.startswith("data: ") for ln in lines) and len(lines) == 3
    for ln in lines:
        out = _format_text_generation_stream_output(ln, details=True)
        assert isinstance(out, TextGenerationStreamOutput)
        check_annotated(TextGenerationStreamOutput, json.loads(ln[6:]))
    hf_client.state["body"] = body
    events = list(hf_client.text_generation("Hi", details=True, stream=True))
    assert [e.token.id for e in events] == [9, 12, 2]
    assert [e.details for e in events[:2]] == [None, None]
    last = events[-1]
    assert last.generated_text == "Hel" + HALF_EURO
    assert (last.details.finish_reason, last.details.generated_tokens, last.details.seed,
            last.details.input_length) == ("eos_token", 3, 42, 6)
    # without details the client yields the token texts: they make the whole text
    assert "".join(hf_client.text_generation("Hi", stream=True)) == "Hel" + HALF_EURO
    # an aborted stream ends with TGI's error event, which the client raises by its type
    hf_client.state["body"] = answers["tgi__error.sse"]
    with pytest.raises(OverloadedError):
        list(hf_client.text_generation("Hi", details=True, stream=True))
