"""Plain data passed between layers: requests, sampling parameters, outputs. No torch here."""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field

from tandem.errors import InvalidRequest


GRAMMAR_KINDS = ("json_schema", "json_object", "regex", "choice", "ebnf", "structural_tag")


@dataclass(frozen=True)
class GrammarSpec:
    """A constraint on the generated text (structured outputs), compiled by tandem/grammar.

    `text` by kind: json_schema, the schema as JSON; json_object, ignored (any JSON object);
    regex, the pattern; choice, a JSON list of the allowed strings; ebnf, the grammar (xgrammar's
    EBNF, root rule `root`); structural_tag, xgrammar's structural tag as JSON (tool calls).

    `trusted`: built by the server from its own parts, nothing of a request in it (the guard that
    keeps a tool call from opening when no tools were given): compiled without the bounded trial
    that a client's constraint gets (tandem/grammar/compiler.py). Never set from a client's body;
    it travels between the cluster's own processes (the internal API)."""

    kind: str
    text: str = ""
    trusted: bool = False


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens and when to stop. Defaults follow the OpenAI API."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None  # None: no logprobs; k >= 0: the sampled token plus the top k
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True  # leave special tokens (e.g. <|im_end|>) out of the text
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit), OpenAI's logit_bias
    # None: off; k >= 0: each prompt token's logprob (but the first's) plus the top k. Such a
    # prompt is computed whole: a prefix-cache hit has no logits to score.
    prompt_logprobs: int | None = None
    grammar: GrammarSpec | None = None   # the output must match it (masks at every step)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def needs_penalties(self) -> bool:
        return (self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.repetition_penalty != 1.0)

    def validate(self) -> None:
        """Raise InvalidRequest naming the first bad parameter."""
        def bad(param: str, why: str) -> InvalidRequest:
            return InvalidRequest(f"'{param}' {why}", param=param)

        if self.max_tokens < 1:
            raise bad("max_tokens", f"must be at least 1, got {self.max_tokens}")
        if not (math.isfinite(self.temperature) and 0.0 <= self.temperature <= 2.0):
            raise bad("temperature", f"must be between 0 and 2, got {self.temperature}")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise bad("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise bad("top_k", f"must be 0 (off) or positive, got {self.top_k}")
        if not (math.isfinite(self.min_p) and 0.0 <= self.min_p <= 1.0):
            raise bad("min_p", f"must be in [0, 1], got {self.min_p}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not (math.isfinite(value) and -2.0 <= value <= 2.0):
                raise bad(name, f"must be between -2 and 2, got {value}")
        if not (math.isfinite(self.repetition_penalty) and 0.0 < self.repetition_penalty <= 10.0):
            raise bad("repetition_penalty", f"must be in (0, 10], got {self.repetition_penalty}")
        if len(self.stop) > 16:
            raise bad("stop", "accepts at most 16 sequences")
        if any(not s for s in self.stop):
            raise bad("stop", "must not contain empty strings")
        if self.logprobs is not None and not (0 <= self.logprobs <= 20):
            raise bad("top_logprobs", f"must be between 0 and 20, got {self.logprobs}")
        if self.prompt_logprobs is not None and not (0 <= self.prompt_logprobs <= 20):
            raise bad("prompt_logprobs", f"must be between 0 and 20, got {self.prompt_logprobs}")
        if self.min_tokens < 0 or self.min_tokens > self.max_tokens:
            raise bad("min_tokens", "must be between 0 and max_tokens")
        if self.grammar is not None and self.grammar.kind not in GRAMMAR_KINDS:
            raise bad("structured_outputs", f"has unknown kind {self.grammar.kind!r}; one of {', '.join(GRAMMAR_KINDS)}")
        for token_id, bias in self.logit_bias:
            if token_id < 0:
                raise bad("logit_bias", f"has token id {token_id}; token ids are non-negative")
            if not (math.isfinite(bias) and -100.0 <= bias <= 100.0):
                raise bad("logit_bias", f"maps token {token_id} to {bias}; biases are between -100 and 100")


class FinishReason(str, enum.Enum):
    STOP = "stop"          # EOS, a stop token id or a stop string
    LENGTH = "length"      # max_tokens or the model's context
    ABORT = "abort"        # the client went away or the request was cancelled
    ERROR = "error"        # the engine failed this request (message in RequestDelta.error)


@dataclass(frozen=True)
class KVHandle:
    """Where a prefill worker keeps a request's KV blocks for a decode worker to pull.

    The prefill side holds `block_ids` pinned until the decode side confirms the pull
    (or a timeout passes). `block_hashes` lets the decode side skip blocks it already has.
    """

    worker: str                  # transport address of the prefill worker's KV (opaque to the gateway)
    request_id: str              # id of the request on the prefill worker
    block_ids: tuple[int, ...]   # blocks on the prefill worker, in sequence order
    num_tokens: int              # tokens whose KV is in those blocks (the prompt)
    layout: dict                 # KVLayout.to_dict() of the prefill worker (checked by the puller)
    block_hashes: tuple[int, ...] = ()  # chained hashes of the full blocks, same order
    transport: str = "tcp"

    def to_dict(self) -> dict:
        return {"worker": self.worker, "request_id": self.request_id,
                "block_ids": list(self.block_ids), "num_tokens": self.num_tokens,
                "layout": self.layout, "block_hashes": [str(h) for h in self.block_hashes],
                "transport": self.transport}

    @classmethod
    def from_dict(cls, d: dict) -> "KVHandle":
        try:
            return cls(worker=str(d["worker"]), request_id=str(d["request_id"]),
                       block_ids=tuple(int(b) for b in d["block_ids"]),
                       num_tokens=int(d["num_tokens"]), layout=dict(d["layout"]),
                       block_hashes=tuple(int(h) for h in d.get("block_hashes", ())),
                       transport=str(d.get("transport", "tcp")))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidRequest(f"malformed kv_handle: {exc}", param="kv_handle") from exc


@dataclass(frozen=True)
class ParserOptions:
    """How the server turns this request's generated text into API fields (the tool-call and
    reasoning parsers by vLLM's names; None: plain text)."""

    tool_call_parser: str | None = None
    reasoning_parser: str | None = None


@dataclass(frozen=True)
class TraceParent:
    """A W3C trace context (the `traceparent` header, version 00): the trace a request belongs to
    and the span that sent it. Parsed and formatted by tandem/tracing/traceparent.py; ids are
    lowercase hex, never all zeros."""

    trace_id: str       # 32 hex digits
    span_id: str        # 16 hex digits: the caller's span, the parent of the receiver's
    sampled: bool = True  # the caller may have recorded its span: receivers record theirs


@dataclass(frozen=True)
class AgentTurn:
    """What a request says of the agent turn it is; the worker keeps the turn's KV for the next
    one (tandem/kv/retention.py)."""

    # the client's hint (body `agent.expect_next_turn_s` or header `x-agent-expect-next-turn-s`),
    # clamped by the route; 0: no next turn is coming; None: no hint
    expect_next_turn_s: float | None = None
    # output texts that open a tool call in this request's format (its tool-call parser's); empty
    # when no tools are offered
    tool_call_markers: tuple[str, ...] = ()


@dataclass(frozen=True)
class RequestContext:
    """Who sends a request and how it is to be served, carried explicitly from the HTTP layer
    through the backend (gateway: routing; worker: the engine). Never read from ambient state."""

    session_id: str | None = None    # x-session-affinity: requests of one session go to one worker
    tenant: str | None = None        # the API key's tenant (None: anonymous, a server without keys)
    cache_salt: str | None = None    # part of every block hash: KV is shared only within a salt
    priority: int = 0                # vLLM's convention: lower values are served first
    deadline: float | None = None    # time.monotonic() by which the request should have finished
    parser: ParserOptions = ParserOptions()
    # The tenant is part of every block hash too (tandem/kv/block_hash.py: cache_keys), so
    # tenants never share KV; True (the operator's --share-prefix-cache) leaves it out.
    share_prefix_cache: bool = False
    # the HTTP request's server span (tandem/api/tracing.py): a gateway's calls to its workers are
    # its children. Not on the internal wire: the `traceparent` header carries it between processes.
    trace: TraceParent | None = None
    # Leading prompt tokens inside a prefix the operator declared shared (--shared-prefixes):
    # whole blocks of them are hashed without the tenant. Set by the route that builds the
    # request (so a gateway's value holds on its workers); never more than the prompt's length.
    shared_prefix_tokens: int = 0
    agent: AgentTurn = AgentTurn()


@dataclass
class EngineRequest:
    """One generation request as the engine sees it: token ids in, deltas out."""

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams
    context: RequestContext = RequestContext()
    arrival_time: float = field(default_factory=time.monotonic)
    prefill_only: bool = False               # prefill role: stop after the first token, keep blocks
    kv_handle: KVHandle | None = None        # decode role: pull these blocks before decoding
    # Tokens already generated elsewhere (prefill's first token, or a migrated stream's
    # sent tokens). They are part of the context, count toward max_tokens, and are not
    # emitted again.
    resume_output_ids: list[int] = field(default_factory=list)

    @property
    def cache_salt(self) -> str | None:
        return self.context.cache_salt


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob), best first
    rank: int | None = None  # 1 + how many tokens scored higher (known for scored prompt tokens)


@dataclass(frozen=True)
class RequestTimings:
    arrival: float
    first_scheduled: float | None
    first_token: float | None
    finished: float | None


@dataclass(frozen=True)
class RequestDelta:
    """What one engine step produced for one request."""

    request_id: str
    new_token_ids: list[int]
    new_text: str
    finished: bool = False
    finish_reason: FinishReason | None = None
    logprobs: list[TokenLogprob] | None = None
    # prompt tokens 1..n-1 scored (SamplingParams.prompt_logprobs), on the delta of the first token
    prompt_logprobs: list[TokenLogprob] | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    num_output_tokens: int = 0
    kv_handle: KVHandle | None = None   # prefill role: set on the final delta
    timings: RequestTimings | None = None  # set on the final delta
    error: str | None = None


# the layout of EngineStats.kv_tier_stats (summed position by position across workers)
KV_TIERS = ("host", "disk", "store")
KV_TIER_COUNTERS = ("queries", "hits", "read_bytes", "write_bytes", "read_seconds", "reads",
                    "write_seconds", "writes", "corrupt", "errors", "skipped", "evicted",
                    "used_bytes", "capacity_bytes", "available")
# the layout of EngineStats.kv_handoff_stats (summed position by position across workers): pulls
# per bucket of KV_HANDOFF_BUCKETS (upper bounds in seconds, then one past the last), then the
# pulls' summed seconds, then the failed pulls
KV_HANDOFF_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# upper bounds, in seconds, of EngineStats.turn_gap_counts (the observed pauses between an agent's
# turns: most within a second, nearly all within ten)
TURN_GAP_BUCKETS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's load and cache, for /metrics and the gateway."""

    num_running: int
    num_waiting: int
    num_blocks_total: int
    num_blocks_free: int          # free now, including evictable cached blocks
    num_blocks_cached: int        # holding a reusable prefix
    kv_cache_usage: float         # fraction of blocks referenced by live requests
    prefix_cache_queries: int     # tokens looked up, cumulative
    prefix_cache_hits: int        # tokens found, cumulative
    prompt_tokens: int            # cumulative
    generation_tokens: int        # cumulative
    num_preemptions: int          # cumulative
    waiting_prefill_tokens: int   # prompt tokens not yet computed, over all requests
    running_context_tokens: int   # tokens in the contexts of running requests past their prefill
    # speculative decoding, cumulative (vLLM's spec_decode counters)
    spec_num_drafts: int = 0              # request-steps that verified at least one draft token
    spec_num_draft_tokens: int = 0        # draft tokens verified
    spec_num_accepted_tokens: int = 0     # draft tokens accepted
    spec_accepted_per_pos: tuple[int, ...] = ()   # accepted drafts by position in the draft
    # KV tiers below the device (tandem.kvstore), cumulative except usage and availability: one
    # value per (tier, counter) of KV_TIERS x KV_TIER_COUNTERS, tier-major; () without tiers
    kv_tier_stats: tuple[float, ...] = ()
    # per tier of KV_TIERS, loading a block against recomputing it as this worker's cost model
    # measures it (tandem/kvstore/cost.py; >= 1: a hit there is not worth loading); the gateway
    # routes by it (tandem/router/policies/prefix_value.py); () without tiers; not summed
    kv_tier_weights: tuple[float, ...] = ()
    # KV pulls of the prefill -> decode handoff on this (decode) worker, cumulative: the layout of
    # KV_HANDOFF_BUCKETS; () without a handoff connector
    kv_handoff_stats: tuple[float, ...] = ()
    # KV retention across tool calls (tandem/kv/retention.py): blocks retained now; turns whose
    # next turn arrived while retained; retentions that expired; retained blocks taken under
    # pressure (demoted to the host tier when there is one); observed gaps between a retained
    # turn's end and the next turn's arrival, cumulative counts per TURN_GAP_BUCKETS bound
    # (+Inf last), and their sum in seconds
    retained_blocks: int = 0
    retention_hits: int = 0
    retention_expired: int = 0
    retention_evicted_blocks: int = 0
    turn_gap_counts: tuple[int, ...] = ()
    turn_gap_sum: float = 0.0
