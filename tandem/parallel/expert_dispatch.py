"""Expert parallelism with token dispatch and combine (all-to-all), the alternative to one
all-reduce per MoE layer (ParallelConfig.expert_dispatch = "alltoall").

With tensor-parallel attention every rank of a stage holds all T tokens after attention. Here
rank r takes its slice of them, rows [r*T//n, (r+1)*T//n), and:
1. routes them (weights, expert ids [t, k]);
2. dispatch: sends each (token, choice) row to the rank holding that expert (experts are
   contiguous ranges per rank, so sorting by expert id groups by rank): one all-to-all of the
   counts, one of the rows with their expert ids packed behind them (bytes);
3. each rank runs its experts on the rows it received (SparseMoE.expert_rows);
4. combine: an all-to-all sends the outputs back in the order they came; the owner scales them
   by the routing weights and sums them per token in ascending expert order (as one process
   does), then adds the shared experts (held whole on every rank in this mode) on its tokens;
5. an all-gather gives every rank all T outputs again (the next layer's attention needs them).
Every rank calls the same collectives in the same order, token counts differing by at most one.
"""

from __future__ import annotations

import torch

from tandem.layers.moe import SparseMoE
from tandem.parallel.group import RankGroup


class AllToAllDispatch:
    def __init__(self, group: RankGroup, experts_per_rank: int) -> None:
        self.g = group
        self.per = experts_per_rank

    def __call__(self, moe: SparseMoE, x: torch.Tensor) -> torch.Tensor:
        # x [T, hidden], the same on every rank of the stage -> [T, hidden]
        n, r, T = self.g.tp_size, self.g.tp_rank, x.shape[0]
        own = x[r * T // n:(r + 1) * T // n]                               # [t, hidden]
        t, k = own.shape[0], moe.spec.top_k
        weights, ids = moe.gate(own)                                       # [t, k] float32, [t, k]
        if not moe.spec.weights_float32:
            weights = weights.to(x.dtype)
        order = torch.argsort(ids.reshape(-1), stable=True)               # [t*k] by expert, then token
        send_ids = ids.reshape(-1)[order]                                  # [t*k]
        send_tok = order // k                                              # [t*k] row in `own`
        send_counts = torch.bincount(send_ids // self.per, minlength=n)   # [n]
        recv_counts = torch.empty_like(send_counts)
        self.g.all_to_all(recv_counts, send_counts)
        sends, recvs = send_counts.tolist(), recv_counts.tolist()
        # dispatch: rows and their expert ids as one byte tensor [m, hidden * itemsize + 8]
        packed = torch.cat((own.index_select(0, send_tok).view(torch.uint8),
                            send_ids.unsqueeze(1).view(torch.uint8)), dim=1)
        got = packed.new_empty((sum(recvs), packed.shape[1]))
        self.g.all_to_all(got, packed, recvs, sends)
        row_bytes = packed.shape[1] - 8
        recv_x = got[:, :row_bytes].contiguous().view(x.dtype)           # [m', hidden]
        recv_ids = got[:, row_bytes:].contiguous().view(torch.int64).reshape(-1)   # [m']
        y = moe.expert_rows(recv_x, recv_ids)                              # [m', hidden]
        # combine: outputs back to their tokens' ranks, in the order they were sent
        back = y.new_empty((sum(sends), y.shape[1]))
        self.g.all_to_all(back, y, sends, recvs)
        w = weights.reshape(-1)[order].unsqueeze(1)                        # [t*k, 1]
        out = torch.zeros_like(own)
        out.index_add_(0, send_tok, (back * w).to(x.dtype))
        if moe.shared_experts is not None:
            out = out + moe.shared_experts(own)
        return self._all_gather(out, T)

    def _all_gather(self, part: torch.Tensor, T: int) -> torch.Tensor:
        # part [t_r, hidden] of each rank -> [T, hidden] in rank order (padded to equal sizes)
        n = self.g.tp_size
        size = -(-T // n)
        pad = part.new_zeros((size, part.shape[1]))
        pad[:part.shape[0]] = part
        bufs = [torch.empty_like(pad) for _ in range(n)]
        self.g.all_gather(bufs, pad)
        return torch.cat([b[:(q + 1) * T // n - q * T // n] for q, b in enumerate(bufs)])
