"""SIGTERM's drain (tandem/worker/drain.py) and the server that runs it (tandem/worker/server.py)."""

import asyncio
import signal
import socket

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tandem.worker.drain import DrainConfig, WorkerDrain
from tandem.worker.server import DrainingServer


def test_drain_begins_waits_for_idle_twice_then_leaves():
    calls, looks = [], iter([False, True, False, True, True, True])

    async def begin():
        calls.append("begin")

    async def leave():
        calls.append("leave")

    def idle():
        calls.append("idle")
        return next(looks)

    drained = asyncio.run(WorkerDrain(DrainConfig(timeout_s=5, poll_s=0.001), begin, idle, leave).run())
    # a single idle look between two busy ones is not enough: a call may have been admitted
    assert drained and calls == ["begin", "idle", "idle", "idle", "idle", "idle", "leave"]


def test_drain_that_times_out_still_leaves():
    calls = []

    async def note(what):
        calls.append(what)

    drained = asyncio.run(WorkerDrain(DrainConfig(timeout_s=0.05, poll_s=0.01), lambda: note("begin"),
                                      lambda: False, lambda: note("leave")).run())
    assert not drained and calls == ["begin", "leave"]


def test_first_sigterm_drains_while_serving_second_stops_at_once():
    busy = {"n": 1}
    log = []

    async def hello(request):
        return PlainTextResponse("ok")

    async def begin():
        log.append("begin")

    async def leave():
        log.append("leave")

    async def main():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        drain = WorkerDrain(DrainConfig(timeout_s=10, poll_s=0.01), begin, lambda: busy["n"] == 0, leave)
        server = DrainingServer(uvicorn.Config(Starlette(routes=[Route("/", hello)]), host="127.0.0.1",
                                               port=port, log_level="error"), drain)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        server.handle_exit(signal.SIGTERM, None)
        await asyncio.sleep(0.3)
        async with httpx.AsyncClient() as c:   # still serving while it drains
            assert (await c.get(f"http://127.0.0.1:{port}/")).status_code == 200
        assert not task.done() and log == ["begin"]
        busy["n"] = 0
        await asyncio.wait_for(task, 10)
        assert log == ["begin", "leave"]

        # a second SIGTERM while draining is uvicorn's own immediate shutdown (only the flag is
        # checked here: uvicorn re-raises the signals it handled once it has stopped)
        server = DrainingServer(uvicorn.Config(Starlette(), log_level="error"), drain)
        server._loop = asyncio.get_running_loop()
        server.handle_exit(signal.SIGTERM, None)
        assert not server.should_exit
        server.handle_exit(signal.SIGTERM, None)
        assert server.should_exit
        server._captured_signals.clear()

    asyncio.run(main())
