"""Polls every worker: health and load from /internal/stats, cache contents from /internal/kv_events.

Every `poll_interval_s` each worker whose previous poll has ended is polled again, each on its
own (a dead worker's slow polls do not delay the others'); `poll_once` polls all and waits (start-up,
tests). A worker that
turns unhealthy, restarts (its stats' `instance_id` changes) or expires loses its prefix-index
entries and load correction, and its event stream restarts from `since=0` (the worker answers
with a full resync).

A vanished host (link down, machine gone: packets lost, nothing refused) must not hold requests
until their read timeout: a probe that cannot connect makes the worker unhealthy at once (a
busy worker still accepts connections; its slow answers count toward `unhealthy_after`), and
a worker given up for any reason has its connections aborted (`on_lost`, the HTTP client's
`abort`), so calls waiting on it fail now and their requests are retried or migrated.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import orjson

from tandem.gateway.registry import Registry, Worker
from tandem.gateway.worker_client import WorkerHTTP
from tandem.http.client import ConnectFailed, HTTPFailure
from tandem.router.load_tracker import LoadTracker
from tandem.router.prefix_index import PrefixIndex
from tandem.router.routed_prefixes import RoutedPrefixes

log = logging.getLogger(__name__)


class Monitor:
    def __init__(self, registry: Registry, index: PrefixIndex, tracker: LoadTracker,
                 http: WorkerHTTP, clock: Callable[[], float] = time.monotonic,
                 on_lost: Callable[[str], object] = lambda url: None,
                 routed: RoutedPrefixes | None = None) -> None:
        self.registry = registry
        self.index = index
        self.routed = routed     # the router's prompts sent lately, forgotten with the worker
        self.tracker = tracker
        self.http = http
        self.clock = clock
        self.on_lost = on_lost   # a worker given up: close its connections (calls on them fail now)

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.registry.config.poll_interval_s
        polls: dict[str, asyncio.Task] = {}     # worker url -> its poll in flight
        try:
            while not stop.is_set():
                try:
                    self._expire()
                    for w in self.registry.all():
                        if w.url not in polls:
                            task = asyncio.ensure_future(self._poll_logged(w))
                            polls[w.url] = task
                            task.add_done_callback(lambda t, url=w.url: polls.pop(url, None))
                except Exception:  # a bug here must not stop health checking
                    log.exception("worker poll round failed")
                try:
                    await asyncio.wait_for(stop.wait(), interval)
                except TimeoutError:
                    pass
        finally:
            for task in list(polls.values()):
                task.cancel()
            await asyncio.gather(*polls.values(), return_exceptions=True)

    async def _poll_logged(self, w: Worker) -> None:
        try:
            await self.poll_worker(w)
        except Exception:  # a bug here must not stop health checking
            log.exception("poll of worker %s failed", w.url)

    async def poll_once(self) -> None:
        """Expire silent workers, poll every worker, wait for all the polls."""
        self._expire()
        await asyncio.gather(*(self.poll_worker(w) for w in self.registry.all()))

    def _expire(self) -> None:
        for w in self.registry.expire(self.clock()):
            log.warning("worker %s stopped sending heartbeats; removed", w.url)
            self.forget(w.url)

    def forget(self, url: str) -> None:
        """Give a worker up (unhealthy, expired, gone, restarted): its cache and load entries go,
        and its connections are aborted."""
        self.index.clear(url)
        if self.routed is not None:
            self.routed.forget(url)
        self.tracker.forget(url)
        self.on_lost(url)

    async def _get_json(self, url: str, path: str) -> tuple[int, object]:
        """(status, parsed JSON body or None when the status is not 2xx)."""
        async with self.http.stream("GET", url, path, b"",
                                    self.registry.config.probe_timeout_s) as r:
            body = await r.read()
            return r.status, (orjson.loads(body) if 200 <= r.status < 300 else None)

    async def poll_worker(self, w: Worker) -> None:
        polled_at = self.tracker.now()
        role_seq = w.role_seq
        try:
            status, stats = await self._get_json(w.url, "/internal/stats")
            failure = None if isinstance(stats, dict) else f"/internal/stats answered {status}" + (
                " (the worker refused the gateway's cluster secret)" if status in (401, 403) else "")
        except ConnectFailed as exc:   # refused, or the host does not answer: gone, not busy
            if self.registry.mark_dead(w.url):
                log.warning("worker %s is unhealthy: %s", w.url, exc)
                self.forget(w.url)
            return
        except (HTTPFailure, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
            failure = str(exc)
        if failure is not None:
            if self.registry.poll_failed(w.url):
                log.warning("worker %s is unhealthy after %d failed polls: %s",
                            w.url, w.failures, failure)
                self.forget(w.url)
            return
        if w.role_seq != role_seq:
            return   # a role switch began or ended while we waited: this reply may predate it
        was_healthy = w.healthy
        old_instance = w.stats.get("instance_id")
        if old_instance is not None and stats.get("instance_id") != old_instance:
            self.forget(w.url)   # restarted (between two polls, or while unhealthy): its cache is new
            w.kv_since = 0
            w.restarts += 1
            self.registry.undrain(w.url)   # a drain was for the old instance (a planner's role switch)
            log.warning("worker %s is a new instance (restart %d)", w.url, w.restarts)
        self.registry.poll_ok(w.url, stats, self.clock())
        if not was_healthy and w.healthy:
            log.info("worker %s (%s) is healthy", w.url, w.role)
        self.tracker.report(w.url, int(stats.get("waiting_prefill_tokens", 0)),
                            int(stats.get("running_context_tokens", 0)), polled_at)
        await self.poll_events(w)

    async def poll_events(self, w: Worker) -> None:
        epoch = w.epoch
        try:
            _, reply = await self._get_json(w.url, f"/internal/kv_events?since={w.kv_since}")
        except (HTTPFailure, ValueError):
            return  # the stats poll judges health; events are retried next round
        if not isinstance(reply, dict):
            return  # 404: a worker without prefix caching events (prefix routing sees nothing there)
        if w.epoch != epoch or self.registry.get(w.url) is not w:
            return  # it went unhealthy or left while we waited: this reply is stale
        w.kv_since = self.index.apply(w.url, reply)
