import math
import time
from dataclasses import fields, replace

import orjson
import pytest

from tandem.errors import InvalidRequest
from tandem.api.internal import wire
from tandem.types import (AgentTurn, EngineRequest, FinishReason, GrammarSpec, KVHandle, ParserOptions,
                          RequestContext, RequestDelta, RequestTimings, SamplingParams, TokenLogprob,
                          TraceParent)

HANDLE = KVHandle(worker="10.0.0.1:9000", request_id="p-1", block_ids=(4, 5), num_tokens=20,
                  layout={"model": "x", "dtype": "float32", "block_size": 16, "num_layers": 2,
                          "num_kv_heads": 2, "head_dim": 8},
                  block_hashes=(2**64 - 1, 7), transport="shm")


def roundtrip(obj, to, frm):
    return frm(orjson.loads(orjson.dumps(to(obj))))


def test_request_roundtrip_keeps_every_field():
    sp = SamplingParams(max_tokens=7, temperature=0.5, top_p=0.9, top_k=5, min_p=0.05, seed=3,
                        presence_penalty=0.1, frequency_penalty=0.2, repetition_penalty=1.1,
                        stop=("a", "b"), stop_token_ids=(1, 2), ignore_eos=True, min_tokens=1,
                        logprobs=2, include_stop_str_in_output=True, skip_special_tokens=False,
                        logit_bias=((5, -1.5), (9, 100.0)),
                        prompt_logprobs=0, grammar=GrammarSpec("json_schema", '{"type": "object"}'))
    # every field differs from its default, so a forgotten field would show
    assert all(getattr(sp, f.name) != f.default for f in fields(SamplingParams))
    req = EngineRequest(request_id="r1", prompt_token_ids=[1, 2, 3], sampling=sp,
                        context=RequestContext(cache_salt="t"),
                        prefill_only=True, kv_handle=HANDLE, resume_output_ids=[9])
    back = roundtrip(req, wire.request_to_dict, wire.request_from_dict)
    for name in ("request_id", "prompt_token_ids", "sampling", "cache_salt", "prefill_only",
                 "kv_handle", "resume_output_ids"):
        assert getattr(back, name) == getattr(req, name), name
    assert "arrival_time" not in wire.request_to_dict(req)
    # the server's own (trusted) grammar keeps its mark between the cluster's processes
    trusted = replace(req, sampling=replace(sp, grammar=GrammarSpec("structural_tag", "{}", trusted=True)))
    assert roundtrip(trusted, wire.request_to_dict, wire.request_from_dict).sampling.grammar.trusted


def test_a_grammar_whose_trusted_mark_is_not_a_boolean_is_refused():
    d = wire.request_to_dict(EngineRequest(request_id="r1", prompt_token_ids=[1],
                                           sampling=SamplingParams(grammar=GrammarSpec("regex", "a"))))
    d["sampling"]["grammar"]["trusted"] = "yes"
    with pytest.raises(InvalidRequest, match="trusted"):
        wire.request_from_dict(d)


def test_request_context_roundtrip_keeps_every_field():
    ctx = RequestContext(session_id="s-1", tenant="key-1", cache_salt="t", priority=-3,
                         deadline=time.monotonic() + 30.0,
                         parser=ParserOptions(tool_call_parser="hermes", reasoning_parser="qwen3"),
                         share_prefix_cache=True, trace=TraceParent("ab" * 16, "cd" * 8),
                         shared_prefix_tokens=1, agent=AgentTurn(3.5, ("<tool_call>",)))
    # every field differs from its default, so a forgotten field would show
    assert all(getattr(ctx, f.name) != f.default for f in fields(RequestContext))
    req = EngineRequest(request_id="r1", prompt_token_ids=[1], sampling=SamplingParams(), context=ctx)
    back = roundtrip(req, wire.request_to_dict, wire.request_from_dict).context
    # all but the trace, which the traceparent header carries (tandem/gateway/upstream_trace.py)
    assert back.trace is None
    assert replace(back, deadline=None) == replace(ctx, deadline=None, trace=None)
    # the deadline travels as seconds left: the same instant on the receiver's clock
    assert abs(back.deadline - ctx.deadline) < 1.0
    assert (back.priority, back.cache_salt) == (-3, "t")


def test_request_defaults():
    back = wire.request_from_dict({"request_id": "r", "prompt_token_ids": [1]})
    assert back.sampling == SamplingParams() and back.kv_handle is None and not back.prefill_only
    assert back.context == RequestContext()


def test_a_top_level_cache_salt_from_an_older_caller_is_still_read():
    back = wire.request_from_dict({"request_id": "r", "prompt_token_ids": [1], "cache_salt": "t"})
    assert back.context == RequestContext(cache_salt="t") and back.cache_salt == "t"


@pytest.mark.parametrize("body,param", [
    ({"request_id": "r", "prompt_token_ids": [1], "sampling": {"top_k": "5"}}, "sampling.top_k"),
    ({"request_id": "r", "prompt_token_ids": [1], "sampling": {"stop": "a"}}, "sampling.stop"),
    ({"request_id": "r", "prompt_token_ids": [1], "sampling": {"nope": 1}}, "sampling"),
    ({"request_id": "r", "prompt_token_ids": [1], "sampling": {"temperature": 9}}, "temperature"),
    ({"request_id": "r", "prompt_token_ids": [1], "sampling": {"logit_bias": [[1]]}}, "sampling.logit_bias"),
    ({"request_id": "r", "prompt_token_ids": [1], "sampling": {"logit_bias": [["1", 2]]}},
     "sampling.logit_bias"),
    ({"request_id": "r", "prompt_token_ids": [1], "sampling": {"logit_bias": [[1, 200]]}}, "logit_bias"),
    ({"request_id": "r", "prompt_token_ids": [1.5]}, "prompt_token_ids"),
    ({"request_id": 5, "prompt_token_ids": [1]}, "request_id"),
    ({"request_id": "r", "prompt_token_ids": [1], "kv_handle": {"worker": "w"}}, "kv_handle"),
    ({"request_id": "r", "prompt_token_ids": [1], "prefill_only": 1}, "prefill_only"),
    ({"prompt_token_ids": [1]}, None),
    ({"request_id": "r", "prompt_token_ids": [1], "context": "x"}, "context"),
    ({"request_id": "r", "prompt_token_ids": [1], "context": {"nope": 1}}, "context"),
    ({"request_id": "r", "prompt_token_ids": [1], "context": {"priority": "high"}}, "context.priority"),
    ({"request_id": "r", "prompt_token_ids": [1], "context": {"session_id": 5}}, "context.session_id"),
    ({"request_id": "r", "prompt_token_ids": [1], "context": {"parser": {"tool_call_parser": 1}}},
     "context.parser.tool_call_parser"),
    ({"request_id": "r", "prompt_token_ids": [1], "cache_salt": 5}, "cache_salt"),
    # shared tokens past the prompt would share the tenant's output blocks
    ({"request_id": "r", "prompt_token_ids": [1], "context": {"shared_prefix_tokens": 2}},
     "context.shared_prefix_tokens"),
    ({"request_id": "r", "prompt_token_ids": [1], "context": {"shared_prefix_tokens": -1}},
     "context.shared_prefix_tokens"),
    ({"request_id": "r", "prompt_token_ids": [1], "context": {"shared_prefix_tokens": "1"}},
     "context.shared_prefix_tokens"),
])
def test_request_from_dict_rejects_bad_fields(body, param):
    with pytest.raises(InvalidRequest) as info:
        wire.request_from_dict(body)
    assert info.value.param == param


def test_delta_roundtrip_full():
    d = RequestDelta(request_id="r", new_token_ids=[5, 6], new_text="hi", finished=True,
                     finish_reason=FinishReason.LENGTH,
                     logprobs=[TokenLogprob(5, -math.inf, ((5, -0.5), (7, -math.inf))),
                               TokenLogprob(6, -0.25, ())],
                     prompt_logprobs=[TokenLogprob(3, -1.0, ((4, -0.5),), rank=2),
                                      TokenLogprob(4, -math.inf, (), rank=9)],
                     num_prompt_tokens=10, num_cached_tokens=8, num_output_tokens=2,
                     kv_handle=HANDLE, timings=RequestTimings(1.0, 1.5, 2.0, None), error="boom")
    assert roundtrip(d, wire.delta_to_dict, wire.delta_from_dict) == d


def test_delta_minimal_is_small():
    d = RequestDelta(request_id="r", new_token_ids=[5], new_text="a")
    assert wire.delta_to_dict(d) == {"request_id": "r", "new_token_ids": [5], "new_text": "a"}
    assert roundtrip(d, wire.delta_to_dict, wire.delta_from_dict) == d
