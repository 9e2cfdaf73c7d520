"""Clients that must work unmodified against `ragged serve` with a decoder (issue 20): the openai
SDK (completions and chat, streaming and not, sync and async), LangChain's ChatOpenAI,
LlamaIndex's OpenAILike, huggingface_hub's InferenceClient (text_generation streaming and not,
with details; chat_completion) and `curl -N`. The model is make_chat_decoder.py's tiny GPT-2;
each client's text is checked against the server's own greedy answer, which
test_serve_gen.py checks against rg_generate alone."""
import asyncio
import json
import os
import shutil
import subprocess

import pytest

import make_chat_decoder
from server_util import Server

openai = pytest.importorskip("openai")
MSGS = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Hello!"}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = make_chat_decoder.make(str(tmp_path_factory.mktemp("chatdec_cli") / "m"), seed=11)
    s = Server(d, "--served-model-name", "tiny-gpt")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def want(srv):
    """The server's greedy answers (raw HTTP) that every client must reproduce."""
    st, comp = srv.post_json("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 8,
                                                 "temperature": 0, "ignore_eos": True})
    assert st == 200
    st, chat = srv.post_json("/v1/chat/completions", {"messages": MSGS, "max_tokens": 8,
                                                      "temperature": 0, "ignore_eos": True})
    assert st == 200
    return comp["choices"][0]["text"], chat["choices"][0]["message"]["content"]


def base(srv):
    return f"http://{srv.host}:{srv.port}/v1"


EXTRA = {"ignore_eos": True}


def test_openai_sdk_sync(srv, want):
    c = openai.OpenAI(base_url=base(srv), api_key="none")
    models = c.models.list()
    assert [m.id for m in models.data] == ["tiny-gpt"]
    r = c.completions.create(model="tiny-gpt", prompt="The quick brown fox", max_tokens=8,
                             temperature=0, extra_body=EXTRA)
    assert r.choices[0].text == want[0] and r.usage.completion_tokens == 8
    parts = [ch.choices[0].text for ch in c.completions.create(
        model="tiny-gpt", prompt="The quick brown fox", max_tokens=8, temperature=0,
        stream=True, extra_body=EXTRA) if ch.choices]
    assert "".join(parts) == want[0]
    r = c.chat.completions.create(model="tiny-gpt", messages=MSGS, max_tokens=8, temperature=0,
                                  extra_body=EXTRA)
    assert r.choices[0].message.content == want[1] and r.choices[0].finish_reason == "length"
    stream = c.chat.completions.create(model="tiny-gpt", messages=MSGS, max_tokens=8,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True}, extra_body=EXTRA)
    text, usage = "", None
    for ch in stream:
        if ch.choices:
            text += ch.choices[0].delta.content or ""
        if ch.usage:
            usage = ch.usage
    assert text == want[1] and usage.completion_tokens == 8
    # logprobs in the SDK's types
    r = c.chat.completions.create(model="tiny-gpt", messages=MSGS, max_tokens=4, temperature=0,
                                  logprobs=True, top_logprobs=3, extra_body=EXTRA)
    lp = r.choices[0].logprobs.content
    assert len(lp) == 4 and all(len(t.top_logprobs) == 3 for t in lp)
    assert all(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in lp)
    # an error in OpenAI's shape becomes the SDK's exception
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="tiny-gpt", prompt="x", max_tokens=4, temperature=5)
    assert "temperature" in str(e.value)


def test_openai_sdk_async(srv, want):
    async def go():
        c = openai.AsyncOpenAI(base_url=base(srv), api_key="none")
        rs = await asyncio.gather(*[c.chat.completions.create(
            model="tiny-gpt", messages=MSGS, max_tokens=8, temperature=0, extra_body=EXTRA)
            for _ in range(4)])
        st = await c.chat.completions.create(model="tiny-gpt", messages=MSGS, max_tokens=8,
                                             temperature=0, stream=True, extra_body=EXTRA)
        text = ""
        async for ch in st:
            if ch.choices:
                text += ch.choices[0].delta.content or ""
        await c.close()
        return [r.choices[0].message.content for r in rs], text
    outs, text = asyncio.run(go())
    assert outs == [want[1]] * 4 and text == want[1]


def test_langchain_chat_openai(srv, want):
    lc = pytest.importorskip("langchain_openai")
    llm = lc.ChatOpenAI(base_url=base(srv), api_key="none", model="tiny-gpt", temperature=0,
                        max_tokens=8, extra_body=EXTRA)
    msgs = [("system", MSGS[0]["content"]), ("human", MSGS[1]["content"])]
    assert llm.invoke(msgs).content == want[1]
    assert "".join(ch.content for ch in llm.stream(msgs)) == want[1]


def test_llamaindex_openai_like(srv, want):
    oal = pytest.importorskip("llama_index.llms.openai_like")
    from llama_index.core.llms import ChatMessage
    llm = oal.OpenAILike(api_base=base(srv), api_key="none", model="tiny-gpt",
                         is_chat_model=True, temperature=0, max_tokens=8,
                         additional_kwargs={"extra_body": EXTRA})
    r = llm.chat([ChatMessage(role="system", content=MSGS[0]["content"]),
                  ChatMessage(role="user", content=MSGS[1]["content"])])
    assert r.message.content == want[1]
    llm2 = oal.OpenAILike(api_base=base(srv), api_key="none", model="tiny-gpt",
                          is_chat_model=False, temperature=0, max_tokens=8,
                          additional_kwargs={"extra_body": EXTRA})
    assert llm2.complete("The quick brown fox").text == want[0]


def test_huggingface_hub_client(srv, want):
    hub = pytest.importorskip("huggingface_hub")
    c = hub.InferenceClient(base_url=f"http://{srv.host}:{srv.port}")
    out = c.text_generation("The quick brown fox", max_new_tokens=6, details=True)
    assert out.details.generated_tokens == len(out.details.tokens)
    assert out.generated_text == "".join(t.text for t in out.details.tokens) or \
        "\ufffd" in out.generated_text
    streamed = list(c.text_generation("The quick brown fox", max_new_tokens=6, stream=True,
                                      details=True))
    assert [s.token.id for s in streamed] == [t.id for t in out.details.tokens]
    assert streamed[-1].generated_text == out.generated_text
    assert c.text_generation("The quick brown fox", max_new_tokens=6) == out.generated_text
    # without ignore_eos (the hub client has no extra body): greedy either way, so the stream
    # and the whole answer agree, and both are the raw route's answer cut at an EOS if any
    r = c.chat_completion(messages=MSGS, max_tokens=8, temperature=0)
    assert r.choices[0].message.content and want[1].startswith(r.choices[0].message.content)
    parts = [ch.choices[0].delta.content or "" for ch in c.chat_completion(
        messages=MSGS, max_tokens=8, temperature=0, stream=True) if ch.choices]
    assert "".join(parts) == r.choices[0].message.content


@pytest.mark.skipif(not shutil.which("curl"), reason="curl not installed")
def test_curl_no_buffer_stream(srv, want):
    body = json.dumps({"model": "tiny-gpt", "messages": MSGS, "max_tokens": 8, "temperature": 0,
                       "stream": True, "ignore_eos": True})
    out = subprocess.run(["curl", "-sN", "-H", "Content-Type: application/json", "-d", body,
                          f"http://{srv.host}:{srv.port}/v1/chat/completions"],
                         capture_output=True, timeout=60, text=True,
                         env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    assert out.returncode == 0
    events = [b[len("data: "):] for b in out.stdout.split("\n\n") if b.strip()]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == want[1]
