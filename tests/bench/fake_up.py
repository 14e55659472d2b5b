"""Stand-in for `tandem up` in topology tests: serves the fake OpenAI server on --port until SIGINT.

Usage: python fake_up.py up --model M [--colocated N | --prefill P --decode D] --port N [...]
It writes its argv to $FAKE_UP_LOG (one JSON line per start) so tests can check the commands, and
says it is ready as `tandem up` does once its server listens (never with $FAKE_UP_NEVER_READY set,
while the server answers /health: a gateway with one of its workers).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tandem.launcher.cluster import READY_LINE  # noqa: E402
from tests.bench.fake_server import FakeServer  # noqa: E402


def main() -> None:
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    with open(os.environ["FAKE_UP_LOG"], "a") as f:
        f.write(json.dumps(argv) + "\n")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    with FakeServer(port=port):
        if not os.environ.get("FAKE_UP_NEVER_READY"):
            print(f"{READY_LINE} http://127.0.0.1:{port}", flush=True)
        stop.wait(60)


if __name__ == "__main__":
    main()
