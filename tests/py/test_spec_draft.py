"""Speculative decoding with a draft model (issue 30 item 4, `--draft-model`; include/ragged.h
rg_model_set_draft, src/gen/engine.c draft_propose).

The target is the tiny Llama of test_spec_decode.py; its draft is the same model cut to its first
layer (an early-exit draft: it agrees with the target often but not always, so drafts are both
accepted and rejected), or an unrelated model of the same vocabulary (mostly rejected).
  - greedy output with drafts is token-identical to greedy without them, and to the float64
    reference up to the first near tie; the acceptance counts show accepted and rejected
    drafts (the test fails if speculation silently did nothing); KV blocks back to 0;
  - sampled requests: the same tokens seed for seed as without drafts (the proposal is a
    function of the context only, so the one-hot acceptance rule keeps the distribution);
  - Generator.stream: steps that carry several tokens, the same ids;
  - one engine, mixed: drafting and plain greedy requests, a sampled one, a host-chain one and a
    beam search, stop ids inside accepted runs, many max_tokens, tight step budgets: each as it
    runs alone without speculation; the engine's KV blocks return to 0;
  - refusals: another vocabulary, the model as its own draft, an encoder;
  - the real SmolLM2 GGUF through `ragged generate --draft-model` and `ragged serve
    --draft-model` (the file as its own draft, loaded a second time): the same ids and text as
    without, and the acceptance counters."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import make_decoder
import ragged_ctypes as rc
from server_util import Server
from test_spec_decode import (PROMPTS, REPEAT, SPEC, _gguf, check_mixed, check_reference,
                              mixed_requests, streamed_text)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
import ragged  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(target dir, cfg, weights, early-exit draft dir, unrelated draft dir)."""
    root = tmp_path_factory.mktemp("spec_draft")
    d, dd, du = str(root / "target"), str(root / "draft"), str(root / "other")
    cfg, w = make_decoder.make(d, "llama", seed=301, **SPEC)
    os.makedirs(dd)
    c = dict(cfg, num_hidden_layers=1)
    with open(os.path.join(dd, "config.json"), "w") as f:
        json.dump(c, f)
    st = load_file(os.path.join(d, "model.safetensors"))
    save_file({k: v for k, v in st.items() if ".layers.1." not in k},
              os.path.join(dd, "model.safetensors"))
    make_decoder.make(du, "llama", seed=77, **dict(SPEC, H=32, heads=2, kv_heads=1, layers=1,
                                                    inter=48))
    return d, cfg, w, dd, du


def test_greedy_identical_and_reference(models):
    d, cfg, w, dd, du = models
    n_new = 36
    with ragged.Generator(d, max_batch_tokens=64) as g:
        base = g.generate(PROMPTS, max_tokens=n_new, ignore_eos=True)
    for draft in (dd, du):
        with ragged.Generator(d, max_batch_tokens=64, draft_model=draft) as g:
            for k in (1, 4, 7):
                spec = g.generate(PROMPTS, max_tokens=n_new, ignore_eos=True,
                                  num_speculative_tokens=k)
                assert g.kv_blocks_in_use() == 0
                assert [s["ids"] for s in spec] == [b["ids"] for b in base], (draft, k)
                assert [s["finish_reason"] for s in spec] == ["length"] * len(PROMPTS)
                drafted, accepted = spec[0]["spec_drafted"], spec[0]["spec_accepted"]
                if draft == dd:  # the early-exit draft: accepted and rejected drafts
                    assert accepted > 0 and drafted - accepted > 0, (k, drafted, accepted)
                else:
                    assert drafted > 0 and drafted > accepted, (k, drafted, accepted)
            for s, b in zip(spec, base):
                np.testing.assert_allclose(s["logprobs"], b["logprobs"], rtol=1e-4, atol=1e-5)
            # without num_speculative_tokens the draft is not asked
            plain = g.generate(PROMPTS, max_tokens=8, ignore_eos=True)
            assert plain[0]["spec_drafted"] == 0
            assert [p["ids"] for p in plain] == [b["ids"][:8] for b in base]
    # the streaming engine: steps of several tokens, the same ids
    with ragged.Generator(d, max_batch_tokens=64, draft_model=dd) as g:
        multi = 0
        for pr, b in zip(PROMPTS, base):
            ev = list(g.stream(pr, max_tokens=n_new, ignore_eos=True,
                               num_speculative_tokens=4))
            assert [t for x in ev for t in x["ids"]] == b["ids"]
            assert ev[-1]["finish_reason"] == "length"
            multi += sum(len(x["ids"]) > 1 for x in ev)
        assert multi > 0
    # a step budget of 8 tokens: drafts and the draft's own prefill cut, the same tokens
    with ragged.Generator(d, max_batch_tokens=8, draft_model=dd) as g:
        cut = g.generate(PROMPTS, max_tokens=n_new, ignore_eos=True, num_speculative_tokens=6)
        assert [s["ids"] for s in cut] == [b["ids"] for b in base]
        assert cut[0]["spec_accepted"] > 0
    check_reference(cfg, w, base, n_new)  # the float64 reference, up to near ties


@pytest.mark.parametrize("opts", [dict(temperature=0.3), dict(temperature=0.8, top_k=5),
                                  dict(temperature=0.5, top_p=0.9, min_p=0.05)])
def test_sampled_identical_seed_for_seed(models, opts):
    d, _, _, dd, _ = models
    with ragged.Generator(d, max_batch_tokens=64) as g:
        base = g.generate(PROMPTS, max_tokens=36, ignore_eos=True, seed=11, n=2, **opts)
    with ragged.Generator(d, max_batch_tokens=64, draft_model=dd) as g:
        spec = g.generate(PROMPTS, max_tokens=36, ignore_eos=True, seed=11, n=2,
                          num_speculative_tokens=4, **opts)
        assert [s["ids"] for s in spec] == [b["ids"] for b in base]
        for s, b in zip(spec, base):
            np.testing.assert_allclose(s["logprobs"], b["logprobs"], rtol=1e-4, atol=1e-5)
        assert spec[0]["spec_accepted"] > 0
        assert spec[0]["spec_drafted"] - spec[0]["spec_accepted"] > 0
        assert g.kv_blocks_in_use() == 0


def test_mixed_engine(models):
    d, _, _, dd, _ = models
    with ragged.Generator(d, max_batch_tokens=64) as ref, \
            ragged.Generator(d, max_batch_tokens=64, draft_model=dd) as g:
        reqs, want = mixed_requests(g, ref)
        check_mixed(g, reqs, want)


def test_refused(models, tmp_path):
    """rg_model_set_draft's refusals, each with its reason; the target still generates."""
    import ragged.generate as rgen
    d, _, _, dd, _ = models
    bad = str(tmp_path / "v100")
    make_decoder.make(bad, "llama", seed=5, **dict(SPEC, vocab=100))
    with pytest.raises(ragged.RaggedError, match="vocabularies differ: 101 tokens"):
        ragged.Generator(d, draft_model=bad)
    l = rgen.lib()
    with ragged.Generator(d) as g, ragged.Generator(dd) as dg:
        assert l.rg_model_set_draft(g._handle(), g._handle()) != 0
        assert "cannot draft for itself" in l.rg_last_error().decode()
        # a draft with a draft of its own
        assert l.rg_model_set_draft(dg._handle(), g._handle()) == 0
        assert l.rg_model_set_draft(g._handle(), dg._handle()) != 0
        assert "draft model of its own" in l.rg_last_error().decode()
        assert l.rg_model_set_draft(dg._handle(), None) == 0  # detached
        # a borrowed Generator as the draft: it stays open after the target closes
        with ragged.Generator(d, max_batch_tokens=64, draft_model=dg) as t:
            out = t.generate(PROMPTS[:1], max_tokens=8, ignore_eos=True,
                             num_speculative_tokens=3)
            assert out[0]["spec_drafted"] > 0
        assert dg.generate(PROMPTS[:1], max_tokens=2, ignore_eos=True)[0]["ids"]
        assert g.generate(PROMPTS[:1], max_tokens=8, ignore_eos=True)[0]["ids"] == \
            out[0]["ids"]
    # an encoder (an embedding model) is no draft
    enc = str(tmp_path / "enc")
    import make_tiny
    make_tiny.make_tiny(enc, make_tiny.CONFIGS["h32_gelu"], make_tiny.minilm_dir())
    with pytest.raises(ragged.RaggedError, match="must both be decoder-only"):
        ragged.Generator(d, draft_model=enc)


def _metrics(s):
    st, h, data = s.request("GET", "/metrics")
    return {ln.split()[0]: float(ln.split()[1]) for ln in data.decode().splitlines()
            if ln and not ln.startswith("#") and len(ln.split()) == 2}


def test_cli_and_serve_draft_model(tmp_path, models):
    path = _gguf()
    inp = tmp_path / "in.txt"
    inp.write_text(REPEAT + "\nThe cat sat on the mat. The cat sat on the\n")
    outs = []
    for extra in ([], ["--draft-model", path, "--num-speculative-tokens", "3"]):
        r = subprocess.run([rc.BIN_PATH, "generate", "--model", path, "--input", str(inp),
                            "--max-tokens", "16", "--no-progress", "--device", "cpu", *extra],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        outs.append([json.loads(x) for x in r.stdout.splitlines()])
    base, spec = outs
    assert [x["ids"] for x in spec] == [x["ids"] for x in base]
    assert [x["text"] for x in spec] == [x["text"] for x in base]
    t = spec[0]["timing"]
    assert t["spec_accepted"] > 0 and t["spec_drafted"] >= t["spec_accepted"]
    # usage errors: both proposers; a draft of another vocabulary
    r = subprocess.run([rc.BIN_PATH, "generate", "--model", path, "--draft-model", path,
                        "--speculative", "ngram"], capture_output=True, text=True, timeout=60,
                       input="x\n")
    assert r.returncode == 2 and "choose one" in r.stderr, r.stderr
    r = subprocess.run([rc.BIN_PATH, "generate", "--model", path, "--draft-model", models[3],
                        "--no-progress"], capture_output=True, text=True, timeout=120,
                       input="x\n")
    assert r.returncode == 2 and "vocabularies differ" in r.stderr, r.stderr
    # the server: a greedy completion as without drafts, whole and streamed; the counters
    s = Server(path, "--max-model-len", 512, "--draft-model", path,
               "--num-speculative-tokens", 4, "--no-prefix-caching")
    try:
        st, out = s.post_json("/v1/completions", {"prompt": REPEAT, "max_tokens": 16,
                                                  "temperature": 0})
        assert st == 200, out
        want = out["choices"][0]["text"]
        with ragged.Generator(path) as g:
            assert g.generate([REPEAT], max_tokens=16)[0]["text"] == want
        assert streamed_text(s, REPEAT, 16) == want
        m = _metrics(s)
        assert m["ragged_gen_spec_decode_num_accepted_tokens_total"] > 0
        assert m["ragged_gen_kv_blocks_used"] == 0
    finally:
        s.stop()
    for bad, msg in ((["--draft-model", path, "--speculative", "ngram"], "choose one"),
                     (["--speculative", "draft"], "needs --draft-model")):
        r = subprocess.run([rc.BIN_PATH, "serve", "--model", path, *bad],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
