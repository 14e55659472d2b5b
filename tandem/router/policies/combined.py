"""default: session affinity first, then prefix-aware routing with token load.

1. A request with x-session-affinity goes to its rendezvous worker if that worker is available
   and within the affinity load bound (reason "affinity"). An agentic session's history is cached
   there, and affinity keeps it so even before the KV events have reached the gateway. Unless the
   shared KV store holds at least as much of the prompt as that worker does: then every worker
   can load the history and prefix_aware picks by load (reasons "session_store", ...).
2. Otherwise (no session, or its worker is down or over the bound) prefix_aware decides: longest
   cached prefix traded against token load, with the hotspot guard. Reasons are prefix_aware's
   ("prefix", "load", "hotspot"), prefixed "session_" when a session's home could not take it.

Settings: AffinityConfig and PrefixAwareConfig (see those modules).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tandem.router.policies.affinity import AffinityConfig, session_choice
from tandem.router.policies.prefix_aware import PrefixAware
from tandem.router.snapshot import Decision, Snapshot


@dataclass(frozen=True)
class Combined:
    affinity: AffinityConfig = field(default_factory=AffinityConfig)
    prefix: PrefixAware = field(default_factory=PrefixAware)
    name: str = "default"

    def choose(self, snap: Snapshot) -> Decision:
        if snap.request.session_id is not None:
            w, reason = session_choice(snap, self.affinity)
            shared = snap.request.shared_blocks
            if reason == "affinity" and not (shared and shared >= w.cached_blocks):
                return Decision(w.worker_id, self.name, "affinity")
            d = self.prefix.choose(snap)
            return replace(d, policy=self.name, reason="session_" + d.reason)
        return replace(self.prefix.choose(snap), policy=self.name)
