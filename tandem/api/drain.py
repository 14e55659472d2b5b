"""A worker that drains before it stops (tandem/worker/drain.py runs the sequence on SIGTERM):
its HTTP side.

While `DrainState.draining` is set, a new generation call (POST to /v1/..., /internal/generate,
Workers AI's /client/v4/...) is answered 503 (code `worker_draining`, in the route's own error
envelope) at once: a gateway retries it on
another worker, a client may too. Everything else is still served: /internal/stats (which
reports `draining`, so a gateway sends nothing new), /internal/kv_release (a gateway freeing
this worker's handed-over blocks), /health (503 "draining", for load balancers), /metrics.
The gate counts generation calls in flight (admitted and not yet answered to the end), so the
drain knows when the last stream has finished.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tandem.api.errors import error_response_for_path
from tandem.errors import NoHealthyWorker

GENERATION_PREFIXES = ("/v1/", "/internal/generate", "/client/v4/")


@dataclass
class DrainState:
    draining: bool = False
    in_flight: int = 0        # generation calls admitted and not yet answered to the end


class WorkerDraining(NoHealthyWorker):
    code = "worker_draining"

    def __init__(self) -> None:
        super().__init__("this worker is draining before it stops; send the request to another one")


class DrainGate:
    """ASGI middleware: refuse new generation calls while draining; count the ones in flight."""

    def __init__(self, app: ASGIApp, state: DrainState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" \
                or not scope["path"].startswith(GENERATION_PREFIXES):
            await self.app(scope, receive, send)
            return
        if self.state.draining:
            await error_response_for_path(scope["path"], WorkerDraining())(scope, receive, send)
            return
        self.state.in_flight += 1
        done = False

        async def counted_send(message: Message) -> None:
            nonlocal done
            if message["type"] == "http.response.body" and not message.get("more_body", False) \
                    and not done:
                done = True
                self.state.in_flight -= 1
            await send(message)

        try:
            await self.app(scope, receive, counted_send)
        finally:
            if not done:
                done = True
                self.state.in_flight -= 1
