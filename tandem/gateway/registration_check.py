"""What the gateway checks before it accepts a worker's first registration (POST
/internal/register from a worker it does not know yet; later heartbeats are not checked again).

1. Loopback: a worker advertising 127.0.0.0/8, ::1 or `localhost` can be reached only from its
   own host. A gateway bound to a non-loopback address serves several hosts, so such an address
   is refused at once, unless `allow_loopback_workers` (`--allow-loopback-workers`: one host, a
   gateway bound to 0.0.0.0 for its clients). A gateway bound to loopback accepts them.
2. Reachability: the gateway GETs the advertised URL's /health (any HTTP answer will do: a
   worker that drains answers 503, yet is there) within `register_probe_timeout_s` (1.5 s:
   under the worker's 2 s heartbeat timeout, so the worker hears the verdict; a refused
   connection is tried again meanwhile, since a worker's first heartbeat may leave just before
   its server listens); no answer in that time (refused, unresolvable, a firewall dropping
   packets) refuses the registration. 0 turns the probe off.

A refusal is `RegistrationRefused` (400, param "url", code `advertised_loopback` or
`worker_unreachable`), whose message names the address and what to fix. The worker logs it as an
error and keeps beating (tandem/worker/registration.py): a route or firewall fixed later lets
it in without a restart.
"""

from __future__ import annotations

import asyncio
import ipaddress
from urllib.parse import urlsplit

from tandem.errors import RegistrationRefused
from tandem.gateway.config import RegistryConfig
from tandem.gateway.worker_client import WorkerHTTP
from tandem.http.client import ConnectFailed, HTTPFailure


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_refusal(worker_url: str, gateway_host: str, allow: bool) -> str | None:
    """Why a worker advertising `worker_url` may not join a gateway bound to `gateway_host`;
    None when it may."""
    host = urlsplit(worker_url).hostname
    if allow or not is_loopback(host) or is_loopback(gateway_host):
        return None
    return (f"worker address {worker_url} is a loopback address, which this gateway (bound to "
            f"{gateway_host}, serving several hosts) cannot reach: start the worker with "
            "--advertise-url http://ADDR:PORT, ADDR an address of its host that the gateway can "
            "reach (or start the gateway with --allow-loopback-workers when both run on one host)")


class RegistrationCheck:
    def __init__(self, config: RegistryConfig, gateway_host: str, http: WorkerHTTP) -> None:
        self.config = config
        self.gateway_host = gateway_host
        self.http = http

    async def check(self, worker_url: str) -> None:
        """Raises RegistrationRefused when the worker may not join."""
        why = loopback_refusal(worker_url, self.gateway_host, self.config.allow_loopback_workers)
        if why is not None:
            raise RegistrationRefused(why, "advertised_loopback")
        timeout_s = self.config.register_probe_timeout_s
        if timeout_s <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            # a refused connection is tried again until the deadline: a worker's first heartbeat
            # leaves from its start-up hook, which may run just before its server listens
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    async with self.http.stream("GET", worker_url, "/health", b"", timeout_s) as r:
                        await r.read()
                return
            except ConnectFailed as exc:
                if loop.time() + 0.1 >= deadline:
                    raise self._unreachable(worker_url, exc) from None
                await asyncio.sleep(0.1)
            except (HTTPFailure, TimeoutError, OSError) as exc:
                raise self._unreachable(worker_url, exc) from None

    def _unreachable(self, worker_url: str, exc: Exception) -> RegistrationRefused:
        return RegistrationRefused(
            f"the gateway cannot reach worker address {worker_url} (GET {worker_url}/health: "
            f"{str(exc) or type(exc).__name__}, {self.config.register_probe_timeout_s:g} s "
            "allowed): advertise an address this gateway can reach (tandem serve --advertise-url), "
            "and check routes and firewalls between the two hosts", "worker_unreachable")
