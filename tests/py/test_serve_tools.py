"""OpenAI tool calling against `ragged serve` (issue 31 item 2), with a tiny random-weight GPT-2 whose
tokenizer_config.json carries Qwen2.5-0.5B-Instruct's chat template (the Hermes tool branches).

References, none of them ragged's: the openai SDK's own parsing and stream accumulation; jsonschema
on the arguments; the prompt length against jinja2's rendering of the real template (as
transformers renders it with the tools, on the messages as vLLM passes them) tokenized by HF
`tokenizers`; LangChain's bind_tools, unmodified. A random model calls no tool by itself, so
"auto" is checked for what it must not do (invent calls, leak markup); "required" and named
choices are constrained by the grammar, so their calls must parse and validate every time."""
import json
import os
import sys

import pytest

jsonschema = pytest.importorskip("jsonschema")
openai = pytest.importorskip("openai")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_chat_decoder  # noqa: E402
from server_util import Server  # noqa: E402
from test_chat_tools import jinja_render  # noqa: E402

QWEN = os.path.join(HERE, "..", "data", "chat_templates", "Qwen2.5-0.5B-Instruct.jinja")

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 8},
    "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city", "unit"]}
ADD = {"type": "object", "properties": {
    "a": {"type": "integer", "minimum": 0, "maximum": 99},
    "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "description": "a + b", "parameters": ADD}},
]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
MSGS = [{"role": "system", "content": "You call tools."},
        {"role": "user", "content": "Weather in Paris?"}]
BASE = {"max_tokens": 200, "temperature": 1.0, "seed": 7}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = make_chat_decoder.make(str(tmp_path_factory.mktemp("tools") / "m"), seed=5, n_pos=2048)
    cfg_path = os.path.join(d, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    with open(QWEN) as f:
        cfg["chat_template"] = f.read()
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    return d


@pytest.fixture(scope="module")
def srv(model_dir):
    s = Server(model_dir, "--served-model-name", "tiny-qwen")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none")


def _prompt_tokens(model_dir, messages, tools, template=QWEN):
    """The prompt length by the references: jinja2 on the real template (with the tiny model's
    tokenizer_config.json bos / eos), HF tokenizers."""
    from tokenizers import Tokenizer
    with open(template) as f:
        text = jinja_render(f.read(), messages, tools, True, "<|endoftext|>", "<|im_end|>")
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    return len(tok.encode(text, add_special_tokens=False).ids)


def _check_calls(calls, names=None):
    assert calls, "no tool calls"
    for tc in calls:
        assert tc.type == "function" and tc.id.startswith("call_")
        assert tc.function.name in (names or SCHEMAS)
        jsonschema.validate(json.loads(tc.function.arguments), SCHEMAS[tc.function.name])
    assert len({tc.id for tc in calls}) == len(calls)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_and_named_calls_validate(client, seed):
    r = client.chat.completions.create(model="tiny-qwen", messages=MSGS, tools=TOOLS,
                                       tool_choice="required", max_tokens=200, seed=seed)
    ch = r.choices[0]
    if ch.finish_reason != "length":
        assert ch.finish_reason == "tool_calls"
        _check_calls(ch.message.tool_calls)
        assert ch.message.content is None
    r = client.chat.completions.create(
        model="tiny-qwen", messages=MSGS, tools=TOOLS, seed=seed, max_tokens=200,
        tool_choice={"type": "function", "function": {"name": "add"}})
    ch = r.choices[0]
    assert ch.finish_reason == "stop", ch   # OpenAI's (and vLLM's) for a named choice
    _check_calls(ch.message.tool_calls, ["add"])
    assert len(ch.message.tool_calls) == 1


def test_openai_tool_loop(client, model_dir):
    """The SDK's loop: a forced call, its result sent back as a tool message with the
    assistant's message as the SDK returned it, then the next turn renders as the template
    does (prompt_tokens equal to jinja2 + HF tokenizers on the same conversation)."""
    msgs = list(MSGS)
    r = client.chat.completions.create(
        model="tiny-qwen", messages=msgs, tools=TOOLS, max_tokens=200, seed=4,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    msg = r.choices[0].message
    _check_calls(msg.tool_calls, ["get_weather"])
    assert r.usage.prompt_tokens == _prompt_tokens(model_dir, msgs, TOOLS)
    msgs.append(msg)
    msgs.append({"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "21 C, sunny"})
    r2 = client.chat.completions.create(model="tiny-qwen", messages=msgs, tools=TOOLS,
                                        max_tokens=5, seed=4)
    ref = [*MSGS, {"role": "assistant", "content": None, "tool_calls": [
        {"id": msg.tool_calls[0].id, "type": "function",
         "function": {"name": "get_weather", "arguments": msg.tool_calls[0].function.arguments}}]},
        msgs[-1]]
    assert r2.usage.prompt_tokens == _prompt_tokens(model_dir, ref, TOOLS)
    assert r2.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_auto_invents_no_calls(client, model_dir):
    """A random model's text holds no <tool_call>: it all stays content, nothing is parsed out
    of it; tool_choice "none" keeps the tools in the prompt (as vLLM does)."""
    for choice in ("auto", "none"):
        r = client.chat.completions.create(model="tiny-qwen", messages=MSGS, tools=TOOLS,
                                           tool_choice=choice, max_tokens=30, seed=9)
        ch = r.choices[0]
        assert not ch.message.tool_calls and ch.finish_reason in ("stop", "length")
        assert r.usage.prompt_tokens == _prompt_tokens(model_dir, MSGS, TOOLS)
    r = client.chat.completions.create(model="tiny-qwen", messages=MSGS, max_tokens=5, seed=9)
    assert r.usage.prompt_tokens == _prompt_tokens(model_dir, MSGS, None)


def _stream_final(client, **kw):
    """The SDK's own accumulation of a stream (ChatCompletionStreamState)."""
    from openai.lib.streaming.chat import ChatCompletionStreamState
    state = ChatCompletionStreamState()
    chunks = []
    for chunk in client.chat.completions.create(stream=True, **kw):
        state.handle_chunk(chunk)
        chunks.append(chunk)
    return state.get_final_completion(), chunks


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_stream_accumulates_to_the_whole_answer(client, choice):
    kw = dict(model="tiny-qwen", messages=MSGS, tools=TOOLS, tool_choice=choice, max_tokens=200,
              seed=3, temperature=1.0)
    final, chunks = _stream_final(client, **kw)
    whole = client.chat.completions.create(**kw)
    fc, wc = final.choices[0], whole.choices[0]
    assert fc.finish_reason == wc.finish_reason
    if wc.finish_reason == "length":
        return
    assert fc.finish_reason == ("tool_calls" if choice == "required" else "stop")
    _check_calls(fc.message.tool_calls)
    assert [(t.function.name, json.loads(t.function.arguments)) for t in fc.message.tool_calls] == \
        [(t.function.name, json.loads(t.function.arguments)) for t in wc.message.tool_calls]
    assert not fc.message.content
    # the first chunk of each call carries its id, type and name; no content chunk has markup
    firsts = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])
              if d.id]
    assert [d.function.name for d in firsts] == [t.function.name for t in wc.message.tool_calls]
    assert all(d.type == "function" and d.function.arguments == "" for d in firsts)
    for c in chunks:
        if c.choices and c.choices[0].delta.content:
            assert "<tool_call>" not in c.choices[0].delta.content


def test_langchain_bind_tools(srv):
    lc = pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool

    @tool
    def add(a: int, b: int) -> int:
        """Add a and b."""
        return a + b

    llm = lc.ChatOpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none",
                        model="tiny-qwen", max_tokens=200, seed=2)
    msg = llm.bind_tools([add], tool_choice="add").invoke("What is 2 + 3?")
    assert len(msg.tool_calls) == 1 and msg.tool_calls[0]["name"] == "add"
    args = msg.tool_calls[0]["args"]
    assert set(args) <= {"a", "b"} and all(isinstance(v, int) for v in args.values())
    assert not msg.invalid_tool_calls
    msg = llm.bind_tools([add], tool_choice="any").invoke("What is 2 + 3?")
    if msg.response_metadata.get("finish_reason") != "length":
        assert msg.tool_calls and msg.tool_calls[0]["name"] == "add"


@pytest.mark.parametrize("body,param,want", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name", "not among the tools"),
    ({"tool_choice": "sometimes"}, "tool_choice", "tool_choice must be"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0]", "name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0]", "function"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]},
     "tools[0]", "JSON Schema"),
    ({"tools": [TOOLS[1], TOOLS[1]]}, "tools[1]", "also tools[0]"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "number", "multipleOf": 2}}}}}],
      "tool_choice": "required"}, "tool_choice", "multipleOf"),
    ({"tool_choice": "required", "tools": None}, "tool_choice", "needs tools"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
     "only one structured-output constraint"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id", "missing"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
     "messages[0].tool_calls", "only assistant"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "add", "arguments": "{bad"}}]}]},
     None, "arguments is not JSON"),
])
def test_bad_tool_requests_are_400(srv, body, param, want):
    req = {"model": "tiny-qwen", "messages": MSGS, "tools": TOOLS, **BASE, **body}
    req = {k: v for k, v in req.items() if v is not None}
    st, r = srv.post_json("/v1/chat/completions", req)
    assert st == 400, r
    assert want in r["error"]["message"], r
    if param:
        assert r["error"]["param"] == param, r
    st, r = srv.post_json("/v1/chat/completions", {"messages": MSGS, "max_tokens": 2})
    assert st == 200


def _lit(s):
    """A regex matching s alone (the grammar's regex subset)."""
    return "".join("\\" + ch if ch in ".^$*+?{}[]\\|()" else "\\n" if ch == "\n" else ch
                   for ch in s)


LLAMA33 = os.path.join(HERE, "..", "data", "chat_templates", "Llama-3.3-70B-Instruct.jinja")
HERMES_OUT = ('Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>\n'
              '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}\n'
              '</tool_call>')
LLAMA_OUT = '{"name": "add", "parameters": {"a": 2,"b": 3}}'
MISTRAL3 = os.path.join(HERE, "..", "data", "chat_templates", "Mistral-7B-Instruct-v0.3.jinja")
MISTRAL_OUT = 'Checking.[TOOL_CALLS] [{"name": "add", "arguments": {"a": 2, "b": 3}}]'


@pytest.mark.parametrize("template,out,content", [
    (None, HERMES_OUT, "Sure.\n"),
    (LLAMA33, LLAMA_OUT, None),
    (MISTRAL3, MISTRAL_OUT, "Checking."),
    (None, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2\n</tool_call>", "same"),
])
def test_auto_parses_what_the_model_wrote(client, template, out, content):
    """tool_choice auto: a text in the family's call markup (forced here with guided_regex, since
    a random model writes none) comes back as tool_calls, the rest as content, whole and
    streamed alike; a malformed call stays text."""
    extra = {"guided_regex": _lit(out)}
    if template:
        with open(template) as f:
            extra["chat_template"] = f.read()
    kw = dict(model="tiny-qwen", messages=MSGS, tools=TOOLS, max_tokens=300, seed=1,
              extra_body=extra)
    whole = client.chat.completions.create(**kw)
    final, chunks = _stream_final(client, **kw)
    want = [("add", {"a": 2, "b": 3})] + ([("get_weather", {"city": "Paris", "unit": "c"})]
                                          if out == HERMES_OUT else [])
    for ch in (whole.choices[0], final.choices[0]):
        if content == "same":
            assert ch.finish_reason == "stop" and ch.message.content == out
            assert not ch.message.tool_calls
            continue
        assert ch.finish_reason == "tool_calls", ch
        assert [(t.function.name, json.loads(t.function.arguments))
                for t in ch.message.tool_calls] == want
        assert (ch.message.content or None) == content
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == (out if content == "same" else content or "")


def test_mistral_round_trip(client, model_dir):
    """Mistral v0.3's template wants its 9-character call ids back: the ids ragged gives are
    such, and the next turn (the SDK's message, then the result) renders as jinja2 renders it."""
    with open(MISTRAL3) as f:
        tmpl = f.read()
    msgs = [{"role": "user", "content": "2 + 3?"}]
    r = client.chat.completions.create(
        model="tiny-qwen", messages=msgs, tools=TOOLS, max_tokens=300, seed=1,
        extra_body={"chat_template": tmpl, "guided_regex": _lit(MISTRAL_OUT)})
    assert r.usage.prompt_tokens == _prompt_tokens(model_dir, msgs, TOOLS, MISTRAL3)
    msg = r.choices[0].message
    assert [len(t.id) for t in msg.tool_calls] == [9] and msg.tool_calls[0].id.isalnum()
    msgs += [msg, {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "5"}]
    r2 = client.chat.completions.create(model="tiny-qwen", messages=msgs, tools=TOOLS,
                                        max_tokens=3, seed=1, extra_body={"chat_template": tmpl})
    ref = [msgs[0], {"role": "assistant", "content": msg.content, "tool_calls": [
        {"id": msg.tool_calls[0].id, "type": "function", "function": {
            "arguments": msg.tool_calls[0].function.arguments, "name": "add"}}]}, msgs[-1]]
    assert r2.usage.prompt_tokens == _prompt_tokens(model_dir, ref, TOOLS, MISTRAL3)


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(srv, method):
    """LangChain's with_structured_output, unmodified: "json_schema" sends the pydantic model as
    a strict response_format (the openai SDK's parse validates the reply against the model),
    "function_calling" as a named tool; both are constrained by the grammar, so every reply must
    come back as a valid instance, for several seeds."""
    lc = pytest.importorskip("langchain_openai")
    from typing import Literal

    from pydantic import BaseModel, Field

    class Reading(BaseModel):
        """A temperature reading."""
        city: str = Field(max_length=8)
        unit: Literal["c", "f"]
        degrees: int = Field(ge=-50, le=60)

    for seed in (1, 2, 3):
        llm = lc.ChatOpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none",
                            model="tiny-qwen", max_tokens=200, seed=seed, temperature=1.0)
        out = llm.with_structured_output(Reading, method=method, include_raw=True).invoke(
            "How warm is it in Paris?")
        assert out["parsing_error"] is None, (seed, out["raw"])
        r = out["parsed"]
        assert isinstance(r, Reading), (seed, out["raw"])
        assert r.unit in ("c", "f") and -50 <= r.degrees <= 60 and len(r.city) <= 8
