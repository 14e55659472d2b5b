"""Drive a synchronous Engine to completion, and a reference greedy decoder in transformers."""

from __future__ import annotations

import contextlib
import itertools
import time

import torch

from tandem.types import EngineRequest, SamplingParams
from tests.conftest import assert_all_blocks_free

_ids = itertools.count()


def request(prompt, max_tokens=8, prefill_only=False, **sampling) -> EngineRequest:
    sampling.setdefault("temperature", 0.0)
    sampling.setdefault("ignore_eos", True)
    return EngineRequest(request_id=f"r{next(_ids)}", prompt_token_ids=list(prompt),
                         sampling=SamplingParams(max_tokens=max_tokens, **sampling),
                         prefill_only=prefill_only)


def run(engine, requests, max_steps=10_000, timeout_s=120.0):
    """Add all requests, step until done; returns {request_id: [deltas]}."""
    for r in requests:
        engine.add_request(r)
    out = {r.request_id: [] for r in requests}
    deadline = time.monotonic() + timeout_s
    steps = 0
    while engine.requests:  # blocks handed over to a decode worker may still be pinned
        if steps >= max_steps or time.monotonic() > deadline:
            raise AssertionError("engine did not finish within the step and time bounds")
        if engine.has_runnable():
            steps += 1
        else:
            time.sleep(0.001)  # only KV pulls in flight
        for d in engine.step():
            out[d.request_id].append(d)
    return out


def settle_handoffs(prefill, timeout_s: float = 10.0) -> None:
    """Step a prefill worker until it keeps no handed-over blocks: it frees its copy once the
    pull is confirmed (a step's connector poll)."""
    deadline = time.monotonic() + timeout_s
    while prefill.scheduler.kept and time.monotonic() < deadline:
        prefill.step()
        time.sleep(0.01)


@contextlib.contextmanager
def handoff_pair(prefill, decode):
    """A prefill and a decode engine for the body; after it, every handoff settled and every block
    of both free (the idle invariant); both shut down whatever happens."""
    try:
        yield prefill, decode
        settle_handoffs(prefill)
        assert_all_blocks_free(prefill)
        assert_all_blocks_free(decode)
    finally:
        prefill.shutdown()
        decode.shutdown()


def check_decode_after_handoff(prefill, decode, prompt, ref, resume_at=7) -> None:
    """`prompt` prefilled on `prefill`, its KV handed to `decode`, which continues it; then a
    migration (the stream resumes on `decode` from the client's first `resume_at` tokens, no
    handle). Both must give `ref`, one engine's greedy tokens for the prompt."""
    first = request(prompt, max_tokens=len(ref), prefill_only=True)
    pre = run(prefill, [first])[first.request_id][0]
    second = EngineRequest("d", list(prompt), first.sampling, kv_handle=pre.kv_handle,
                           resume_output_ids=list(pre.new_token_ids))
    out = run(decode, [second])[second.request_id]
    assert pre.new_token_ids + tokens(out) == ref
    third = EngineRequest("m", list(prompt), first.sampling, resume_output_ids=ref[:resume_at])
    assert tokens(run(decode, [third])[third.request_id]) == ref[resume_at:]


def tokens(deltas) -> list[int]:
    return [t for d in deltas for t in d.new_token_ids]


def prompts(n, vocab=512, seed=0, min_len=3, max_len=60):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        out.append(torch.randint(10, vocab, (length,), generator=g).tolist())
    return out


def hf_greedy(model_dir, prompt, max_tokens) -> list[int]:

    model = _hf_model(model_dir)
    ids = torch.tensor([prompt])
    out = []
    with torch.no_grad():
        for _ in range(max_tokens):
            nxt = int(model(ids).logits[0, -1].argmax())
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return out


_HF_CACHE: dict = {}


def _hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    key = str(model_dir)
    if key not in _HF_CACHE:
        _HF_CACHE[key] = AutoModelForCausalLM.from_pretrained(key, dtype=torch.float32).eval()
    return _HF_CACHE[key]
