"""What the tool-call guard's masks cost per step at a large vocabulary (issue 33, item 1).

The guard (tandem/turn/tool_guard.py) is xgrammar free text without the call opening. Its cost per
decode step is the engine's mask path: a bitmask for the batch (`allocate`), one row per request
(`RequestGrammar.mask_rows`, filled on a helper thread during the forward when more than 8 rows),
and `apply` to the logits before sampling. Measured here with the real GrammarCompiler and
RequestGrammar on a synthetic byte-level vocabulary of 151k tokens (Qwen's size; no real tokenizer
of that size ships with the repo), each request advancing by a random allowed token per step;
medians of 60 steps, one torch thread. Also the first compile (xgrammar reads the vocabulary once
per engine) and a compile once the vocabulary is known.

  .venv/bin/python benchmarks/guard_masks.py
"""

from __future__ import annotations

import random
import statistics
import string
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from tandem.grammar.compiler import GrammarCompiler
from tandem.grammar.masks import GrammarMasks, allocate, apply
from tandem.turn.tool_guard import no_calls_grammar

VOCAB = 151_000
BATCHES = (1, 8, 32, 64)
STEPS = 60


def synthetic_tokenizer(size: int) -> Tokenizer:
    """Byte-level BPE with `size` tokens: the 256 bytes, random 2-10 character pieces (letters,
    digits, markup), an end token and `<tool_call>` as an added token."""
    rng = random.Random(0)
    vocab = {t: i for i, t in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    chars = string.ascii_letters * 4 + string.digits + "<>[]{}_|\"':,.ĠĊ"
    while len(vocab) < size - 3:
        vocab.setdefault("".join(rng.choice(chars) for _ in range(rng.randint(2, 10))), len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|im_end|>"])
    tok.add_tokens(["<tool_call>", "</tool_call>"])
    return tok


def step_us(comp: GrammarCompiler, batch: int, eos: int, rng: random.Random) -> tuple[float, float]:
    """(allocate + fill µs, apply µs) per decode step of `batch` guarded requests, medians."""
    vocab = comp.vocab_size
    grammars = [comp.matcher(no_calls_grammar(("<tool_call>",))) for _ in range(batch)]
    logits = torch.randn(batch, vocab)   # [B, V]
    fills, applies = [], []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        bitmask = allocate(batch, vocab)   # [B, ceil(V / 32)]
        for row, g in enumerate(grammars):
            g.mask_rows(bitmask, row, [])
        t1 = time.perf_counter()
        apply(logits, GrammarMasks(bitmask, list(range(batch))))
        fills.append(t1 - t0)
        applies.append(time.perf_counter() - t1)
        for row, g in enumerate(grammars):   # each request takes a random allowed token
            while True:
                t = rng.randrange(vocab)
                if t != eos and (bitmask[row, t // 32] >> (t % 32)) & 1:
                    break
            assert g.accept(t)
    return statistics.median(fills) * 1e6, statistics.median(applies) * 1e6


def main() -> None:
    torch.set_num_threads(1)
    tok = synthetic_tokenizer(VOCAB)
    eos = tok.token_to_id("<|im_end|>")
    comp = GrammarCompiler(tok, tok.get_vocab_size(), [eos])
    t = time.perf_counter()
    comp.compile(no_calls_grammar(("<tool_call>",)))
    print(f"first compile (xgrammar reads the vocabulary, then the grammar): {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    comp.compile(no_calls_grammar(("[TOOL_CALLS]",)))
    print(f"compile once the vocabulary is known: {(time.perf_counter() - t) * 1e3:.1f} ms")
    print("| batch | allocate + fill µs/step | µs/row | apply µs/step | total µs/step |")
    print("|---:|---:|---:|---:|---:|")
    rng = random.Random(1)
    for batch in BATCHES:
        fill, app = step_us(comp, batch, eos, rng)
        print(f"| {batch} | {fill:.0f} | {fill / batch:.1f} | {app:.0f} | {fill + app:.0f} |")


if __name__ == "__main__":
    main()
