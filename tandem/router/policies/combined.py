"""default: sessions kept on their worker, new sessions placed for their future, then prefix + load.

A session is a conversation the gateway recognises: by its `x-session-affinity` header, else by a
fingerprint of its first messages (tandem/gateway/conversation.py). The router remembers, per pool,
the worker each session's last request went to (`RequestInfo.session_home`, from
tandem/router/sessions.py) and how many live sessions each worker holds (`WorkerLoad.sessions`).

1. A session with a home goes home (reason "affinity") while the home is available and within
   the load bound: its history is cached there, even before the KV events say so. The bound is
   affinity.py's, max(slack_tokens, load_factor * (sum of loads + prompt) / workers), but what
   a request adds to a worker is what that worker must compute (and load) of it, not its whole
   prompt: at home that is the new turn only, so a session leaves its cache only for a real
   imbalance. Unless the shared KV store holds at least as much of the prompt as the home does:
   then every worker can load the history, and the request is placed as in 2 ("session_*").
2. A session without a home (its first request, reasons "new_*"), or whose home is down or over
   the bound ("session_*"), is placed among
   - the available workers within the load bound (all of them if none is),
   - holding fewer than `min sessions + new_session_slack` sessions: new sessions are spread
     over the workers, because a session's later turns are most of its work and will follow it
     (with the default slack of 2, new sessions never make the workers' live session counts
     differ by more than two). Within that, the prefix decides: with a slack of 1 the counts
     alone placed every other session, so two tenants' sessions alternating over two workers
     put both tenants' system prompts in each worker's cache, which on a tight cache evicted the
     sessions' histories (docs/benchmarks.md 14: 0.81 of the ideal cached tokens against 0.96
     with 2). The cost that remains: a prefix shared by more sessions than a worker takes (a
     tenant's system prompt) is computed once on each worker it spreads to. A session whose
     client said it ended (RequestInfo.session_ends) no longer counts, nor one resting between
     tasks (its last turn stopped without a tool call: tandem/router/sessions.py). Not in
     a pool of prefill workers: a session's later turns follow its decode worker (placement.py,
     rule 5), so a prefill worker holds no session's future and prefix and load decide there;
   by prefix_aware's near-best rule (below), then the session's rendezvous order (affinity.py).
3. A request of no session: prefix_aware's near-best rule over every available worker.

Near-best (prefix_aware.py with a margin): cost(w) = load(w) + what w computes or loads of the
prompt, each tier's hit valued by the load-versus-recompute model (prefix_value.py). The workers
within `margin` of the lowest cost, margin = max(margin_blocks blocks, margin_frac of the prompt),
are near-best; of those, the ones whose hit is within the margin of the largest, then the least
loaded wins, then the one holding fewest sessions. So a prefix that differs by a block or a tenth
of the prompt (a chat template's opening, a short shared system prompt) does not decide alone,
while a session's whole history, or a system prompt a worker holds or is computing, does at a
near tie in cost.

Reasons (metric labels): "affinity"; prefix_aware's ("prefix", "store", "load", "hotspot"), bare
for requests of no session, prefixed "new_" for a session's first request and "session_" for a
session moved from its home.

Load: a worker's queued prefill tokens plus DECODE_WEIGHT (0.1) times the context tokens of its
decoding requests, in the load bound, the hotspot guard and the cost alike. A decoding request
delays a newcomer's prefill by its share of each step the prefill shares with it (attention over
its context: about context / (6 x hidden size) prefill tokens a step), not by its whole context;
weighted 1.0, two sessions in their last decode steps on 4k-token contexts made their worker a
"hotspot" and sent the next session of the same tenant to a worker without its system prompt,
which then held two tenants' prompts in a cache with room for one (docs/benchmarks.md 14).
Only the requests of the routed request's priority or a better one count (WorkerLoad's token
loads, tandem/router/load_tracker.py): a worker serves better levels first, so a flood of
priority-10 prompts on a tenant's worker delays none of its priority-0 sessions and must not
send them to a worker without their system prompt (docs/benchmarks.md 19).

Settings: AffinityConfig (load bound), PrefixAwareConfig (margin_blocks=1, margin_frac=0.1 here;
tier weights; hotspot guard), SessionConfig.new_session_slack.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tandem.router.policies.affinity import AffinityConfig
from tandem.router.policies.base import candidates, token_load
from tandem.router.policies.prefix_aware import PrefixAware, PrefixAwareConfig
from tandem.router.policies.prefix_value import uncached_cost
from tandem.router.snapshot import Decision, Snapshot


@dataclass(frozen=True)
class SessionConfig:
    # a new (or moved) session goes only to a worker holding fewer sessions than the fewest any
    # candidate holds plus this; 1: by counts alone; a large value lets the prefix decide alone
    new_session_slack: int = 2


DECODE_WEIGHT = 0.1


def near_best() -> PrefixAware:
    return PrefixAware(PrefixAwareConfig(decode_weight=DECODE_WEIGHT, margin_blocks=1, margin_frac=0.1))


def session_bound() -> AffinityConfig:
    return AffinityConfig(decode_weight=DECODE_WEIGHT)


@dataclass(frozen=True)
class Combined:
    affinity: AffinityConfig = field(default_factory=session_bound)
    prefix: PrefixAware = field(default_factory=near_best)
    sessions: SessionConfig = field(default_factory=SessionConfig)
    name: str = "default"

    def choose(self, snap: Snapshot) -> Decision:
        req = snap.request
        if req.session_id is None:
            return replace(self.prefix.choose(snap), policy=self.name)
        ws = candidates(snap)
        cfg = self.affinity
        loads = {w.worker_id: token_load(w, cfg.decode_weight) for w in ws}
        # what the request adds to each worker: what that worker computes (and loads) of it
        adds = {w.worker_id: uncached_cost(w, req, self.prefix.config.tiers) for w in ws}
        bound = max(cfg.slack_tokens,
                    cfg.load_factor * (sum(loads.values()) + req.num_prompt_tokens) / len(ws))
        within = [w for w in ws if loads[w.worker_id] + adds[w.worker_id] <= bound] or list(ws)
        home = next((w for w in ws if w.worker_id == req.session_home), None)
        if home is not None and home in within and \
                not (req.shared_blocks and req.shared_blocks >= home.cached_blocks):
            return Decision(home.worker_id, self.name, "affinity")
        open_ = within
        if any(w.role != "prefill" for w in within):
            fewest = min(w.sessions for w in within)
            open_ = [w for w in within if w.sessions < fewest + self.sessions.new_session_slack]
        d = self.prefix.pick(snap, open_)
        prefix = "new_" if req.session_home is None else "session_"
        return replace(d, policy=self.name, reason=prefix + d.reason)
