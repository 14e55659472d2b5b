"""One child process of `tandem up`: its name, command line, URL, cores and role."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcSpec:
    name: str
    cmd: tuple[str, ...]
    url: str
    cores: tuple[int, ...] | None   # None: not pinned
    role: str | None = None         # worker role; None for the gateway
