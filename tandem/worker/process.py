"""A worker process: its engine behind the HTTP API, started and stopped with the app.

The app's lifespan starts the engine (and, registered with a gateway, the heartbeat once the
engine is ready) and stops them in the reverse order; uvicorn serves until SIGINT, or until
SIGTERM's drain has let the running requests finish.
"""

from __future__ import annotations

import gc

import uvicorn

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.queue.service import QueueConfig, QueueSetup, engine_headroom
from tandem.compute_threads import compute_alone
from tandem.engine.async_engine import AsyncEngine
from tandem.tokenization.tokenizer import warm_chat_template
from tandem.worker.drain import DrainConfig, WorkerDrain
from tandem.worker.registration import Heartbeat, HeartbeatConfig, advertised_url, gateway_urls
from tandem.worker.server import DrainingServer


def lifecycle(engine, config: ServerConfig, freeze_heap: bool = False,
              beats: list[Heartbeat] | None = None, warm_grammars: bool = False):
    """The app's startup/shutdown hooks: the engine, and with --gateway the heartbeat, which
    starts once the engine is ready (into `beats`, for the drain) and deregisters before the
    engine stops. `warm_grammars`: the grammar compile process starts before the engine loads and
    reads the vocabulary once it is up (it takes seconds, which the first request with a grammar
    would otherwise wait). `freeze_heap` (the
    worker process's own entry point): once the engine is up, everything allocated so far (torch,
    the model, the engine) lives as long as the process, so it leaves the garbage collector's
    full passes, which would otherwise walk ~10^5 objects (~80 ms, measured at start-up) between
    two decode steps."""

    async def start_engine() -> None:
        if warm_grammars:
            engine.prepare_grammars()   # its helper imports xgrammar while the weights load
        await engine.start()
        warm_chat_template(engine.tokenizer)
        if warm_grammars:
            engine.warm_grammars()
        if freeze_heap:
            gc.collect()
            gc.freeze()

    if config.gateway_url is None:
        return start_engine, engine.shutdown

    beats = [] if beats is None else beats

    async def startup() -> None:
        await start_engine()
        for gateway in gateway_urls(config.gateway_url):   # each gateway of the cluster
            hb = Heartbeat(HeartbeatConfig(
                gateway_url=gateway, role=engine.role,
                worker_url=config.advertise_url or advertised_url(config.host, config.port),
                cluster_secret=config.cluster_secret))
            await hb.start()
            beats.append(hb)

    async def shutdown() -> None:
        for hb in beats:
            await hb.stop()
        await engine.shutdown()

    return startup, shutdown


def run_worker(engine: AsyncEngine, config: ServerConfig, queue: QueueConfig | None,
               drain: DrainConfig = DrainConfig()) -> None:
    """Serve `engine` on config.host:config.port until the process is told to stop; with `queue`,
    the app also serves the asynchronous batch API, taking work while the engine has headroom.
    The first SIGTERM drains (tandem/worker/drain.py): no new requests, the running ones finish,
    the worker leaves its gateway, then the process exits; a second one stops it at once."""
    compute_alone()   # this thread serves HTTP; the engine thread's OpenMP team is the only one
    beats: list[Heartbeat] = []
    startup, shutdown = lifecycle(engine, config, freeze_heap=True, beats=beats, warm_grammars=True)
    setup = None if queue is None else QueueSetup(queue, engine_headroom(engine, queue))
    app = build_app(engine, config, startup=startup, shutdown=shutdown, queue=setup)
    draining = worker_drain(app.state.ctx.drain, engine, beats, drain)
    # loop="auto" takes uvloop and http="auto" httptools when they are installed.
    DrainingServer(uvicorn.Config(app, host=config.host, port=config.port, loop="auto", http="auto",
                                  log_level=config.log_level, access_log=config.access_log,
                                  timeout_graceful_shutdown=5), draining).run()


def worker_drain(state, engine, beats: list[Heartbeat], config: DrainConfig) -> WorkerDrain:
    """SIGTERM's drain (tandem/worker/drain.py) over this worker: `state` is the app's DrainState
    (tandem/api/drain.py), `beats` its heartbeat once started."""

    async def begin() -> None:
        state.draining = True
        for hb in beats:
            await hb.drain()

    def idle() -> bool:
        s = engine.stats()
        return (state.in_flight == 0 and s.num_running == 0 and s.num_waiting == 0
                and s.num_blocks_free == s.num_blocks_total)

    async def leave() -> None:
        for hb in beats:
            await hb.stop()

    return WorkerDrain(config, begin, idle, leave)
