"""Where the HTTP layer meets the meter (tandem/usage/meter.py): what a request's usage is, and
the metering of an interactive request's `GenerationRun`.

The usage of a request is counted as its response reports it (OpenAIFormatter.usage, the other
formats alike): per engine request, its prompt and cached tokens as its latest delta reports
them and its output tokens as its final delta counts them (resumed tokens included), else the
tokens its deltas carried; a prompt's tokens count once for its n choices. A request that
produced no token and did not finish normally (an error before its first token, a client that
left during the prompt) counts nothing.

Exactly once: an interactive request is recorded when its `GenerationRun` closes, the single
point where its usage is final on this app: retries and migrations happen below it (the
gateway's backend keeps one stream per engine request), a cut stream closes it with what was
generated up to the cut. Its entry's key is its first engine request's id, new per HTTP request.
Queued work is recorded per job by the queue's runner (tandem/api/queue/service.py, `run_job`),
keyed by the job's id, whichever gateway ends it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tandem.api.backend import ResponseInfo
from tandem.asyncq.job import ANONYMOUS
from tandem.types import EngineRequest, FinishReason, RequestDelta
from tandem.usage.limits import BATCH, INTERACTIVE
from tandem.usage.meter import Admission, Meter
from tandem.usage.pricing import TokenUsage
from tandem.usage.window import Counts


@dataclass
class RequestTally:
    """One engine request's usage so far, from the deltas it produced."""

    prompt: int = 0
    cached: int = 0
    counted: int = 0          # tokens carried by the deltas seen
    reported: int = 0         # num_output_tokens of the latest delta
    final: bool = False       # finished normally (not with an error)

    def add(self, d: RequestDelta) -> None:
        if d.num_prompt_tokens:
            self.prompt, self.cached = d.num_prompt_tokens, d.num_cached_tokens
        self.counted += len(d.new_token_ids)
        self.reported = d.num_output_tokens or self.reported
        if d.finished and d.finish_reason is not FinishReason.ERROR:
            self.final = True

    @property
    def produced(self) -> bool:
        return self.final or self.counted > 0

    @property
    def output(self) -> int:
        return max(self.reported, self.counted)


def request_usage(requests: list[EngineRequest], tallies: list[RequestTally],
                  choices_per_prompt: int = 1) -> TokenUsage | None:
    """The usage of a request's engine requests (choice i of prompt p at p * n + i); None when
    none of them produced anything."""
    if not any(t.produced for t in tallies):
        return None
    n = max(1, choices_per_prompt)
    uncached = cached = output = 0
    for p in range(0, len(requests), n):
        group = [t for t in tallies[p:p + n] if t.produced]
        if group:   # the prompt counts once, as its first choice that ran reports it
            t = group[0]
            prompt = t.prompt or len(requests[p].prompt_token_ids)
            cached += min(t.cached, prompt)
            uncached += prompt - min(t.cached, prompt)
        output += sum(t.output for t in group)
    return TokenUsage(uncached, cached, output)


def input_tokens(requests: list[EngineRequest], choices_per_prompt: int = 1) -> int:
    return sum(len(r.prompt_token_ids) for r in requests[::max(1, choices_per_prompt)])


def account_of(req: EngineRequest) -> str:
    return req.context.tenant or ANONYMOUS


class RunMeter:
    """The metering of one interactive request's GenerationRun: `admit` before its backend
    streams open (a refusal is the request's 429), `observe` each delta, `settle` once when the
    run closes (tandem/api/run.py calls all three)."""

    def __init__(self, meter: Meter, requests: list[EngineRequest], model: str,
                 choices_per_prompt: int = 1, kind: str = INTERACTIVE) -> None:
        self.meter = meter
        self.requests = requests
        self.model = model
        self.n = choices_per_prompt
        self.kind = kind
        self.account = account_of(requests[0])
        self.tallies = [RequestTally() for _ in requests]
        self.admission: Admission | None = None
        self._settled = False

    async def admit(self, info: ResponseInfo) -> None:
        self.admission = await self.meter.admit(
            self.account, self.model, self.kind, input_tokens(self.requests, self.n),
            [r.sampling.max_tokens for r in self.requests])
        for name, value in (self.admission.headers or {}).items():
            info.set_header(name, value)

    def observe(self, i: int, d: RequestDelta) -> None:
        self.tallies[i].add(d)

    async def settle(self) -> None:
        """Idempotent; shielded, so a client that leaves (its task cancelled) still gets its
        usage recorded."""
        if self._settled or self.admission is None:
            return
        self._settled = True
        usage = request_usage(self.requests, self.tallies, self.n)
        used = Counts() if usage is None else Counts(1, usage.input, usage.output)
        entry = None if usage is None else self.meter.entry(
            self.requests[0].request_id, self.account, self.model, self.kind, usage)
        await asyncio.shield(self.meter.settle(self.admission, used, entry))


class JobMeter:
    """The metering of one run of a queued job (kind batch): `admit` the requests this run
    computes under the account's batch limit (a refusal sends the job back to the queue until
    it would fit), `observe` this run's deltas, and `settle` once: the run's window corrected
    to what it produced and, when the job has its whole output, the job's entry recorded under
    "job:<id>" with the usage of all its runs (its saved output included), as its result
    reports it. A job run again after a crash or an expired lease records nothing new."""

    def __init__(self, meter: Meter, job_id: str, account: str, model: str,
                 choices_per_prompt: int = 1) -> None:
        self.meter = meter
        self.key = f"job:{job_id}"
        self.account = account
        self.model = model
        self.n = choices_per_prompt
        self.admission = Admission()
        self.input = 0
        self.produced = 0

    async def admit(self, pending: list[EngineRequest]) -> None:
        self.input = sum(len(r.prompt_token_ids) + len(r.resume_output_ids) for r in pending)
        self.admission = await self.meter.admit(self.account, self.model, BATCH, self.input,
                                                [r.sampling.max_tokens for r in pending])

    def observe(self, d: RequestDelta) -> None:
        self.produced += len(d.new_token_ids)

    async def settle(self, requests: list[EngineRequest] | None = None,
                     outputs: list[tuple[int, RequestDelta]] | None = None) -> None:
        """`requests` and `outputs` (every request's deltas, earlier runs' first) once the job
        has its whole output; None after a run that did not end the job."""
        entry = None
        if requests is not None and outputs is not None:
            tallies = [RequestTally() for _ in requests]
            for i, d in outputs:
                tallies[i].add(d)
            usage = request_usage(requests, tallies, self.n)
            if usage is not None:
                entry = self.meter.entry(self.key, self.account, self.model, BATCH, usage)
        used = Counts(1, self.input, self.produced) if self.produced or entry else Counts()
        await asyncio.shield(self.meter.settle(self.admission, used, entry))
