"""A NumPy reference of src/gen/sampler.h's chain for one logits row (the tests of rg_model_step's
sampler path, CPU and GPU)."""
import numpy as np


def ref_sample_chain(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                     repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, u=0.5,
                     penalty=None, bias=None, top_n=0):
    """src/gen/sampler.h's chain written in NumPy: bias, penalties and temperature in float32
    (as the C code rounds them), the selection and the draw in float64. Returns (id, log-prob,
    top ids, top log-probs)."""
    f32 = np.float32
    lg = logits.astype(f32).copy()
    n = len(lg)
    for t, v in zip(*(bias or ([], []))):
        lg[t] = f32(lg[t] + f32(v))
    for t, c, inp in zip(*(penalty or ([], [], []))):
        if f32(repetition_penalty) != 1 and (c > 0 or inp):
            lg[t] = f32(lg[t] * f32(repetition_penalty)) if lg[t] < 0 else f32(lg[t] / f32(repetition_penalty))
        if c > 0:
            lg[t] = f32(lg[t] - f32(f32(c) * f32(frequency_penalty)))
            lg[t] = f32(lg[t] - f32(presence_penalty))
    alive = np.ones(n, bool)
    if temperature > 0:
        if f32(temperature) != 1:
            lg = (lg / f32(temperature)).astype(f32)
        if 0 < top_k < n:
            alive &= lg >= np.sort(lg)[::-1][top_k - 1]
        if top_p < 1:
            idx = np.nonzero(alive)[0]
            order = idx[np.lexsort((idx, -lg[idx].astype(np.float64)))]
            e = np.exp(lg[order].astype(np.float64) - float(lg[order[0]]))
            before = np.concatenate([[0.0], np.cumsum(e)[:-1]])
            keep = before < float(f32(top_p)) * e.sum()
            keep[0] = True
            alive[:] = False
            alive[order[keep]] = True
        mx = float(lg[alive].max())
        if min_p > 0:
            alive &= ~(np.exp(lg.astype(np.float64) - mx) < float(f32(min_p)))
    mx = float(lg[alive].max())
    e = np.where(alive, np.exp(lg.astype(np.float64) - mx), 0.0)
    total = e.sum()
    if temperature > 0:
        cum = np.cumsum(e)
        hit = np.nonzero((cum > u * total) & alive)[0]
        tok = int(hit[0]) if len(hit) else int(np.nonzero(alive)[0][-1])
    else:
        tok = int(np.nonzero(lg == lg.max())[0][0])
    lse = mx + np.log(total)
    idx = np.nonzero(alive)[0]
    order = idx[np.lexsort((idx, -lg[idx].astype(np.float64)))][:top_n]
    return tok, float(lg[tok]) - lse, order, lg[order].astype(np.float64) - lse
