"""Grammar compiles at the async front, in the helper process: a long compile holds up neither a
plain request nor one whose grammar is cached (the engine thread never waits for a compile),
its request going kills it, one past the timeout is a 400 naming the limit before any delta, and
the engine's shutdown ends the helper."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from tandem.config import GrammarConfig
from tandem.engine.async_engine import AsyncEngine
from tandem.engine.engine import Engine
from tandem.errors import InvalidRequest
from tandem.types import GrammarSpec
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request
from tests.grammar.test_compile_process import QUICK, SLOW, gone


async def _collect(front, req):
    return [d async for d in front.generate(req)]


async def _compiling(front) -> int:
    """The pid of the compile child, once one runs."""
    for _ in range(12_000):   # the helper's first start imports xgrammar: seconds
        process = front.engine.grammars.process
        if process is not None and process.child_pid is not None:
            return process.child_pid
        await asyncio.sleep(0.01)
    raise AssertionError("no compile started")


def _run(llama_dir, timeout_s: float, body) -> None:
    async def main():
        config = engine_config(llama_dir, grammar=GrammarConfig(compile_timeout_s=timeout_s))
        front = AsyncEngine(config, engine=Engine.from_config(config))
        await front.start()
        try:
            await body(front)
            await asyncio.sleep(0.2)   # aborts land at the next steps
            assert_all_blocks_free(front.engine)
            helper = front.engine.grammars.process.pid
        finally:
            await front.shutdown()
        assert gone(helper)   # shut down with the engine
    asyncio.run(asyncio.wait_for(main(), 300))


def test_a_long_compile_holds_up_no_other_request_and_goes_with_its_request(llama_dir):
    async def body(front):
        await asyncio.wait_for(_collect(front, request(prompts(1, seed=1)[0], grammar=QUICK)), 120)
        slow = asyncio.ensure_future(_collect(front, request(prompts(1, seed=2)[0], grammar=SLOW)))
        child = await _compiling(front)
        plain = await asyncio.wait_for(_collect(front, request(prompts(1, seed=3)[0], max_tokens=8)), 60)
        cached = await asyncio.wait_for(
            _collect(front, request(prompts(1, seed=4)[0], max_tokens=4, grammar=QUICK)), 60)
        assert sum(len(d.new_token_ids) for d in plain) == 8 and plain[-1].finished
        assert cached[-1].finished
        assert not slow.done() and not gone(child)   # still compiling all along
        slow.cancel()                                # the client went
        await asyncio.gather(slow, return_exceptions=True)
        for _ in range(200):
            if gone(child):
                break
            await asyncio.sleep(0.05)
        assert gone(child) and front.engine.grammars.cached(SLOW) is None
        assert front.engine.grammars.process.starts == 1
        nice = await asyncio.get_running_loop().run_in_executor(   # the compile thread yields
            front.engine.grammars.executor, os.getpriority, os.PRIO_PROCESS, 0)
        assert nice > os.getpriority(os.PRIO_PROCESS, 0) or nice == 19
    _run(llama_dir, 600.0, body)


def test_a_compile_past_the_timeout_fails_its_request_before_any_delta(llama_dir):
    async def body(front):
        with pytest.raises(InvalidRequest, match="--grammar-compile-timeout"):
            await _collect(front, request(prompts(1, seed=5)[0], grammar=SLOW))
        out = await asyncio.wait_for(_collect(front, request(prompts(1, seed=6)[0], grammar=GrammarSpec(
            "choice", '["yes", "no"]'), ignore_eos=False)), 60)
        assert "".join(d.new_text for d in out) in ("yes", "no")
    _run(llama_dir, 1.0, body)



def _children() -> set[int]:
    pids: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            pids.update(int(p) for p in f.read().split())
    return pids


def test_a_helper_started_before_the_load_is_the_one_the_trials_use(llama_dir):
    async def main():
        config = engine_config(llama_dir, grammar=GrammarConfig(compile_timeout_s=600.0))
        front = AsyncEngine(config)   # start() loads the engine: the helper imports meanwhile
        before = _children()
        front.prepare_grammars()
        (helper,) = _children() - before
        await front.start()
        try:
            front.warm_grammars()
            out = await asyncio.wait_for(_collect(front, request(prompts(1, seed=7)[0], grammar=QUICK)), 120)
            assert out[-1].finished
            process = front.engine.grammars.process
            assert process.pid == helper and process.starts == 1
        finally:
            await front.shutdown()
        assert gone(helper)
    asyncio.run(asyncio.wait_for(main(), 300))


def test_a_helper_started_before_a_load_that_fails_is_stopped(tmp_path):
    async def main():
        config = engine_config(tmp_path, grammar=GrammarConfig(compile_timeout_s=600.0))   # no model
        front = AsyncEngine(config)
        before = _children()
        front.prepare_grammars()
        (helper,) = _children() - before
        with pytest.raises(Exception):
            await front.start()
        return helper
    helper = asyncio.run(asyncio.wait_for(main(), 120))
    for _ in range(100):
        if gone(helper):
            break
        time.sleep(0.05)
    assert gone(helper)
