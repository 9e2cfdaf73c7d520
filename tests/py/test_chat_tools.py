"""Tool conversations in the chat templates (src/gen/chat_template.c, rg_chat_template_render_tools)
against the real templates rendered by jinja2, as transformers' apply_chat_template renders them
with tools= and as vLLM hands it the messages (an assistant's tool_calls[].function.arguments
parsed from its JSON text into a dict; content None when the client sent null).

Templates: Qwen2.5-0.5B-Instruct (Hermes <tools> / <tool_call> / <tool_response>),
Llama-3.3-70B-Instruct and Llama-3.2-3B-Instruct (JSON calls, ipython results, tools in the first
user turn), Mistral-7B-Instruct-v0.3 ([AVAILABLE_TOOLS] / [TOOL_CALLS] / [TOOL_RESULTS], call ids
of 9 characters); SmolLM2's ChatML and Meta-Llama-3's have no tool branches: tools given to them
change nothing (as in transformers), a tool message or tool_calls is refused. Where the template
raises (Llama: two calls in one message; Mistral: roles out of order, ids not 9 long), ragged
answers RG_ERR_INVALID_INPUT."""
import ctypes
import json
from datetime import datetime

import pytest

jinja2 = pytest.importorskip("jinja2")
import jinja2.ext  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

import ragged_ctypes as rc  # noqa: E402
from test_chat_template import MODELS, RG_ERR, ChatMessage, _raise, _template, _tojson  # noqa: E402

TOOL_TEMPLATES = ["Qwen2.5-0.5B-Instruct", "Llama-3.3-70B-Instruct", "Llama-3.2-3B-Instruct",
                  "Mistral-7B-Instruct-v0.3"]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather \"now\" in a city \u2014 \u00e9t\u00e9\n(2 lines)",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "e.g. Z\u00fcrich"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 1},
        "threshold": {"type": "number", "default": 0.5, "examples": [1e-07, 100.0, 1e16, -0.0]},
        "verbose": {"type": "boolean", "default": False}, "extra": {"default": None},
        "empty_obj": {"type": "object", "properties": {}}, "empty_list": {"default": []}},
        "required": ["city"]}}}
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}


def _call(i, name, args):
    return {"id": "call_%04d" % i, "type": "function",  # 9 characters, as Mistral's wants
            "function": {"name": name, "arguments": json.dumps(args)}}


def _asst_calls(content, *calls):
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def _tool(i, content):
    return {"role": "tool", "tool_call_id": "call_%04d" % i, "content": content}


U = {"role": "user", "content": "  What's the weather in Z\u00fcrich?  "}
S = {"role": "system", "content": " Be brief. "}
# conversations every tool template accepts (one call per assistant message: Llama's limit)
CHATS = [
    [U],
    [S, U],
    [U, _asst_calls(None, _call(0, "get_weather", {"city": "Z\u00fcrich", "days": 2})),
     _tool(0, '{"temp": 21.5, "sky": "clear"}')],
    [S, U, _asst_calls("Let me check.", _call(0, "get_weather", {"city": "Paris", "x": [1, 2.5, None,
                                                                                   {"k": "\"q\"\n"}]})),
     _tool(0, "sunny\n"), {"role": "assistant", "content": "Sunny."},
     {"role": "user", "content": "And 2+3?"}, _asst_calls("", _call(1, "add", {"a": 2, "b": 3})),
     _tool(1, "5")],
    [U, _asst_calls(None, _call(0, "add", {})), _tool(0, ""), {"role": "assistant", "content": "ok"}],
]
# Qwen only: parallel calls and consecutive tool results in one user turn
PARALLEL = [U, _asst_calls(None, _call(0, "get_weather", {"city": "A"}), _call(1, "add", {"a": 1, "b": 2})),
            _tool(0, "cold"), _tool(1, "3"), {"role": "user", "content": "thanks"}]


def jinja_render(src, messages, tools, gen, bos, eos):
    """transformers' render_jinja_template with tools, on the messages as vLLM passes them."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    msgs = json.loads(json.dumps(messages))
    for m in msgs:
        for tc in m.get("tool_calls") or []:
            tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
    return env.from_string(src).render(messages=msgs, tools=tools or None, documents=None,
                                       add_generation_prompt=gen, bos_token=bos, eos_token=eos,
                                       unk_token="<unk>")


def c_render(src, messages, tools, gen, bos, eos, tools_text=None):
    """(status name, text or last error) of rg_chat_template_render_tools; the OpenAI message
    fields as JSON text, as the server passes them."""
    l = rc.lib()
    l.rg_chat_template_render_tools.argtypes = [
        ctypes.c_char_p, ctypes.POINTER(ChatMessage), ctypes.c_int, ctypes.c_char_p,
        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_bool, ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p, ctypes.c_void_p]
    l.rg_chat_template_render_tools.restype = ctypes.c_int
    # ensure_ascii=False: json-c 0.16 decodes some escaped surrogate pairs to U+FFFD (those of
    # code points whose low 16 bits are D800-DFFF, e.g. "\udab6\udcb8" for U+BD8B8), a bug of
    # the JSON reader, not of the rendering
    keep = [(m["role"].encode(), (m.get("content") or "").encode(),
             json.dumps(m["tool_calls"], ensure_ascii=False).encode()
             if m.get("tool_calls") else None,
             m["tool_call_id"].encode() if m.get("tool_call_id") else None)
            for m in messages]
    arr = (ChatMessage * len(keep))(*[ChatMessage(r, c, len(c), t, i) for r, c, t, i in keep])
    if tools_text is None and tools is not None:
        # the layout of the text must not matter
        tools_text = json.dumps(tools, indent=1, ensure_ascii=False)
    out, n = ctypes.c_void_p(), ctypes.c_size_t()
    st = l.rg_chat_template_render_tools(
        src.encode(), arr, len(keep), tools_text.encode() if tools_text is not None else None,
        bos.encode() if bos else None, eos.encode() if eos else None, gen, ctypes.byref(out),
        ctypes.byref(n), None, None)
    if st:
        assert not out.value
        return RG_ERR.get(st, str(st)), l.rg_last_error().decode()
    text = ctypes.string_at(out.value, n.value).decode()
    rc._libc.free(out)
    return "RG_OK", text


def _both(src, chat, tools, gen, bos, eos):
    """ragged's rendering equals jinja2's, or both refuse; returns jinja2's text or None."""
    try:
        want = jinja_render(src, chat, tools, gen, bos, eos)
    except jinja2.exceptions.TemplateError as e:
        st, msg = c_render(src, chat, tools, gen, bos, eos)
        assert st == "RG_ERR_INVALID_INPUT", (chat, str(e), msg)
        return None
    assert c_render(src, chat, tools, gen, bos, eos) == ("RG_OK", want), (chat, gen)
    return want


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
@pytest.mark.parametrize("tools", [[WEATHER, ADD], [ADD], None, []])
def test_tool_chats_match_jinja(name, tools):
    _, bos, eos = MODELS[name]
    src = _template(name)
    chats = CHATS + ([PARALLEL] if not name.startswith("Llama") else [])
    rendered = []
    for chat in chats:
        for gen in (True, False):
            rendered.append(_both(src, chat, tools, gen, bos, eos))
    assert sum(r is not None for r in rendered) >= 2 * len(CHATS)  # not vacuous
    if tools:   # the tool blocks are there
        assert all("\"add\"" in r for r in rendered if r is not None)


def test_tools_written_as_tojson():
    """The tool JSON in the Hermes block is json.dumps's (", " / ": ", ensure_ascii False, the
    request's key order, Python's float repr), whatever the layout of the request's text."""
    src = _template("Qwen2.5-0.5B-Instruct")
    _, text = c_render(src, [U], [WEATHER], True, None, "<|im_end|>")
    assert "\n" + json.dumps(WEATHER, ensure_ascii=False) + "\n</tools>" in text
    assert '"examples": [1e-07, 100.0, 1e+16, -0.0]' in text
    _, text = c_render(_template("Llama-3.3-70B-Instruct"), [U], [WEATHER], True,
                       "<|begin_of_text|>", "<|eot_id|>")
    assert json.dumps(WEATHER, ensure_ascii=False, indent=4) + "\n\n" in text


def test_llama_raises_where_the_template_does():
    src = _template("Llama-3.3-70B-Instruct")
    two = [U, _asst_calls(None, _call(0, "add", {"a": 1}), _call(1, "add", {"b": 2}))]
    with pytest.raises(jinja2.exceptions.TemplateError, match="single tool-calls"):
        jinja_render(src, two, [ADD], True, "<s>", "</s>")
    st, msg = c_render(src, two, [ADD], True, "<s>", "</s>")
    assert st == "RG_ERR_INVALID_INPUT" and "single tool-calls" in msg
    only_sys = [S]
    with pytest.raises(jinja2.exceptions.TemplateError, match="no first user message"):
        jinja_render(src, only_sys, [ADD], True, "<s>", "</s>")
    st, msg = c_render(src, only_sys, [ADD], True, "<s>", "</s>")
    assert st == "RG_ERR_INVALID_INPUT" and "no first user message" in msg


@pytest.mark.parametrize("name", ["SmolLM2-135M-Instruct", "Meta-Llama-3-8B-Instruct",
                                  "gemma-2-2b-it", "Phi-3.5-mini-instruct"])
def test_templates_without_tool_branches(name):
    """Tools change nothing (transformers renders them so: the template never reads them); a tool
    message or tool_calls is refused rather than rendered wrong."""
    _, bos, eos = MODELS[name]
    src = _template(name)
    chat = [{"role": "user", "content": "hi"}]
    assert c_render(src, chat, [WEATHER], True, bos, eos) == \
        ("RG_OK", jinja_render(src, chat, [WEATHER], True, bos, eos))
    for bad in ([chat[0], _asst_calls(None, _call(0, "add", {}))],
                [chat[0], {"role": "assistant", "content": "x"}, _tool(0, "r")]):
        st, msg = c_render(src, bad, [ADD], True, bos, eos)
        assert st == "RG_ERR_INVALID_INPUT" and "tool" in msg, (name, msg)


def test_mistral_raises_where_the_template_does():
    """Call ids other than 9 characters, roles out of order around tool messages; and the tools
    go before every user message equal to the last (Jinja compares the dicts)."""
    _, bos, eos = MODELS["Mistral-7B-Instruct-v0.3"]
    src = _template("Mistral-7B-Instruct-v0.3")
    long_id = [U, _asst_calls(None, {**_call(0, "add", {}), "id": "call_12345678"})]
    assert _both(src, long_id, [ADD], True, bos, eos) is None
    bad_result = [U, _asst_calls(None, _call(0, "add", {})), {**_tool(0, "r"), "tool_call_id": "x"}]
    assert _both(src, bad_result, [ADD], True, bos, eos) is None
    assert _both(src, [U, _tool(0, "r"), U], [ADD], True, bos, eos) is None
    twice = [U, {"role": "assistant", "content": "a"}, U]
    text = _both(src, twice, [ADD], True, bos, eos)
    assert text.count("[AVAILABLE_TOOLS]") == 2


@pytest.mark.parametrize("tools_text,want", [
    ("[", "not valid JSON"), ('{"type": "function"}', "tools must be a list"),
    ("[1]", "tools[0] must be an object")])
def test_bad_tools_text(tools_text, want):
    st, msg = c_render(_template("Qwen2.5-0.5B-Instruct"), [U], None, True, None, "<|im_end|>",
                       tools_text=tools_text)
    assert st == "RG_ERR_INVALID_INPUT" and want in msg, msg


def test_bad_tool_calls():
    src = _template("Qwen2.5-0.5B-Instruct")
    bad_args = [U, _asst_calls(None, {"id": "c", "type": "function",
                                      "function": {"name": "add", "arguments": "{not json"}})]
    st, msg = c_render(src, bad_args, [ADD], True, None, "<|im_end|>")
    assert st == "RG_ERR_INVALID_INPUT" and "messages[1].tool_calls[0].function.arguments" in msg
    no_name = [U, _asst_calls(None, {"id": "c", "type": "function", "function": {"arguments": "{}"}})]
    st, msg = c_render(src, no_name, [ADD], True, None, "<|im_end|>")
    assert st == "RG_ERR_INVALID_INPUT" and "name" in msg
    on_user = [{"role": "user", "content": "x", "tool_calls": [_call(0, "add", {})]}]
    st, msg = c_render(src, on_user, [ADD], True, None, "<|im_end|>")
    assert st == "RG_ERR_INVALID_INPUT" and "assistant" in msg


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_tool_text_is_content_not_markup(name):
    """The content spans (what --chat-content-as-text tokenizes as plain text) cover the
    request's tool JSON, names, arguments and results, and none of the template's markup."""
    _, bos, eos = MODELS[name]
    src = _template(name)
    l = rc.lib()
    l.rg_chat_template_render_tools.argtypes = [
        ctypes.c_char_p, ctypes.POINTER(ChatMessage), ctypes.c_int, ctypes.c_char_p,
        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_bool, ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_size_t)]
    chat = CHATS[3]
    keep = [(m["role"].encode(), (m.get("content") or "").encode(),
             json.dumps(m["tool_calls"]).encode() if m.get("tool_calls") else None,
             m["tool_call_id"].encode() if m.get("tool_call_id") else None) for m in chat]
    arr = (ChatMessage * len(keep))(*[ChatMessage(r, c, len(c), t, i) for r, c, t, i in keep])
    out, n, sp, ns = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_void_p(), ctypes.c_size_t()
    st = l.rg_chat_template_render_tools(src.encode(), arr, len(keep), json.dumps([ADD]).encode(),
                                         bos.encode() if bos else None, eos.encode(), True,
                                         ctypes.byref(out), ctypes.byref(n), ctypes.byref(sp),
                                         ctypes.byref(ns))
    assert st == 0, l.rg_last_error()
    text = ctypes.string_at(out.value, n.value)
    spans = ctypes.cast(sp, ctypes.POINTER(ctypes.c_size_t))[:2 * ns.value]
    rc._libc.free(out)
    rc._libc.free(sp)
    pairs = list(zip(spans[::2], spans[1::2]))
    assert all(a < b <= n.value for a, b in pairs)
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(pairs, pairs[1:]))
    inside = b"".join(text[a:b] for a, b in pairs)
    outside = bytearray(text)
    for a, b in pairs:
        outside[a:b] = b"\0" * (b - a)
    for markup in (b"<|im_start|>", b"<tool_call>", b"<|start_header_id|>", b"[TOOL_CALLS]",
                   b"[AVAILABLE_TOOLS]", b"[INST]"):
        assert markup not in inside
    assert b'"type": "integer"' in inside     # the tool's JSON
    assert b"Paris" in inside and b"sunny" in inside  # arguments and a result
    assert b"Paris" not in outside and b'"integer"' not in outside


def test_tojson_numbers_and_strings_generated():
    """Generated numbers (Python's float repr: shortest round trip, exponents) and strings (every
    control character, quotes, backslashes, non-ASCII) written as json.dumps writes them."""
    import random
    import struct
    rng = random.Random(31)
    floats = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(300)]
    floats = [f for f in floats if f == f and abs(f) != float("inf")]
    floats += [rng.uniform(-1e6, 1e6) for _ in range(200)] + [rng.random() * 10 ** rng.randint(-30, 30)
                                                            for _ in range(200)]
    floats += [0.1, 1e-4, 1e-5, 9.999e15, 1e16, 123456789012345678.0, 5e-324, 1.7976931348623157e308]
    ints = [rng.randint(-2 ** 63, 2 ** 63 - 1) for _ in range(50)] + [0, -1, 2 ** 64 - 1]
    strs = ["".join(chr(rng.choice([rng.randint(0, 0x7f), rng.randint(0x80, 0x10ffff)]))
                    for _ in range(20)) for _ in range(30)]
    strs = [s.encode("utf-8", "ignore").decode("utf-8", "ignore").replace("\0", "")
            for s in strs if not any(0xd800 <= ord(c) <= 0xdfff for c in s)]
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "examples": floats, "ints": ints, "strings": strs,
        "nested": {"a": [[], {}, [{}], None, True, False]}}}}
    src = _template("Qwen2.5-0.5B-Instruct")
    chat = [{"role": "user", "content": "x"}]
    assert c_render(src, chat, [tool], True, None, "<|im_end|>") == \
        ("RG_OK", jinja_render(src, chat, [tool], True, None, "<|im_end|>"))
