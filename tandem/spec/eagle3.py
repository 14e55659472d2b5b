"""EAGLE-3 proposals: a one-layer head (tandem/spec/eagle3_head.py) drafts from the target's own
hidden states, which the target's runner hands over at every step (tandem/runner/aux_hidden.py);
the target verifies the drafts like any other (greedy output unchanged).

State per request: the head's own paged KV (tandem/spec/eagle3_kv.py, one layer), whose slot j
holds head row `origin + j` computed from the target's hidden state at that position (`rows` such
rows: positions [origin, origin + rows)). The target's states arrive for every row the runner
computed, prompt chunks included. A prompt read from the target's prefix cache has none: the
head's own prefix cache (full blocks of rows keyed by their tokens) covers it when an earlier
request computed that prefix; otherwise the head's window starts where states begin (`origin`).

One call for the requests that want drafts (limits k_i > 0), with n_i tokens each:
1. catch-up, one batched forward: head rows for positions [origin + rows, n - 1) from the target
   states held for them (the last one pairs the state at n - 2 with the target's newest token
   n - 1); its last row gives the first draft token. At most `catchup_rows_per_step` rows over
   the call; a request left behind drafts at a later call;
2. k_max - 1 unrolled steps batched over the requests still drafting: row n - 2 + s reads the
   head's own output of the previous row and the embedding of draft token s (its K/V goes to
   slots past `rows`, overwritten at the next call).
A request with no target state for position n - 2 (e.g. its proposer was just installed) gets no
draft, never an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tandem.config import SpeculativeConfig
from tandem.kv.layout import KVLayout
from tandem.layers.attention import AttentionWorkspace
from tandem.layers.attention_batch import AttentionBatch, SeqSlice
from tandem.spec.eagle3_features import FeatureTap
from tandem.spec.eagle3_kv import HeadKV, HeadSeq
from tandem.spec.eagle3_loader import load_head
from tandem.spec.target import SpecTarget

# a catch-up of at most this many rows runs as single-row decode slices batched with the other
# requests' rather than as a prefill chunk of its own (tandem/spec/draft_model.py: the same)
_AS_DECODE_ROWS = 8


@dataclass(frozen=True)
class Eagle3ProposerConfig:
    catchup_rows_per_step: int = 4096   # head rows of catch-up per call, all requests together
    max_pending_rows: int = 4096        # target states held per request before the head reads them
    # a request more than this many rows behind (a prompt not in the head's prefix cache, or
    # steps the gate did not draft) catches up only its last rows: its window restarts there, and
    # the tap holds no more than this many states per request (0: every row since the window's
    # start, up to max_pending_rows). 128 on the demo pair (docs/benchmarks.md 10): tool-call
    # turns over no speculation at batch 8 x0.88 -> x1.36, batch 32 x0.76 -> x1.34, batch 1 unchanged
    catchup_window: int = 128


def _held_rows(cfg: Eagle3ProposerConfig) -> int:
    """States the tap keeps per request: with a catch-up window, older ones are never read."""
    return min(cfg.max_pending_rows, cfg.catchup_window) if cfg.catchup_window else cfg.max_pending_rows


class Eagle3Proposer:
    def __init__(self, k: int, head_path: str, target: SpecTarget,
                 cfg: Eagle3ProposerConfig = Eagle3ProposerConfig()) -> None:
        self.k = k
        self.cfg = cfg
        self.target = target.loaded.model
        self.device = torch.device(target.config.model.device)
        self.dtype = target.loaded.dtype
        self.head = load_head(head_path, self.target, self.dtype, self.device,
                              verify=target.config.model.verify_checksums)
        hc = self.head.cfg
        arch = target.loaded.arch
        if (hc.num_heads, hc.num_kv_heads, hc.head_dim) == (arch.num_heads, arch.num_kv_heads, arch.head_dim):
            # the target's attention kernels and single-pass norms fit the head's shapes too
            ws = self.target.workspace
            self.head.workspace = AttentionWorkspace(ws.decode_kernel, ws.prefill_kernel)
            self.head.use_fused_ops(self.target.model.norm.fused)
        self.vocab = target.loaded.arch.vocab_size
        self.eos = frozenset(target.loaded.eos_token_ids)
        block_size = target.config.cache.block_size
        self.layout = KVLayout(model=f"eagle3/H{hc.hidden_size}", dtype=str(self.dtype).removeprefix("torch."),
                               block_size=block_size, num_layers=1, num_kv_heads=hc.num_kv_heads,
                               head_dim=hc.head_dim)
        per_request = -(-(k + 1) // block_size) + 1
        num_blocks = -(-target.kv_tokens // block_size) + target.config.scheduler.max_num_seqs * per_request
        self.kv_cache = self.layout.allocate(num_blocks, self.device)  # [blocks, 1, 2, bs, kv_heads, head_dim]
        self.cache = HeadKV(num_blocks, block_size)
        self.tap = FeatureTap(hc.aux_layers, _held_rows(cfg))
        self.target.aux_tap = self.tap   # the runner now captures hc.aux_layers at every step

    def reconfigure(self, cfg: Eagle3ProposerConfig) -> None:
        """New limits, effective from the next call."""
        self.cfg = cfg
        self.tap.max_rows = _held_rows(cfg)

    def attach(self) -> None:
        """Capture the target's states for this head again (after `close`)."""
        self.target.aux_tap = self.tap

    def close(self) -> None:
        """Stop the target's capture (the proposer is being replaced or dropped)."""
        if self.target.aux_tap is self.tap:
            self.target.aux_tap = None

    # --- the Proposer's side ---------------------------------------------------------------
    def propose(self, requests: Sequence, limits: Sequence[int] | None = None) -> list[list[int]]:
        limits = [self.k] * len(requests) if limits is None else [min(self.k, k) for k in limits]
        drafts: list[list[int]] = [[] for _ in requests]
        budget = self.cfg.catchup_rows_per_step
        work: list[tuple[int, HeadSeq, int, torch.Tensor, list[int]]] = []  # (index, seq, first, aux, tokens)
        for i, (req, k) in enumerate(zip(requests, limits)):
            tokens = req.all_token_ids
            n = len(tokens)
            pending = self.tap.pending.get(req)
            if k <= 0 or n < 2 or pending is None:
                continue
            seq = self.cache.seq(req)
            if pending.replaced_from is not None and pending.replaced_from < seq.origin + seq.rows:
                seq.rows = max(0, pending.replaced_from - seq.origin)   # those positions were recomputed
            run = pending.take(n - 2)
            if run is None:
                continue
            first, aux = run
            window = self.cfg.catchup_window
            if first > seq.origin + seq.rows:   # a prompt from the target's prefix cache: the head's may hold it
                self.cache.reuse(seq, tokens, n - 1 - window if window else 0, first)
            want = min(seq.origin + seq.rows, n - 2)   # the last row is always recomputed: it drafts
            floor = max(first, n - 1 - window) if window else first
            if floor > want:   # no states for [want, first), or too many rows behind: restart there
                aligned = -(-floor // self.cache.block_size) * self.cache.block_size
                floor = aligned if aligned <= n - 2 else floor    # on a block boundary: publishable
                self.cache.restart(seq, floor)
                want = floor
            aux = aux[want - first:]
            if aux.shape[0] > budget or not self.cache.reserve(seq, n - 1 - seq.origin + k - 1):
                pending.add(want, aux, self.tap.max_rows)   # kept for a later call
                continue
            budget -= aux.shape[0]
            seq.rows = want - seq.origin
            work.append((i, seq, want, aux, tokens))
        if not work:
            return drafts
        cur = self._catch_up(work)                      # [len(live), H]: each live request's last output
        live = list(range(len(work)))
        step = 0
        while live:
            nxt, keep = [], []
            for at, (j, token) in enumerate(zip(live, self._draft(cur))):
                i = work[j][0]
                drafts[i].append(token)
                if len(drafts[i]) < limits[i] and token not in self.eos:
                    nxt.append(j)
                    keep.append(at)
            if not nxt:
                break
            step += 1
            rows = [(work[j][1], drafts[work[j][0]][-1]) for j in nxt]
            cur = self._unroll(cur[keep], rows, step)
            live = nxt
        return drafts

    def observe(self, request, num_proposed: int, num_accepted: int) -> None:
        pass   # the next call reads the target's states of what was accepted

    def finished(self, request) -> None:
        self.tap.drop(request)
        self.cache.free(request)

    # --- the head's forwards -------------------------------------------------------------------
    @torch.inference_mode()
    def _catch_up(self, work) -> torch.Tensor:
        """Rows from the target's states; -> the head's output at each request's last row [W, H]."""
        aux = torch.cat([a for _, _, _, a, _ in work]).to(self.device, self.dtype)    # [T, k, H]
        feat = self.head.fuse(aux)                                                  # [T, H]
        ids: list[int] = []
        positions: list[int] = []
        slices: list[SeqSlice] = []
        last: list[int] = []
        for _, seq, first, a, tokens in work:
            n = a.shape[0]
            ids += tokens[first + 1:first + 1 + n]   # row p reads the token at p + 1
            positions += range(first, first + n)
            slot = first - seq.origin
            if n <= _AS_DECODE_ROWS:
                slices += [SeqSlice(seq.block_ids, slot + j, 1) for j in range(n)]
            else:
                slices.append(SeqSlice(seq.block_ids, slot, n))
            last.append(len(ids) - 1)
            seq.rows = slot + n
        out = self._forward(feat, ids, positions, slices)
        for _, seq, _, _, tokens in work:
            self.cache.publish(seq, tokens)
        return out.index_select(0, torch.tensor(last, device=self.device))

    @torch.inference_mode()
    def _unroll(self, feat: torch.Tensor, rows: list[tuple[HeadSeq, int]], step: int) -> torch.Tensor:
        """Draft row `step` of each request: its previous output and draft token -> [R, H]."""
        ids = [token for _, token in rows]
        # slot rows + step - 1 follows the request's last true row (slot rows - 1, position origin + rows - 1)
        positions = [seq.origin + seq.rows - 1 + step for seq, _ in rows]
        slices = [SeqSlice(seq.block_ids, seq.rows - 1 + step, 1) for seq, _ in rows]
        return self._forward(feat, ids, positions, slices)

    def _forward(self, feat: torch.Tensor, ids: list[int], positions: list[int],
                 slices: list[SeqSlice]) -> torch.Tensor:
        dev = self.device
        ids_t = torch.tensor(ids, dtype=torch.long).to(dev)
        emb = self.target.model.embed_tokens(ids_t)                                  # [T, H]
        batch = AttentionBatch.build(slices, self.layout.block_size, dev)
        return self.head(feat, emb, torch.tensor(positions, dtype=torch.long).to(dev), batch, self.kv_cache)

    @torch.inference_mode()
    def _draft(self, out: torch.Tensor) -> list[int]:
        logits = self.target.compute_logits(self.head.norm(out))                     # [R, V]
        return logits[:, :self.vocab].argmax(dim=-1).tolist()


def build(cfg: SpeculativeConfig, target: SpecTarget | None) -> Eagle3Proposer:
    """{"method": "eagle3", "model": HEAD_DIR} (tandem/spec/registry.py; make_proposer passes the
    target). Installs its hidden-state tap on the target."""
    assert target is not None and cfg.model
    return Eagle3Proposer(cfg.num_speculative_tokens, cfg.model, target)
