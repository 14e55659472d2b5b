"""A worker registering itself with a gateway: `tandem serve --gateway URL` announces itself and
keeps alive (the gateway's side is tandem.gateway.app's /internal/register).

Use from the worker app's lifespan:

    hb = Heartbeat(HeartbeatConfig(gateway_url=cfg.gateway_url,
                                   worker_url=advertised_url(cfg.host, cfg.port), role=engine.role))
    await hb.start()     # after the engine is ready: the gateway starts routing at once
    ...
    await hb.stop()      # deregisters (best effort) and stops the loop

Every call presents the cluster secret (`x-tandem-cluster-secret`, tandem/cluster_secret.py) when
the worker has one: a gateway with a secret refuses registrations without it (401), and tenant API
keys never open /internal routes (403).

Several gateways (`--gateway URL1,URL2`): one Heartbeat per gateway, each on its own.

Protocol (gateway side: tandem.gateway.app): `POST {gateway}/internal/register` with
{"url", "role", "draining"} every `interval_s` (the gateway's reply may set
`heartbeat_interval_s`); `POST {gateway}/internal/deregister` {"url"} on stop. A gateway that
is down or restarts is retried forever: the next heartbeat registers the worker again.
A gateway refuses a first registration whose address it cannot use (a loopback address on a
gateway serving several hosts, or one its probe of `{url}/health` cannot reach:
tandem/gateway/registration_check.py) with a 400 naming the address; the worker logs it as an
error (`refusal` keeps it) and tries again each interval, so fixing the network lets it in.

The role in a heartbeat is the one the worker started with. A worker whose role the gateway's
planner switched at runtime (POST /internal/role, tandem/api/internal/role_switch.py) reports
its current role, and a switch under way, in /internal/stats, which the gateway polls and prefers
to the heartbeat's (tandem/gateway/registry.py); a restarted gateway learns it at its first poll,
before it routes anything to the worker.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass, field

import httpx

from tandem import cluster_secret

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeartbeatConfig:
    gateway_url: str
    worker_url: str            # how the gateway reaches this worker
    role: str                  # both | prefill | decode
    interval_s: float = 2.0    # until the gateway says otherwise
    timeout_s: float = 2.0
    cluster_secret: str | None = field(default=None, repr=False)  # the gateway's --cluster-secret


def advertised_url(host: str, port: int) -> str:
    """This worker's URL for others: a wildcard bind address becomes the host name."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _error_message(r: httpx.Response) -> str:
    try:
        return str(r.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return r.text[:500]


def gateway_urls(flag: str) -> list[str]:
    """`--gateway URL[,URL...]`: every gateway of the cluster; a worker registers with each (a
    gateway knows only the workers that registered with it, so one behind a load balancer
    would see heartbeats reach only some of them)."""
    urls = [u.strip() for u in flag.split(",") if u.strip()]
    if not urls:
        raise ValueError(f"--gateway {flag!r}: give a gateway URL (several separated by commas)")
    return urls


class Heartbeat:
    def __init__(self, config: HeartbeatConfig) -> None:
        self.config = config
        self._gateway = config.gateway_url.rstrip("/")
        if "://" not in self._gateway:
            self._gateway = "http://" + self._gateway
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._client: httpx.AsyncClient | None = None
        self.registered = asyncio.Event()   # set after the first accepted heartbeat
        self.draining = False
        self.refusal: str | None = None    # the gateway's last refusal of this address, if any

    async def start(self) -> None:
        self._client = httpx.AsyncClient(timeout=self.config.timeout_s,
                                         headers=cluster_secret.headers(self.config.cluster_secret))
        self._task = asyncio.create_task(self._run())

    async def beat(self) -> float | None:
        """One registration; returns the interval the gateway asks for, None if it failed."""
        assert self._client is not None
        body = {"url": self.config.worker_url, "role": self.config.role, "draining": self.draining}
        try:
            r = await self._client.post(f"{self._gateway}/internal/register", json=body)
            if r.status_code in (401, 403):
                log.warning("gateway %s refused the registration (%d): this worker's cluster secret "
                            "is missing or not the gateway's", self._gateway, r.status_code)
                return None
            if r.status_code == 400 and not self.registered.is_set():
                # the gateway refused this address (tandem/gateway/registration_check.py): said
                # loudly, then retried each interval (a route or firewall may be fixed meanwhile)
                log.error("gateway %s refused to register this worker: %s", self._gateway,
                          _error_message(r))
                self.refusal = _error_message(r)
                return None
            r.raise_for_status()
            reply = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("heartbeat to %s failed: %s", self._gateway, exc)
            return None
        self.refusal = None
        if not self.registered.is_set():
            log.info("registered with gateway %s as %s (%s)", self._gateway,
                     self.config.worker_url, self.config.role)
            self.registered.set()
        return float(reply.get("heartbeat_interval_s") or self.config.interval_s)

    async def _run(self) -> None:
        interval = self.config.interval_s
        while not self._stop.is_set():
            interval = await self.beat() or self.config.interval_s
            try:
                await asyncio.wait_for(self._stop.wait(), interval)
            except asyncio.TimeoutError:
                pass

    async def drain(self) -> None:
        """Ask the gateway to send no new requests here (finishing ones continue)."""
        self.draining = True
        if self._client is not None and not self._stop.is_set():
            await self.beat()

    async def stop(self) -> None:
        """Deregister and stop beating; idempotent (the drain leaves first, shutdown again)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if self._client is not None:
            try:
                await self._client.post(f"{self._gateway}/internal/deregister",
                                        json={"url": self.config.worker_url})
            except httpx.HTTPError:
                pass  # the gateway expires us after its heartbeat TTL anyway
            await self._client.aclose()
