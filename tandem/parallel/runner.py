"""ParallelRunner: the model runner of rank 0, the rank that schedules.

The engine's execute is the boundary: `prepare` builds the step's tensors as ModelRunner does
and keeps the step's plain inputs; `execute` first broadcasts them, so that every rank runs the
same forward (their collectives meet rank 0's), then runs rank 0's forward and samples. Only
rank 0 samples. A rank that died is reported by the launcher's monitor (`fail`): every later
step raises RankFailed instead of waiting on a collective that cannot complete.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tandem.grammar.masks import GrammarMasks
from tandem.parallel.messages import StepMessage, Stop, broadcast
from tandem.runner.model_runner import ModelRunner, StepInputs, StepResult
from tandem.runner.scheduled import ScheduledSeq


class RankFailed(RuntimeError):
    """A rank of this parallel worker is gone; the worker cannot compute any more."""


class ParallelRunner(ModelRunner):
    failure: str | None = None
    on_close: Callable[[], None] | None = None     # stops the other ranks (set by the launcher)
    _pending: StepMessage | None = None

    def prepare(self, seqs: Sequence[ScheduledSeq], block_tables: Sequence[list[int]]) -> StepInputs:
        inputs = super().prepare(seqs, block_tables)
        # the slices rank 0's batch was built from (verify rows as decode rows in bf16), so that
        # every rank computes the same attention
        slices = list(inputs.slices)
        self._pending = StepMessage(inputs.input_ids.tolist(), inputs.positions.tolist(), slices)
        return inputs

    def execute(self, inputs: StepInputs,
                grammar_masks: Callable[[], GrammarMasks | None] | None = None) -> StepResult:
        if self.failure is not None:
            raise RankFailed(self.failure)
        msg, self._pending = self._pending, None
        assert msg is not None, "execute() without prepare()"
        broadcast(msg)
        self.model.plan_step(msg.slices, self.layout.block_size)   # the same micro-batches as every rank
        return super().execute(inputs, grammar_masks)

    def fail(self, reason: str) -> None:
        self.failure = reason

    def close(self) -> None:
        if self.failure is None:
            try:
                broadcast(Stop())
            except RuntimeError:
                pass        # a rank is gone already: nothing to stop cleanly
        if self.on_close is not None:
            self.on_close()
