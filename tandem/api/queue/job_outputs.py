"""What a queued job's engine requests have produced, across its runs: a preempted run's tokens
are continued, not recomputed.

A job's runner builds the same engine requests on every run (its body and the parse are
deterministic). `JobOutputs` restores what earlier runs produced (the job's saved `progress`),
says which requests still have to run (`requests`: the unfinished ones, each with its produced
tokens as `resume_output_ids`, which the engine takes as context that counts toward max_tokens
and is not emitted again; its detokenizer, stop strings and grammar state continue from them,
and the prefix cache holds most of the prompt), collects this run's deltas (`add`), and gives
the formatter every request's deltas in order (`deltas`: the saved output as one delta, then
this run's). So a greedy job preempted any number of times ends with the result of a run that
never was.

A backend that does not carry `resume_output_ids` starts over: its first delta counts only its
own tokens (`num_output_tokens`), and that request's saved output is dropped, so the answer is
still whole. Usage: prompt and cached tokens of the first run that reported them (as the
gateway merges a migrated stream's), completion tokens as the last delta counts them.

The saved form (`snapshot`) is {"v": 1, "outputs": [merged delta or null, ...]} in the internal
wire's delta encoding (token ids, text, logprobs, counts; a finished request's final fields).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from tandem.api.internal.wire import delta_from_dict, delta_to_dict
from tandem.asyncq.job import JSON
from tandem.types import EngineRequest, RequestDelta, TokenLogprob

VERSION = 1
log = logging.getLogger(__name__)


@dataclass
class _Output:
    """One engine request's output: `saved` (earlier runs, merged) then `new` (this run)."""
    saved: RequestDelta | None = None
    new: list[RequestDelta] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        last = self.new[-1] if self.new else self.saved
        return last is not None and last.finished

    def saved_ids(self) -> list[int]:
        return list(self.saved.new_token_ids) if self.saved is not None else []


def _merge(deltas: list[RequestDelta]) -> RequestDelta:
    """Consecutive deltas of one request as one: tokens, text and logprobs joined; counts and
    the final fields of the last one; the prompt's fields (cached tokens, prompt logprobs) of
    the first."""
    first, last = deltas[0], deltas[-1]
    lps: list[TokenLogprob] | None = []
    for d in deltas:
        if d.logprobs is None:
            lps = None
            break
        lps.extend(d.logprobs)
    return replace(last, new_token_ids=[t for d in deltas for t in d.new_token_ids],
                   new_text="".join(d.new_text for d in deltas), logprobs=lps,
                   prompt_logprobs=first.prompt_logprobs, num_cached_tokens=first.num_cached_tokens,
                   kv_handle=None, timings=None)


class JobOutputs:
    def __init__(self, n: int, saved: JSON | None) -> None:
        self._outs = [_Output() for _ in range(n)]
        restored = (saved or {}).get("outputs") if (saved or {}).get("v") == VERSION else None
        if isinstance(restored, list) and len(restored) == n:   # else: start over
            try:
                deltas = [delta_from_dict(d) if d is not None else None for d in restored]
            except (KeyError, TypeError, ValueError):
                log.warning("asyncq: a job's saved progress is unreadable; it starts over")
                deltas = [None] * n
            for out, d in zip(self._outs, deltas):
                out.saved = d

    def pending(self) -> list[int]:
        """Indices of the requests that have not finished."""
        return [i for i, out in enumerate(self._outs) if not out.finished]

    def requests(self, reqs: list[EngineRequest]) -> list[EngineRequest]:
        """The pending ones of the job's engine requests (in `pending()` order), resumed."""
        return [replace(reqs[i], resume_output_ids=self._outs[i].saved_ids())
                for i in self.pending()]

    def add(self, i: int, d: RequestDelta) -> None:
        """A delta of request i (its index among all the job's requests) from this run."""
        out = self._outs[i]
        if not out.new and out.saved is not None and not out.saved.finished:
            resumed = len(out.saved.new_token_ids)
            if d.num_output_tokens != resumed + len(d.new_token_ids):
                out.saved = None     # the backend started over: its output is the whole answer
        if out.saved is not None and d.num_cached_tokens != out.saved.num_cached_tokens:
            d = replace(d, num_cached_tokens=out.saved.num_cached_tokens)
        out.new.append(d)

    def deltas(self) -> list[tuple[int, RequestDelta]]:
        """Every request's output, for a formatter: the saved part as one delta, then this
        run's deltas as they came."""
        items: list[tuple[int, RequestDelta]] = []
        for i, out in enumerate(self._outs):
            if out.saved is not None:
                items.append((i, out.saved))
            items.extend((i, d) for d in out.new)
        return items

    def snapshot(self) -> JSON | None:
        """The job's progress to save; None while this run has produced nothing (the saved
        progress, if any, is still the job's)."""
        if not any(out.new for out in self._outs):
            return None
        outputs = []
        for out in self._outs:
            parts = ([out.saved] if out.saved is not None else []) + out.new
            outputs.append(delta_to_dict(_merge(parts)) if parts else None)
        return {"v": VERSION, "outputs": outputs}
