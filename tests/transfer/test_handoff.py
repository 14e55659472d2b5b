"""The handoff connector's scheduler side: what it loads, keeps and refuses (no transport needed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tandem.errors import InvalidRequest
from tandem.kv.layout import KVLayout, KVLayoutMismatch
from tandem.transfer.handoff import HandoffScheduler
from tandem.types import EngineRequest, FinishReason, KVHandle, SamplingParams

LAYOUT = KVLayout("m", "float32", 4, 2, 2, 16)


@dataclass
class _Req:
    request_id: str = "r"
    all_token_ids: list = field(default_factory=lambda: list(range(11)))
    cache_keys: tuple = ()
    kv_handle: KVHandle | None = None
    prefill_only: bool = False
    num_preemptions: int = 0
    num_computed_tokens: int = 10
    finish_reason: FinishReason | None = None


def _handle(num_tokens=10):
    return KVHandle("127.0.0.1:1", "p-r", (5, 6, 7), num_tokens, LAYOUT.to_dict(), (11, 12))


def test_match_keeps_local_hits_but_always_pulls_the_last_block():
    s = HandoffScheduler("127.0.0.1:9", "tcp", LAYOUT)
    req = _Req(kv_handle=_handle())
    assert s.match(_Req(), 0, 4) is None                       # no handle: nothing to load
    m = s.match(req, 0, 4)
    assert (m.num_local_tokens, m.num_external_tokens, m.load_async, m.cache_hit) == (0, 10, True, False)
    m = s.match(req, 8, 4)                                     # 2 blocks hit locally: the 3rd is pulled
    assert (m.num_local_tokens, m.num_external_tokens) == (8, 2)
    m = s.match(_Req(kv_handle=_handle(8), all_token_ids=list(range(9))), 8, 4)
    assert (m.num_local_tokens, m.num_external_tokens) == (4, 4)  # a local hit on the last block is not kept
    load = s.load(req, s.match(req, 4, 4), 1, [20, 21])
    assert load.source is req.kv_handle and (load.first_block, load.dst_block_ids) == (1, (20, 21))
    assert s.match(_Req(kv_handle=_handle(), num_preemptions=1), 0, 4) is None  # its copy was released


def test_a_handed_over_prefill_keeps_its_blocks_and_describes_them():
    s = HandoffScheduler("127.0.0.1:9", "tcp", LAYOUT)
    done = s.request_finished(_Req(prefill_only=True), [1, 2, 3], [101, 102, 103], admitted=True)
    assert done.keep_blocks and done.kv_handle.block_ids == (1, 2, 3)
    assert done.kv_handle.num_tokens == 10 and done.kv_handle.block_hashes == (101, 102)
    assert done.saves[0].block_ids == (1, 2, 3)
    ended = s.request_finished(_Req(prefill_only=True, finish_reason=FinishReason.STOP), [1], [], True)
    assert not ended.keep_blocks and ended.kv_handle is None


def test_a_decode_that_never_pulled_gives_the_blocks_up():
    s = HandoffScheduler("127.0.0.1:9", "tcp", LAYOUT)
    req = _Req(kv_handle=_handle(), finish_reason=FinishReason.ABORT)
    assert s.request_finished(req, [], [], admitted=False).give_up == req.kv_handle
    assert s.request_finished(req, [4], [], admitted=True).give_up is None


def test_validate_checks_the_handle_against_the_request_and_the_layout():
    s = HandoffScheduler("127.0.0.1:9", "tcp", LAYOUT)
    sp = SamplingParams()
    s.validate(EngineRequest("a", list(range(10)), sp, kv_handle=_handle(), resume_output_ids=[1]))
    with pytest.raises(InvalidRequest, match="covers 10 tokens, expected 11"):
        s.validate(EngineRequest("a", list(range(11)), sp, kv_handle=_handle(), resume_output_ids=[1]))
    other = KVHandle("x", "p", (1,), 10, KVLayout("m", "bfloat16", 4, 2, 2, 16).to_dict())
    with pytest.raises(KVLayoutMismatch, match="dtype"):
        s.validate(EngineRequest("a", list(range(10)), sp, kv_handle=other, resume_output_ids=[1]))
