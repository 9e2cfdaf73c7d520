"""Chat templates by family (src/gen/chat_template.c) against the real templates rendered by jinja2.

tests/data/chat_templates/*.jinja are the chat_template strings of the models' tokenizer_config.json
(Hugging Face hub; gated repos through ungated mirrors: unsloth/Llama-3.2-3B-Instruct,
unsloth/gemma-2-2b-it, NousResearch/Llama-2-7b-chat-hf; "-legacy" files are earlier revisions of
the same repos; Qwen2.5-0.5B-Instruct's, the one with Hermes tool branches, as the Swift Jinja port
vendors it in its tests: github.com/maiqingqiang/Jinja Tests/ChatTemplateTests.swift at 6dbe4c4,
the "Qwen/Qwen2.5-0.5B-Instruct" case). Tool conversations: test_chat_tools.py. Each is rendered here with jinja2 the way transformers' apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, raise_exception, strftime_now, a
tojson filter, the loopcontrols extension, bos_token / eos_token / add_generation_prompt, tools
None), and rg_chat_template_render must give the same bytes for every conversation the template
accepts and an RG_ERR_INVALID_INPUT for every one it raises on. The renderer reads the family
and variant from the template source alone, so nothing in C is told which file it is."""
import ctypes
import json
import os
from datetime import datetime

import pytest

jinja2 = pytest.importorskip("jinja2")
import jinja2.ext  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

import ragged_ctypes as rc  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "data", "chat_templates")

# fixture -> (family, bos_token, eos_token as the model's tokenizer_config.json has them)
MODELS = {
    "SmolLM2-135M-Instruct": ("chatml", "<|im_start|>", "<|im_end|>"),
    "Qwen2-0.5B-Instruct": ("chatml", None, "<|im_end|>"),
    "Qwen2.5-0.5B-Instruct": ("chatml", None, "<|im_end|>"),
    "Llama-2-7b-chat-hf": ("llama2", "<s>", "</s>"),
    "Meta-Llama-3-8B-Instruct": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "Llama-3.2-3B-Instruct": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "Llama-3.3-70B-Instruct": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "Mistral-7B-Instruct-v0.1": ("mistral", "<s>", "</s>"),
    "Mistral-7B-Instruct-v0.1-legacy": ("mistral", "<s>", "</s>"),
    "Mixtral-8x7B-Instruct-v0.1-legacy": ("mistral", "<s>", "</s>"),
    "Mistral-7B-Instruct-v0.3": ("mistral", "<s>", "</s>"),
    "gemma-2-2b-it": ("gemma", "<bos>", "<eos>"),
    "gemma-7b-it-legacy": ("gemma", "<bos>", "<eos>"),
    "Phi-3-mini-4k-instruct": ("phi3", "<s>", "<|endoftext|>"),
    "Phi-3-mini-4k-instruct-legacy": ("phi3", "<s>", "<|endoftext|>"),
    "Phi-3.5-mini-instruct": ("phi3", "<s>", "<|endoftext|>"),
    "TinyLlama-1.1B-Chat-v1.0": ("zephyr", "<s>", "</s>"),
}

# what a template drops without raising and ragged refuses instead (chat_template.h)
DROPS_SYSTEM = {"Phi-3-mini-4k-instruct-legacy"}

RG_ERR = {1: "RG_ERR_INVALID_INPUT", 2: "RG_ERR_INVALID_UTF8", 6: "RG_ERR_UNSUPPORTED"}


def _u(c):
    return {"role": "user", "content": c}


def _a(c):
    return {"role": "assistant", "content": c}


def _s(c):
    return {"role": "system", "content": c}


# Conversations every family accepts (user first, alternating), with and without a system message
CHATS = [
    [_u("Hello")],
    [_u("What is 2+2?"), _a("4"), _u("And 3+3?")],
    [_u("Hi"), _a("Hello! How can I help?"), _u("Tell me a joke."), _a("No.")],
    [_u("  padded  \n"), _a("\n\t answer with spaces \t\n"), _u(" \u00a0x\u3000\u2028")],
    [_u("h\u00e9llo \u4e16\u754c \U0001F389 \u0645\u0631\u062d\u0628\u0627"), _a("\u00e7a va")],
    [_u("")],
    [_u(""), _a(""), _u("")],
    [_u(" \n\t ")],
    [_u("quotes ' \" and {{ braces }} {% raw %} \\n backslash \\ end")],
    [_u("line one\nline two\r\nline three")],
    [_u("[INST] not a tag [/INST] <|im_end|> <end_of_turn>")],
]
SYSTEMS = ["You are terse.", "", "  system with spaces \n", "\u30b7\u30b9\u30c6\u30e0"]

# Conversations some templates raise on (and ragged must refuse where they do)
BAD = [
    [_u("a"), _u("b")],
    [_a("a"), _u("b")],
    [_u("a"), _a("b"), _a("c")],
    [_u("a"), _s("b"), _u("c")],
    [_s("a"), _a("b")],
    [_s("a"), _s("b"), _u("c")],
]


def _raise(msg):
    raise jinja2.exceptions.TemplateError(msg)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def jinja_render(src, messages, add_generation_prompt, bos, eos):
    """transformers' render_jinja_template, minus the assistant-mask extension."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(src).render(messages=messages, tools=None, documents=None,
                                       add_generation_prompt=add_generation_prompt,
                                       bos_token=bos, eos_token=eos, unk_token="<unk>")


class ChatMessage(ctypes.Structure):
    """include/ragged.h rg_chat_message."""
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p),
                ("content_len", ctypes.c_size_t), ("tool_calls", ctypes.c_char_p),
                ("tool_call_id", ctypes.c_char_p)]


def _lib():
    l = rc.lib()
    l.rg_chat_template_detect.argtypes = [ctypes.c_char_p]
    l.rg_chat_template_detect.restype = ctypes.c_int
    l.rg_chat_family_name.argtypes = [ctypes.c_int]
    l.rg_chat_family_name.restype = ctypes.c_char_p
    l.rg_chat_template_render.argtypes = [
        ctypes.c_char_p, ctypes.POINTER(ChatMessage), ctypes.c_int, ctypes.c_char_p,
        ctypes.c_char_p, ctypes.c_bool, ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_size_t)]
    l.rg_chat_template_render.restype = ctypes.c_int
    return l


def c_render(src, messages, add_generation_prompt, bos, eos):
    """(status name, text or last error) of rg_chat_template_render."""
    l = _lib()
    keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
    arr = (ChatMessage * max(1, len(keep)))(*[ChatMessage(r, c, len(c)) for r, c in keep])
    out, n = ctypes.c_void_p(), ctypes.c_size_t()
    st = l.rg_chat_template_render(src.encode(), arr, len(keep),
                                   bos.encode() if bos is not None else None,
                                   eos.encode() if eos is not None else None,
                                   add_generation_prompt, ctypes.byref(out), ctypes.byref(n))
    if st != 0:
        assert not out.value
        return RG_ERR.get(st, str(st)), l.rg_last_error().decode()
    text = ctypes.string_at(out.value, n.value).decode()
    assert ctypes.string_at(out.value) == text.encode()  # NUL-terminated, no NUL inside
    rc._libc.free(out)
    return "RG_OK", text


def _template(name):
    with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def _check(name, messages, gen):
    family, bos, eos = MODELS[name]
    src = _template(name)
    try:
        want, err = jinja_render(src, messages, gen, bos, eos), None
    except jinja2.exceptions.TemplateError as e:
        want, err = None, str(e)
    st, got = c_render(src, messages, gen, bos, eos)
    if err is not None:
        assert st == "RG_ERR_INVALID_INPUT", (name, messages, err, got)
        assert "messages[" in got
        return st
    if name in DROPS_SYSTEM and any(m["role"] == "system" for m in messages):
        assert st == "RG_ERR_INVALID_INPUT" and "drops system" in got, (name, got)
        return st
    if st != "RG_OK" and any(m["role"] == "system" for m in messages[1:]):
        # Llama 2 drops a later system message, Gemma writes a "system" turn its model never
        # saw: ragged refuses both (chat_template.h)
        assert st == "RG_ERR_INVALID_INPUT", (name, got)
        assert "allowed only first" in got or "System role not supported" in got, (name, got)
        assert family in ("llama2", "gemma"), (name, got)
        return st
    if st == "RG_OK" and got != want and "strftime_now" in src:
        # the date may have turned between the two renderings
        want = jinja_render(src, messages, gen, bos, eos)
    assert st == "RG_OK", (name, messages, got)
    assert got == want, (name, messages, gen)
    return st


def test_fixtures_present():
    have = {f[:-len(".jinja")] for f in os.listdir(TEMPLATES) if f.endswith(".jinja")}
    assert have == set(MODELS)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_detect(name):
    l = _lib()
    f = l.rg_chat_template_detect(_template(name).encode())
    assert l.rg_chat_family_name(f).decode() == MODELS[name][0]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_render_matches_jinja(name):
    """Every conversation, with no system message and with each system message, both
    add_generation_prompt values: equal bytes, or refused where the template raises."""
    n_ok = 0
    for chat in CHATS:
        for sys in [None] + SYSTEMS:
            msgs = chat if sys is None else [_s(sys)] + chat
            for gen in (False, True):
                n_ok += _check(name, msgs, gen) == "RG_OK"
    # every template renders most of them (Gemma and legacy Mistral / Phi-3 refuse the system ones)
    assert n_ok >= 2 * len(CHATS)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bad_orders(name):
    """Role orders the template raises on are RG_ERR_INVALID_INPUT naming the message; the
    others render as the template does."""
    for msgs in BAD:
        _check(name, msgs, True)


def test_default_system_prompt():
    """ChatML templates add their own default system message (read from the template source)
    when the first message is not a system one."""
    for name, default in (("Qwen2-0.5B-Instruct", "You are a helpful assistant."),
                          ("SmolLM2-135M-Instruct", "You are a helpful AI assistant named "
                                                    "SmolLM, trained by Hugging Face")):
        st, text = c_render(_template(name), [_u("x")], True, None, None)
        assert st == "RG_OK"
        assert text.startswith("<|im_start|>system\n" + default + "<|im_end|>\n")
        st, text = c_render(_template(name), [_s("mine"), _u("x")], True, None, None)
        assert default not in text and text.startswith("<|im_start|>system\nmine<|im_end|>")
    # a ChatML template without one adds none
    plain = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
             "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
             "%}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    for gen in (False, True):
        assert c_render(plain, [_u("x"), _a("y")], gen, None, None)[1] == \
            jinja_render(plain, [_u("x"), _a("y")], gen, None, None)


def test_escapes_in_default_system():
    """The default system literal is decoded as Jinja does (\\n, \\t, \\', \\u escapes; both
    quote styles)."""
    for lit in ("'<|im_start|>system\\nIt\\'s \\u00e9\\ttab<|im_end|>\\n'",
                '"<|im_start|>system\\nsay \\"hi\\"\\\\ \\x41<|im_end|>\\n"'):
        src = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != "
               "'system' %}{{ " + lit + " }}{% endif %}{{'<|im_start|>' + message['role'] + "
               "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
               "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
        msgs = [_u("q")]
        assert c_render(src, msgs, True, None, None) == \
            ("RG_OK", jinja_render(src, msgs, True, None, None))


def test_unknown_template_refused():
    """A template of no known family is RG_ERR_UNSUPPORTED naming its first bytes; detect says
    unknown."""
    l = _lib()
    made_up = "{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}### reply:"
    st, msg = c_render(made_up, [_u("x")], True, "<s>", "</s>")
    assert st == "RG_ERR_UNSUPPORTED" and "{% for m in messages %}### {{" in msg
    assert l.rg_chat_family_name(l.rg_chat_template_detect(made_up.encode())) == b"unknown"
    assert l.rg_chat_template_detect(None) == 0


def test_bad_messages():
    """Unknown roles, invalid UTF-8 and NUL bytes are refused naming the message."""
    src = _template("Qwen2-0.5B-Instruct")
    st, msg = c_render(src, [_u("a"), {"role": "tool", "content": "x"}], True, None, None)
    assert st == "RG_ERR_INVALID_INPUT" and "messages[1]" in msg and "tool" in msg
    st, msg = c_render(src, [], True, None, None)
    assert st == "RG_ERR_INVALID_INPUT"
    l = _lib()
    for content, want in ((b"a\xff", "RG_ERR_INVALID_UTF8"), (b"a\x00b", "RG_ERR_INVALID_INPUT")):
        arr = (ChatMessage * 1)(ChatMessage(b"user", content, len(content)))
        out = ctypes.c_void_p()
        st = l.rg_chat_template_render(src.encode(), arr, 1, None, None, True,
                                       ctypes.byref(out), None)
        assert RG_ERR.get(st) == want and not out.value
        assert "messages[0]" in l.rg_last_error().decode()
