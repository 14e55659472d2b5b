"""Grammars for structured outputs, compiled with xgrammar for one tokenizer and cached by spec.

Agents resend the same tools and schemas turn after turn, so a compiled grammar is kept (LRU, by
kind and text) and compiling it again costs a dictionary lookup. Compiling may take milliseconds to
seconds for a large schema: the async front compiles off the engine thread before the request is
queued, and the engine then finds it in the cache. A spec that does not compile is the caller's
error: `InvalidRequest` naming the parameter, never a stalled batch.

xgrammar stays at this edge: the rest of tandem sees `GrammarSpec` (tandem/types.py),
`RequestGrammar` and the bitmask helpers of tandem/grammar/masks.py.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence

from tandem.errors import InvalidRequest
from tandem.grammar.request_grammar import RequestGrammar
from tandem.grammar.schema_workarounds import json_safe_strings
from tandem.types import GrammarSpec


def _choice_ebnf(text: str) -> str:
    try:
        options = json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(f"choice must be a JSON list of strings: {exc}", param="structured_outputs") from exc
    if not (isinstance(options, list) and options and all(isinstance(o, str) for o in options)):
        raise InvalidRequest("choice must be a non-empty list of strings", param="structured_outputs")
    return "root ::= " + " | ".join(json.dumps(o, ensure_ascii=False) for o in options)


class GrammarCompiler:
    """Compiles specs for one tokenizer. Thread-safe: the async front and the engine share it."""

    def __init__(self, backend_tokenizer, vocab_size: int, stop_token_ids: Sequence[int],
                 cache_size: int = 256) -> None:
        """`backend_tokenizer`: a `tokenizers.Tokenizer`; `vocab_size`: the model's logits width
        (may exceed the tokenizer's: padded rows are never allowed)."""
        self._backend = backend_tokenizer
        self.vocab_size = vocab_size
        self._stop_token_ids = list(stop_token_ids)
        self._cache: OrderedDict[GrammarSpec, object] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._xgr_compiler = None   # built on first use: reading the vocabulary takes a while

    def _compiler(self):
        if self._xgr_compiler is None:
            import xgrammar as xgr
            from transformers import PreTrainedTokenizerFast

            hf = PreTrainedTokenizerFast(tokenizer_object=self._backend)
            info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=self.vocab_size,
                                                      stop_token_ids=self._stop_token_ids or None)
            self._xgr_compiler = xgr.GrammarCompiler(info, max_threads=1)
        return self._xgr_compiler

    def compile(self, spec: GrammarSpec):
        """The compiled grammar of `spec` (cached); raises InvalidRequest if it does not compile."""
        with self._lock:
            compiled = self._cache.get(spec)
            if compiled is not None:
                self._cache.move_to_end(spec)
                return compiled
            compiled = self._compile(spec)
            self._cache[spec] = compiled
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return compiled

    def _compile(self, spec: GrammarSpec):
        compiler = self._compiler()
        try:
            if spec.kind == "json_schema":
                schema = json_safe_strings(json.loads(spec.text))
                return compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True)
            if spec.kind == "json_object":   # OpenAI's JSON mode: an object, not any JSON value
                return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
            if spec.kind == "regex":
                return compiler.compile_regex(spec.text)
            if spec.kind == "choice":
                return compiler.compile_grammar(_choice_ebnf(spec.text))
            if spec.kind == "ebnf":
                return compiler.compile_grammar(spec.text)
            if spec.kind == "structural_tag":
                return compiler.compile_structural_tag(spec.text)
        except InvalidRequest:
            raise
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError subclasses with a message
            raise InvalidRequest(f"the {spec.kind} constraint does not compile: {exc}",
                                 param="structured_outputs") from exc
        raise InvalidRequest(f"unknown constraint kind {spec.kind!r}", param="structured_outputs")

    def matcher(self, spec: GrammarSpec, output_so_far: Sequence[int] = ()) -> RequestGrammar:
        """A request's grammar state after `output_so_far` (tokens generated before a handoff or a
        migration: the state is rebuilt from them). Raises InvalidRequest if they break it."""
        grammar = RequestGrammar(self.compile(spec), self.vocab_size)
        for i, token in enumerate(output_so_far):
            if not grammar.accept(token):
                raise InvalidRequest(f"resumed output token {i} ({token}) does not match the request's "
                                     "constraint", param="resume_output_ids")
        return grammar
