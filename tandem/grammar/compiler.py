"""Grammars for structured outputs, compiled with xgrammar for one tokenizer, bounded, and cached
by spec.

Agents resend the same tools and schemas turn after turn, so a compiled grammar is kept (LRU, by
kind and text) and compiling it again costs a dictionary lookup; a spec that failed is kept too,
and refused again without compiling. Compiling may take milliseconds to minutes (a choice of
20,000 options), so it is bounded (GrammarConfig, each limit a 400 naming its flag): the text's
size and the number of choices are checked first; then a trial compile runs in a child process
(compile_process.py), killed past the time limit or once its request went (not for the server's
own trusted specs, GrammarSpec.trusted: the first chat request after start-up would wait for the
helper to import xgrammar, seconds); a spec that passed is
compiled here, on the compile thread (`executor`, at nice 10 like the trial: the engine's steps
keep the cores). That second compile cannot be stopped, but is known to end: it is the trial's
work again, which ended within the limit. The async front compiles before the request is queued,
one spec at a time, and hands the grammar to the engine, whose thread never compiles nor waits for
a compile: the cache's lock is held for lookups only.

xgrammar stays at this edge: the rest of tandem sees `GrammarSpec` (tandem/types.py),
`RequestGrammar` and the bitmask helpers of tandem/grammar/masks.py.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from tandem.config import GrammarConfig
from tandem.errors import InvalidRequest
from tandem.grammar.compile_process import CompileProcess, stop_helper
from tandem.grammar.request_grammar import RequestGrammar
from tandem.grammar.spec_kinds import PARAM, choice_options, compile_spec
from tandem.types import GrammarSpec

log = logging.getLogger(__name__)
_NICE = 10   # the compile thread's CPU priority below the engine's, as the trial's (compile_process.py)


def check_size(spec: GrammarSpec, config: GrammarConfig) -> None:
    """InvalidRequest if `spec` is larger than the config allows (checked before compiling)."""
    if len(spec.text) > config.max_chars:
        raise InvalidRequest(f"the {spec.kind} constraint is {len(spec.text)} characters long, over "
                             f"the limit of {config.max_chars} (--max-grammar-chars)", param=PARAM)
    if spec.kind == "choice" and len(options := choice_options(spec.text)) > config.max_choices:
        raise InvalidRequest(f"choice has {len(options)} options, over the limit of "
                             f"{config.max_choices} (--max-grammar-choices)", param=PARAM)


class GrammarCompiler:
    """Compiles specs for one tokenizer. Thread-safe: the async front and the engine share it."""

    def __init__(self, backend_tokenizer, vocab_size: int, stop_token_ids: Sequence[int],
                 config: GrammarConfig = GrammarConfig(), cache_size: int = 256) -> None:
        """`backend_tokenizer`: a `tokenizers.Tokenizer`; `vocab_size`: the model's logits width
        (may exceed the tokenizer's: padded rows are never allowed)."""
        self._backend = backend_tokenizer
        self.vocab_size = vocab_size
        self._stop_token_ids = list(stop_token_ids)
        self.config = config
        # spec -> its compiled grammar, or the message of the InvalidRequest it failed with
        self._cache: OrderedDict[GrammarSpec, object] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()        # the cache: never held while compiling
        self._setup = threading.Lock()       # the tokenizer info, the compilers; compiles here
        self._info = None                    # xgrammar's TokenizerInfo: reading the vocabulary takes a while
        self._local = None                   # xgrammar's compiler in this process
        self._process: CompileProcess | None = None   # trials (None with compile_timeout_s None)
        self._spawned: subprocess.Popen | None = None  # a helper started early (adopt_helper)
        self._executor: ThreadPoolExecutor | None = None

    def cached(self, spec: GrammarSpec):
        """The compiled grammar of `spec` if it is cached, else None; raises InvalidRequest if
        `spec` failed before."""
        with self._lock:
            hit = self._cache.get(spec)
            if hit is not None:
                self._cache.move_to_end(spec)
        if isinstance(hit, str):
            raise InvalidRequest(hit, param=PARAM)
        return hit

    def compile(self, spec: GrammarSpec, cancel: threading.Event | None = None):
        """The compiled grammar of `spec` (cached); raises InvalidRequest if it is over a limit or
        does not compile, CompileStopped once `cancel` is set during the trial (the compile here,
        after the trial, runs to its end)."""
        compiled = self.cached(spec)
        if compiled is not None:
            return compiled
        check_size(spec, self.config)
        try:
            compiled = self._compile(spec, cancel)
        except InvalidRequest as exc:
            self._put(spec, exc.message)
            raise
        self._put(spec, compiled)
        return compiled

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The compile thread, at nice 10 (Linux: a thread's own priority), for the async front."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="grammar-compile",
                                                initializer=_lower_priority)
        return self._executor

    def warm(self) -> None:
        """Read the vocabulary and start the compile process, on a thread of their own: the first
        request with a grammar then finds them ready."""
        def run() -> None:
            with self._setup:
                self._compilers()
            if self._process is not None:
                self._process.start()

        threading.Thread(target=run, name="grammar-warm", daemon=True).start()

    def adopt_helper(self, spawned: subprocess.Popen) -> None:
        """A trial helper started before this compiler existed (compile_process.spawn_helper(), by
        a worker before its weights load): the trials use it instead of starting their own."""
        with self._setup:
            if self._process is None and self.config.compile_timeout_s is not None:
                self._spawned = spawned
                return
        stop_helper(spawned)   # trials run already, or never

    def close(self) -> None:
        spawned, self._spawned = self._spawned, None
        if spawned is not None:
            stop_helper(spawned)
        if self._process is not None:
            self._process.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def process(self) -> CompileProcess | None:
        """The compile process (None until the first compile, or when compiles run in-process)."""
        return self._process

    def matcher(self, spec: GrammarSpec, output_so_far: Sequence[int] = (),
                compiled=None) -> RequestGrammar:
        """A request's grammar state after `output_so_far` (tokens generated before a handoff or a
        migration: the state is rebuilt from them), from `compiled` if given (compiled by the
        async front) else compiled now. Raises InvalidRequest if the tokens break it."""
        grammar = RequestGrammar(compiled if compiled is not None else self.compile(spec), self.vocab_size)
        for i, token in enumerate(output_so_far):
            if not grammar.accept(token):
                raise InvalidRequest(f"resumed output token {i} ({token}) does not match the request's "
                                     "constraint", param="resume_output_ids")
        return grammar

    def _put(self, spec: GrammarSpec, value) -> None:
        with self._lock:
            self._cache[spec] = value
            self._cache.move_to_end(spec)
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _compile(self, spec: GrammarSpec, cancel: threading.Event | None):
        with self._setup:
            local, process = self._compilers()
        if process is not None and not spec.trusted:
            process.check(spec, cancel)   # compiles within the limit, or raises
        with self._setup:
            return compile_spec(local, spec)

    def _compilers(self):
        """Under _setup: xgrammar's compiler here and the trials' process (None: no trials), the
        tokenizer info built on the way."""
        import xgrammar as xgr

        info = self._tokenizer_info()
        if self._local is None:
            self._local = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        if self._process is None and self.config.compile_timeout_s is not None:
            spawned, self._spawned = self._spawned, None
            self._process = CompileProcess(info.serialize_json(), self.config.compile_timeout_s, spawned)
        return self._local, self._process

    def _tokenizer_info(self):
        """Under _setup."""
        if self._info is None:
            import xgrammar as xgr
            from transformers import PreTrainedTokenizerFast

            hf = PreTrainedTokenizerFast(tokenizer_object=self._backend)
            self._info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=self.vocab_size,
                                                            stop_token_ids=self._stop_token_ids or None)
        return self._info


def import_in_background() -> None:
    """Import what reading the vocabulary needs (xgrammar, transformers' fast tokenizer: ~1 s),
    on a thread of its own, so that warm() later finds them imported (a worker, while its weights
    load)."""
    def run() -> None:
        import xgrammar  # noqa: F401
        from transformers import PreTrainedTokenizerFast  # noqa: F401

    threading.Thread(target=run, name="grammar-imports", daemon=True).start()


def _lower_priority() -> None:
    """This thread's nice value raised by _NICE (Linux: a thread's own; the process keeps its)."""
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + _NICE))
    except (AttributeError, OSError) as exc:
        log.warning("the grammar compile thread keeps its priority: %r", exc)
