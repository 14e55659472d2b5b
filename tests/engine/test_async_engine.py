"""The async front: streams, concurrent requests, errors before the first delta, abort on cancel."""

import asyncio

import pytest

from tandem.engine.async_engine import AsyncEngine
from tandem.engine.engine import Engine
from tandem.errors import PromptTooLong
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import hf_greedy, prompts, request


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def _started(model_dir, **kw):
    config = engine_config(model_dir, **kw)
    front = AsyncEngine(config, engine=Engine.from_config(config))
    await front.start()
    return front


async def _collect(front, req):
    return [d async for d in front.generate(req)]


def test_concurrent_streams_match_reference(llama_dir):
    async def main():
        front = await _started(llama_dir)
        try:
            ps = prompts(6, seed=20)
            reqs = [request(p, max_tokens=7) for p in ps]
            outs = await asyncio.gather(*(_collect(front, r) for r in reqs))
            for p, deltas in zip(ps, outs):
                assert [t for d in deltas for t in d.new_token_ids] == hf_greedy(llama_dir, p, 7)
                assert deltas[-1].finished and sum(d.finished for d in deltas) == 1
                assert deltas[-1].timings.first_token >= deltas[-1].timings.arrival
            await asyncio.sleep(0.1)
            assert_all_blocks_free(front.engine)
        finally:
            await front.shutdown()
    _run(main())


def test_bad_request_raises_before_first_delta(llama_dir):
    async def main():
        front = await _started(llama_dir, num_blocks=8)
        try:
            with pytest.raises(PromptTooLong):
                await _collect(front, request([5] * 100))
            assert front.stats().num_waiting == 0
        finally:
            await front.shutdown()
    _run(main())


def test_abandoned_stream_is_aborted_and_frees_blocks(llama_dir):
    async def main():
        front = await _started(llama_dir)
        try:
            gen = front.generate(request(prompts(1, seed=21)[0], max_tokens=500))
            first = await gen.__anext__()
            assert not first.finished
            await gen.aclose()
            for _ in range(100):
                await asyncio.sleep(0.02)
                if not front.engine.requests:
                    break
            assert_all_blocks_free(front.engine)
        finally:
            await front.shutdown()
    _run(main())
