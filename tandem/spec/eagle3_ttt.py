"""The EAGLE-3 head's training-time test: the head unrolled `depth` steps over a whole document at
once, each step reading its own previous output as serving does (tandem/spec/eagle3.py), with
dense attention whose mask reproduces what each unrolled row sees when serving.

Serving, the row that drafts token s of a draft (s = 1..depth) sits at position p and attends
to the head's rows from the target's states at positions <= p - s + 1 and to the unrolled rows
of the same draft, one per earlier step, at positions p - s + 2 .. p. Here step s computes that
row for every p at once: its feature is step s-1's output at p - 1 (step 1: the target's fused
states at p), its keys those of step 1 up to p - s + 1 plus, for each i in 2..s, step i's key at
p - s + i (a diagonal). Row p of every step predicts the target's token at p + 2.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tandem.spec.eagle3_head import Eagle3Head


def unroll(head: Eagle3Head, aux: torch.Tensor, next_emb: torch.Tensor, depth: int) -> list[torch.Tensor]:
    """aux [T, k, H]: the target's states at positions 0..T-1; next_emb [T, H]: the embedding of
    the token at p + 1 for row p. -> `depth` outputs [T, H]; step s's rows p < s - 1 are padding."""
    T = aux.shape[0]
    c = head.cfg
    positions = torch.arange(T)
    feat = head.fuse(aux)                                                      # [T, H]
    keys: list[torch.Tensor] = []     # per step: [kv_heads, T, D]
    values: list[torch.Tensor] = []
    outs = []
    rep = c.num_heads // c.num_kv_heads
    for s in range(1, depth + 1):
        q, k, v = head.qkv(feat, next_emb, positions)      # q [T, heads, D], k/v [T, kv_heads, D]
        keys.append(k.transpose(0, 1))
        values.append(v.transpose(0, 1))
        qh = q.transpose(0, 1) * head.scale                                   # [heads, T, D]
        k1 = keys[0].repeat_interleave(rep, 0)                                # [heads, T, D]
        v1 = values[0].repeat_interleave(rep, 0)
        scores = qh @ k1.transpose(1, 2)                                      # [heads, T, T]
        # query p sees step-1 keys j <= p - (s - 1)
        allowed = torch.ones(T, T, dtype=torch.bool).tril(-(s - 1))
        scores = scores.masked_fill(~allowed, float("-inf"))
        diag_scores, diag_values = [], []
        for i in range(2, s + 1):        # step i's row at p - (s - i)
            shift = s - i
            ki = _shift(keys[i - 1].repeat_interleave(rep, 0), shift)          # [heads, T, D]
            vi = _shift(values[i - 1].repeat_interleave(rep, 0), shift)
            diag_scores.append((qh * ki).sum(-1, keepdim=True))               # [heads, T, 1]
            diag_values.append(vi)
        if diag_scores:
            allw = torch.cat([scores] + diag_scores, dim=-1).softmax(-1)
            allw = torch.nan_to_num(allw)   # padding rows (p < s - 1) see nothing
            o = allw[..., :T] @ v1
            for j, vi in enumerate(diag_values):
                o = o + allw[..., T + j:T + j + 1] * vi
        else:
            o = torch.nan_to_num(scores.softmax(-1)) @ v1
        out = head.finish(feat, o.transpose(0, 1))                            # [T, H]
        outs.append(out)
        feat = _shift(out, 1, dim=0)     # step s+1 at p reads step s's output at p - 1
    return outs


def _shift(x: torch.Tensor, n: int, dim: int = 1) -> torch.Tensor:
    """x moved n places forward along `dim` (row p gets row p - n), zeros in front."""
    if n == 0:
        return x
    pad = torch.zeros_like(x.narrow(dim, 0, n))
    return torch.cat((pad, x.narrow(dim, 0, x.shape[dim] - n)), dim=dim)


def step_losses(head: Eagle3Head, outs: list[torch.Tensor], lm_head: torch.Tensor,
                labels: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, list[float], list[float]]:
    """outs: unroll's; lm_head [V, H]; labels [T]: the target's token at p + 2 for row p; weights
    [T] (0: no loss). -> (sum over steps of each step's weighted mean CE, per-step mean CE,
    per-step top-1 agreement on weighted rows)."""
    total = torch.zeros(())
    ces, accs = [], []
    for s, out in enumerate(outs, start=1):
        rows = torch.nonzero(weights[s - 1:] > 0).squeeze(1) + (s - 1)   # padding rows of step s left out
        w = weights[rows]
        logits = F.linear(head.norm(out.index_select(0, rows)), lm_head)   # [R, V]
        ce = F.cross_entropy(logits, labels[rows], reduction="none")
        step_loss = (ce * w).sum() / w.sum().clamp_min(1e-6)
        total = total + step_loss
        ces.append(float(step_loss.detach()))
        accs.append(float((logits.detach().argmax(-1) == labels[rows]).float().mean()) if len(rows) else 0.0)
    return total, ces, accs
