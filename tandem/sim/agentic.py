"""An agentic trace for the simulator, shaped like `tandem bench`'s agentic workload.

tandem/bench/agentic.py's defaults: each tenant has a system prompt with tools (~1,700 tokens,
shared by its sessions); a session opens with [system, user task] (~70 tokens of its own), then
each turn resends the whole conversation plus the previous answer (32 tokens) and a tool result
(~130 tokens). Here the prompts are token sequences of their owners' ids (tenant, session, turn),
so equal prefixes are equal tokens, and the block hashes are the workers' own chained hashes
(tandem/kv/block_hash.py) over full blocks; a prompt's partial last block gets a hash of its own,
never equal to a full block's. As the bench, sessions start `session_gap_s` apart (0: all at
once) and run closed loop: a turn arrives a think time (exponential, mean `think_s`, drawn from
`seed`) after the previous answer (`SimRequest.follows`).

Each request names the full blocks its answer adds (`SimRequest.output_hashes`), so the worker
that decodes it caches them as an engine does, and the ideal (tandem/sim/trace.py `make_trace`:
every repeated block) counts the previous answer as a hit, as the bench's does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tandem.kv.block_hash import hash_block_tokens, hash_request_blocks
from tandem.sim.request import SimRequest
from tandem.sim.trace import Trace, make_trace


@dataclass(frozen=True)
class AgenticTrace:
    sessions: int = 8
    turns: int = 4
    tenants: int = 2
    prefix_tokens: int = 1702       # system prompt + tools (AgenticConfig's planned prefix)
    user_tokens: int = 66
    output_tokens: int = 32
    tool_result_tokens: int = 131
    session_gap_s: float = 0.0      # between sessions' first turns
    think_s: float = 0.5            # mean pause between an answer and the next turn
    block_size: int = 16
    seed: int = 0


def _tokens(owner: int, n: int) -> list[int]:
    """n token ids that belong to `owner` alone (ids differ between owners; the simulator never
    looks a token up in a vocabulary)."""
    return [owner * 1_000_000 + i for i in range(n)]


def agentic_trace(cfg: AgenticTrace = AgenticTrace()) -> Trace:
    bs = cfg.block_size
    rng = random.Random(cfg.seed)
    requests = []
    for s in range(cfg.sessions):
        tenant = s % cfg.tenants
        prompt = _tokens(1 + tenant, cfg.prefix_tokens) + _tokens(1_000 + s, cfg.user_tokens)
        for k in range(cfg.turns):
            answer = _tokens(1_000_000 + 1_000 * s + k, cfg.output_tokens)
            hashes = hash_request_blocks(prompt, bs)
            full = len(hashes)
            tail = prompt[full * bs:]
            if tail:
                hashes.append(hash_block_tokens(hashes[-1] if hashes else None, tail, ("partial",)))
            decoded = hash_request_blocks(prompt + answer[:-1], bs)[full:]
            think = rng.expovariate(1.0 / cfg.think_s) if k > 0 and cfg.think_s > 0 else 0.0
            requests.append(SimRequest(f"s{s}-t{k}", s * cfg.session_gap_s, len(prompt), cfg.output_tokens,
                                       tuple(hashes), f"session-{s}", output_hashes=tuple(decoded),
                                       follows=f"s{s}-t{k - 1}" if k > 0 else None, think_s=think))
            # the next turn: this answer and a tool result
            prompt = prompt + answer + _tokens(2_000_000 + 1_000 * s + k, cfg.tool_result_tokens)
    requests.sort(key=lambda r: (r.arrival, int(r.request_id.split("-t")[1])))
    return make_trace(requests, bs)
