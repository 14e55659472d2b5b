"""The multi-token step with a scripted proposer: proposals right and wrong give exactly the
output of no proposals, only accepted tokens' blocks reach the prefix cache, and no block leaks."""

from __future__ import annotations

import pytest

from tandem.kv.block_hash import hash_request_blocks
from tandem.runner.scheduled import accepted_length
from tests.engine.helpers import prompts, request, run, tokens


class ScriptedProposer:
    """Proposes the reference continuation of each request, with every `wrong_every`-th
    proposal replaced by a wrong token (so some steps accept all, some a prefix, some none)."""

    def __init__(self, reference: dict[tuple[int, ...], list[int]], k: int, wrong_every: int,
                 vocab: int) -> None:
        self.reference = reference
        self.k = k
        self.wrong_every = wrong_every
        self.vocab = vocab
        self.calls = 0
        self.proposed = 0

    def propose(self, requests):
        out = []
        for req in requests:
            ref = self.reference[tuple(req.prompt_token_ids)]
            at = len(req.output_token_ids)
            draft = list(ref[at:at + self.k])
            for i in range(len(draft)):
                self.calls += 1
                if self.calls % self.wrong_every == 0:
                    draft[i] = (draft[i] + 1) % self.vocab
            self.proposed += len(draft)
            out.append(draft)
        return out

    def observe(self, request, num_proposed, num_accepted):
        pass

    def finished(self, request):
        pass


def _run_holding_no_extra_block(engine, reqs):
    """Step to completion; after every step no request holds a block past those its own tokens
    need (blocks that only rejected proposals reached are dropped)."""
    for r in reqs:
        engine.add_request(r)
    out = {r.request_id: [] for r in reqs}
    for _ in range(1000):
        if not engine.requests:
            return out
        for d in engine.step():
            out[d.request_id].append(d)
        for req in engine.requests.values():
            assert len(engine.kv.block_ids(req.request_id)) <= -(-req.num_tokens // engine.kv.block_size)
    raise AssertionError("the engine did not finish in 1000 steps")


def _reference(engine, batch, max_tokens, **sampling):
    reqs = [request(p, max_tokens=max_tokens, **sampling) for p in batch]
    res = run(engine, reqs)
    return {tuple(p): tokens(res[r.request_id]) for p, r in zip(batch, reqs)}


def _cached_hashes_are_real(engine, sequences) -> None:
    """Every hash in the prefix cache is the hash of a block of some request's real tokens."""
    real: set[int] = set()
    for seq in sequences:
        real.update(hash_request_blocks(seq, engine.kv.block_size, (), engine.kv.hash_seed))
    assert set(engine.kv.pool.cached_hashes()) <= real


@pytest.mark.parametrize("k,wrong_every", [(1, 2), (3, 4), (5, 3), (4, 1)])
def test_scripted_proposals_change_nothing(llama_dir, make_engine, k, wrong_every):
    batch = prompts(5, seed=40, min_len=5, max_len=40)
    reference = _reference(make_engine(llama_dir), batch, max_tokens=17)
    engine = make_engine(llama_dir)
    engine.proposer = proposer = ScriptedProposer(reference, k, wrong_every, engine.loaded.arch.vocab_size)
    reqs = [request(p, max_tokens=17) for p in batch]
    res = _run_holding_no_extra_block(engine, reqs)
    for p, r in zip(batch, reqs):
        out = res[r.request_id]
        assert tokens(out) == reference[tuple(p)]
        assert out[-1].num_output_tokens == 17 and out[-1].finish_reason.value == "length"
    assert proposer.proposed > 0
    _cached_hashes_are_real(engine, [p + reference[tuple(p)] for p in batch])


def test_accepted_tokens_take_fewer_steps(llama_dir, make_engine):
    prompt = prompts(1, seed=41, min_len=12, max_len=12)[0]
    reference = _reference(make_engine(llama_dir), [prompt], max_tokens=20)
    engine = make_engine(llama_dir)
    engine.proposer = ScriptedProposer(reference, k=4, wrong_every=10**9, vocab=engine.loaded.arch.vocab_size)
    engine.add_request(r := request(prompt, max_tokens=20))
    steps, got = 0, []
    while engine.requests and steps < 100:
        steps += 1
        for d in engine.step():
            got += d.new_token_ids
        if engine.requests:   # no block past those the request's own tokens need
            assert len(engine.kv.block_ids(r.request_id)) <= -(-len(prompt + got) // engine.kv.block_size)
    assert got == reference[tuple(prompt)]
    assert steps == 1 + 4   # the prefill samples 1 token, then 5 per step: 1 + 4 * 5 = 21 >= 20


def test_seeded_sampling_is_unchanged_by_proposals(llama_dir, make_engine):
    """A seeded request's token at each position does not depend on how it was reached."""
    batch = prompts(3, seed=42, min_len=6, max_len=30)
    sampling = dict(temperature=1.0, seed=7, top_k=20)
    reference = _reference(make_engine(llama_dir), batch, max_tokens=12, **sampling)
    engine = make_engine(llama_dir)
    engine.proposer = ScriptedProposer(reference, 3, 3, engine.loaded.arch.vocab_size)
    reqs = [request(p, max_tokens=12, **sampling) for p in batch]
    res = run(engine, reqs)
    assert {tuple(p): tokens(res[r.request_id]) for p, r in zip(batch, reqs)} == reference


def test_a_stop_token_inside_accepted_proposals_ends_the_request_there(llama_dir, make_engine):
    prompt = prompts(1, seed=43, min_len=10, max_len=10)[0]
    reference = _reference(make_engine(llama_dir), [prompt], max_tokens=12)
    ref = reference[tuple(prompt)]
    stop = ref[6]
    first = ref.index(stop)
    engine = make_engine(llama_dir)
    engine.proposer = ScriptedProposer(reference, 5, 10**9, engine.loaded.arch.vocab_size)
    r = request(prompt, max_tokens=12, stop_token_ids=(stop,))
    out = run(engine, [r])[r.request_id]
    assert tokens(out) == ref[:first + 1]
    assert out[-1].finish_reason.value == "stop"


def test_proposals_that_do_not_fit_are_dropped_not_preempting(llama_dir, make_engine):
    """With a cache too small for the proposals, requests still finish with the same output."""
    batch = prompts(4, seed=44, min_len=8, max_len=8)
    reference = _reference(make_engine(llama_dir), batch, max_tokens=10)
    engine = make_engine(llama_dir, num_blocks=16)   # 4 requests x 18 tokens = 4 x 5 blocks: tight
    engine.proposer = ScriptedProposer(reference, 6, 5, engine.loaded.arch.vocab_size)
    reqs = [request(p, max_tokens=10) for p in batch]
    res = run(engine, reqs)
    assert {tuple(p): tokens(res[r.request_id]) for p, r in zip(batch, reqs)} == reference


def test_accepted_length():
    assert accepted_length([], [5]) == 0
    assert accepted_length([1, 2, 3], [1, 2, 3, 4]) == 3
    assert accepted_length([1, 2, 3], [1, 9, 3, 4]) == 1
    assert accepted_length([1, 2, 3], [0, 2, 3, 4]) == 0
