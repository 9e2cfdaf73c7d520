"""ctypes binding for the Python test-suite.

RAGGED_LIB names the public library under test (default build/libragged.so). The suite loads its
sibling libragged_internal.so: the same objects, with the internal functions the tests call
(tokenizer, CPU probes, single ops; RG_TEST_API in src/core/export.h) exported as well.
test_public_api.py checks the public library itself: its export list and an embedding through
it alone."""
import ctypes
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PUBLIC_LIB_PATH = os.environ.get("RAGGED_LIB", os.path.join(ROOT, "build", "libragged.so"))
LIB_PATH = os.path.join(os.path.dirname(PUBLIC_LIB_PATH), "libragged_internal.so")
BIN_PATH = os.environ.get("RAGGED_BIN", os.path.join(ROOT, "build", "ragged"))

RG_OK = 0
DEVICE = {"cpu": 0, "cuda": 1}
DTYPE = {"fp32": 0, "fp16": 1, "bf16": 2, "auto": 3}

_lib = None


class AttnDesc(ctypes.Structure):
    """src/ops/ops.h rg_attn_desc, for RG_TEST_API callers of rg_op_attention /
    rg_op_paged_attention (libragged_internal.so). Field order and types as in the header."""
    _fields_ = [("causal", ctypes.c_bool), ("num_heads", ctypes.c_int),
                ("num_kv_heads", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("scale", ctypes.c_float), ("n_seq", ctypes.c_int),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_q_h", ctypes.c_void_p),
                ("max_seqlen_q", ctypes.c_int), ("context_lens", ctypes.c_void_p),
                ("context_lens_h", ctypes.c_void_p), ("max_context_len", ctypes.c_int),
                ("block_tables", ctypes.c_void_p), ("max_blocks_per_seq", ctypes.c_int),
                ("block_size", ctypes.c_int), ("n_blocks", ctypes.c_int64),
                ("k_new", ctypes.c_void_p), ("v_new", ctypes.c_void_p),
                ("seg", ctypes.c_void_p), ("rel_bias", ctypes.c_void_p),
                ("rel_max", ctypes.c_int), ("dis", ctypes.c_void_p)]


class ModelParams(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int), ("device_index", ctypes.c_int),
                ("dtype", ctypes.c_int), ("max_batch_tokens", ctypes.c_int),
                ("pooling_set", ctypes.c_bool), ("pooling", ctypes.c_int),
                ("dense_dir", ctypes.c_char_p), ("weights", ctypes.c_int),
                ("quantize", ctypes.c_int)]


class ModelInfo(ctypes.Structure):
    """include/ragged.h rg_model_info."""
    _fields_ = [("model_dir", ctypes.c_char_p), ("model_type", ctypes.c_char_p),
                ("vocab_size", ctypes.c_int), ("hidden_size", ctypes.c_int),
                ("num_attention_heads", ctypes.c_int), ("num_hidden_layers", ctypes.c_int),
                ("intermediate_size", ctypes.c_int), ("max_position_embeddings", ctypes.c_int),
                ("type_vocab_size", ctypes.c_int), ("hidden_act", ctypes.c_char_p),
                ("layer_norm_eps", ctypes.c_double), ("pooling", ctypes.c_int),
                ("normalize", ctypes.c_bool), ("device", ctypes.c_int), ("dtype", ctypes.c_int),
                ("max_batch_tokens", ctypes.c_int), ("max_seq_len", ctypes.c_int),
                ("num_labels", ctypes.c_int), ("labels", ctypes.POINTER(ctypes.c_char_p)),
                ("multi_label", ctypes.c_bool), ("output_dim", ctypes.c_int),
                ("kind", ctypes.c_int), ("num_key_value_heads", ctypes.c_int),
                ("head_dim", ctypes.c_int), ("bos_token_id", ctypes.c_int),
                ("eos_token_id", ctypes.c_int), ("tie_word_embeddings", ctypes.c_bool),
                ("decoder_start_token_id", ctypes.c_int),
                ("max_source_positions", ctypes.c_int),
                ("weight_bytes", ctypes.c_ulonglong), ("quantized_weights", ctypes.c_int)]


RG_MODEL_ENCODER, RG_MODEL_DECODER, RG_MODEL_ENC_DEC = 0, 1, 2


class StepBatch(ctypes.Structure):
    """include/ragged.h rg_step_batch."""
    _fields_ = [("n_tokens", ctypes.c_int), ("tokens", ctypes.c_void_p),
                ("positions", ctypes.c_void_p), ("n_seq", ctypes.c_int),
                ("cu_seqlens_q", ctypes.c_void_p), ("context_lens", ctypes.c_void_p),
                ("max_blocks_per_seq", ctypes.c_int), ("block_tables", ctypes.c_void_p),
                ("slot_mapping", ctypes.c_void_p), ("n_logits", ctypes.c_int),
                ("logits_rows", ctypes.c_void_p),
                ("cross_lens", ctypes.c_void_p), ("max_cross_blocks_per_seq", ctypes.c_int),
                ("cross_block_tables", ctypes.c_void_p)]  # encoder-decoders only


class RowSampling(ctypes.Structure):
    """include/ragged.h rg_row_sampling."""
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repetition_penalty", ctypes.c_float), ("presence_penalty", ctypes.c_float),
                ("frequency_penalty", ctypes.c_float), ("u", ctypes.c_double),
                ("n_penalty", ctypes.c_int), ("penalty_ids", ctypes.c_void_p),
                ("penalty_counts", ctypes.c_void_p), ("penalty_in_prompt", ctypes.c_void_p),
                ("n_logit_bias", ctypes.c_int), ("logit_bias_ids", ctypes.c_void_p),
                ("logit_bias_values", ctypes.c_void_p)]


def row_sampling(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                 presence_penalty=0.0, frequency_penalty=0.0, u=0.5, penalty=None, bias=None):
    """An rg_row_sampling; penalty: (ids, counts, in_prompt), bias: (ids, values). The arrays
    are kept on the returned object (._keep) so they outlive the call."""
    r = RowSampling(temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
                    frequency_penalty, u)
    keep = []
    if penalty is not None:
        ids, cnt, inp = (np.ascontiguousarray(penalty[0], np.int32),
                         np.ascontiguousarray(penalty[1], np.int32),
                         np.ascontiguousarray(penalty[2], np.uint8))
        keep += [ids, cnt, inp]
        r.n_penalty, r.penalty_ids = len(ids), ids.ctypes.data
        r.penalty_counts, r.penalty_in_prompt = cnt.ctypes.data, inp.ctypes.data
    if bias is not None:
        ids, val = np.ascontiguousarray(bias[0], np.int32), np.ascontiguousarray(bias[1], np.float32)
        keep += [ids, val]
        r.n_logit_bias, r.logit_bias_ids, r.logit_bias_values = len(ids), ids.ctypes.data, val.ctypes.data
    r._keep = keep
    return r


class StepOut(ctypes.Structure):
    """include/ragged.h rg_step_out."""
    _fields_ = [("top_n", ctypes.c_int), ("rows", ctypes.c_void_p), ("ids", ctypes.c_void_p),
                ("logprobs", ctypes.c_void_p), ("top_ids", ctypes.c_void_p),
                ("top_logprobs", ctypes.c_void_p), ("logits", ctypes.c_void_p),
                ("want_logits", ctypes.c_void_p)]


class KvInfo(ctypes.Structure):
    """include/ragged.h rg_kv_info."""
    _fields_ = [("block_size", ctypes.c_int), ("n_blocks", ctypes.c_int),
                ("num_layers", ctypes.c_int), ("num_kv_heads", ctypes.c_int),
                ("head_dim", ctypes.c_int), ("bytes_per_token", ctypes.c_size_t),
                ("bytes_per_block", ctypes.c_size_t), ("bytes", ctypes.c_size_t)]


class ModelStats(ctypes.Structure):
    """rg_model_stats (include/ragged.h)."""
    _fields_ = [("graph_captures", ctypes.c_longlong), ("graph_replays", ctypes.c_longlong),
                ("graph_eager", ctypes.c_longlong), ("graphs_pinned", ctypes.c_longlong),
                ("gemm_plans", ctypes.c_longlong)]


class ModelBatch(ctypes.Structure):
    """include/ragged.h rg_model_batch."""
    _fields_ = [("tokens", ctypes.c_void_p), ("token_types", ctypes.c_void_p),
                ("cu_seqlens", ctypes.c_void_p), ("n_seq", ctypes.c_int),
                ("layout", ctypes.c_void_p)]


class Layout(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("n_rows", ctypes.c_int), ("row_len", ctypes.c_int),
                ("slot_len", ctypes.c_int), ("req_row", ctypes.POINTER(ctypes.c_int32)),
                ("req_offset", ctypes.POINTER(ctypes.c_int32))]


def lib():
    global _lib
    if _lib is None:
        l = ctypes.CDLL(LIB_PATH)
        l.rg_last_error.restype = ctypes.c_char_p
        l.rg_status_name.restype = ctypes.c_char_p
        l.rg_model_load.restype = ctypes.c_void_p
        l.rg_model_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ModelParams),
                                    ctypes.POINTER(ctypes.c_int)]
        l.rg_model_free.argtypes = [ctypes.c_void_p]
        l.rg_model_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                        ctypes.c_bool, ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_size_t)]
        l.rg_model_embed.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int, ctypes.c_void_p]
        l.rg_model_embed_layout.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_int, ctypes.POINTER(Layout), ctypes.c_void_p]
        l.rg_model_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(ModelBatch), ctypes.c_void_p]
        l.rg_model_tokenize_pair.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
            ctypes.c_bool, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t)]
        l.rg_tokenizer_encode_pair.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
            ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_bool)]
        l.rg_model_get_info.restype = ctypes.POINTER(ModelInfo)
        l.rg_model_get_info.argtypes = [ctypes.c_void_p]
        l.rg_model_get_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(ModelStats)]
        l.rg_model_get_stats.restype = None
        l.rg_model_graph_warmup.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_int)]
        l.rg_model_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                      ctypes.POINTER(ctypes.c_size_t)]
        l.rg_model_arena_bytes.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_size_t),
                                           ctypes.POINTER(ctypes.c_size_t)]
        l.rg_tokenizer_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        l.rg_tokenizer_free.argtypes = [ctypes.c_void_p]
        l.rg_tokenizer_encode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                          ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.POINTER(ctypes.c_size_t)]
        l.rg_model_kv_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        l.rg_model_kv_init_bytes.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        l.rg_model_kv_init_fraction.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_double]
        l.rg_model_kv_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(KvInfo)]
        l.rg_model_kv_copy_blocks.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                              ctypes.c_int]
        l.rg_model_step.argtypes = [ctypes.c_void_p, ctypes.POINTER(StepBatch),
                                    ctypes.POINTER(StepOut)]
        l.free.argtypes = [ctypes.c_void_p] if hasattr(l, "free") else None
        _lib = l
    return _lib


class RaggedError(Exception):
    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _err(st):
    l = lib()
    return RaggedError(l.rg_status_name(st).decode(), l.rg_last_error().decode(errors="replace"))


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]


def _take_ids(p, n):
    """The n int32 values at the malloc'd pointer p (a c_void_p) as a list; frees p."""
    out = (np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_int32)), (n,)).tolist()
           if n else [])
    _libc.free(p)
    return out


class Tokenizer:
    def __init__(self, model_dir):
        self._h = ctypes.c_void_p()
        st = lib().rg_tokenizer_load(model_dir.encode(), ctypes.byref(self._h))
        if st != RG_OK:
            raise _err(st)

    def encode(self, text):
        data = text.encode("utf-8", errors="surrogatepass") if isinstance(text, str) else text
        ids = ctypes.c_void_p()
        n = ctypes.c_size_t()
        st = lib().rg_tokenizer_encode(self._h, data, len(data), ctypes.byref(ids), ctypes.byref(n))
        if st != RG_OK:
            raise _err(st)
        return _take_ids(ids, n.value)

    def encode_pair(self, a, b, max_len=0):
        """(ids, token type ids, truncated) of the pair (a, b)."""
        da, db = (x.encode("utf-8", errors="surrogatepass") if isinstance(x, str) else x
                  for x in (a, b))
        ids, types = ctypes.c_void_p(), ctypes.c_void_p()
        n = ctypes.c_size_t()
        trunc = ctypes.c_bool()
        st = lib().rg_tokenizer_encode_pair(self._h, da, len(da), db, len(db),
                                            ctypes.c_size_t(max_len), ctypes.byref(ids),
                                            ctypes.byref(types), ctypes.byref(n),
                                            ctypes.byref(trunc))
        if st != RG_OK:
            raise _err(st)
        return _take_ids(ids, n.value), _take_ids(types, n.value), trunc.value

    def close(self):
        if self._h:
            lib().rg_tokenizer_free(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        self.close()


class Model:
    """A loaded ragged model. device 'cpu'|'cuda', dtype 'fp32'|'fp16'|'bf16'."""

    def __init__(self, model_dir, device="cpu", dtype="fp32", max_batch_tokens=16384,
                 weights="auto", quantize="none"):
        """weights: rg_model_params.weights, "auto" (GGUF blocks kept where the backend reads
        them) or "dequantize"; quantize: rg_model_params.quantize, "none" or "q8_0", or an
        int passed as it is (to test the library's refusal of unknown values)."""
        p = ModelParams(DEVICE[device], 0, DTYPE[dtype], max_batch_tokens)
        p.weights = {"auto": 0, "dequantize": 1}[weights]
        p.quantize = quantize if isinstance(quantize, int) else {"none": 0, "q8_0": 1}[quantize]
        st = ctypes.c_int(0)
        self._h = lib().rg_model_load(model_dir.encode(), ctypes.byref(p), ctypes.byref(st))
        if not self._h:
            raise _err(st.value)

    def tokenize(self, text, truncate=False):
        data = text.encode("utf-8") if isinstance(text, str) else text
        ids = ctypes.c_void_p()
        n = ctypes.c_size_t()
        st = lib().rg_model_tokenize(self._h, data, len(data), truncate, ctypes.byref(ids), ctypes.byref(n))
        if st != RG_OK:
            raise _err(st)
        return _take_ids(ids, n.value)

    def run(self, seqs, types=None, layout=None):
        """rg_model_run: (n_seq, output_dim) float32 (embeddings, or a classifier's scores)."""
        dim = self.info().output_dim
        tokens = np.ascontiguousarray(np.concatenate([np.asarray(s, np.int32) for s in seqs]),
                                      dtype=np.int32)
        tt = (np.ascontiguousarray(np.concatenate([np.asarray(t, np.int32) for t in types]),
                                   dtype=np.int32) if types is not None else None)
        cu = np.zeros(len(seqs) + 1, np.int32)
        cu[1:] = np.cumsum([len(s) for s in seqs])
        out = np.full((max(len(seqs), 1), dim), np.nan, np.float32)
        b = ModelBatch(tokens.ctypes.data, tt.ctypes.data if tt is not None else None,
                       cu.ctypes.data, len(seqs),
                       ctypes.addressof(layout) if layout is not None else None)
        st = lib().rg_model_run(self._h, ctypes.byref(b), out.ctypes.data)
        if st != RG_OK:
            raise _err(st)
        return out[:len(seqs)]

    def tokenize_pair(self, a, b, truncate=False):
        da, db = (x.encode("utf-8") if isinstance(x, str) else x for x in (a, b))
        ids, types, n = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_size_t()
        st = lib().rg_model_tokenize_pair(self._h, da, len(da), db, len(db), truncate,
                                          ctypes.byref(ids), ctypes.byref(types), ctypes.byref(n))
        if st != RG_OK:
            raise _err(st)
        return _take_ids(ids, n.value), _take_ids(types, n.value)

    def embed_ids(self, seqs, hidden_size, layout=None):
        """seqs: list of lists of token ids -> (n_seq, hidden_size) float32 array."""
        tokens = np.ascontiguousarray(np.concatenate([np.asarray(s, np.int32) for s in seqs]) if seqs else np.zeros(0, np.int32), dtype=np.int32)
        cu = np.zeros(len(seqs) + 1, np.int32)
        cu[1:] = np.cumsum([len(s) for s in seqs])
        out = np.full((max(len(seqs), 1), hidden_size), np.nan, np.float32)
        if layout is None:
            st = lib().rg_model_embed(self._h, tokens.ctypes.data, cu.ctypes.data, len(seqs), out.ctypes.data)
        else:
            st = lib().rg_model_embed_layout(self._h, tokens.ctypes.data, cu.ctypes.data, len(seqs),
                                             ctypes.byref(layout), out.ctypes.data)
        if st != RG_OK:
            raise _err(st)
        return out[:len(seqs)]

    def info(self):
        """The model's rg_model_info (a ModelInfo, valid while the model lives)."""
        return lib().rg_model_get_info(self._h).contents

    def stats(self):
        """rg_model_get_stats as a dict."""
        s = ModelStats()
        lib().rg_model_get_stats(self._h, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in ModelStats._fields_}

    def graph_warmup(self, max_seqs, max_len):
        """rg_model_graph_warmup: the number of graphs captured."""
        n = ctypes.c_int(-1)
        st = lib().rg_model_graph_warmup(self._h, max_seqs, max_len, ctypes.byref(n))
        if st != RG_OK:
            raise _err(st)
        return n.value

    def memory(self):
        """(used, total) bytes from rg_model_memory: device memory on CUDA, RSS / MemTotal on CPU."""
        used, total = ctypes.c_size_t(), ctypes.c_size_t()
        st = lib().rg_model_memory(self._h, ctypes.byref(used), ctypes.byref(total))
        if st != RG_OK:
            raise _err(st)
        return used.value, total.value

    def arena_bytes(self, n_tokens, n_seq):
        """(planned, naive) activation bytes for a batch (rg_model_arena_bytes)."""
        planned, naive = ctypes.c_size_t(), ctypes.c_size_t()
        st = lib().rg_model_arena_bytes(self._h, n_tokens, n_seq, ctypes.byref(planned),
                                        ctypes.byref(naive))
        if st != RG_OK:
            raise _err(st)
        return planned.value, naive.value

    # ---- decoders (rg_model_step and the KV cache) ----
    def kv_init(self, block_size, n_blocks=0):
        st = lib().rg_model_kv_init(self._h, block_size, n_blocks)
        if st != RG_OK:
            raise _err(st)

    def kv_init_fraction(self, block_size, fraction):
        st = lib().rg_model_kv_init_fraction(self._h, block_size, fraction)
        if st != RG_OK:
            raise _err(st)

    def kv_init_bytes(self, block_size, nbytes):
        st = lib().rg_model_kv_init_bytes(self._h, block_size, nbytes)
        if st != RG_OK:
            raise _err(st)

    def kv_info(self):
        k = KvInfo()
        st = lib().rg_model_kv_info(self._h, ctypes.byref(k))
        if st != RG_OK:
            raise _err(st)
        return k

    def kv_copy_blocks(self, src, dst):
        s = np.ascontiguousarray(src, np.int32)
        d = np.ascontiguousarray(dst, np.int32)
        st = lib().rg_model_kv_copy_blocks(self._h, s.ctypes.data, d.ctypes.data, len(s))
        if st != RG_OK:
            raise _err(st)

    def step(self, *a, **kw):
        """rg_model_step, logits only: (n_logits, vocab_size) float32. block_tables: 2-D (n_seq,
        max_blocks_per_seq). n_tokens / n_seq default to the array lengths (hostile tests
        override them)."""
        return self.step_out(*a, logits=True, **kw)["logits"]

    def step_argmax(self, *a, **kw):
        """rg_model_step's greedy path: (ids int32 (n_logits), log-probs float32 (n_logits))."""
        r = self.step_out(*a, ids=True, **kw)
        return r["ids"], r["logprobs"]

    def step_sample(self, params, *a, top_n=0, **kw):
        """rg_model_step's sampler path: params, a list of RowSampling (one per logits row);
        returns (ids int32 (n_logits), log-probs f32 (n_logits), top ids (n_logits, top_n), top
        log-probs (n_logits, top_n))."""
        r = self.step_out(*a, ids=True, rows=params, top_n=top_n, **kw)
        return r["ids"], r["logprobs"], r["top_ids"], r["top_logprobs"]

    def step_sample_logits(self, params, *a, top_n=0, keep=None, **kw):
        """rg_model_step's sampler path with the logits copied out too: step_sample's four
        results and the logits sampled from, (n_logits, vocab_size) float32 (rows not in keep, a
        list of booleans, stay NaN)."""
        r = self.step_out(*a, ids=True, rows=params, top_n=top_n, logits=True, want_logits=keep,
                          **kw)
        return r["ids"], r["logprobs"], r["top_ids"], r["top_logprobs"], r["logits"]

    def step_batch(self, tokens, positions, cu_seqlens_q, context_lens, block_tables,
                   slot_mapping, logits_rows, n_tokens=None, n_seq=None):
        """An rg_step_batch over int32 copies of the arrays (kept on it as ._keep, so they
        outlive the call). block_tables: 2-D (n_seq, max_blocks_per_seq), or 1-D for one
        sequence."""
        arrs = [np.ascontiguousarray(a, np.int32) for a in
                (tokens, positions, cu_seqlens_q, context_lens, slot_mapping, logits_rows)]
        bt = np.ascontiguousarray(block_tables, np.int32)
        if bt.ndim == 1:
            bt = bt[None, :]
        tk, ps, cu, cl, sm, lr = arrs
        b = StepBatch(len(tk) if n_tokens is None else n_tokens, tk.ctypes.data, ps.ctypes.data,
                      len(cl) if n_seq is None else n_seq, cu.ctypes.data, cl.ctypes.data,
                      bt.shape[1], bt.ctypes.data, sm.ctypes.data, len(lr), lr.ctypes.data)
        b._keep = arrs + [bt]
        return b

    def step_raw(self, batch, out):
        """rg_model_step(batch, out) as given (out: a StepOut or None); raises RaggedError."""
        st = lib().rg_model_step(self._h, ctypes.byref(batch),
                                 None if out is None else ctypes.byref(out))
        if st != RG_OK:
            raise _err(st)

    def step_out(self, *a, ids=False, logprobs=True, rows=None, top_n=0, logits=False,
                 want_logits=None, **kw):
        """rg_model_step with an rg_step_out built from the flags: ids (the chosen tokens; with
        their log-probs unless logprobs is False), rows (a list of RowSampling: the sampler
        path), top_n alternatives, logits (the LM head's rows; want_logits, a list of booleans,
        names the rows copied, the others stay NaN). Returns a dict of the arrays asked for,
        n_logits rows each: ids, logprobs, top_ids and top_logprobs (n_logits, top_n), logits
        (n_logits, vocab_size). Outputs start as guard values (-1 / NaN; top ids -7)."""
        b = self.step_batch(*a, **kw)
        n = b.n_logits
        rn = max(n, 1)
        o = StepOut(top_n=top_n)
        res = {}
        if ids:
            res["ids"] = np.full(rn, -1, np.int32)
            o.ids = res["ids"].ctypes.data
            if logprobs:
                res["logprobs"] = np.full(rn, np.nan, np.float32)
                o.logprobs = res["logprobs"].ctypes.data
        if rows is not None:
            arr = (RowSampling * max(len(rows), 1))(*rows)
            o.rows = ctypes.cast(arr, ctypes.c_void_p)
        if top_n:
            res["top_ids"] = np.full((rn, top_n), -7, np.int32)
            res["top_logprobs"] = np.full((rn, top_n), np.nan, np.float32)
            o.top_ids = res["top_ids"].ctypes.data
            o.top_logprobs = res["top_logprobs"].ctypes.data
        elif ids:
            res["top_ids"] = np.zeros((rn, 0), np.int32)
            res["top_logprobs"] = np.zeros((rn, 0), np.float32)
        if logits:
            res["logits"] = np.full((rn, self.info().vocab_size), np.nan, np.float32)
            o.logits = res["logits"].ctypes.data
        if want_logits is not None:
            want = np.ascontiguousarray(want_logits, np.uint8)
            o.want_logits = want.ctypes.data
        self.step_raw(b, o)
        return {k: v[:n] for k, v in res.items()}

    def close(self):
        if self._h:
            lib().rg_model_free(self._h)
            self._h = None

    def __del__(self):
        self.close()
