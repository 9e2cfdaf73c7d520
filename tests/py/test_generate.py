"""rg_generate / rg_generate_ids (include/ragged.h), ragged.Generator and `ragged generate`.

  - on the tiny random decoders of make_decoder.py (GPT-2, Llama with GQA, Qwen2): greedy output
    equals the argmax of rg_model_step's logits chained by hand (prefill, then one step per token,
    one sequence at a time), for several prompts generated in one call; KV blocks in use return
    to 0 after every call, also after errors (a cancelling callback, an over-long prompt);
  - transformers 5's config.json (rope_parameters instead of rope_theta / rope_scaling): logits
    equal the float64 reference of ref_decoder.py, run on the equivalent old-style config;
  - ragged.Generator options: seeds (same seed same ids, another seed other ids), n samples,
    beams, stop strings against the greedy text, logprobs;
  - the CLI with the real default model (SmolLM2 GGUF): found without Python on PATH, JSON
    fields, --stop, --max-tokens, --seed, --num-beams, --n, --logprobs, bad options (exit 2), an
    over-long prompt and an encoder model (exit 1, one clear line)."""
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import make_decoder
import ref_decoder
import ragged_ctypes as rc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
import ragged  # noqa: E402

MODELS = {
    "gpt2": ("gpt2", dict(H=32, heads=4, layers=2, vocab=97, n_pos=64)),
    "llama_gqa": ("llama", dict(H=64, heads=4, kv_heads=2, layers=2, inter=96, vocab=101,
                                max_pos=64)),
    "qwen2": ("llama", dict(H=64, heads=4, kv_heads=2, layers=2, inter=96, vocab=83,
                            model_type="qwen2", tie=True, rope_theta=1000000.0, max_pos=64)),
}
PROMPTS = [[5, 17, 3, 9, 22, 1, 40], [7], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen_decoders")
    out = {}
    for i, (name, (fam, spec)) in enumerate(MODELS.items()):
        d = str(root / name)
        cfg, w = make_decoder.make(d, fam, seed=300 + i, **spec)
        out[name] = (d, cfg, w)
    return out


def hand_greedy(m, prompt, n_new, bs=4):
    """Greedy by hand over rg_model_step: prefill, then one decode step per token."""
    m.kv_init(bs, 64)
    ids, out, margins = list(prompt), [], []
    pos = 0
    for _ in range(n_new):
        new = ids[pos:]
        p = list(range(pos, len(ids)))
        slots = p  # blocks 0, 1, 2, ... in order: slot = position
        nb = (len(ids) + bs - 1) // bs
        bt = np.arange(nb, dtype=np.int32)[None, :]
        lg = m.step(new, p, [0, len(new)], [len(ids)], bt, slots, [len(new) - 1])[0]
        top2 = np.sort(lg)[-2:]
        margins.append((top2[1] - top2[0]) / np.abs(lg).max())
        t = int(np.argmax(lg))
        out.append(t)
        ids.append(t)
        pos = len(ids) - 1
    return out, min(margins)


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_equals_chained_step_argmax(models, name):
    d = models[name][0]
    m = rc.Model(d, max_batch_tokens=64)
    try:
        want = []
        for pr in PROMPTS:
            toks, margin = hand_greedy(m, pr, 10)
            assert margin > 1e-4, "a near tie would make the comparison fragile"
            want.append(toks)
    finally:
        m.close()
    g = ragged.Generator(d, max_batch_tokens=64)
    try:
        assert g.kv_blocks_in_use() == 0
        outs = g.generate(PROMPTS, max_tokens=10, ignore_eos=True)
        assert [o["ids"] for o in outs] == want
        assert [o["prompt_tokens"] for o in outs] == [len(p) for p in PROMPTS]
        assert all(o["finish_reason"] == "length" and o["completion_tokens"] == 10 for o in outs)
        assert all(o["text"] is None for o in outs)  # no tokenizer in these directories
        assert g.kv_blocks_in_use() == 0
        # a prompt chunked over several steps (max_batch_tokens 8 < 13 tokens) gives the same
        g8 = ragged.Generator(d, max_batch_tokens=8)
        try:
            assert [o["ids"] for o in g8.generate(PROMPTS, max_tokens=10, ignore_eos=True)] \
                == want
        finally:
            g8.close()
    finally:
        g.close()


def test_blocks_released_after_errors(models):
    d = models["llama_gqa"][0]
    g = ragged.Generator(d, max_batch_tokens=64)
    try:
        seen = []

        def cancel(seq, tok, lp):
            seen.append(tok)
            if len(seen) == 3:
                raise RuntimeError("stop here")
        with pytest.raises(ragged.RaggedError):
            g.generate(PROMPTS, max_tokens=10, on_token=cancel)
        assert len(seen) == 3
        assert g.kv_blocks_in_use() == 0
        with pytest.raises(ragged.RaggedError) as e:
            g.generate([list(range(1, 65))], max_tokens=4)  # 64 tokens, context 64
        assert e.value.status == "RG_ERR_TOO_LONG" and "64" in e.value.message
        with pytest.raises(ragged.RaggedError) as e:
            g.generate([[1, 2]], max_tokens=4, top_p=1.5, temperature=1.0)
        assert e.value.status == "RG_ERR_INVALID_INPUT" and "top_p" in e.value.message
        with pytest.raises(ragged.RaggedError) as e:
            g.generate([[1, 2]], max_tokens=4, num_beams=2, temperature=1.0)
        assert g.kv_blocks_in_use() == 0
        # and it still works afterwards
        assert len(g.generate([[1, 2]], max_tokens=4)[0]["ids"]) == 4
        assert g.kv_blocks_in_use() == 0
    finally:
        g.close()


def test_caller_cache_and_chat_template(models, tmp_path):
    """A KV cache the caller made is used as it is (holding each sequence but not all at once:
    the engine preempts and recomputes, with the outputs of a large cache; a prompt as long as
    the cache: RG_ERR_TOO_LONG; blocks back to 0 either way);
    a Hugging Face directory's chat template comes from tokenizer_config.json, with its
    bos_token / eos_token; a template of no known family is refused."""
    d = models["llama_gqa"][0]
    g = ragged.Generator(d, max_batch_tokens=64)
    try:
        assert g.chat_template is None
        mt = 16 - max(len(p) for p in PROMPTS)  # each prompt and its tokens fit 16 alone
        assert mt >= 3
        want = g.generate(PROMPTS, max_tokens=mt, ignore_eos=True, logprobs=2)  # own cache
        st = rc.lib().rg_model_kv_init(g._h, 4, 4)  # 16 positions
        assert st == 0
        # together they need more: preempted sequences are recomputed as prefill chunks, another
        # GEMM shape than the decode steps they replace, so fp32 logits may differ in the last
        # bits; the ids are equal up to a near-tie (top-2 log-prob margin below 1e-3) at most
        got = g.generate(PROMPTS, max_tokens=mt, ignore_eos=True, logprobs=2)
        for o, w in zip(got, want):
            assert len(o["ids"]) == len(w["ids"]) == mt
            k = next((k for k, (a, b) in enumerate(zip(o["ids"], w["ids"])) if a != b), None)
            if k is not None:
                margin = w["top_logprobs"][k][0][1] - w["top_logprobs"][k][1][1]
                assert margin < 1e-3, (k, o["ids"], w["ids"], margin)
        assert g.kv_blocks_in_use() == 0
        with pytest.raises(ragged.RaggedError) as e:  # the cache is the context: 16
            g.generate([list(range(1, 17))], max_tokens=10, ignore_eos=True)
        assert e.value.status == "RG_ERR_TOO_LONG"
        assert g.kv_blocks_in_use() == 0
        out = g.generate([[1, 2, 3]], max_tokens=4, ignore_eos=True)[0]
        assert len(out["ids"]) == 4 and g.kv_blocks_in_use() == 0
    finally:
        g.close()
    import shutil
    from test_chat_template import TEMPLATES, jinja_render
    for name, tmpl, ok in (("chatml", "{% for m in messages %}<|im_start|>{{ m.role }}\n"
                                      "{{ m.content }}<|im_end|>\n{% endfor %}", True),
                           ("llama2", "{{ bos_token }}[INST] {{ messages[0].content }} [/INST]",
                            False)):
        dd = tmp_path / name
        shutil.copytree(d, dd)
        (dd / "tokenizer_config.json").write_text(json.dumps({"chat_template": tmpl}))
        g = ragged.Generator(str(dd), max_batch_tokens=64)
        try:
            assert g.chat_template == tmpl
            if ok:
                assert g.chat_family == "chatml"
                assert g.chat_format("x") == \
                    "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
            else:
                assert g.chat_family is None
                with pytest.raises(ragged.RaggedError) as e:
                    g.chat_format("x")
                assert e.value.status == "RG_ERR_UNSUPPORTED" and "ChatML" in e.value.message
        finally:
            g.close()
    # real templates with the bos_token / eos_token of tokenizer_config.json (a string or an
    # AddedToken object): rg_model_chat_apply equals jinja2's rendering with those tokens
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": " Hello "}, {"role": "user", "content": "2+2?"}]
    for fixture, family, bos, eos in (
            ("Meta-Llama-3-8B-Instruct", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
            ("Mistral-7B-Instruct-v0.3", "mistral", "<s>", "</s>"),
            ("Llama-2-7b-chat-hf", "llama2", "<s>", "</s>"),
            ("Phi-3-mini-4k-instruct", "phi3", "<s>", "<|endoftext|>")):
        with open(os.path.join(TEMPLATES, fixture + ".jinja"), encoding="utf-8") as f:
            tmpl = f.read()
        dd = tmp_path / fixture
        shutil.copytree(d, dd)
        (dd / "tokenizer_config.json").write_text(json.dumps({
            "chat_template": tmpl, "eos_token": eos,
            "bos_token": {"content": bos, "lstrip": False, "normalized": False,
                          "rstrip": False, "single_word": False, "__type": "AddedToken"}}))
        g = ragged.Generator(str(dd), max_batch_tokens=64)
        try:
            assert g.chat_family == family
            for gen in (False, True):
                assert g.chat_apply(chat, gen) == jinja_render(tmpl, chat, gen, bos, eos)
            assert g.chat_format("x", system="s") == jinja_render(
                tmpl, [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}],
                True, bos, eos)
            with pytest.raises(ragged.RaggedError) as e:
                g.chat_apply([{"role": "tool", "content": "x"}])
            assert e.value.status == "RG_ERR_INVALID_INPUT" and "messages[0]" in e.value.message
        finally:
            g.close()


def test_chat_apply_tools(models, tmp_path):
    """Generator.chat_apply with tools, assistant tool_calls (arguments as JSON text or a dict),
    tool results, continue_final_message and a chat_template override: equal to jinja2's
    rendering of the real templates (test_chat_tools.jinja_render, as transformers renders them
    with tools=), for Qwen2.5's Hermes, Llama 3.3's and Mistral v0.3's tool branches; tools
    given to a template without tool branches change nothing, as in transformers."""
    pytest.importorskip("jinja2")
    import shutil
    from test_chat_template import TEMPLATES
    from test_chat_tools import ADD, CHATS, WEATHER, jinja_render
    d = models["llama_gqa"][0]
    for fixture, bos, eos in (("Qwen2.5-0.5B-Instruct", "<|endoftext|>", "<|im_end|>"),
                              ("Llama-3.3-70B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
                              ("Mistral-7B-Instruct-v0.3", "<s>", "</s>")):
        with open(os.path.join(TEMPLATES, fixture + ".jinja"), encoding="utf-8") as f:
            tmpl = f.read()
        dd = tmp_path / fixture
        shutil.copytree(d, dd)
        (dd / "tokenizer_config.json").write_text(json.dumps({
            "chat_template": tmpl, "eos_token": eos, "bos_token": bos}))
        g = ragged.Generator(str(dd), max_batch_tokens=64)
        try:
            for chat in CHATS:
                for tools in (None, [WEATHER, ADD]):
                    want = jinja_render(tmpl, chat, tools, True, bos, eos)
                    assert g.chat_apply(chat, tools=tools) == want, (fixture, chat, tools)
            # arguments given as a dict (as a client may hold them) render the same
            chat = CHATS[2]
            as_dict = [dict(m, tool_calls=[dict(c, function=dict(
                c["function"], arguments=json.loads(c["function"]["arguments"])))
                for c in m["tool_calls"]]) if m.get("tool_calls") else m for m in chat]
            assert g.chat_apply(as_dict, tools=[WEATHER]) == \
                jinja_render(tmpl, chat, [WEATHER], True, bos, eos)
            with pytest.raises(ragged.RaggedError) as e:  # arguments that are not JSON
                g.chat_apply([chat[0], dict(chat[1], tool_calls=[dict(
                    chat[1]["tool_calls"][0], function={"name": "get_weather",
                                                        "arguments": "{not json"})])],
                    tools=[WEATHER])
            assert e.value.status == "RG_ERR_INVALID_INPUT" and "arguments" in e.value.message
        finally:
            g.close()
    # a template without tool branches: tools change nothing; continue_final_message and a
    # chat_template override, against jinja2 too
    from test_chat_template import jinja_render as plain_render
    with open(os.path.join(TEMPLATES, "SmolLM2-135M-Instruct.jinja"), encoding="utf-8") as f:
        smol = f.read()
    g = ragged.Generator(d, max_batch_tokens=64)
    try:
        chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I"}]
        full = plain_render(smol, chat, False, "<|endoftext|>", "<|im_end|>")
        assert g.chat_apply(chat[:1], chat_template=smol, tools=[ADD]) == \
            plain_render(smol, chat[:1], True, "<|endoftext|>", "<|im_end|>")
        got = g.chat_apply(chat, add_generation_prompt=False, continue_final_message=True,
                           chat_template=smol)
        assert got == full[:full.rindex("Hello, I") + len("Hello, I")]
    finally:
        g.close()


def test_eos_lists(models, tmp_path):
    """eos_token_id as a list (Llama 3 instruct) in config.json and in generation_config.json:
    rg_generate stops at any of them, as HF generate does."""
    import shutil
    d = models["llama_gqa"][0]
    g = ragged.Generator(d, max_batch_tokens=64)
    try:
        free = g.generate([PROMPTS[0]], max_tokens=10, ignore_eos=True)[0]["ids"]
    finally:
        g.close()
    unseen = [t for t in range(101) if t not in free]
    for where in ("config.json", "generation_config.json"):
        dd = tmp_path / where.split(".")[0]
        shutil.copytree(d, dd)
        cfg = json.loads((dd / "config.json").read_text())
        cfg["eos_token_id"] = [unseen[0], unseen[1]]
        if where == "config.json":
            cfg["eos_token_id"].append(free[3])
        else:
            (dd / where).write_text(json.dumps({"eos_token_id": [unseen[2], free[3]]}))
        (dd / "config.json").write_text(json.dumps(cfg))
        g = ragged.Generator(str(dd), max_batch_tokens=64)
        try:
            out = g.generate([PROMPTS[0]], max_tokens=10)[0]
            k = free.index(free[3])
            assert out["ids"] == free[:k + 1] and out["finish_reason"] == "eos", where
            l = rc.lib()
            l.rg_model_eos_id.argtypes = [ctypes.c_void_p]
            l.rg_model_eos_id.restype = ctypes.c_int32
            assert l.rg_model_eos_id(g._h) == unseen[0]
        finally:
            g.close()


def test_generator_options(models):
    d = models["llama_gqa"][0]
    g = ragged.Generator(d, max_batch_tokens=64)
    try:
        a = g.generate(PROMPTS, max_tokens=8, temperature=1.0, seed=5, n=2, ignore_eos=True)
        b = g.generate(PROMPTS, max_tokens=8, temperature=1.0, seed=5, n=2, ignore_eos=True)
        c = g.generate(PROMPTS, max_tokens=8, temperature=1.0, seed=6, n=2, ignore_eos=True)
        assert len(a) == 2 * len(PROMPTS)
        assert [o["ids"] for o in a] == [o["ids"] for o in b]
        assert [o["ids"] for o in a] != [o["ids"] for o in c]
        assert [(o["prompt_index"], o["index"]) for o in a] == \
            [(i, j) for i in range(len(PROMPTS)) for j in range(2)]
        # top-k 1 sampling is greedy
        greedy = g.generate(PROMPTS, max_tokens=8, ignore_eos=True)
        k1 = g.generate(PROMPTS, max_tokens=8, temperature=0.7, top_k=1, seed=9,
                        ignore_eos=True)
        assert [o["ids"] for o in k1] == [o["ids"] for o in greedy]
        # logprobs: the chosen token is among the alternatives, probabilities <= 1
        lp = g.generate([PROMPTS[0]], max_tokens=4, logprobs=3, ignore_eos=True)[0]
        for tok, l, alts in zip(lp["ids"], lp["logprobs"], lp["top_logprobs"]):
            assert l <= 0 and len(alts) == 3 and alts[0][0] == tok
        # beams: n best of 4, each of max_tokens (EOS ignored), scores descending
        bm = g.generate([PROMPTS[0]], max_tokens=6, num_beams=4, n=3, ignore_eos=True)
        assert len(bm) == 3 and all(len(o["ids"]) == 6 for o in bm)
        assert bm[0]["score"] >= bm[1]["score"] >= bm[2]["score"]
        assert g.kv_blocks_in_use() == 0
    finally:
        g.close()


def device_and_host(g, monkeypatch, opts):
    """The same generate() with the device paths (default) and with RAGGED_GEN_DEVICE_SAMPLE=0
    (whole logits rows on the host); asserts the ids are equal, returns both answers."""
    dev = g.generate(PROMPTS, max_tokens=10, ignore_eos=True, **opts)
    monkeypatch.setenv("RAGGED_GEN_DEVICE_SAMPLE", "0")
    host = g.generate(PROMPTS, max_tokens=10, ignore_eos=True, **opts)
    monkeypatch.delenv("RAGGED_GEN_DEVICE_SAMPLE")
    assert [x["ids"] for x in dev] == [x["ids"] for x in host], opts
    return dev, host


def test_sampling_on_the_device_equals_the_host_chain(models, monkeypatch):
    """rg_generate samples through rg_model_step's sampler path (the logits stay on the device);
    the host chain over the logits (RAGGED_GEN_DEVICE_SAMPLE=0) makes the same choices from the same draws:
    identical ids and top alternatives, log-probs within float rounding, penalties, bias and n > 1
    included (the device kernels' float64 sums run in another order, so a draw within ~1e-16 of
    a boundary could differ; none does here)."""
    g = ragged.Generator(models["gpt2"][0], max_batch_tokens=64)
    opts = [dict(temperature=0.9, top_k=20, top_p=0.9, seed=3, n=3),
            dict(temperature=1.2, min_p=0.05, repetition_penalty=1.3, presence_penalty=0.4,
                 frequency_penalty=0.6, seed=4, n=2, logprobs=4),
            dict(repetition_penalty=1.5, logprobs=2)]  # processed greedy
    try:
        for o in opts:
            dev, host = device_and_host(g, monkeypatch, o)
            for a, b in zip(dev, host):
                np.testing.assert_allclose(a["logprobs"], b["logprobs"], rtol=0, atol=1e-5)
                if o.get("logprobs"):
                    assert [[t for t, _ in alt] for alt in a["top_logprobs"]] == \
                        [[t for t, _ in alt] for alt in b["top_logprobs"]]
        assert g.kv_blocks_in_use() == 0
    finally:
        g.close()


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_beams_from_device_candidates_equal_host_logits(models, name, monkeypatch):
    """Beam search takes each row's best few tokens from rg_model_step's sampler path (the logits
    stay on the device); the search over the full logits on the host (RAGGED_GEN_DEVICE_SAMPLE=0) returns
    the same hypotheses, scores within f32 rounding."""
    g = ragged.Generator(models[name][0], max_batch_tokens=64)
    opts = [dict(num_beams=4, n=3),
            dict(num_beams=4, n=2, no_repeat_ngram_size=2, length_penalty=0.5),
            dict(num_beams=6, num_beam_groups=3, diversity_penalty=1.0, n=4)]
    try:
        for o in opts:
            dev, host = device_and_host(g, monkeypatch, o)
            for a, b in zip(dev, host):
                assert a["score"] == pytest.approx(b["score"], rel=1e-5, abs=1e-5)
        assert g.kv_blocks_in_use() == 0
    finally:
        g.close()


def test_rope_parameters_config(models, tmp_path):
    """transformers >= 5 writes rope_theta and the scaling into "rope_parameters"."""
    rng = np.random.default_rng(3)
    spec = dict(H=64, heads=4, kv_heads=1, layers=2, inter=80, vocab=89, tie=True,
                rope_theta=500000.0, max_pos=256,
                rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                  high_freq_factor=4.0, original_max_position_embeddings=64))
    ids = list(rng.integers(0, 89, 120))
    for variant in ("llama3", "default"):
        d = str(tmp_path / variant)
        cfg, w = make_decoder.make(d, "llama", seed=11, **spec)
        if variant == "default":
            cfg["rope_scaling"] = None
        ref = ref_decoder.forward(cfg, w, ids)  # old-style config
        new = {k: v for k, v in cfg.items() if k not in ("rope_theta", "rope_scaling")}
        new["rope_parameters"] = dict(cfg["rope_scaling"] or {"rope_type": "default"},
                                      rope_theta=cfg["rope_theta"])
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(new, f)
        m = rc.Model(d, max_batch_tokens=256)
        try:
            m.kv_init(16, 8)
            got = m.step(ids, list(range(len(ids))), [0, len(ids)], [len(ids)],
                         np.arange(8, dtype=np.int32)[None, :], list(range(len(ids))),
                         np.arange(len(ids)))
        finally:
            m.close()
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err <= 1e-5, (variant, err)


# ---- the command line, with the real default model ------------------------------------------

def _env(**kw):
    env = {k: v for k, v in os.environ.items() if k not in ("RAGGED_MODEL", "RAGGED_MODEL_DIR")}
    env.pop("LD_PRELOAD", None)
    env["PATH"] = "/nonexistent"  # the default model is found without running Python
    env.update({k: str(v) for k, v in kw.items()})
    return env


def gen(*args, stdin=b"The capital of France is\n", env=None):
    p = subprocess.run([os.path.abspath(rc.BIN_PATH), "generate", *args], input=stdin,
                       capture_output=True, env=env or _env(), timeout=300)
    return p


def lines(p):
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return [json.loads(x) for x in p.stdout.decode().splitlines()]


def test_cli_default_model_and_fields():
    out = lines(gen("--max-tokens", "8"))
    assert len(out) == 1
    o = out[0]
    assert set(o) >= {"prompt", "index", "text", "ids", "finish_reason", "usage", "timing"}
    assert o["prompt"] == "The capital of France is" and len(o["ids"]) == 8
    assert o["finish_reason"] == "length" and "Paris" in o["text"]
    assert o["usage"] == {"prompt_tokens": 5, "completion_tokens": 8}
    assert o["timing"]["total_s"] > 0 and o["timing"]["tokens_per_s"] > 0
    assert "logprobs" not in o


def test_cli_chat():
    """--chat: each line as a user turn of the model's template (SmolLM2's ChatML, its default
    system message included, as jinja2 renders it), tokenized without extra special tokens:
    the same prompt and greedy answer as ragged.Generator's chat=True, ending at <|im_end|>."""
    from test_chat_template import jinja_render
    q = "What is the capital of France?"
    # dequantized weights: with SmolLM2's Q4_1 blocks kept (the default since issue 30) the
    # greedy answer to this prompt is another text (test_gguf_quant.py tests that path); the
    # CLI and the Generator still agree on it
    qo = lines(gen("--chat", "--max-tokens", "8", stdin=(q + "\n").encode()))[0]
    with ragged.Generator(max_batch_tokens=256) as gq:
        assert gq.generate(q, chat=True, max_tokens=8)[0]["ids"] == qo["ids"]
    o = lines(gen("--chat", "--weights", "dequantize", "--max-tokens", "40",
                  stdin=(q + "\n").encode()))[0]
    assert o["prompt"] == q and o["finish_reason"] == "eos" and "Paris" in o["text"]
    g = ragged.Generator(max_batch_tokens=256, weights="dequantize")
    try:
        text = jinja_render(g.chat_template, [{"role": "user", "content": q}], True, None, None)
        assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
        ref = g.generate(q, chat=True, max_tokens=40)[0]
        assert ref["ids"] == o["ids"]
        # SmolLM2's tokenizer adds no BOS: the rendered text alone tokenizes to the same count
        assert o["usage"]["prompt_tokens"] == ref["prompt_tokens"] == \
            g.generate(text, max_tokens=1)[0]["prompt_tokens"]
    finally:
        g.close()


def test_cli_stop_seed_beams_logprobs(tmp_path):
    full = lines(gen("--max-tokens", "12"))[0]
    cut = full["text"].index(".")
    stopped = lines(gen("--max-tokens", "12", "--stop", "."))[0]
    assert stopped["finish_reason"] == "stop" and stopped["text"] == full["text"][:cut]
    assert stopped["ids"] == full["ids"][:len(stopped["ids"])]
    prompts = b"Once upon a time\nThe best way to learn\n"
    a = lines(gen("--max-tokens", "10", "--temperature", "0.9", "--seed", "7", "--n", "2",
                  stdin=prompts))
    b = lines(gen("--max-tokens", "10", "--temperature", "0.9", "--seed", "7", "--n", "2",
                  "--top-p", "0.9", "--top-k", "40", stdin=prompts))
    a2 = lines(gen("--max-tokens", "10", "--temperature", "0.9", "--seed", "7", "--n", "2",
                   stdin=prompts))
    assert len(a) == 4 and [x["ids"] for x in a] == [x["ids"] for x in a2]
    assert [x["prompt"] for x in a] == ["Once upon a time"] * 2 + ["The best way to learn"] * 2
    assert len(b) == 4
    beams = lines(gen("--max-tokens", "6", "--num-beams", "3", "--n", "2"))
    assert len(beams) == 2 and [x["index"] for x in beams] == [0, 1]
    lp = lines(gen("--max-tokens", "4", "--logprobs", "2"))[0]
    assert len(lp["logprobs"]) == 4 and all(len(t) == 2 for t in lp["top_logprobs"])
    assert [t[0]["id"] for t in lp["top_logprobs"]] == lp["ids"]  # greedy: the top one
    # --input / --output
    (tmp_path / "in.txt").write_bytes(prompts)
    p = gen("--max-tokens", "3", "--input", str(tmp_path / "in.txt"), "--output",
            str(tmp_path / "out.jsonl"), "--progress", stdin=b"")
    assert p.returncode == 0 and p.stdout == b""
    assert "tokens/s" in p.stderr.decode()
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2


def test_cli_info_on_decoders(models):
    gg = subprocess.run([os.path.abspath(rc.BIN_PATH), "info", "--device", "cpu"],
                        capture_output=True, env=_env(RAGGED_MODEL=_default_gguf()), timeout=120)
    assert gg.returncode == 0, gg.stderr
    i = json.loads(gg.stdout)["model"]
    assert (i["kind"], i["model_type"], i["num_key_value_heads"], i["head_dim"]) == \
        ("decoder", "llama", 3, 64)
    assert i["eos_token_id"] == 2 and i["chat_template"] is True
    assert i["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 4
    # $RAGGED_MODEL picks another decoder; one without a tokenizer cannot take text prompts
    p = gen("--max-tokens", "2", env=_env(RAGGED_MODEL=models["gpt2"][0]))
    assert p.returncode == 1 and "input line 1" in p.stderr.decode()


def _default_gguf():
    import test_tokenizer_decoder_bpe as tdb
    return tdb._gguf_path()


def test_cli_stream():
    p = gen("--max-tokens", "8", "--stream")
    assert p.returncode == 0, p.stderr
    full = lines(gen("--max-tokens", "8"))[0]
    assert p.stdout.decode() == full["text"] + "\n"
    assert "length, 8 tokens" in p.stderr.decode()


@pytest.mark.parametrize("args,words", [
    (["--top-p", "x"], "--top-p"),
    (["--max-tokens", "0"], "--max-tokens"),
    (["--logprobs", "21"], "--logprobs"),
    (["--seed", "-1"], "--seed"),
    (["--frobnicate"], "unknown option"),
    (["--max-tokens"], "needs a value"),
])
def test_cli_bad_options(args, words):
    p = gen(*args)
    assert p.returncode == 2 and p.stdout == b""
    assert words in p.stderr.decode()


def _mem_free():
    """MemTotal minus this process's resident bytes, as rg_model_kv_init_fraction reads them."""
    with open("/proc/meminfo") as f:
        total = int(next(x for x in f if x.startswith("MemTotal:")).split()[1]) * 1024
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return total - rss


def test_kv_cache_fraction(models):
    """rg_model_kv_init_fraction sizes the cache from the memory left after the model (CPU:
    MemTotal minus RSS); a fraction outside (0, 1] is refused and leaves no cache behind."""
    m = rc.Model(models["llama_gqa"][0], max_batch_tokens=64)
    try:
        before = _mem_free()
        m.kv_init_fraction(16, 0.001)
        k = m.kv_info()
        want = 0.001 * before
        assert k.block_size == 16 and k.n_blocks >= 1
        assert 0.8 * want - k.bytes_per_block <= k.bytes <= 1.05 * want + k.bytes_per_block, \
            (k.bytes, want)
        for bad in (0.0, -0.5, 1.5, float("nan")):
            with pytest.raises(rc.RaggedError) as e:
                m.kv_init_fraction(16, bad)
            assert "fraction" in str(e.value)
    finally:
        m.close()


def test_cli_kv_cache_options():
    """--kv-cache-fraction / --kv-cache-bytes make the cache generate uses as is (its size bounds
    the context: a too-small cache ends the output with "length"); a bad value exits 2 naming
    the option."""
    out = lines(gen("--max-tokens", "4", "--kv-cache-fraction", "0.01"))
    assert len(out) == 1 and len(out[0]["ids"]) == 4
    p = gen("--max-tokens", "4", "--kv-cache-bytes", "1")  # one block of 16 positions: fits
    assert len(lines(p)[0]["ids"]) == 4
    # 5 + 20 positions do not fit one block: the cache bounds the context, so the output
    # stops at 16 positions with finish_reason "length"
    o = lines(gen("--max-tokens", "20", "--kv-cache-bytes", "1", "--ignore-eos"))[0]
    assert len(o["ids"]) == 16 - 5 and o["finish_reason"] == "length"
    for opt, val in (("--kv-cache-fraction", "2"), ("--kv-cache-fraction", "x"),
                     ("--kv-cache-bytes", "0")):
        p = gen(opt, val)
        assert p.returncode == 2 and opt in p.stderr.decode()


def test_cli_errors(minilm_dir):
    long = (b"a " * 9000).strip() + b"\n"
    p = gen("--max-tokens", "2", stdin=b"hello\n" + long)
    assert p.returncode == 1 and p.stdout == b""
    err = p.stderr.decode()
    assert "input line 2" in err and "8192" in err
    p = gen("--max-tokens", "2", "--top-p", "1.5", "--temperature", "1")
    assert p.returncode == 2 and "top_p" in p.stderr.decode()
    p = gen("--num-beams", "2", "--temperature", "1")
    assert p.returncode == 2 and "beam" in p.stderr.decode()
    p = gen("--model", minilm_dir)
    assert p.returncode == 1 and "encoder" in p.stderr.decode()
    p = gen(stdin=b"")
    assert p.returncode == 1 and "empty input" in p.stderr.decode()
