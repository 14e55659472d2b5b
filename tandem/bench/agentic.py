"""Agentic sessions: a system prompt with tools, then turns that resend the whole history.

Each tenant has its own system prompt and tool definitions (shared by all its sessions). A
session starts with [system, user task]; after each answer the driver appends the assistant's
actual output and the next turn's tool result, waits the think time, and sends the grown
conversation again with `x-session-affinity: <session id>` (unless affinity_header is off, as
most agent harnesses send none). Think times are exponential around a mean, or uniform in a
range (tool runs of 0.5-10 s). Everything is drawn from one seed.

Sizes are in words of a fixed list of common English words; each is about one token in the
usual BPE vocabularies, so the planned sizes are token estimates. The planned ideal hits
(an infinite prefix cache): the first turn of a tenant's first session hits nothing, later
first turns hit the tenant's system prompt and tools, and turn k hits everything turn k-1 sent
plus its answer.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from tandem.bench.workload import Session, Turn, Workload, poisson_arrivals

WORDS = tuple("""
the of and to in is for on that with as by at from this be are or it an was which not have
can will file data value list name type table user query result error code line test run
time read write open close start stop check update create delete find search return call
function method class object field index key path system server client request response
message status output input config option default number string array map set item node
tree graph edge block cache memory disk page size count total first last next previous
new old main local remote global public private shared common simple basic full empty
valid invalid true false null none all any each every some other more less most least
high low fast slow small large long short good bad early late before after above below
into over under between during without within along across around through because while
until since then also only just still even again once here there where when what who how
why yes add get put move copy send load save parse build make take give keep show tell
work help need want use try ask look turn change play
""".split())


@dataclass(frozen=True)
class AgenticConfig:
    num_sessions: int = 8
    turns: int = 4                   # requests per session
    num_tenants: int = 2             # tenants with distinct system prompts and tools
    system_tokens: int = 1024        # system prompt size (words ~ tokens)
    tool_tokens: int = 512           # total size of the tool definitions' descriptions
    num_tools: int = 8
    user_tokens: int = 64            # first user message
    tool_result_tokens: int = 128    # tool result appended before each later turn
    output_tokens: int = 32          # max_tokens of every turn
    think_time_s: float = 0.5        # mean of the exponential pause between turns (0 = none)
    # (lo, hi): pauses drawn uniformly from [lo, hi] s instead (a tool run of a second or ten);
    # think_time_s is then unused
    think_time_range_s: tuple[float, float] | None = None
    session_rate: float | None = None  # open loop: Poisson session starts per second (None: all at 0)
    send_tools: bool = False         # send `tools` in the request; else the definitions go in the system prompt
    tool_result_role: str = "user"   # role of tool results ("tool" needs a template that accepts it)
    affinity_header: bool = True     # send x-session-affinity (False: as most harnesses, none)
    seed: int = 0


def _think_time(rng: np.random.Generator, cfg: AgenticConfig) -> float:
    if cfg.think_time_range_s is not None:
        lo, hi = cfg.think_time_range_s
        return float(rng.uniform(lo, hi))
    return float(rng.exponential(cfg.think_time_s)) if cfg.think_time_s > 0 else 0.0


def _words(rng: np.random.Generator, n: int) -> str:
    idx = rng.integers(0, len(WORDS), size=max(0, n))
    return " ".join(WORDS[i] for i in idx)


def _tools(rng: np.random.Generator, tenant: int, cfg: AgenticConfig) -> list[dict]:
    per_tool = max(1, cfg.tool_tokens // max(1, cfg.num_tools))
    return [{"type": "function", "function": {
        "name": f"t{tenant}_tool_{i}",
        "description": _words(rng, per_tool),
        "parameters": {"type": "object",
                       "properties": {"query": {"type": "string", "description": _words(rng, 4)}},
                       "required": ["query"]}}}
        for i in range(cfg.num_tools)]


def agentic_workload(cfg: AgenticConfig) -> Workload:
    if cfg.num_sessions < 1 or cfg.turns < 1 or cfg.num_tenants < 1:
        raise ValueError("agentic workload needs at least one session, turn and tenant")
    if cfg.think_time_range_s is not None:
        lo, hi = cfg.think_time_range_s
        if not 0 <= lo <= hi:
            raise ValueError(f"think time range {lo}..{hi}: expected 0 <= lo <= hi seconds")
    rng = np.random.default_rng(cfg.seed)
    tenants = []  # (system message, tools or None, planned prefix tokens)
    for t in range(cfg.num_tenants):
        tools = _tools(rng, t, cfg)
        system = f"You are agent number {t}. " + _words(rng, cfg.system_tokens)
        # ~20 tokens of JSON structure per tool besides its description
        prefix = cfg.system_tokens + 6 + cfg.tool_tokens + 20 * cfg.num_tools
        if not cfg.send_tools:
            system += "\n\n# Tools\n" + json.dumps(tools)
        tenants.append(({"role": "system", "content": system},
                        tuple(tools) if cfg.send_tools else None, prefix))
    arrivals = (poisson_arrivals(cfg.num_sessions, cfg.session_rate, cfg.seed)
                if cfg.session_rate else [0.0] * cfg.num_sessions)
    seen_tenants: set[int] = set()
    sessions = []
    for s in range(cfg.num_sessions):
        t = s % cfg.num_tenants
        system, tools, prefix = tenants[t]
        user = {"role": "user", "content": "Task: " + _words(rng, cfg.user_tokens)}
        expected = prefix + cfg.user_tokens + 2
        ideal = prefix if t in seen_tenants else 0
        seen_tenants.add(t)
        turns = []
        for k in range(cfg.turns):
            new: tuple[dict, ...] = ()
            think = 0.0
            if k > 0:
                ideal = expected + cfg.output_tokens   # all of turn k-1 and its answer
                expected = ideal + cfg.tool_result_tokens + 3
                new = ({"role": cfg.tool_result_role,
                        "content": "Tool result: " + _words(rng, cfg.tool_result_tokens)},)
                think = _think_time(rng, cfg)
            turns.append(Turn(request_id=f"s{s}-t{k}", max_tokens=cfg.output_tokens,
                              think_time_s=think, new_messages=new,
                              expected_prompt_tokens=expected, ideal_cached_tokens=ideal))
        sessions.append(Session(session_id=f"session-{cfg.seed}-{s}", turns=tuple(turns),
                                arrival_s=arrivals[s], tenant=f"tenant-{t}",
                                base_messages=(system, user), tools=tools,
                                affinity=cfg.affinity_header))
    return Workload(name="agentic", sessions=tuple(sessions),
                    params={"kind": "agentic", **asdict(cfg)}, uses_token_ids=False)
