"""A request's grammar state past its end: a stop token the request ignores (ignore_eos) ends the
grammar, and what follows is free (accepted, rows left unmasked) instead of an error."""

from __future__ import annotations

import torch

from tandem.config import GrammarConfig
from tandem.grammar.compiler import GrammarCompiler
from tandem.grammar.masks import allocate
from tandem.tokenization.tokenizer import Tokenizer
from tandem.types import GrammarSpec


def test_after_an_ignored_stop_token_everything_is_free(llama_dir):
    tok = Tokenizer.from_dir(llama_dir)
    vocab = tok.backend.get_vocab_size()
    compiler = GrammarCompiler(tok.backend, vocab, tok.eos_token_ids, GrammarConfig(compile_timeout_s=None))
    grammar = compiler.matcher(GrammarSpec("choice", '["ab"]'))
    for t in tok.encode("ab", add_special_tokens=False) + [tok.eos_token_ids[0]]:
        assert grammar.accept(t)
    assert grammar.terminated
    x = tok.encode("x", add_special_tokens=False)
    assert grammar.accept(x[0]) and grammar.valid_prefix(x * 3) == 3
    mask = allocate(2, vocab)
    grammar.mask_rows(mask, 0, x)
    assert torch.equal(mask, allocate(2, vocab))   # every token allowed in both rows
