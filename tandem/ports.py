"""Free ports for children to bind soon: drawn below the kernel's ephemeral range.

Outgoing connections take their source ports from the ephemeral range, so a port chosen there
(bind to port 0) can be taken by one of them before the child binds it; the child then fails with
"address already in use". Every launcher of a listening child (workers, the gateway, the Mooncake
master, the tensor-parallel rendezvous) draws its ports here.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port(host: str = "127.0.0.1", avoid: set[int] = frozenset()) -> int:
    """A port free on `host` now, for a child to bind soon. Drawn below the kernel's ephemeral
    range where there is room (10000 up to its start): outgoing connections take their source
    ports from that range, and one of them could take a port chosen there before the child binds
    it (a worker then fails with "address already in use"). Else, a port the kernel picks."""
    low = _ephemeral_start()
    rng = random.SystemRandom()
    for _ in range(200):
        with socket.socket() as s:
            try:
                s.bind((host, rng.randrange(10000, low) if low > 11000 else 0))
            except OSError:
                continue     # in use
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise RuntimeError("no free port")


def _ephemeral_start(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768     # Linux's default
