"""`ragged serve` with several models in one process (issue 31 item 4): an encoder embedding model,
a cross-encoder reranker and a decoder behind one port, `--model A ... --model B ...`.

The reference for every answer is the same model served alone by its own `ragged serve` (the
single-model server, whose routes the other suites check against HF and NumPy): routing by the
request's "model" must reach the right engine and change nothing in what it computes. Also:
/v1/models lists every model under each of its names (vLLM's `--served-model-name A B`, and the
comma form), an unknown name is 404 model_not_found on every route (as vLLM answers it), a route
of the wrong kind is 400, a bad second model stops the start with a clear message and a
non-zero status, a concurrent mix of requests to all three models gets the sequential answers,
and SIGTERM stops the server cleanly (status 0; under ASan with leak checking on). The config
file form (`--config FILE`) serves what its command line does, and each mistake in it is a
usage error that names the file and the key."""
import json
import os
import re
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import make_chat_decoder
from ragged_ctypes import BIN_PATH
from server_util import Server, parse_metrics, server_env, tiny_model

TEXTS = ["Hello world!", "The quick brown fox jumps over the lazy dog.", "a"]
PROMPTS = ["Hello, world! How are you today?", "The quick brown fox", "A"]
DEC_ARGS = ["--kv-cache-bytes", 4 << 20, "--max-num-seqs", 8, "--max-num-batched-tokens", 32,
            "--block-size", 4]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("multi"))
    return {"emb": tiny_model(root, "h32_gelu"), "rr": tiny_model(root, "bert_rerank"),
            "gen": make_chat_decoder.make(os.path.join(root, "dec"), seed=7)}


@pytest.fixture(scope="module")
def multi(dirs):
    # vLLM's form for the first model's names, the comma form for the decoder's; the decoder's
    # own KV cache and step budget follow its --model
    s = Server(dirs["emb"], "--served-model-name", "emb", "emb-alias",
               "--model", dirs["rr"], "--served-model-name", "rr",
               "--model", dirs["gen"], "--served-model-name", "gen,gen-alias", *DEC_ARGS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def singles(dirs):
    """Each model served alone: the references."""
    out = {"emb": Server(dirs["emb"]), "rr": Server(dirs["rr"]),
           "gen": Server(dirs["gen"], *DEC_ARGS)}
    yield out
    for s in out.values():
        s.stop()


def embed(s, texts, **kw):
    st, out = s.post_json("/v1/embeddings", dict({"input": texts}, **kw))
    assert st == 200, out
    return np.array([d["embedding"] for d in out["data"]], np.float64)


def rerank(s, **kw):
    st, out = s.post_json("/rerank", dict({"query": "a fox", "texts": TEXTS}, **kw))
    assert st == 200, out
    return [r["score"] for r in sorted(out, key=lambda r: r["index"])]


def complete(s, prompt, **kw):
    st, out = s.post_json("/v1/completions", dict({"prompt": prompt, "max_tokens": 8,
                                                   "temperature": 0, "ignore_eos": True}, **kw))
    assert st == 200, out
    return out


def chat(s, **kw):
    st, out = s.post_json("/v1/chat/completions",
                          dict({"messages": [{"role": "user", "content": "Hi there"}],
                                "max_tokens": 6, "temperature": 0}, **kw))
    assert st == 200, out
    return out


def test_models_listed(multi):
    st, h, data = multi.request("GET", "/v1/models")
    assert st == 200
    models = json.loads(data)["data"]
    assert [m["id"] for m in models] == ["emb", "emb-alias", "rr", "gen", "gen-alias"]
    assert all(m["object"] == "model" for m in models)
    assert [m.get("max_model_len") for m in models][3:] == [256, 256]  # the decoder's context
    for name in ("emb", "emb-alias", "rr", "gen-alias"):
        st, h, data = multi.request("GET", f"/v1/models/{name}")
        assert st == 200 and json.loads(data)["id"] == name
    st, h, data = multi.request("GET", "/v1/models/gen")
    assert json.loads(data)["max_model_len"] == 256
    # /info: the first model's answer, as a single-model server gives it, and every model
    st, h, data = multi.request("GET", "/info")
    info = json.loads(data)
    assert info["served_model_name"] == "emb" and info["model_type"] == {
        "embedding": {"pooling": "mean"}}
    assert [(m["id"], m["aliases"], m["kind"]) for m in info["models"]] == [
        ("emb", ["emb", "emb-alias"], "embedding"), ("rr", ["rr"], "reranker"),
        ("gen", ["gen", "gen-alias"], "generator")]
    # each model's own budgets: the decoder's KV cache and step budget came after its --model
    g = info["models"][2]
    assert (g["kv_cache_bytes"], g["max_num_seqs"], g["max_num_batched_tokens"]) == \
        (4 << 20, 8, 32)
    assert g["max_input_length"] == 256
    st, h, data = multi.request("GET", "/health")
    assert st == 200


def test_routing_matches_single_servers(multi, singles, dirs):
    ref = embed(singles["emb"], TEXTS)
    for kw in ({}, {"model": "emb"}, {"model": "emb-alias"}, {"model": dirs["emb"]}):
        got = embed(multi, TEXTS, **kw)  # no "model": the first model
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)
    st, out = multi.post_json("/embed", {"inputs": TEXTS[0], "model": "emb"})  # TEI's route
    assert st == 200 and np.allclose(out[0], embed(singles["emb"], TEXTS[:1])[0], atol=1e-6)

    np.testing.assert_allclose(rerank(multi, model="rr"), rerank(singles["rr"]), atol=1e-6)
    # TEI's POST / by the chosen model's kind: a reranker's is /rerank
    st, out = multi.post_json("/", {"query": "a fox", "texts": TEXTS, "model": "rr"})
    assert st == 200 and len(out) == len(TEXTS), out

    for p in PROMPTS:
        want = complete(singles["gen"], p)
        for name in ("gen", "gen-alias"):
            got = complete(multi, p, model=name)
            assert got["choices"][0]["text"] == want["choices"][0]["text"], (p, name)
            # (cached_tokens differ: the second name's request hits the prefix cache)
            assert [got["usage"][k] for k in ("prompt_tokens", "completion_tokens")] == \
                [want["usage"][k] for k in ("prompt_tokens", "completion_tokens")]
            assert got["model"] == "gen"  # answers carry the first name, as vLLM's
    assert chat(multi, model="gen")["choices"][0]["message"] == \
        chat(singles["gen"])["choices"][0]["message"]
    st, out = multi.post_json("/tokenize", {"prompt": PROMPTS[0], "model": "gen"})
    st1, ref_tok = singles["gen"].post_json("/tokenize", {"prompt": PROMPTS[0]})
    assert st == 200 and out["tokens"] == ref_tok["tokens"]
    st, out = multi.post_json("/tokenize", {"inputs": TEXTS[0], "model": "emb"})
    st1, ref_tok = singles["emb"].post_json("/tokenize", {"inputs": TEXTS[0]})
    assert st == 200 and out == ref_tok


def test_unknown_model_404_everywhere(multi):
    comp = {"prompt": "A", "max_tokens": 1}
    bodies = [("/v1/chat/completions", {"messages": [{"role": "user", "content": "A"}]}),
              ("/v1/completions", comp), ("/completions", comp),
              ("/generate", {"inputs": "A"}), ("/v1/embeddings", {"input": "A"}),
              ("/embed", {"inputs": "A"}), ("/rerank", {"query": "a", "texts": ["b"]}),
              ("/predict", {"inputs": "A"}), ("/tokenize", {"prompt": "A"}),
              ("/detokenize", {"tokens": [1, 2]}), ("/", {"inputs": "A"})]
    for path, body in bodies:
        st, out = multi.post_json(path, dict(body, model="gpt-4o-mini"))
        assert st == 404, (path, out)
        err = out["error"]
        if isinstance(err, dict):  # OpenAI's shape on /v1
            assert err["code"] == "model_not_found" and err["param"] == "model", (path, out)
            msg = err["message"]
        else:  # TEI's
            assert out["error_type"] == "model_not_found", (path, out)
            msg = err
        assert "gpt-4o-mini" in msg and "'emb', 'rr', 'gen'" in msg, (path, msg)
    st, h, data = multi.request("GET", "/v1/models/gpt-4o-mini")
    assert st == 404 and json.loads(data)["error"]["code"] == "model_not_found"
    assert multi.alive()


def test_no_model_goes_to_the_first_that_fits(multi, singles):
    """Without "model" (or with huggingface_hub's placeholder), a route goes to the first model
    whose kind serves it: a TEI client's /rerank reaches the reranker, an OpenAI client's chat
    the generator, though the first model embeds."""
    np.testing.assert_allclose(rerank(multi), rerank(singles["rr"]), atol=1e-6)
    want = complete(singles["gen"], PROMPTS[0])["choices"][0]["text"]
    assert complete(multi, PROMPTS[0])["choices"][0]["text"] == want
    assert chat(multi, model="dummy")["choices"][0]["message"] == \
        chat(singles["gen"])["choices"][0]["message"]
    st, out = multi.post_json("/generate", {"inputs": PROMPTS[0],
                                            "parameters": {"max_new_tokens": 2}})
    assert st == 200, out
    # the embedding routes keep the first model
    np.testing.assert_allclose(embed(multi, TEXTS), embed(singles["emb"], TEXTS), atol=1e-6)


def test_wrong_kind_400(multi):
    cases = [("/v1/completions", {"prompt": "A", "max_tokens": 1, "model": "emb"}),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "A"}],
                                       "model": "rr"}),
             ("/v1/embeddings", {"input": "A", "model": "gen"}),
             ("/embed", {"inputs": "A", "model": "rr"}),
             ("/rerank", {"query": "a", "texts": ["b"], "model": "emb"}),
             ("/rerank", {"query": "a", "texts": ["b"], "model": "gen"})]
    for path, body in cases:
        st, out = multi.post_json(path, body)
        assert st == 400, (path, body, out)
        msg = out["error"]["message"] if isinstance(out["error"], dict) else out["error"]
        assert body["model"] in msg, (path, msg)  # the refused model is named


def same_greedy(got, want, tie=1e-3):
    """A greedy completion run in other batch compositions (concurrent requests) equals the one
    run alone, but for a near tie: CPU GEMMs of other row counts round differently, so at the
    first token where the two differ, the alone run's top-2 log-probs must lie within `tie` of
    each other and the concurrent run must have taken the runner-up."""
    a, b = got["logprobs"]["tokens"], want["logprobs"]["tokens"]
    if a == b:
        return
    j = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    top = want["logprobs"]["top_logprobs"][j]
    assert a[j] in top and max(top.values()) - top[a[j]] <= tie, (j, a, b, top)


def test_concurrent_mix(multi, singles):
    want_emb = embed(singles["emb"], TEXTS)
    want_rr = rerank(singles["rr"])
    want_gen = {p: complete(singles["gen"], p, logprobs=2)["choices"][0] for p in PROMPTS}
    errors, lock = [], threading.Lock()
    before = multi.metrics()

    def run(k):
        try:
            for j in range(4):
                kind = (k + j) % 3
                if kind == 0:
                    i = (k + j) % len(TEXTS)
                    got = embed(multi, [TEXTS[i]], model="emb-alias")
                    assert np.allclose(got[0], want_emb[i], atol=1e-6)
                elif kind == 1:
                    assert np.allclose(rerank(multi, model="rr"), want_rr, atol=1e-6)
                else:
                    p = PROMPTS[(k + j) % len(PROMPTS)]
                    got = complete(multi, p, model="gen", logprobs=2)["choices"][0]
                    same_greedy(got, want_gen[p])
        except Exception as e:  # noqa: BLE001 (reported below)
            with lock:
                errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors[:3]
    after = multi.metrics()
    for name in ("emb", "rr", "gen"):  # 48 requests, 16 to each model
        key = f'ragged_model_requests_total{{model="{name}"}}'
        assert after[key] - before[key] == 16, (name, before[key], after[key])
        assert f'ragged_model_queue_depth{{model="{name}"}}' in after
    assert 'vllm:num_requests_running{model_name="gen"}' in after  # the decoder's series


def run_serve(*args, timeout=120):
    return subprocess.run([BIN_PATH, "serve", "--host", "127.0.0.1", "--port", "0", "--device",
                           "cpu", *[str(a) for a in args]], capture_output=True, text=True,
                          env=server_env(), timeout=timeout)


def test_bad_second_model_fails_start(dirs, tmp_path):
    missing = str(tmp_path / "no-such-model")
    r = run_serve("--model", dirs["emb"], "--model", missing)
    assert r.returncode != 0 and "ragged serving" not in r.stdout
    assert "model 2 of 2" in r.stderr and missing in r.stderr, r.stderr
    # a directory that is there but holds no model: the load fails, naming it
    bad = tmp_path / "empty"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    r = run_serve("--model", dirs["emb"], "--model", str(bad))
    assert r.returncode != 0 and "ragged serving" not in r.stdout
    assert str(bad) in r.stderr, r.stderr
    # a server option after the second --model: refused by name
    r = run_serve("--model", dirs["emb"], "--model", dirs["rr"], "--port", "1234")
    assert r.returncode == 2 and "--port is the server's option" in r.stderr, r.stderr
    # two models that answer to one name
    r = run_serve("--model", dirs["emb"], "--served-model-name", "x", "--model", dirs["rr"],
                  "--served-model-name", "y,x")
    assert r.returncode == 2 and "both answer to the name 'x'" in r.stderr, r.stderr


def test_per_model_budgets(dirs):
    """Each model's own --max-batch-tokens / --max-inputs: the later model's come after its
    --model and leave the first model's alone."""
    s = Server(dirs["emb"], "--max-inputs", 4, "--max-batch-tokens", 2048, "--model", dirs["rr"],
               "--max-inputs", 2, "--max-batch-tokens", 512, "--served-model-name", "rr")
    try:
        st, h, data = s.request("GET", "/info")
        models = json.loads(data)["models"]
        assert [(m["max_inputs"], m["max_batch_tokens"]) for m in models] == \
            [(4, 2048), (2, 512)]
        st, out = s.post_json("/v1/embeddings", {"input": ["a"] * 4})
        assert st == 200, out
        st, out = s.post_json("/rerank", {"query": "q", "texts": ["a"] * 3, "model": "rr"})
        assert st == 413, out
        st, out = s.post_json("/rerank", {"query": "q", "texts": ["a"] * 2, "model": "rr"})
        assert st == 200, out
    finally:
        s.stop()


def test_sigterm_with_work_in_flight(dirs):
    """SIGTERM while the decoder streams and the encoder embeds: the drain covers every model's
    engine, the answers go out, and the process exits 0 (every model's memory freed: ASan's leak
    check would make it 23)."""
    s = Server(dirs["emb"], "--model", dirs["gen"], "--served-model-name", "gen",
               "--step-delay-ms", 20, *DEC_ARGS)
    results = []

    def gen_req():
        results.append(s.post_json("/v1/completions", {"prompt": "A", "max_tokens": 20,
                                                       "temperature": 0, "model": "gen",
                                                       "ignore_eos": True})[0])
    t = threading.Thread(target=gen_req)
    t.start()
    time.sleep(0.2)
    st, _ = s.post_json("/v1/embeddings", {"input": "x"})
    assert st == 200
    s.proc.send_signal(signal.SIGTERM)
    t.join(60)
    rc = s.stop()
    assert rc == 0 and results == [200], (results, s.stderr()[-2000:])
    assert "draining" in s.stderr() and "answered" in s.stderr()


# ---- `ragged serve --config FILE`: the same servers from a JSON file ---------------------------

def write_config(tmp_path, cfg, name="serve.json"):
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return str(path)


def test_config_file_serves_as_the_command_line(multi, dirs, tmp_path):
    """The config file form of the `multi` fixture's command line: the same models under the same
    names, each with its own options, the same answers by route and "model". Values in each JSON
    form: a list, a comma string, numbers, a number as a string, a flag set false (as if left
    out). The command line's --port beside --config wins over the file's "port"."""
    cfg = {"host": "127.0.0.1", "device": "cpu", "port": 1, "json-output": False,
           "models": [{"model": dirs["emb"], "served-model-name": ["emb", "emb-alias"]},
                      {"model": dirs["rr"], "served-model-name": "rr"},
                      {"served-model-name": "gen,gen-alias", "model": dirs["gen"],
                       "kv-cache-bytes": 4 << 20, "max-num-seqs": 8,
                       "max-num-batched-tokens": 32, "block-size": "4"}]}
    s = Server(None, raw_args=["--config", write_config(tmp_path, cfg), "--port", "0"])
    try:
        assert s.port != 1 and s.start_json is None  # the command line's port; plain log lines
        for path in ("/v1/models", "/info"):
            got = json.loads(s.request("GET", path)[2])
            want = json.loads(multi.request("GET", path)[2])
            if path == "/v1/models":
                assert [m["id"] for m in got["data"]] == [m["id"] for m in want["data"]] == \
                    ["emb", "emb-alias", "rr", "gen", "gen-alias"]
            else:
                assert got["models"] == want["models"], (got["models"], want["models"])
        np.testing.assert_allclose(embed(s, TEXTS, model="emb-alias"), embed(multi, TEXTS),
                                   rtol=0, atol=1e-6)
        np.testing.assert_allclose(rerank(s, model="rr"), rerank(multi, model="rr"), atol=1e-6)
        for name in ("gen", "gen-alias"):
            assert complete(s, PROMPTS[1], model=name)["choices"][0]["text"] == \
                complete(multi, PROMPTS[1], model="gen")["choices"][0]["text"]
        st, out = s.post_json("/v1/embeddings", {"input": "a", "model": "gpt-4o-mini"})
        assert st == 404 and out["error"]["code"] == "model_not_found"
    finally:
        s.stop()


def test_config_help():
    out = subprocess.run([BIN_PATH, "serve", "--help"], capture_output=True, text=True,
                         env=server_env(), timeout=60).stdout
    assert "ragged serve --config FILE [server options]" in out
    words = " ".join(out.split())
    assert '{"models": [{"model": "DIR"' in words and "--model with --config is an error" in words


def config_cases(dirs):
    """(file content, arguments beside --config, what stderr must say) for each usage error."""
    emb, rr = dirs["emb"], dirs["rr"]
    two = [{"model": emb}, {"model": rr}]
    return [
        (None, [], "cannot open: No such file or directory"),  # unreadable: no such file
        ('{"models": [', [], "not valid JSON: unexpected end at byte"),
        ('{"models": [}', [], "not valid JSON:"),
        ('{"models": []} x', [], "not valid JSON: trailing data at byte 15"),
        ("[]", [], 'expected an object {"models": [...], ...}, got an array'),
        ({"port": 8080}, [], 'no "models": list the models to serve'),
        ({"models": []}, [], "models is empty: list one model or more"),
        ({"models": {"model": emb}}, [],
         "models: expected an array of model objects, got an object"),
        ({"models": [{"model": emb}] * 9}, [], "models: 9 models, at most 8 are served"),
        ({"models": [emb]}, [], "models[0]: expected an object, got a string"),
        ({"models": [{"served-model-name": "a"}]}, [], 'models[0] has no "model"'),
        ({"models": [{"model": emb, "model-id": rr}]}, [],
         "models[0] gives its model twice ('model' and 'model-id')"),
        ({"models": [{"model": emb}, {"model": rr, "foo": 1}]}, [],
         "models[1]: unknown key 'foo' (not a ragged serve option"),
        ({"bar": 1, "models": two}, [], "unknown key 'bar'"),
        ({"--port": 1, "models": two}, [], "keys are option names without the leading --"),
        ({"models": [{"model": emb}, {"model": rr, "port": 9000}]}, [],
         "models[1].port: --port is the server's option, not one model's: give it at the top"),
        ({"dtype": "fp32", "models": two}, [],
         'dtype: --dtype is one model\'s option: give it in the entries of "models"'),
        ({"models": [{"model": emb, "auto-truncate": "yes"}]}, [],
         "models[0].auto-truncate: expected true or false, got a string"),
        ({"models": [{"model": emb, "max-inputs": {}}]}, [],
         "models[0].max-inputs: expected a number or a string, got an object"),
        ({"models": [{"model": emb, "served-model-name": ["a", 1]}]}, [],
         "models[0].served-model-name[1]: expected a string, got a number"),
        ({"models": [{"model": emb, "served-model-name": []}]}, [],
         "models[0].served-model-name: an empty list"),
        ({"models": [{"model": emb, "pooling": 3}]}, [],
         "models[0].pooling: expected a string, got a number"),
        ({"port": None, "models": two}, [], "port: expected a number or a string, got null"),
        ('{"port": 1, "port": 2, "models": [{"model": "x"}]}', [], "duplicate key 'port'"),
        # values: the parser's own check, as on the command line
        ({"models": [{"model": emb, "max-inputs": 0}]}, [], "bad value for --max-inputs: '0'"),
        ({"port": 1.5, "models": two}, [], "bad value for --port: '1.5'"),
        # the command line beside --config
        ({"models": two}, ["--model", emb], "--config and --model cannot go together"),
        ({"models": two}, ["--max-inputs", "4"],
         "--max-inputs is one model's option: with --config, give it in the entries of"),
        ({"models": two}, ["--config", "x.json"], "--config given twice"),
    ]


def test_config_file_errors(dirs, tmp_path):
    """Each mistake in a config file, or beside --config, is a usage error (status 2) with one
    message that names the file and the key (models[i].key in a model), and nothing starts."""
    for k, (content, extra, want) in enumerate(config_cases(dirs)):
        path = str(tmp_path / "missing.json") if content is None else \
            write_config(tmp_path, content, f"c{k}.json")
        r = subprocess.run([BIN_PATH, "serve", "--config", path, *extra], capture_output=True,
                           text=True, env=server_env(), timeout=60)
        assert r.returncode == 2 and want in r.stderr, (content, extra, r.returncode, r.stderr)
        assert "ragged serving" not in r.stdout
        if "--config" not in extra and "bad value" not in want and content is not None:
            assert path in r.stderr, r.stderr  # names the file
    # a directory is no config file; --config without a FILE
    r = subprocess.run([BIN_PATH, "serve", "--config", str(tmp_path)], capture_output=True,
                       text=True, env=server_env(), timeout=60)
    assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr
    r = subprocess.run([BIN_PATH, "serve", "--config"], capture_output=True, text=True,
                       env=server_env(), timeout=60)
    assert r.returncode == 2 and "--config needs a FILE" in r.stderr, r.stderr


def _check_exposition(text):
    """The text format's grouping rules: each family's # HELP / # TYPE once, and every sample
    right after its own family's header (a histogram's _bucket / _sum / _count included).
    Returns {family: [sample lines]}."""
    fams, cur = {}, None
    for ln in text.splitlines():
        if ln.startswith("# HELP ") or ln.startswith("# TYPE "):
            name = ln.split()[2]
            if name != cur:  # a family opens (HELP, or TYPE alone: HELP is optional)
                assert name not in fams, f"family {name} split: a second header"
                cur = name
                fams[cur] = []
        elif ln and not ln.startswith("#"):
            name = ln.split("{")[0].split()[0]
            assert cur and (name == cur or name in (cur + "_bucket", cur + "_sum",
                                                    cur + "_count")), (cur, ln)
            fams[cur].append(ln)
    return fams


def test_metrics_of_several_decoders(dirs):
    """Two decoders in one server: /metrics holds each generation family once, with one sample
    per decoder labeled model="<name>" (the Prometheus text format refuses a family split in
    two), and each decoder's counters count its own requests."""
    two = dirs["gen"] + "-copy"
    if not os.path.isdir(two):
        import shutil
        shutil.copytree(dirs["gen"], two)
    s = Server(dirs["gen"], "--served-model-name", "a", *DEC_ARGS,
               "--model", two, "--served-model-name", "b", *DEC_ARGS)
    try:
        for prompt, model in (("x y", "a"), ("y z", "a"), ("z x", "a"), ("x x", "b")):
            complete(s, prompt, model=model)
        st, _, data = s.request("GET", "/metrics")
        assert st == 200
        fams = _check_exposition(data.decode())
        m = parse_metrics(data.decode())
        assert m['ragged_gen_requests_finished_total{model="a"}'] == 3
        assert m['ragged_gen_requests_finished_total{model="b"}'] == 1
        assert m['ragged_gen_generation_tokens_total{model="a"}'] == 24
        assert m['ragged_gen_generation_tokens_total{model="b"}'] == 8
        for fam in ("ragged_gen_kv_blocks_free", "ragged_gen_time_to_first_token_seconds",
                    "vllm:num_requests_running"):
            labs = {re.match(r'[^{]+\{model="([^"]*)"', ln).group(1) for ln in fams[fam]}
            assert labs == {"a", "b"}, (fam, fams[fam][:4])
        assert 'vllm:num_requests_running{model="b",model_name="b"}' in m
    finally:
        s.stop()
