"""A submitter cancelled before the engine thread took its request (a client gone, a queued job
preempted) must neither kill the engine thread nor leave its request running."""

import asyncio

from tandem.engine.async_engine import AsyncEngine
from tandem.engine.engine import Engine
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request


async def _collect(front, req):
    return [d async for d in front.generate(req)]


def test_cancelled_submissions_leave_the_engine_serving(llama_dir):
    async def main():
        config = engine_config(llama_dir)
        front = AsyncEngine(config, engine=Engine.from_config(config))
        await front.start()
        try:
            busy = asyncio.ensure_future(_collect(front, request(prompts(1, seed=1)[0], max_tokens=60)))
            await asyncio.sleep(0.05)
            for i in range(12):   # cancelled at every point from "just queued" to "just accepted"
                t = asyncio.ensure_future(_collect(front, request(prompts(1, seed=2 + i)[0],
                                                                 max_tokens=40)))
                for _ in range(i % 4):
                    await asyncio.sleep(0)
                t.cancel()
                await asyncio.gather(t, return_exceptions=True)
            assert front._thread.is_alive()
            out = await asyncio.wait_for(_collect(front, request(prompts(1, seed=99)[0], max_tokens=3)), 30)
            assert out[-1].finished and sum(len(d.new_token_ids) for d in out) == 3
            await busy
            for _ in range(50):   # aborts of the cancelled ones land at the next steps
                if front.stats().num_running == front.stats().num_waiting == 0:
                    break
                await asyncio.sleep(0.05)
            assert (front.stats().num_running, front.stats().num_waiting) == (0, 0)
            await asyncio.sleep(0.1)
            assert_all_blocks_free(front.engine)
        finally:
            await front.shutdown()
    asyncio.run(asyncio.wait_for(main(), 120))
