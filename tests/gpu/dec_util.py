"""Host-side KV bookkeeping for the GPU decoder scripts (no torch: compute-sanitizer runs
decoder_cuda_cpu.py with it): sequences over a shuffled pool of KV blocks, and one step call of
rg_model_step per list of (sequence, new ids) parts."""
import numpy as np

BS = 16  # positions per KV block


class Seqs:
    """Host bookkeeping of several sequences over a shuffled block pool."""

    def __init__(self, n_blocks, seed=0):
        self.free = list(np.random.default_rng(seed).permutation(n_blocks))
        self.blocks, self.n = {}, {}

    def part(self, sid, toks):
        b = self.blocks.setdefault(sid, [])
        c0 = self.n.get(sid, 0)
        pos = list(range(c0, c0 + len(toks)))
        while len(b) * BS < c0 + len(toks):
            b.append(int(self.free.pop()))
        self.n[sid] = c0 + len(toks)
        return pos, [b[p // BS] * BS + p % BS for p in pos]

    def step(self, m, parts, argmax=False):
        """parts: [(sid, toks)]; returns the logits of each part's last row, or with argmax
        (rg_model_step's greedy path) their greedy ids and log-probs."""
        toks, pos, cu, ctx, slots = [], [], [0], [], []
        for sid, t in parts:
            p, s = self.part(sid, t)
            toks += t
            pos += p
            cu.append(cu[-1] + len(t))
            ctx.append(self.n[sid])
            slots += s
        width = max(len(self.blocks[sid]) for sid, _ in parts)
        bt = np.zeros((len(parts), width), np.int32)
        for i, (sid, _) in enumerate(parts):
            bt[i, :len(self.blocks[sid])] = self.blocks[sid]
        rows = [c - 1 for c in cu[1:]]
        if argmax:
            return m.step_argmax(toks, pos, cu, ctx, bt, slots, rows)
        return m.step(toks, pos, cu, ctx, bt, slots, rows)
