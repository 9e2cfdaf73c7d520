"""Structured outputs (issue 31): constrained decoding against independent references.

(a) the regex DFA (rg_regex_fullmatch, the automaton the sampler masks with) against Python's
    re.fullmatch (re.ASCII: ragged's \\d \\w \\s are ASCII) on generated (regex, string) pairs;
(b) generated JSON Schemas (nesting, enums, const, required and optional properties, integers,
    numbers, booleans, null, strings with patterns and length bounds, arrays with bounds, anyOf)
    each generated from by a tiny random-weight model through the Python API, the output parsed
    with json.loads and validated with jsonschema;
(c) the server: every API's form answered with a valid output, a bad regex / schema / keyword
    a 400 naming the field (TGI's routes: 422, as TGI validates), and the server still
    answering after them.
"""
import ctypes
import json
import os
import random
import re
import sys

import pytest

jsonschema = pytest.importorskip("jsonschema")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

import make_chat_decoder  # noqa: E402
from server_util import ASAN, Server  # noqa: E402


def lib():
    import ragged_ctypes as rc
    l = rc.lib()
    l.rg_regex_fullmatch.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_bool)]
    l.rg_regex_fullmatch.restype = ctypes.c_int
    l.rg_last_error.restype = ctypes.c_char_p
    return l


def dfa_match(l, pattern, s):
    b = ctypes.c_bool()
    sb = s.encode()
    st = l.rg_regex_fullmatch(pattern.encode(), sb, len(sb), ctypes.byref(b))
    assert st == 0, f"/{pattern}/: {l.rg_last_error().decode()}"
    return b.value


# ---- (a) regexes ------------------------------------------------------------------------------

ALPHABET = ["a", "b", "c", "1", "7", " ", "-", ".", "é", "€", "_", "\n", "Z"]
ATOMS = ["a", "b", "c", "1", "é", r"\.", r"\-", ".", r"\d", r"\w", r"\s", r"\D", "[abc]",
         "[a-c1-7]", "[^a]", "[^\\d ]", "[é€]", "[.-]", r"\x41", "€"]


def gen_regex(rng, depth=0):
    """A random pattern of the supported subset, and a generator of strings it matches."""
    k = rng.random()
    if depth > 2 or k < 0.35:
        return rng.choice(ATOMS)
    if k < 0.55:
        return "".join(gen_regex(rng, depth + 1) for _ in range(rng.randint(2, 3)))
    if k < 0.7:
        return "(" + "|".join(gen_regex(rng, depth + 1) for _ in range(rng.randint(2, 3))) + ")"
    inner = gen_regex(rng, depth + 1)
    if len(inner) > 1 and not (inner.startswith("[") and inner.endswith("]")) \
            and not (inner.startswith("(") and inner.endswith(")")):
        inner = "(?:" + inner + ")"
    q = rng.choice(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"])
    return inner + q


def sample_match(rng, pattern, tries=200):
    """A string re.fullmatch accepts, found by random search over short strings built from the
    pattern's own literal characters and the alphabet (None when none was found)."""
    chars = list(set(ALPHABET + [c for c in pattern if c not in "()[]|*+?{}\\^,"]))
    for _ in range(tries):
        s = "".join(rng.choice(chars) for _ in range(rng.randint(0, 6)))
        if re.fullmatch(pattern, s, re.ASCII):
            return s
    return None


def test_regex_against_python_re():
    l = lib()
    rng = random.Random(31)
    n_pairs = n_match = 0
    for _ in range(160):
        p = gen_regex(rng)
        re.compile(p)  # every generated pattern is valid Python too
        strings = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 5)))
                   for _ in range(4)]
        m = sample_match(rng, p)
        if m is not None:
            strings += [m, m + "a", m[:-1]]
        for s in strings:
            want = re.fullmatch(p, s, re.ASCII) is not None
            got = dfa_match(l, p, s)
            assert got == want, f"/{p}/ on {s!r}: ragged {got}, re {want}"
            n_pairs += 1
            n_match += want
    assert n_pairs >= 500 and n_match >= 100, (n_pairs, n_match)


@pytest.mark.parametrize("pattern", ["(a", "a)", "*", "[z-a]", "a{3,1}", r"(a)\1", r"\bx",
                                     "(?=a)b", "a{2000}"])
def test_regex_refused_like_python(pattern):
    """Syntax errors Python's re also refuses, and constructs ragged does not implement, are
    errors with a message (never a silently different language)."""
    l = lib()
    b = ctypes.c_bool()
    st = l.rg_regex_fullmatch(pattern.encode(), b"x", 1, ctypes.byref(b))
    assert st != 0 and l.rg_last_error()


# ---- (b) JSON Schemas -------------------------------------------------------------------------

def schema_regex(schema):
    """rg_grammar_compile_check's regex of a JSON Schema (None, message when refused)."""
    l = lib()
    l.rg_grammar_compile_check.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_void_p),
                                           ctypes.POINTER(ctypes.c_int)]
    out = ctypes.c_void_p()
    st = l.rg_grammar_compile_check(2, json.dumps(schema).encode(), 0, ctypes.byref(out), None)
    if st:
        return None, l.rg_last_error().decode()
    r = ctypes.string_at(out.value).decode()
    ctypes.CDLL(None).free(out)
    return r, None


def test_integer_bounds_against_python():
    """minimum / maximum / exclusive bounds on integers: the regex accepts exactly the integers
    the bounds allow (every integer of a window around them), and no leading zeros."""
    rng = random.Random(7)
    for _ in range(60):
        s = {"type": "integer"}
        if rng.random() < 0.8:
            s[rng.choice(["minimum", "exclusiveMinimum"])] = rng.randint(-1200, 1200) + \
                rng.choice([0, 0.5])
        if rng.random() < 0.8:
            s[rng.choice(["maximum", "exclusiveMaximum"])] = rng.randint(-1200, 1200)
        r, err = schema_regex(s)
        val = jsonschema.Draft202012Validator(s)
        allowed = {v for v in range(-1300, 1300) if val.is_valid(v)}
        if r is None:
            assert not allowed and "no integer" in err, (s, err)
            continue
        for v in range(-1300, 1300):
            assert bool(re.fullmatch(r, str(v))) == (v in allowed), (s, v)
        assert not re.fullmatch(r, "01"), s

PATTERNS = ["[a-z]{1,4}", "[0-9]{2}-[0-9]{2}", "(foo|bar)[0-9]?", "[A-Z][a-z]{0,3}", "x+y?"]


def gen_schema(rng, depth=0):
    """A random schema whose every instance is short (strings and arrays bounded)."""
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "pattern"]
    if depth < 3:
        kinds += ["object", "object", "array", "anyOf"]
    k = rng.choice(kinds)
    if k == "string":
        mn = rng.randint(0, 2)
        return {"type": "string", "minLength": mn, "maxLength": mn + rng.randint(0, 5)}
    if k == "pattern":
        return {"type": "string", "pattern": "^" + rng.choice(PATTERNS) + "$"}
    if k == "integer" and rng.random() < 0.4:
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 500)}
    if k in ("integer", "number", "boolean", "null"):
        return {"type": k}
    if k == "enum":
        pool = ["red", "green", 'say "hi"', 3, -1, 2.5, True, None, "a\\b", "ünï"]
        return {"enum": rng.sample(pool, rng.randint(1, 4))}
    if k == "const":
        return {"const": rng.choice(["fixed", 42, False, {"k": [1, "v"]}])}
    if k == "array":
        mn = rng.randint(0, 2)
        return {"type": "array", "items": gen_schema(rng, depth + 1), "minItems": mn,
                "maxItems": mn + rng.randint(0, 2)}
    if k == "anyOf":
        return {"anyOf": [gen_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]}
    names = rng.sample(["id", "name", "x-y", "a b", "score", "tags", "ok", "nested"],
                       rng.randint(1, 4))
    props = {n: gen_schema(rng, depth + 1) for n in names}
    s = {"type": "object", "properties": props,
         "required": [n for n in names if rng.random() < 0.6]}
    if rng.random() < 0.3:
        s["additionalProperties"] = False
    if rng.random() < 0.2:
        s["title"] = "T"
    return s


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_chat_decoder.make(str(tmp_path_factory.mktemp("structured") / "m"), seed=3,
                                  n_pos=1024)


@pytest.fixture(scope="module")
def gen(model_dir):
    from ragged.generate import Generator
    return Generator(model_dir)


def test_json_schemas_generated(gen):
    rng = random.Random(2031)
    complete = 0
    n = 60 if ASAN else 200  # the ASan build is ~10x slower
    for i in range(n):
        schema = gen_schema(rng)
        jsonschema.Draft202012Validator.check_schema(schema)
        top = {"type": "object", "properties": {"v": schema}, "required": ["v"]} \
            if rng.random() < 0.5 else schema
        r = gen.generate("Data:", max_tokens=400, temperature=1.0, seed=i,
                         grammar=("json_schema", top))[0]
        if r["finish_reason"] == "length":
            continue  # a random model may ramble inside a bounded value; counted below
        assert r["finish_reason"] == "eos", r
        try:
            value = json.loads(r["text"])
        except ValueError as e:
            raise AssertionError(f"schema {i} {json.dumps(top)}: {r['text']!r}: {e}")
        try:
            jsonschema.validate(value, top)
        except jsonschema.ValidationError as e:
            raise AssertionError(f"schema {i} {json.dumps(top)}: {r['text']!r}: {e.message}")
        complete += 1
    assert complete >= 0.9 * n, f"only {complete} of {n} outputs completed"


def test_json_object_regex_and_choice(gen):
    for seed in range(10):
        r = gen.generate("Data:", max_tokens=600, temperature=1.0, seed=seed,
                         grammar=("json_object", None))[0]
        if r["finish_reason"] == "eos":
            assert isinstance(json.loads(r["text"]), dict), r["text"]
        r = gen.generate("x", max_tokens=50, temperature=1.0, seed=seed,
                         grammar=("regex", r"[0-9]{3}-(ab|cd){1,2}"))[0]
        assert re.fullmatch(r"[0-9]{3}-(ab|cd){1,2}", r["text"]), r
        r = gen.generate("x", max_tokens=50, temperature=1.0, seed=seed, n=3,
                         grammar=("choice", ["alpha", "beta", "gamma delta"]))
        assert all(o["text"] in ("alpha", "beta", "gamma delta") for o in r), r


def test_python_stream(gen):
    """Generator.stream() runs the engine with the grammar too: the pieces join to a valid
    instance, each of n outputs under its own DFA state."""
    schema = {"type": "object", "properties": {"k": {"type": "integer", "minimum": 1,
                                                     "maximum": 9}}, "required": ["k"]}
    for seed in range(3):
        texts = {}
        for ev in gen.stream("Hi", max_tokens=100, n=2, temperature=1.0, seed=seed,
                             grammar=("json_schema", schema)):
            texts[ev["index"]] = texts.get(ev["index"], "") + ev["text"]
        assert len(texts) == 2
        for t in texts.values():
            jsonschema.validate(json.loads(t), schema)


def test_python_api_refuses(gen):
    import ragged
    for g, msg in [(("regex", "(a"), "unterminated"),
                   (("json_schema", {"type": "integer", "multipleOf": 3}), "multipleOf"),
                   (("choice", []), "choice")]:
        with pytest.raises(ragged.RaggedError, match=msg):
            gen.generate("x", grammar=g)
    with pytest.raises(ragged.RaggedError, match="beam"):
        gen.generate("x", num_beams=2, grammar=("regex", "a+"))


# ---- (c) the server ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def srv(model_dir):
    s = Server(model_dir)
    yield s
    s.stop()


SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
    "required": ["name", "age"]}
MSGS = [{"role": "user", "content": "Give me JSON"}]


def _check_json(text, schema):
    jsonschema.validate(json.loads(text), schema)


def test_server_apis(srv):
    base = {"max_tokens": 300, "temperature": 1.0, "seed": 5}
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA, "strict": True}}
    st, r = srv.post_json("/v1/chat/completions", {**base, "messages": MSGS, "response_format": rf})
    assert st == 200, r
    _check_json(r["choices"][0]["message"]["content"], SCHEMA)
    st, r = srv.post_json("/v1/completions", {**base, "prompt": "p", "response_format": rf, "n": 2})
    assert st == 200, r
    for c in r["choices"]:
        _check_json(c["text"], SCHEMA)
    st, r = srv.post_json("/v1/completions", {**base, "prompt": "p", "guided_json": SCHEMA})
    assert st == 200, r
    _check_json(r["choices"][0]["text"], SCHEMA)
    st, r = srv.post_json("/v1/completions", {**base, "prompt": "p",
                                              "guided_choice": ["yes", "no", "it \"depends\""]})
    assert st == 200 and r["choices"][0]["text"] in ("yes", "no", 'it "depends"'), r
    st, r = srv.post_json("/v1/chat/completions", {**base, "messages": MSGS,
                                                   "guided_regex": r"\d{2}:\d{2}"})
    assert st == 200 and re.fullmatch(r"\d{2}:\d{2}", r["choices"][0]["message"]["content"]), r
    st, r = srv.post_json("/v1/completions", {**base, "prompt": "p",
                                              "structured_outputs": {"regex": "[a-c]{3}"}})
    assert st == 200 and re.fullmatch("[a-c]{3}", r["choices"][0]["text"]), r
    st, r = srv.post_json("/generate", {"inputs": "p", "parameters": {
        "max_new_tokens": 300, "grammar": {"type": "json", "value": SCHEMA}}})
    assert st == 200, r
    _check_json(r["generated_text"], SCHEMA)
    st, r = srv.post_json("/generate", {"inputs": "p", "parameters": {
        "max_new_tokens": 50, "grammar": {"type": "regex", "value": "(ab){1,3}c"}}})
    assert st == 200 and re.fullmatch("(ab){1,3}c", r["generated_text"]), r
    st, r = srv.post_json("/v1/chat/completions", {**base, "messages": MSGS, "max_tokens": 600,
                                                   "response_format": {"type": "json_object"}})
    assert st == 200, r
    if r["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)


def test_server_stream(srv):
    """A constrained stream's pieces concatenate to a valid output."""
    c = srv.conn(60)
    c.request("POST", "/v1/chat/completions", body=json.dumps({
        "messages": MSGS, "stream": True, "max_tokens": 300, "temperature": 1.0, "seed": 9,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}}),
        headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    text = ""
    for block in r.read().decode().split("\n\n"):
        block = block.strip()
        if not block or block == "data: [DONE]":
            continue
        ev = json.loads(block[len("data: "):])
        for ch in ev["choices"]:
            text += ch["delta"].get("content") or ""
    c.close()
    _check_json(text, SCHEMA)


BAD = [
    ("/v1/completions", {"prompt": "p", "guided_regex": "(ab"}, "guided_regex"),
    ("/v1/completions", {"prompt": "p", "guided_regex": r"(a)\1"}, "guided_regex"),
    ("/v1/completions", {"prompt": "p", "guided_json": {"type": "integer", "multipleOf": 2}},
     "guided_json"),
    ("/v1/completions", {"prompt": "p", "guided_json": "{oops"}, "guided_json"),
    ("/v1/chat/completions", {"messages": MSGS, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strng"}}}},
     "response_format.json_schema.schema"),
    ("/v1/chat/completions", {"messages": MSGS, "response_format": {"type": "yaml"}},
     "response_format"),
    ("/v1/completions", {"prompt": "p", "guided_choice": "yes"}, "guided_choice"),
    ("/v1/completions", {"prompt": "p", "guided_regex": "a", "guided_choice": ["a"]},
     "guided_choice"),
    ("/v1/completions", {"prompt": "p", "use_beam_search": True, "n": 2, "temperature": 0,
                         "guided_regex": "a+"}, None),
    ("/generate", {"inputs": "p", "parameters": {"grammar": {"type": "regex", "value": "[a"}}},
     "grammar.value"),
    ("/generate", {"inputs": "p", "parameters": {"grammar": {"type": "ebnf", "value": "x"}}},
     "grammar"),
]


@pytest.mark.parametrize("path,body,param", BAD)
def test_server_refuses_and_keeps_serving(srv, path, body, param):
    st, r = srv.post_json(path, body)
    assert st == (422 if path == "/generate" else 400), r  # TGI answers validation with 422
    msg = r["error"]["message"] if "error" in r and isinstance(r["error"], dict) else r["error"]
    assert msg
    if param and path.startswith("/v1"):
        assert r["error"]["param"] == param, r
    st, r = srv.post_json("/v1/completions", {"prompt": "p", "max_tokens": 20,
                                              "guided_choice": ["ok"]})
    assert st == 200 and r["choices"][0]["text"] == "ok", r
    assert srv.alive()


def test_server_grammar_state_limit(model_dir):
    """--max-grammar-states bounds one grammar's DFA: a regex over it is a 400 naming the
    field and the limit; one under it is served."""
    s = Server(model_dir, "--max-grammar-states", 100)
    try:
        st, r = s.post_json("/v1/completions", {"prompt": "p", "max_tokens": 20,
                                                "guided_regex": "(a|b)*a(a|b){8}"})
        assert st == 400 and r["error"]["param"] == "guided_regex", r
        assert "over 100 states" in r["error"]["message"], r
        st, r = s.post_json("/v1/completions", {"prompt": "p", "max_tokens": 20,
                                                "guided_regex": "(a|b){1,4}"})
        assert st == 200 and re.fullmatch("(a|b){1,4}", r["choices"][0]["text"]), r
    finally:
        s.stop()
