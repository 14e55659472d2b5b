"""One child process of `tandem up`: its name, command line, URL, cores, role and kind."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcSpec:
    name: str
    cmd: tuple[str, ...]
    url: str
    cores: tuple[int, ...] | None   # None: not pinned
    role: str | None = None         # worker role; None for the gateway (and the store)
    # "server": a tandem HTTP server (a worker, or the gateway when role is None); "store": the
    # Mooncake master (url mooncake://HOST:PORT; ready once it accepts TCP; its output discarded;
    # started first and stopped last)
    kind: str = "server"
