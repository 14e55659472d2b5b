"""Trial compiles in the helper process: one past the timeout, one cancelled (its request went)
and one in flight when the process closes are killed, and the helper serves the next compile
without starting again."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from tandem.config import GrammarConfig
from tandem.errors import InvalidRequest
from tandem.grammar.compile_process import CompileProcess, CompileStopped, spawn_helper
from tandem.grammar.compiler import GrammarCompiler
from tandem.tokenization.tokenizer import Tokenizer
from tandem.types import GrammarSpec

# 3,000 optional properties: 90 KB of schema, a minute of compile (the time grows with their
# number to the power ~2.6: 1,000 took 4 s, 2,000 25 s for the 512-token test vocabulary on one
# busy core)
SLOW = GrammarSpec("json_schema", json.dumps(
    {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}}))
QUICK = GrammarSpec("regex", "[0-9]+")


def compiler(llama_dir, timeout_s: float) -> GrammarCompiler:
    tok = Tokenizer.from_dir(llama_dir)
    return GrammarCompiler(tok.backend, tok.backend.get_vocab_size(), tok.eos_token_ids,
                           GrammarConfig(compile_timeout_s=timeout_s))


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def compile_in_thread(comp: GrammarCompiler, spec: GrammarSpec, cancel=None):
    """Start comp.compile(spec) on a thread; returns (thread, outcome list, the child's pid once
    it compiles)."""
    outcome: list = []

    def run():
        try:
            outcome.append(comp.compile(spec, cancel))
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120   # the helper's first start imports xgrammar
    while (comp.process is None or comp.process.child_pid is None) and thread.is_alive():
        assert time.monotonic() < deadline, "the compile never started"
        time.sleep(0.01)
    return thread, outcome, comp.process.child_pid


def test_a_compile_past_the_timeout_is_killed_and_names_the_limit(llama_dir):
    comp = compiler(llama_dir, timeout_s=1.0)
    try:
        comp.compile(QUICK)   # the helper is up
        thread, outcome, child = compile_in_thread(comp, SLOW)
        thread.join(60)
        (err,) = outcome
        assert isinstance(err, InvalidRequest) and err.param == "structured_outputs"
        assert "within 1 s" in err.message and "--grammar-compile-timeout" in err.message
        assert gone(child)
        assert comp.compile(GrammarSpec("regex", "[a-z]+")) is not None and comp.process.starts == 1
        with pytest.raises(InvalidRequest, match="within 1 s"):   # refused again, from the cache
            comp.compile(SLOW)
    finally:
        comp.close()


def test_a_cancelled_compile_is_killed_at_once(llama_dir):
    comp = compiler(llama_dir, timeout_s=600.0)
    cancel = threading.Event()
    try:
        thread, outcome, child = compile_in_thread(comp, SLOW, cancel)
        assert not gone(child) and not outcome
        cancel.set()
        thread.join(30)
        assert not thread.is_alive() and isinstance(outcome[0], CompileStopped)
        assert gone(child)
        assert comp.compile(QUICK) is not None and comp.process.starts == 1
        assert comp.cached(SLOW) is None   # not a failure of the spec: a later request compiles it
    finally:
        comp.close()


def test_closing_stops_the_compile_in_flight_and_the_helper(llama_dir):
    comp = compiler(llama_dir, timeout_s=600.0)
    thread, outcome, child = compile_in_thread(comp, SLOW)
    helper = comp.process.pid
    comp.close()
    thread.join(30)
    assert isinstance(outcome[0], CompileStopped)
    deadline = time.monotonic() + 10   # the child notices its helper went within a second
    while not (gone(child) and gone(helper)):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_the_servers_own_trusted_grammar_compiles_without_the_trial(llama_dir):
    # the tool-call guard on every chat request without tools: compiled here at once, so the
    # first request after start-up does not wait seconds for the helper to import xgrammar
    comp = compiler(llama_dir, timeout_s=1.0)
    try:
        guard = GrammarSpec("regex", "[a-z]+", trusted=True)
        assert comp.compile(guard) is not None
        assert comp.process is not None and comp.process.starts == 0 and comp.process.pid is None
        # a client's constraint with the same text still gets its trial
        assert comp.compile(GrammarSpec("regex", "[a-z]+")) is not None and comp.process.starts == 1
    finally:
        comp.close()


def test_closing_while_the_helper_starts_stops_it_without_an_error(caplog):
    process = CompileProcess("{}", 600.0, spawned=spawn_helper())   # importing xgrammar: seconds
    starting = threading.Thread(target=process.start)
    starting.start()
    time.sleep(0.2)
    helper = process.pid
    process.close()
    starting.join(30)
    assert not starting.is_alive()
    assert helper is not None and gone(helper)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
