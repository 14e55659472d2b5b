"""Stand-in for `tandem up` in topology tests: serves the fake OpenAI server on --port until SIGINT.

Usage: python fake_up.py up --model M [--colocated N | --prefill P --decode D] --port N [...]
It writes its argv to $FAKE_UP_LOG (one JSON line per start) so tests can check the commands.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.fake_server import FakeServer  # noqa: E402


def main() -> None:
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    with open(os.environ["FAKE_UP_LOG"], "a") as f:
        f.write(json.dumps(argv) + "\n")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    with FakeServer(port=port):
        stop.wait(60)


if __name__ == "__main__":
    main()
