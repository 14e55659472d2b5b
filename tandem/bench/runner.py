"""The load generator: sends a workload's sessions open loop or closed loop, within bounds.

- open loop: each session starts at its `arrival_s` (trace timestamps or Poisson), whatever
  the server's state; its later turns follow its own answers and think times.
- closed loop: `concurrency` sessions run at once; a finished session is replaced by the next.
Bounds: at most `max_requests` requests are sent, none after `duration_s`; requests still
running `drain_timeout_s` after the last send are cancelled and recorded as errors.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable

from tandem.bench.client import StreamingClient
from tandem.bench.sample import RequestSample
from tandem.bench.workload import Session, Workload

# the server's agent hint header (tandem/turn/agent_hint.py; a client does not import the server)
AGENT_HINT_HEADER = "x-agent-expect-next-turn-s"


@dataclass(frozen=True)
class LoadConfig:
    concurrency: int | None = None     # closed loop with this many sessions; None: open loop
    max_requests: int | None = None
    duration_s: float | None = None    # no request is sent after this
    drain_timeout_s: float = 120.0     # after the last send, wait this long for running requests
    # each turn says when the session's next one comes (x-agent-expect-next-turn-s: the next
    # think time, 0 on the last turn), as a harness that knows its tool runs would
    agent_hints: bool = False


class _Budget:
    """Counts sends against max_requests and the deadline (one event loop, so no lock)."""

    def __init__(self, cfg: LoadConfig, t0: float) -> None:
        self.left = cfg.max_requests
        self.deadline = None if cfg.duration_s is None else t0 + cfg.duration_s

    def take(self) -> bool:
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            return False
        if self.left is not None:
            if self.left <= 0:
                return False
            self.left -= 1
        return True

    def exhausted(self) -> bool:
        return self.left == 0 or (self.deadline is not None and time.perf_counter() >= self.deadline)

    def sleep_allowed(self, seconds: float) -> float:
        """Shorten a sleep so it does not run past the deadline."""
        if self.deadline is None:
            return seconds
        return max(0.0, min(seconds, self.deadline - time.perf_counter()))


def planned_requests(workload: Workload, cfg: LoadConfig) -> int:
    n = workload.num_requests
    return n if cfg.max_requests is None else min(n, cfg.max_requests)


async def run_workload(workload: Workload, client: StreamingClient, cfg: LoadConfig,
                       on_done: Callable[[RequestSample], None] = lambda s: None) -> list[RequestSample]:
    """Send the workload; return one sample per request sent, in send order."""
    t0 = time.perf_counter()
    budget = _Budget(cfg, t0)
    samples: list[RequestSample] = []
    running: set[asyncio.Task] = set()

    async def session_task(session: Session, first_taken: bool) -> None:
        await _run_session(session, workload, client, budget, t0, samples, on_done, first_taken,
                           cfg.agent_hints)

    if cfg.concurrency is None:
        for session in sorted(workload.sessions, key=lambda s: s.arrival_s):
            wait = t0 + session.arrival_s - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(budget.sleep_allowed(wait))
            if not budget.take():   # the session's first send, taken here so no task outruns the budget
                break
            task = asyncio.create_task(session_task(session, first_taken=True))
            running.add(task)
            task.add_done_callback(running.discard)
        pending = set(running)
    else:
        queue = list(workload.sessions)
        queue.reverse()

        async def worker() -> None:
            while queue and not budget.exhausted():
                await session_task(queue.pop(), first_taken=False)

        pending = {asyncio.create_task(worker()) for _ in range(max(1, cfg.concurrency))}
    if pending:
        await _drain(pending, budget, cfg.drain_timeout_s)
    samples.sort(key=lambda s: s.start)
    return samples


async def _drain(tasks: set[asyncio.Task], budget: _Budget, drain_timeout_s: float) -> None:
    """Wait for tasks; once no more sends are allowed, give them drain_timeout_s, then cancel."""
    while tasks:
        limit = None
        if budget.deadline is not None:
            limit = max(0.0, budget.deadline - time.perf_counter()) + drain_timeout_s
        done, tasks = await asyncio.wait(tasks, timeout=limit)
        if tasks and limit is not None:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return


async def _run_session(session: Session, workload: Workload, client: StreamingClient,
                       budget: _Budget, t0: float, samples: list[RequestSample],
                       on_done: Callable[[RequestSample], None], first_taken: bool,
                       agent_hints: bool = False) -> None:
    history = list(session.base_messages)
    affinity = {"x-session-affinity": session.session_id} if session.affinity else {}
    prev: RequestSample | None = None
    prev_text = ""
    for k, turn in enumerate(session.turns):
        if k > 0:
            if budget.exhausted():
                return
            if turn.think_time_s > 0:
                await asyncio.sleep(budget.sleep_allowed(turn.think_time_s))
            history.append({"role": "assistant", "content": prev_text})
            history.extend(turn.new_messages)
        if not (k == 0 and first_taken) and not budget.take():
            return
        sample = RequestSample(request_id=turn.request_id, session_id=session.session_id,
                               tenant=session.tenant, turn=k,
                               expected_prompt_tokens=turn.expected_prompt_tokens,
                               expected_output_tokens=turn.max_tokens,
                               ideal_cached_tokens=turn.ideal_cached_tokens)
        body = client.build_body(turn.max_tokens, prompt_ids=turn.prompt_token_ids,
                                 messages=None if workload.uses_token_ids else list(history),
                                 tools=list(session.tools) if session.tools else None)
        samples.append(sample)
        headers = dict(affinity)
        if agent_hints:
            following = session.turns[k + 1].think_time_s if k + 1 < len(session.turns) else 0.0
            headers[AGENT_HINT_HEADER] = f"{following:.3f}"
        try:
            reply = await client.send(body, sample, t0, headers or None)
        except asyncio.CancelledError:
            sample.error = "cancelled: still running at the end of the run"
            sample.end = time.perf_counter() - t0
            on_done(sample)
            raise
        if not workload.uses_token_ids:
            sample.ideal_cached_tokens = chat_ideal_cached_tokens(sample, turn.expected_prompt_tokens, prev)
        on_done(sample)
        if not sample.ok:
            return   # a session cannot go on without its answer
        prev, prev_text = sample, reply.text


def chat_ideal_cached_tokens(sample: RequestSample, planned_prompt: int, prev: RequestSample | None) -> int:
    """Ideal hits in the server's own tokens, from usage.

    Turn k > 0: everything the previous turn sent and generated, minus its last token
    (whose KV is never computed). Turn 0: the planned fraction (tenant prefix) of the prompt.
    """
    if sample.prompt_tokens <= 0:
        return sample.ideal_cached_tokens
    if prev is None:
        fraction = sample.ideal_cached_tokens / planned_prompt if planned_prompt else 0.0
        return int(fraction * sample.prompt_tokens)
    return max(0, min(sample.prompt_tokens - 1, prev.prompt_tokens + prev.completion_tokens - 1))
