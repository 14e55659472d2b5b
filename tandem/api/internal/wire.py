"""EngineRequest and RequestDelta <-> JSON-ready dicts, for the worker's internal API.

Both sides run the same tandem version, yet the decoder still checks every type: a
malformed body is an InvalidRequest naming the field, never a crash in the engine.
Not sent: EngineRequest.arrival_time (a monotonic clock means nothing in another process;
the receiver stamps its own). For the same reason the context's deadline travels as the
seconds left when it was sent ("deadline_s"). Logprobs of -inf travel as null (JSON has no
infinity). A body without "context" may carry a top-level "cache_salt" (older callers).
"""

from __future__ import annotations

import math
import time
from dataclasses import fields
from typing import Any, Callable

from tandem.errors import InvalidRequest
from tandem.types import (
    AgentTurn,
    EngineRequest,
    FinishReason,
    GrammarSpec,
    KVHandle,
    ParserOptions,
    RequestContext,
    RequestDelta,
    RequestTimings,
    SamplingParams,
    TokenLogprob,
)


def _fail(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"'{param}' {why}", param=param)


def _int(v: Any, param: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise _fail(param, f"must be an integer, got {type(v).__name__}")


def _float(v: Any, param: str) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    raise _fail(param, f"must be a number, got {type(v).__name__}")


def _bool(v: Any, param: str) -> bool:
    if isinstance(v, bool):
        return v
    raise _fail(param, f"must be a boolean, got {type(v).__name__}")


def _opt(conv: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    return lambda v, p: None if v is None else conv(v, p)


def _list(conv: Callable[[Any, str], Any]) -> Callable[[Any, str], list]:
    def read(v: Any, p: str) -> list:
        if not isinstance(v, list):
            raise _fail(p, "must be an array")
        return [conv(x, p) for x in v]
    return read


def _int_list(v: Any, param: str) -> list[int]:
    """A list of ints (token ids: a long prompt is checked in one pass, not one call an item)."""
    if isinstance(v, list) and all(type(x) is int for x in v):
        return v
    return _list(_int)(v, param)


def _pair(v: Any, param: str) -> tuple[int, float]:
    if not (isinstance(v, list) and len(v) == 2):
        raise _fail(param, "must hold [token id, bias] pairs")
    return _int(v[0], param), _float(v[1], param)


def _str(v: Any, param: str) -> str:
    if isinstance(v, str):
        return v
    raise _fail(param, f"must be a string, got {type(v).__name__}")


def _grammar(v: Any, param: str) -> GrammarSpec:
    if not (isinstance(v, dict) and v.keys() <= {"kind", "text", "trusted"} and "kind" in v):
        raise _fail(param, "must be an object with 'kind', 'text' and optionally 'trusted'")
    trusted = v.get("trusted", False)
    if not isinstance(trusted, bool):
        raise _fail(param, f"'trusted' must be a boolean, got {type(trusted).__name__}")
    return GrammarSpec(_str(v["kind"], param), _str(v.get("text", ""), param), trusted)


# One decoder per SamplingParams field, keyed by its annotation (a string under
# `from __future__ import annotations`). tests/api/internal/test_wire.py checks every field is covered.
_BY_ANNOTATION: dict[str, Callable[[Any, str], Any]] = {
    "int": _int, "float": _float, "bool": _bool,
    "int | None": _opt(_int),
    "tuple[str, ...]": lambda v, p: tuple(_list(_str)(v, p)),
    "tuple[int, ...]": lambda v, p: tuple(_list(_int)(v, p)),
    "tuple[tuple[int, float], ...]": lambda v, p: tuple(_list(_pair)(v, p)),
    "GrammarSpec | None": _opt(lambda v, p: _grammar(v, p)),
}
_SAMPLING_FIELDS = {f.name: _BY_ANNOTATION[str(f.type)] for f in fields(SamplingParams)}


def _field_to_json(v: Any) -> Any:
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, GrammarSpec):
        return {"kind": v.kind, "text": v.text, "trusted": v.trusted}
    return v


def sampling_to_dict(sp: SamplingParams) -> dict:
    return {name: _field_to_json(getattr(sp, name)) for name in _SAMPLING_FIELDS}


def sampling_from_dict(d: Any) -> SamplingParams:
    if not isinstance(d, dict):
        raise _fail("sampling", "must be an object")
    unknown = sorted(d.keys() - _SAMPLING_FIELDS.keys())
    if unknown:
        raise _fail("sampling", f"has unknown fields {unknown}")
    sp = SamplingParams(**{k: _SAMPLING_FIELDS[k](v, f"sampling.{k}") for k, v in d.items()})
    sp.validate()
    return sp


_CONTEXT_KEYS = {"session_id", "tenant", "cache_salt", "priority", "deadline_s", "parser",
                 "share_prefix_cache", "shared_prefix_tokens",
                 "agent"}
_PARSER_KEYS = {"tool_call_parser", "reasoning_parser"}
_AGENT_KEYS = {"expect_next_turn_s", "tool_call_markers"}


def context_to_dict(c: RequestContext) -> dict:
    return {"session_id": c.session_id, "tenant": c.tenant, "cache_salt": c.cache_salt,
            "priority": c.priority,
            "deadline_s": None if c.deadline is None else c.deadline - time.monotonic(),
            "parser": {"tool_call_parser": c.parser.tool_call_parser,
                       "reasoning_parser": c.parser.reasoning_parser},
            "share_prefix_cache": c.share_prefix_cache,
            "shared_prefix_tokens": c.shared_prefix_tokens,
            "agent": {"expect_next_turn_s": c.agent.expect_next_turn_s,
                      "tool_call_markers": list(c.agent.tool_call_markers)}}


def _object(v: Any, param: str, keys: set[str]) -> dict:
    if not isinstance(v, dict):
        raise _fail(param, "must be an object")
    unknown = sorted(v.keys() - keys)
    if unknown:
        raise _fail(param, f"has unknown fields {unknown}")
    return v


def context_from_dict(v: Any) -> RequestContext:
    d = _object(v, "context", _CONTEXT_KEYS)
    p = _object(d.get("parser", {}), "context.parser", _PARSER_KEYS)

    def text(obj: dict, key: str, prefix: str = "context.") -> str | None:
        return _opt(_str)(obj.get(key), prefix + key)

    a = _object(d.get("agent", {}), "context.agent", _AGENT_KEYS)
    markers = a.get("tool_call_markers", [])
    if not isinstance(markers, list) or not all(isinstance(m, str) for m in markers):
        raise _fail("context.agent.tool_call_markers", "must be a list of strings")
    expect = _opt(_float)(a.get("expect_next_turn_s"), "context.agent.expect_next_turn_s")
    if expect is not None and not 0 <= expect < float("inf"):
        raise _fail("context.agent.expect_next_turn_s", "must be a finite number >= 0")
    left = _opt(_float)(d.get("deadline_s"), "context.deadline_s")
    return RequestContext(
        session_id=text(d, "session_id"), tenant=text(d, "tenant"),
        cache_salt=text(d, "cache_salt"), priority=_int(d.get("priority", 0), "context.priority"),
        deadline=None if left is None else time.monotonic() + left,
        parser=ParserOptions(tool_call_parser=text(p, "tool_call_parser", "context.parser."),
                             reasoning_parser=text(p, "reasoning_parser", "context.parser.")),
        share_prefix_cache=_bool(d.get("share_prefix_cache", False), "context.share_prefix_cache"),
        shared_prefix_tokens=_int(d.get("shared_prefix_tokens", 0), "context.shared_prefix_tokens"),
        agent=AgentTurn(expect, tuple(markers)))


def request_to_dict(req: EngineRequest) -> dict:
    return {"request_id": req.request_id, "prompt_token_ids": req.prompt_token_ids,
            "sampling": sampling_to_dict(req.sampling), "context": context_to_dict(req.context),
            "prefill_only": req.prefill_only,
            "kv_handle": req.kv_handle.to_dict() if req.kv_handle else None,
            "resume_output_ids": req.resume_output_ids}


def request_from_dict(d: Any) -> EngineRequest:
    if not isinstance(d, dict):
        raise InvalidRequest("request must be a JSON object")
    if "request_id" not in d or "prompt_token_ids" not in d:
        raise InvalidRequest("request needs 'request_id' and 'prompt_token_ids'")
    handle = d.get("kv_handle")
    if handle is not None and not isinstance(handle, dict):
        raise _fail("kv_handle", "must be an object")
    context = d.get("context")
    prompt = _int_list(d["prompt_token_ids"], "prompt_token_ids")
    ctx = context_from_dict(context) if context is not None \
        else RequestContext(cache_salt=_opt(_str)(d.get("cache_salt"), "cache_salt"))
    if not 0 <= ctx.shared_prefix_tokens <= len(prompt):   # past the prompt it would share output
        raise _fail("context.shared_prefix_tokens", f"must be in [0, {len(prompt)}] (the prompt's length)")
    return EngineRequest(
        request_id=_str(d["request_id"], "request_id"),
        prompt_token_ids=prompt,
        sampling=sampling_from_dict(d.get("sampling", {})),
        context=ctx,
        prefill_only=_bool(d.get("prefill_only", False), "prefill_only"),
        kv_handle=KVHandle.from_dict(handle) if handle is not None else None,
        resume_output_ids=_int_list(d.get("resume_output_ids", []), "resume_output_ids"))


def _lp_out(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _lp_in(v: Any) -> float:
    return -math.inf if v is None else float(v)


def _lps_out(lps: list[TokenLogprob]) -> list:
    """[token_id, logprob, [[top id, top logprob], ...]] per token, plus the rank when known."""
    return [[lp.token_id, _lp_out(lp.logprob), [[t, _lp_out(v)] for t, v in lp.top]]
            + ([lp.rank] if lp.rank is not None else []) for lp in lps]


def _lps_in(lps: list) -> list[TokenLogprob]:
    return [TokenLogprob(token_id=e[0], logprob=_lp_in(e[1]),
                         top=tuple((a, _lp_in(b)) for a, b in e[2]),
                         rank=e[3] if len(e) > 3 else None) for e in lps]


def delta_to_dict(d: RequestDelta) -> dict:
    """Fields at their defaults are left out: deltas are the hot path of the gateway."""
    out: dict[str, Any] = {"request_id": d.request_id, "new_token_ids": d.new_token_ids,
                           "new_text": d.new_text}
    if d.finished:
        out["finished"] = True
    if d.finish_reason is not None:
        out["finish_reason"] = d.finish_reason.value
    if d.logprobs is not None:
        out["logprobs"] = _lps_out(d.logprobs)
    if d.prompt_logprobs is not None:
        out["prompt_logprobs"] = _lps_out(d.prompt_logprobs)
    for name in ("num_prompt_tokens", "num_cached_tokens", "num_output_tokens"):
        if value := getattr(d, name):
            out[name] = value
    if d.kv_handle is not None:
        out["kv_handle"] = d.kv_handle.to_dict()
    if d.timings is not None:
        t = d.timings
        out["timings"] = {"arrival": t.arrival, "first_scheduled": t.first_scheduled,
                          "first_token": t.first_token, "finished": t.finished}
    if d.error is not None:
        out["error"] = d.error
    return out


def delta_from_dict(d: dict) -> RequestDelta:
    lps = d.get("logprobs")
    prompt_lps = d.get("prompt_logprobs")
    t = d.get("timings")
    reason = d.get("finish_reason")
    return RequestDelta(
        request_id=d["request_id"], new_token_ids=d["new_token_ids"], new_text=d["new_text"],
        finished=d.get("finished", False),
        finish_reason=FinishReason(reason) if reason is not None else None,
        logprobs=None if lps is None else _lps_in(lps),
        prompt_logprobs=None if prompt_lps is None else _lps_in(prompt_lps),
        num_prompt_tokens=d.get("num_prompt_tokens", 0),
        num_cached_tokens=d.get("num_cached_tokens", 0),
        num_output_tokens=d.get("num_output_tokens", 0),
        kv_handle=KVHandle.from_dict(d["kv_handle"]) if d.get("kv_handle") else None,
        timings=RequestTimings(**t) if t is not None else None,
        error=d.get("error"))
