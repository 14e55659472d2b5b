"""The target's hidden states an EAGLE-3 head has not consumed yet, per request: the tap the model
runner feeds (tandem/runner/aux_hidden.py), read by tandem/spec/eagle3.py (bookkeeping only).

Per request, `chunks` are runs of captured rows (first position, aux [n, k, H]) in position
order. The runner computes each request's positions forward from its computed count, so a new
chunk starting at position s replaces whatever was held at positions >= s (rows of rejected
proposals, or a preempted request's recompute). At most `max_rows` rows are held per request;
older ones are dropped (the head then restarts its window at the oldest row kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tandem.runner.aux_hidden import AuxHiddenStep


@dataclass(eq=False)
class PendingFeatures:
    chunks: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # (first position, [n, k, H])
    replaced_from: int | None = None   # lowest position a chunk replaced since the last take
    held: int = 0                      # rows in `chunks`

    def add(self, first: int, rows: torch.Tensor, max_rows: int) -> None:
        last = self.chunks[-1] if self.chunks else None
        if last is not None and last[0] + last[1].shape[0] == first:
            self.chunks.append((first, rows))   # the next positions (every decode step): O(1)
            self.held += rows.shape[0]
        else:
            kept = [(start, t[:first - start]) for start, t in self.chunks if start < first]
            kept.append((first, rows))
            self.chunks = kept
            self.held = sum(t.shape[0] for _, t in kept)
        if self.held > max_rows:
            drop = 0
            while self.held > max_rows and drop < len(self.chunks) - 1:
                self.held -= self.chunks[drop][1].shape[0]
                drop += 1
            del self.chunks[:drop]
        self.replaced_from = first if self.replaced_from is None else min(self.replaced_from, first)

    def take(self, last: int) -> tuple[int, torch.Tensor] | None:
        """The contiguous run of rows ending at position `last` (inclusive): (its first position,
        aux [n, k, H]); None when position `last` is not held. Everything held is dropped."""
        run: list[torch.Tensor] = []
        first = None
        end = last + 1
        for start, t in reversed(self.chunks):
            if start >= end:
                continue
            if start + t.shape[0] < end:   # a gap before `end`
                break
            run.append(t[:end - start])
            first, end = start, start
        self.chunks, self.replaced_from, self.held = [], None, 0
        if first is None:
            return None
        run.reverse()
        return first, run[0] if len(run) == 1 else torch.cat(run)


class FeatureTap:
    """Implements tandem.runner.aux_hidden.AuxHiddenTap for one proposer."""

    def __init__(self, layers: tuple[int, ...], max_rows: int) -> None:
        self.layers = layers
        self.max_rows = max_rows
        self.pending: dict[object, PendingFeatures] = {}   # request (by identity) -> its rows

    def deliver(self, step: AuxHiddenStep) -> None:
        for span in step.spans:
            p = self.pending.get(span.request)
            if p is None:
                p = self.pending[span.request] = PendingFeatures()
            p.add(span.first_position, step.hidden[span.row_start:span.row_start + span.num_rows], self.max_rows)

    def drop(self, request) -> None:
        self.pending.pop(request, None)
