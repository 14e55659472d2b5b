"""Trial compiles out of the serving process, so that one can be stopped.

xgrammar compiles in C++ with the GIL released, and offers no way to interrupt a compile: a thread
running one runs until it ends (a 20,000-option choice: minutes of a core). A process can be
killed. `CompileProcess` keeps one helper process (`python -m tandem.grammar.compile_process`,
at nice 10 so that the engine's steps keep the cores) that has imported xgrammar and read the
tokenizer once, and forks a child for each compile (milliseconds). The helper waits on the child:

- past the timeout it kills the child: InvalidRequest naming the limit;
- told to cancel (the request went: its `cancel` event set, seen within _POLL_S) it kills the
  child: CompileStopped;
- otherwise it hands on the child's verdict: the spec compiles, or the error it does not compile with.

Only the verdict comes back, not the grammar: xgrammar's serialized form of a compiled grammar can
take 30 times as long to write as the compile (300 optional properties: 0.04 s of compile, 1.3 s
and 30 MB of JSON for a 4k vocabulary), so the caller compiles the spec again in its own process,
now known to end within the limit (tandem/grammar/compiler.py).

One trial at a time. Frames between the parent and the helper: 4 bytes of length (big-endian),
then that many bytes of UTF-8 JSON; the helper's first frame out is "ready" (xgrammar imported),
its first frame in the serialized TokenizerInfo. The helper exits when its stdin closes (the
parent went), killing its child; a child exits when the helper goes.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from tandem.errors import InvalidRequest
from tandem.grammar.spec_kinds import PARAM, compile_spec
from tandem.types import GrammarSpec

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 120.0   # the helper imports xgrammar (and with it torch): seconds on a busy host
_GRACE_S = 10.0            # the helper answers within the timeout plus this, or is killed
_POLL_S = 0.05             # how soon a compile sees that its request went
_NICE = 10
_LEN = struct.Struct(">I")


class CompileStopped(Exception):
    """The compile was stopped (its `cancel` set, or the process closed): nobody waits for it."""


class CompileProcess:
    """The helper process trying specs for one tokenizer, one at a time. Thread-safe."""

    def __init__(self, tokenizer_info_json: str, timeout_s: float,
                 spawned: subprocess.Popen | None = None) -> None:
        """`spawned`: a helper started by spawn_helper() before the tokenizer was known (a worker
        starts it before its weights load); it becomes this one's first helper."""
        self._info = tokenizer_info_json
        self.timeout_s = timeout_s
        self._one = threading.Lock()        # one compile in flight; _proc is the holder's
        self._proc: subprocess.Popen | None = None
        self._spawned = spawned
        self._closed = False
        self.starts = 0                     # helpers started (one unless one failed)
        self.child_pid: int | None = None   # the child trying a spec now, if any

    def check(self, spec: GrammarSpec, cancel: threading.Event | None = None) -> None:
        """Returns if `spec` compiles within the timeout; raises InvalidRequest if it does not
        compile, admits nothing, or runs past the timeout, CompileStopped once `cancel` is set."""
        with self._one:
            proc = self._helper(cancel)
            try:
                _write(proc.stdin, {"op": "compile", "kind": spec.kind, "text": spec.text,
                                    "timeout_s": self.timeout_s})
                self.child_pid = _read(proc.stdout, _GRACE_S)["started"]
                reply = self._answer(proc, cancel)
            except (OSError, EOFError, TimeoutError, ValueError, KeyError) as exc:
                self._kill()   # the helper failed (not the child: it answers for that)
                if self._closed:
                    raise CompileStopped() from None
                raise RuntimeError(f"the grammar compile process failed: {exc!r}") from exc
            finally:
                self.child_pid = None
        if "stopped" in reply:
            raise CompileStopped()
        if "crashed" in reply:   # the child died without an answer: xgrammar crashed, or ran out of memory
            raise InvalidRequest(f"the {spec.kind} constraint crashed the grammar compiler", param=PARAM)
        if "timeout" in reply:
            raise InvalidRequest(f"the {spec.kind} constraint did not compile within "
                                 f"{self.timeout_s:g} s, the limit (--grammar-compile-timeout)",
                                 param=PARAM)
        if "error" in reply:
            raise InvalidRequest(reply["error"], param=PARAM)

    def start(self) -> None:
        """Start the helper now (a worker warms it up at start-up: it takes seconds)."""
        with self._one:
            try:
                self._helper(None)
            except CompileStopped:
                pass   # closed meanwhile (the worker stopping)
            except RuntimeError as exc:
                log.error("%s; the next compile tries again", exc)

    def close(self) -> None:
        """Stop the helper (and a compile in flight: CompileStopped)."""
        self._closed = True
        spawned, self._spawned = self._spawned, None
        if spawned is not None:
            stop_helper(spawned)
        proc = self._proc
        if proc is not None:
            proc.kill()
        with self._one:
            self._kill()

    @property
    def pid(self) -> int | None:
        """The helper's process id; None while there is none."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def _helper(self, cancel: threading.Event | None) -> subprocess.Popen:
        """The helper, started if there is none (a start is not cancelled: the next compile
        needs it too). Raises CompileStopped if `cancel` is set, or the process closed."""
        if self._closed:
            raise CompileStopped()
        if self._proc is None:
            try:
                self._start()
            except (OSError, EOFError, TimeoutError, ValueError) as exc:
                self._kill()
                if self._closed:   # close() killed it while it started
                    raise CompileStopped() from None
                raise RuntimeError(f"the grammar compile process did not start: {exc!r}") from exc
        if cancel is not None and cancel.is_set():
            raise CompileStopped()
        return self._proc

    def _start(self) -> None:
        """Under _one."""
        spawned, self._spawned = self._spawned, None
        self._proc = spawned if spawned is not None else spawn_helper()
        self.starts += 1
        if _read(self._proc.stdout, _START_TIMEOUT_S) != "ready":
            raise EOFError("the compile process did not start")
        _write_raw(self._proc.stdin, self._info.encode())

    def _answer(self, proc: subprocess.Popen, cancel: threading.Event | None) -> dict:
        """The helper's answer to the compile in flight; told to cancel once `cancel` is set."""
        deadline = time.monotonic() + self.timeout_s + _GRACE_S
        cancelled = False
        while not _readable(proc.stdout, _POLL_S):
            if not cancelled and cancel is not None and cancel.is_set():
                _write(proc.stdin, {"op": "cancel"})
                cancelled = True
            if time.monotonic() > deadline:
                raise TimeoutError("the compile process did not answer")
        return _read(proc.stdout, None)

    def _kill(self) -> None:
        """Under _one."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_helper(proc)


def _readable(pipe: BinaryIO, timeout_s: float) -> bool:
    return bool(select.select([pipe.fileno()], [], [], timeout_s)[0])


def _write_raw(pipe: BinaryIO, data: bytes) -> None:
    pipe.write(_LEN.pack(len(data)) + data)
    pipe.flush()


def _write(pipe: BinaryIO, obj) -> None:
    _write_raw(pipe, json.dumps(obj).encode())   # ASCII: a lone surrogate crosses as an escape


def _read(pipe: BinaryIO, timeout_s: float | None):
    """One frame, decoded (EOFError if the pipe closed; TimeoutError if none began in time)."""
    if timeout_s is not None and not _readable(pipe, timeout_s):
        raise TimeoutError
    return json.loads(_read_exactly(pipe.fileno(), _LEN.unpack(_read_exactly(pipe.fileno(), _LEN.size))[0]))


def _read_exactly(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def spawn_helper() -> subprocess.Popen:
    """A helper process, started: it imports xgrammar (seconds), then waits for its tokenizer.
    In a session of its own: a Ctrl-C to the worker's process group would kill it mid-start (the
    worker's shutdown stops it; a worker gone closes its stdin, on which it exits)."""
    root = str(Path(__file__).resolve().parents[2])   # the directory holding tandem/
    path = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.Popen([sys.executable, "-m", "tandem.grammar.compile_process"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"})


def stop_helper(proc: subprocess.Popen) -> None:
    """Kill a helper (its child goes with it) and close its pipes."""
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        try:
            pipe.close()
        except OSError:
            pass


# --- the helper and its children -----------------------------------------------------------------
def _helper_main(inp: BinaryIO, out: BinaryIO) -> None:
    os.nice(_NICE)   # first: importing xgrammar (and torch) takes seconds of a core
    import xgrammar as xgr

    _write(out, "ready")
    try:
        info = xgr.TokenizerInfo.deserialize_json(_read_exactly(
            inp.fileno(), _LEN.unpack(_read_exactly(inp.fileno(), _LEN.size))[0]).decode())
    except EOFError:
        return
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)   # the parent caches
    while True:
        try:
            request = _read(inp, None)
        except EOFError:
            return
        if request.get("op") != "compile":
            continue   # a cancel that crossed the answer: nothing runs
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in (r, inp.fileno(), out.fileno()):   # the child answers on w only
                os.close(fd)
            _child_main(compiler, request, w, os.getppid())
        os.close(w)
        _write(out, {"started": pid})
        _write(out, _supervise(pid, r, inp, request["timeout_s"]))


def _supervise(pid: int, r: int, inp: BinaryIO, timeout_s: float) -> dict:
    """Wait for the child `pid` (its answer on `r`) until the timeout or a cancel from the parent."""
    answer = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return {"timeout": True}
            ready = select.select([r, inp.fileno()], [], [], left)[0]
            if r in ready:
                chunk = os.read(r, 1 << 20)
                if chunk:
                    answer += chunk
                    continue
                os.waitpid(pid, 0)
                pid = 0
                return json.loads(answer) if answer else {"crashed": True}
            if inp.fileno() in ready:
                try:
                    message = _read(inp, None)
                except EOFError:   # the parent went
                    os.kill(pid, signal.SIGKILL)
                    os._exit(0)
                if message.get("op") == "cancel":
                    return {"stopped": True}
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(r)


def _child_main(compiler, request: dict, w: int, helper: int) -> None:
    """A forked child: compile, write the answer, exit (never returns)."""
    def exit_with_helper() -> None:   # a compile holds this thread: the helper is watched apart
        while os.getppid() == helper:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=exit_with_helper, daemon=True).start()
    try:
        try:
            compile_spec(compiler, GrammarSpec(request["kind"], request["text"]))
            answer = {"ok": True}
        except InvalidRequest as exc:
            answer = {"error": exc.message}
        except Exception as exc:  # noqa: BLE001 - xgrammar failing past the compile: the spec's fault
            answer = {"error": f"the {request['kind']} constraint does not compile: {exc}"}
        data = memoryview(json.dumps(answer).encode())
        while data:
            data = data[os.write(w, data):]
    finally:
        os._exit(0)


if __name__ == "__main__":
    # frames go out on a copy of stdout; fd 1 itself goes to stderr, so that nothing printed
    # (by Python or by C++) mixes into them
    _out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _helper_main(sys.stdin.buffer, _out)
