"""wait_healthy notices a server that exits or never answers; stop ends what it started."""

import subprocess
import sys

import pytest

from tandem.testing.server_process import stop, wait_healthy


def test_a_server_that_exits_is_reported_with_its_output():
    proc = subprocess.Popen([sys.executable, "-c", "print('boom'); raise SystemExit(3)"],
                            stdout=subprocess.PIPE, text=True)
    proc.wait(30)
    with pytest.raises(RuntimeError, match="exited with code 3") as e:
        wait_healthy("http://127.0.0.1:9", proc, 5, describe=lambda: proc.stdout.read())
    assert "boom" in str(e.value)


def test_a_server_that_never_answers_times_out_and_is_stopped():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(TimeoutError, match="not healthy after 1 s"):
            wait_healthy("http://127.0.0.1:9", proc, 1.0, poll_s=0.1)
    finally:
        stop(proc, grace_s=5)
    assert proc.poll() is not None
