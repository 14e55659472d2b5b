"""A CPU worker keeps one OpenMP team, the engine thread's (tandem/compute_threads.py): its other
threads compute alone and give back the team they started."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

from tandem.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig
from tandem.engine.async_engine import AsyncEngine
from tandem.types import EngineRequest, SamplingParams

# a fresh interpreter: the test process's own threads have OpenMP teams of their own already
_TEAM_FREED = textwrap.dedent("""
    import os, threading, torch
    from tandem.compute_threads import compute_alone

    def tasks():
        return len(os.listdir("/proc/self/task"))

    def big_op():   # torch splits an element-wise op this large across its threads
        (torch.ones(4_000_000) * 2).sum()

    out = {}
    def helper():
        torch.set_num_threads(2)
        big_op()
        with_team = tasks()
        out["alone"] = compute_alone()
        out["freed"] = with_team - tasks()
        big_op()
        out["after_op"] = with_team - tasks()
        out["own_count"] = torch.get_num_threads()
    t = threading.Thread(target=helper)
    t.start(); t.join()
    fresh = []
    t = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
    t.start(); t.join()
    print(out["alone"], out["freed"], out["after_op"], out["own_count"], fresh[0])
""")


def test_a_thread_that_computes_alone_gives_back_its_team():
    done = subprocess.run([sys.executable, "-c", _TEAM_FREED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    alone, freed, after_op, own_count, fresh = done.stdout.split()
    assert alone == "True"
    assert freed == "1"            # its team's one worker thread ended
    assert after_op == "1"         # its next parallel op started no team
    assert own_count == "1"
    assert fresh == "2"            # torch's count for new threads (the engine's) is untouched


def test_a_served_engine_loads_on_a_thread_that_then_computes_alone(llama_dir):
    cfg = EngineConfig(model=ModelConfig(path=str(llama_dir), dtype="float32", show_progress=False),
                       cache=CacheConfig(block_size=4, num_blocks=64),
                       scheduler=SchedulerConfig(max_num_batched_tokens=64), num_threads=2)

    async def run() -> tuple[int, list[int]]:
        import torch

        engine = AsyncEngine(cfg)
        await engine.start()
        try:
            # the default executor's idle thread, the one that loaded the engine, takes this call
            loader_count = await asyncio.to_thread(torch.get_num_threads)
            tokens = []
            async for delta in engine.generate(EngineRequest("r", list(range(5, 40)),
                                                             SamplingParams(max_tokens=4, temperature=0.0))):
                tokens += delta.new_token_ids
            return loader_count, tokens
        finally:
            await engine.shutdown()

    import torch

    before = torch.get_num_threads()
    try:
        loader_count, tokens = asyncio.run(run())
    finally:
        torch.set_num_threads(before)
    assert loader_count == 1
    assert len(tokens) == 4
