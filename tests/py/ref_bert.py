"""Independent float64 NumPy BERT-family encoder (BERT, RoBERTa, XLM-RoBERTa, DistilBERT, MPNet) +
sentence-transformers pooling, the reference the C runtime is tested against. It shares no code with ragged: it reads the Hugging Face directory
itself (config.json, modules.json, 1_Pooling/config.json, model.safetensors via safetensors.numpy;
BF16 tensors, which NumPy cannot represent, through a few lines of header parsing) and takes token
ids as input (tokenization is tested separately against HF `tokenizers`).

Math (HF transformers BertModel / RobertaModel / DistilBertModel / MPNetModel, eval mode):
  x = LN(word[id] + pos[position] + type[0])   (DistilBERT, MPNet: no type term)
  position: 0, 1, ... per sequence; RoBERTa / XLM-R / MPNet: padding_idx + 1 + (count of non-pad
            tokens before it), a pad token itself at padding_idx (create_position_ids_from_input_ids;
            padding_idx = pad_token_id, MPNet's is always 1)
  per layer: q,k,v = x Wq^T + bq, ...; per sequence and head softmax(q k^T / sqrt(d) + B) v;
             x = LN(ctx Wo^T + bo + x); x = LN(act(x W1^T + b1) W2^T + b2 + x)
  B: 0, or MPNet's relative position bias B[h, i, j] = relative_attention_bias[bucket(j - i), h]
     (mpnet_bucket below), the same in every layer
  pooling: mean over tokens / CLS / elementwise max; optional L2 normalize (x / max(|x|, 1e-12)).
"""
import json
import math
import os
import struct

import numpy as np

try:  # float64-accurate and vectorised; scripts/install-deps.sh installs scipy for the tests
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover  (a machine without it: correct, ~20x slower)
    _erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def relu(x):
    return np.maximum(x, 0.0)


ACTS = {"gelu": gelu, "gelu_new": gelu_new, "relu": relu}


def read_safetensors(path):
    """name -> float64 array for every F32/F16/BF16 tensor of one .safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        b, e = d["data_offsets"]
        raw = data[b:e]
        if d["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif d["dtype"] in ("F32", "F16"):
            continue  # read below through safetensors.numpy
        else:
            continue  # position_ids (I64) and the like are not weights
        out[name] = a.reshape(d["shape"]).astype(np.float64)
    from safetensors import safe_open
    with safe_open(path, framework="np") as f:
        for name in f.keys():
            if header[name]["dtype"] in ("F32", "F16"):
                out[name] = f.get_tensor(name).astype(np.float64)
    return out


def load_weights(model_dir):
    p = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(p):
        w = read_safetensors(p)
    else:
        with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
            index = json.load(f)
        w = {}
        for shard in sorted(set(index["weight_map"].values())):
            w.update(read_safetensors(os.path.join(model_dir, shard)))
    # accept base-model prefixes, the old gamma/beta names, and DistilBERT's and MPNet's names
    norm = {}
    for k, v in w.items():
        for pre in ("bert.", "roberta.", "distilbert.", "albert.", "mpnet.", "deberta."):
            if k.startswith(pre):
                k = k[len(pre):]
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        for a, b in DISTILBERT_TO_BERT + MPNET_TO_BERT + DEBERTA_TO_BERT:
            k = k.replace(a, b)
        norm[k] = v
    if "encoder.embedding_hidden_mapping_in.weight" in norm:  # ALBERT: one shared layer
        shared = {k: v for k, v in norm.items()
                  if k.startswith("encoder.albert_layer_groups.0.albert_layers.0.")}
        n_layers = _albert_layers(model_dir)
        for k, v in shared.items():
            base = k[len("encoder.albert_layer_groups.0.albert_layers.0."):]
            for a, b in ALBERT_TO_BERT:
                if base.startswith(a):
                    base = b + base[len(a):]
                    break
            for i in range(n_layers):
                norm[f"encoder.layer.{i}.{base}"] = v
    return norm


def _albert_layers(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    assert c.get("num_hidden_groups", 1) == 1 and c.get("inner_group_num", 1) == 1
    return c["num_hidden_layers"]


# transformers' AlbertLayer names -> BERT names
ALBERT_TO_BERT = [
    ("attention.query.", "attention.self.query."), ("attention.key.", "attention.self.key."),
    ("attention.value.", "attention.self.value."), ("attention.dense.", "attention.output.dense."),
    ("attention.LayerNorm.", "attention.output.LayerNorm."), ("ffn_output.", "output.dense."),
    ("ffn.", "intermediate.dense."), ("full_layer_layer_norm.", "output.LayerNorm."),
]


# transformers' DistilBERT names -> BERT names (order matters: the layer prefix first)
DISTILBERT_TO_BERT = [
    ("transformer.layer.", "encoder.layer."), (".attention.q_lin.", ".attention.self.query."),
    (".attention.k_lin.", ".attention.self.key."), (".attention.v_lin.", ".attention.self.value."),
    (".attention.out_lin.", ".attention.output.dense."),
    (".sa_layer_norm.", ".attention.output.LayerNorm."), (".ffn.lin1.", ".intermediate.dense."),
    (".ffn.lin2.", ".output.dense."), (".output_layer_norm.", ".output.LayerNorm."),
]


# transformers' MPNet names -> BERT names (MPNetAttention keeps its LayerNorm beside attn)
MPNET_TO_BERT = [
    (".attention.attn.q.", ".attention.self.query."), (".attention.attn.k.", ".attention.self.key."),
    (".attention.attn.v.", ".attention.self.value."),
    (".attention.attn.o.", ".attention.output.dense."),
    (".attention.LayerNorm.", ".attention.output.LayerNorm."),
]


def mpnet_bucket(rel, num_buckets=32, max_distance=128):
    """T5's bidirectional relative position bucket of rel = key position - query position, as
    MPNetEncoder.relative_position_bucket defines it: half of the buckets for keys after the query;
    within a half, distances below half/2 get their own bucket, larger ones a logarithmic one up
    to max_distance, and the half's last bucket from there on. Vectorised over rel (int array)."""
    rel = np.asarray(rel, np.int64)
    half = num_buckets // 2
    exact = half // 2
    n = np.abs(rel)
    side = np.where(rel > 0, half, 0)
    log_ratio = np.log(np.maximum(n, 1) / exact) / math.log(max_distance / exact)
    large = np.minimum(exact + np.floor(log_ratio * (half - exact)).astype(np.int64), half - 1)
    return side + np.where(n < exact, n, large)


# transformers' DeBERTa-v2 names -> BERT names
DEBERTA_TO_BERT = [
    (".attention.self.query_proj.", ".attention.self.query."),
    (".attention.self.key_proj.", ".attention.self.key."),
    (".attention.self.value_proj.", ".attention.self.value."),
]


def deberta_log_bucket(rel, bucket_size, max_position):
    """DeBERTa-v2's make_log_bucket_position in float64 NumPy: distances within bucket_size / 2
    as they are, then ceil(log(|rel| / mid) / log((max_position - 1) / mid) * (mid - 1)) + mid
    with rel's sign."""
    rel = np.asarray(rel, np.int64)
    mid = bucket_size // 2
    abs_pos = np.where((rel < mid) & (rel > -mid), mid - 1, np.abs(rel))
    log_pos = np.ceil(np.log(abs_pos / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid
    return np.where(abs_pos <= mid, rel, log_pos * np.sign(rel)).astype(np.int64)


def load_pooling(model_dir):
    """(mode, normalize) from modules.json / 1_Pooling; ('mean', False) without them."""
    mp = os.path.join(model_dir, "modules.json")
    if not os.path.exists(mp):
        return "mean", False
    with open(mp) as f:
        modules = json.load(f)
    mode, normalize = "mean", False
    for mod in modules:
        t = mod.get("type", "")
        if t.endswith("Normalize"):
            normalize = True
        elif t.endswith("Pooling"):
            with open(os.path.join(model_dir, mod["path"], "config.json")) as f:
                pc = json.load(f)
            if pc.get("pooling_mode_cls_token"):
                mode = "cls"
            elif pc.get("pooling_mode_max_tokens"):
                mode = "max"
            else:
                mode = "mean"
    return mode, normalize


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


class RefBert:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        self.w = load_weights(model_dir)
        self.pooling, self.normalize = load_pooling(model_dir)
        c = self.cfg
        self.family = c["model_type"]
        if self.family == "distilbert":  # DistilBertConfig's own key names; LayerNorm eps 1e-12
            c.update(hidden_size=c["dim"], num_attention_heads=c["n_heads"],
                     num_hidden_layers=c["n_layers"], intermediate_size=c["hidden_dim"],
                     hidden_act=c.get("activation", "gelu"))
        else:
            assert self.family in ("bert", "roberta", "xlm-roberta", "albert", "mpnet",
                                   "deberta-v2"), self.family
        self.H = c["hidden_size"]
        self.nh = c["num_attention_heads"]
        self.eps = c.get("layer_norm_eps", 1e-12)
        self.act = ACTS[c.get("hidden_act", "gelu_new" if self.family == "albert" else "gelu")]
        # padding_idx: pad_token_id; MPNetEmbeddings fixes it to 1
        self.pad = 1 if self.family == "mpnet" else c.get("pad_token_id", 0)
        # RoBERTa-style positions count from padding_idx + 1
        self.pos_offset = self.pad + 1 if self.family in ("roberta", "xlm-roberta", "mpnet") else 0
        # MPNet: (num_buckets, heads) relative position bias; compute_position_bias always looks
        # up 32 buckets whatever relative_attention_num_buckets says
        self.rel_bias = self.w.get("encoder.relative_attention_bias.weight")
        self._bias_cache = {}
        self.max_seq_len = c["max_position_embeddings"] - self.pos_offset
        # DeBERTa-v2: disentangled attention (DisentangledSelfAttention); the scale counts
        # pos_att_type's members even without relative_attention
        self.deberta = self.family == "deberta-v2"
        if self.deberta:
            self.eps = c.get("layer_norm_eps", 1e-7)
            pat = c.get("pos_att_type") or []
            if isinstance(pat, str):
                pat = [x.strip() for x in pat.lower().split("|")]
            self.pos_att_type = pat
            self.rel_on = c.get("relative_attention", False)
            self.buckets = c.get("position_buckets", -1)
            mr = c.get("max_relative_positions", -1)
            self.max_rel = mr if mr >= 1 else c["max_position_embeddings"]
            self.span = self.buckets if self.buckets > 0 else self.max_rel
            rel = self.w.get("encoder.rel_embeddings.weight")
            if rel is not None and "layer_norm" in c.get("norm_rel_ebd", "none"):
                rel = layer_norm(rel, self.w["encoder.LayerNorm.weight"],
                                 self.w["encoder.LayerNorm.bias"], self.eps)
            self.rel_emb = rel
            self.disable = set()  # tests: {"c2p"} / {"p2c"} leave a term out
        H = self.H
        self.types = self.w.get("embeddings.token_type_embeddings.weight", np.zeros((1, H)))
        arch = (c.get("architectures") or [""])[0]
        self.classifier = arch.endswith("ForSequenceClassification")
        if self.classifier:  # transformers' heads, eval mode
            w = self.w
            if self.family in ("roberta", "xlm-roberta", "mpnet"):  # MPNet: RoBERTa's head
                self.head = (w["classifier.dense.weight"], w["classifier.dense.bias"], np.tanh,
                             w["classifier.out_proj.weight"], w["classifier.out_proj.bias"])
            elif self.family == "distilbert":
                self.head = (w["pre_classifier.weight"], w["pre_classifier.bias"], relu,
                             w["classifier.weight"], w["classifier.bias"])
            else:  # BERT, ALBERT; DeBERTa's ContextPooler with pooler_hidden_act (gelu)
                act = np.tanh
                if self.deberta and c.get("pooler_hidden_act", "gelu") == "gelu":
                    act = gelu
                self.head = (w["pooler.dense.weight"], w["pooler.dense.bias"], act,
                             w["classifier.weight"], w["classifier.bias"])

    def positions(self, ids):
        """Position ids of one sequence (see the module docstring)."""
        if not self.pos_offset:
            return np.arange(len(ids))
        mask = (ids != self.pad).astype(np.int64)
        return np.cumsum(mask) * mask + self.pad

    def position_bias(self, L):
        """(heads, L, L) bias added to the scaled scores of a sequence of L tokens (0: none)."""
        if self.rel_bias is None:
            return 0.0
        if L not in self._bias_cache:
            i = np.arange(L)
            buckets = mpnet_bucket(i[None, :] - i[:, None])  # [query, key] -> bucket(key - query)
            self._bias_cache[L] = self.rel_bias[buckets].transpose(2, 0, 1)
        return self._bias_cache[L]

    def deberta_rel_pos(self, L):
        """build_relative_position: (L, L) query - key, log-bucketed when position_buckets > 0."""
        i = np.arange(L)
        r = i[:, None] - i[None, :]
        if self.buckets > 0 and self.max_rel > 0:
            r = deberta_log_bucket(r, self.buckets, self.max_rel)
        return r

    def deberta_scale(self):
        """scaled_size_sqrt: sqrt(head_dim * (1 + |pos_att_type|)), computed by transformers in
        float32 and then cast (so the float64 reference uses the same rounded value)."""
        d = self.H // self.nh
        f = 1 + sum(t in self.pos_att_type for t in ("c2p", "p2c"))
        return float(np.sqrt(np.float32(d * f), dtype=np.float32))

    def deberta_bias(self, qs, ks, p, L):
        """disentangled_attention_bias for one sequence: qs, ks (heads, L, d) -> (heads, L, L),
        written with transformers' gathers and transposes."""
        w, nh, span = self.w, self.nh, self.span
        if not self.rel_on:
            return 0.0
        d = self.H // nh
        scale = self.deberta_scale()
        rel = self.rel_emb[: 2 * span]
        proj = lambda n: (rel @ w[p + n + ".weight"].T + w[p + n + ".bias"]).reshape(  # noqa: E731
            2 * span, nh, d).transpose(1, 0, 2)
        r = self.deberta_rel_pos(L)
        score = 0.0
        if "c2p" in self.pos_att_type and "c2p" not in self.disable:
            c2p = qs @ proj("attention.self.key").transpose(0, 2, 1)   # (heads, L, 2 span)
            pos = np.clip(r + span, 0, 2 * span - 1)
            score = score + np.take_along_axis(c2p, np.broadcast_to(pos, (nh, L, L)), -1) / scale
        if "p2c" in self.pos_att_type and "p2c" not in self.disable:
            p2c = ks @ proj("attention.self.query").transpose(0, 2, 1)  # (heads, L, 2 span)
            pos = np.clip(-r + span, 0, 2 * span - 1)
            g = np.take_along_axis(p2c, np.broadcast_to(pos, (nh, L, L)), -1)
            score = score + g.transpose(0, 2, 1) / scale
        return score

    def encode_packed(self, seqs, types=None):
        """Token ids of several sequences -> list of (len_i, H) float64 last hidden states.

        The linear layers, LayerNorms and activations run once over all tokens concatenated
        (row-wise they are independent of the other rows, so this is the same math as one
        sequence at a time, only with fewer, larger NumPy calls); attention runs per sequence."""
        w, H, nh = self.w, self.H, self.nh
        d = H // nh
        seqs = [np.asarray(s, np.int64) for s in seqs]
        lens = [len(s) for s in seqs]
        bounds = np.cumsum([0] + lens)
        ids = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
        pos = np.concatenate([self.positions(s) for s in seqs]) if seqs else np.zeros(0, np.int64)
        tt = (np.concatenate([np.asarray(t, np.int64) for t in types]) if types is not None
              else np.zeros(len(ids), np.int64))
        x = w["embeddings.word_embeddings.weight"][ids] + self.types[tt]
        if "embeddings.position_embeddings.weight" in w and (  # DeBERTa-v3: none
                not self.deberta or self.cfg.get("position_biased_input", True)):
            x = x + w["embeddings.position_embeddings.weight"][pos]
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        if "encoder.embedding_hidden_mapping_in.weight" in w:  # ALBERT: E -> H
            x = (x @ w["encoder.embedding_hidden_mapping_in.weight"].T
                 + w["encoder.embedding_hidden_mapping_in.bias"])
        for i in range(self.cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            lin = lambda t, n: t @ w[p + n + ".weight"].T + w[p + n + ".bias"]  # noqa: E731
            q = lin(x, "attention.self.query")
            k = lin(x, "attention.self.key")
            v = lin(x, "attention.self.value")
            ctx = np.empty_like(x)
            for b0, b1 in zip(bounds[:-1], bounds[1:]):
                L = b1 - b0
                qs, ks, vs = (t[b0:b1].reshape(L, nh, d).transpose(1, 0, 2) for t in (q, k, v))
                if self.deberta:
                    s = (qs @ ks.transpose(0, 2, 1) / self.deberta_scale()
                         + self.deberta_bias(qs, ks, p, L))
                else:
                    s = qs @ ks.transpose(0, 2, 1) / math.sqrt(d) + self.position_bias(L)
                s = np.exp(s - s.max(-1, keepdims=True))
                s /= s.sum(-1, keepdims=True)
                ctx[b0:b1] = (s @ vs).transpose(1, 0, 2).reshape(L, H)
            x = layer_norm(lin(ctx, "attention.output.dense") + x,
                           w[p + "attention.output.LayerNorm.weight"],
                           w[p + "attention.output.LayerNorm.bias"], self.eps)
            h = self.act(lin(x, "intermediate.dense"))
            x = layer_norm(lin(h, "output.dense") + x, w[p + "output.LayerNorm.weight"],
                           w[p + "output.LayerNorm.bias"], self.eps)
        return [x[b0:b1] for b0, b1 in zip(bounds[:-1], bounds[1:])]

    def encode(self, ids):
        """Token ids of one sequence -> (len, H) float64 last hidden state."""
        return self.encode_packed([ids])[0]

    def pool(self, x):
        """(len, H) hidden states -> (H,) pooled (and normalized) embedding."""
        if self.pooling == "cls":
            e = x[0]
        elif self.pooling == "max":
            e = x.max(0)
        else:
            e = x.mean(0)
        if self.normalize:
            e = e / max(np.linalg.norm(e), 1e-12)
        return e

    def embed(self, ids):
        """Token ids of one sequence -> (H,) float64 pooled (and normalized) embedding."""
        return self.pool(self.encode(ids))

    def embed_batch(self, seqs, types=None):
        """Token ids (and token type ids) of several sequences -> (n, H) float64 embeddings, or
        for a *ForSequenceClassification model (n, num_labels) raw scores (one packed pass)."""
        if not len(seqs):
            return np.zeros((0, self.H))
        xs = self.encode_packed(seqs, types)
        if self.classifier:
            w1, b1, act, w2, b2 = self.head
            return np.stack([act(x[0] @ w1.T + b1) @ w2.T + b2 for x in xs])
        return np.stack([self.pool(x) for x in xs])
