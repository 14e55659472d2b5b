"""Frozen settings of the gateway. Built by tandem.cli.gateway; nothing below reads flags or env."""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.api.queue.service import QueueConfig
from tandem.gateway.admission.fair_queue import FairQueueConfig
from tandem.planner.policy import PlannerConfig
from tandem.router.admission import AdmissionLimits
from tandem.router.policies.placement import PlacementConfig
from tandem.tracing.config import TracingConfig
from tandem.turn.sampling_defaults import SamplingDefaults
from tandem.turn.shared_prefix_file import SharedPrefixDecl
from tandem.usage.meter import UsageConfig


@dataclass(frozen=True)
class RegistryConfig:
    """How soon a worker that stopped answering is given up (tandem/gateway/monitor.py). A probe
    that cannot connect (refused, or no answer within the gateway's connect_timeout_s: a host
    that vanished) makes the worker unhealthy at once; probes that connect but time out count
    toward `unhealthy_after` (a busy worker is slow, not gone). A worker given up loses its
    connections: its streams fail over or migrate at once. With the defaults a vanished host is
    given up within poll_interval_s + probe_timeout_s + poll_interval_s + connect_timeout_s
    (about 4 s)."""
    poll_interval_s: float = 0.5      # /internal/stats and /internal/kv_events per worker
    probe_timeout_s: float = 1.0      # one health or event poll waits this long for its answer
    unhealthy_after: int = 3          # consecutive failed polls before a worker is unhealthy
    heartbeat_ttl_s: float = 10.0     # a self-registered worker with no heartbeat this long is dropped
    heartbeat_interval_s: float = 2.0  # what registering workers are told to use
    # a worker's first registration (tandem/gateway/registration_check.py): its advertised URL's
    # /health must answer within this (0: not probed); under the worker's 2 s heartbeat timeout
    register_probe_timeout_s: float = 1.5
    # accept workers advertising a loopback address although the gateway is not bound to loopback
    allow_loopback_workers: bool = False


@dataclass(frozen=True)
class GatewayConfig:
    workers: tuple[str, ...] = ()     # --worker: role read from the worker's /internal/stats
    prefill: tuple[str, ...] = ()     # --prefill
    decode: tuple[str, ...] = ()      # --decode
    policy: str = "default"           # routing policy for every pool
    prefill_policy: str | None = None  # overrides `policy` for the prefill pool
    decode_policy: str | None = None   # ... for the decode pool
    model_path: str | None = None     # tokenizer and chat template (needed to hash prefixes)
    served_model_name: str | None = None
    chat_template: str | None = None  # --chat-template's source: the workers' template, to render as they do
    sampling_defaults: SamplingDefaults = SamplingDefaults()  # the model's generation_config.json
    tool_call_parser: str = "auto"     # as tandem serve's ServerConfig (tandem/turn/parser_setup.py)
    reasoning_parser: str | None = None
    constrain_auto_tool_calls: bool = True
    tool_call_guard: bool = True
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = ()    # tenants' keys
    # the cluster's credential (tandem/cluster_secret.py): the only one the gateway's /internal
    # routes accept, and what it presents to every worker. Not in the repr.
    cluster_secret: str | None = field(default=None, repr=False)
    share_prefix_cache: bool = False   # as tandem serve's ServerConfig: tenants share cached prefixes
    shared_prefixes: tuple[SharedPrefixDecl, ...] = ()   # as ServerConfig's (--shared-prefixes)
    allowed_origins: tuple[str, ...] = ("*",)  # CORS; empty: none
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    admission: AdmissionLimits = field(default_factory=AdmissionLimits)
    # while every worker is saturated (by `admission`), requests wait in per-tenant fair queues
    # (tandem/gateway/admission/); disabled: they get 429 at once
    fair_queue: FairQueueConfig = field(default_factory=FairQueueConfig)
    # Disaggregated mode: whether the decode worker prefills a request itself (conditional
    # disaggregation, on by default; tandem/router/policies/placement.py explains the rule).
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    # ... and a request whose prompt the chosen decode worker would have to compute for at most
    # this many tokens (uncached there) is always served whole by that decode worker, even with
    # placement.enabled=False. 0: only the placement policy decides.
    local_prefill_tokens: int = 0
    planner: PlannerConfig = field(default_factory=PlannerConfig)  # off unless a --slo-* target is set
    # a self-registered worker the planner switches drains at most this long, then switches anyway
    role_switch_drain_s: float = 120.0
    max_prefill_attempts: int = 3     # prefill tried on this many workers before giving up
    max_migrations: int = 3           # a stream moves at most this many times
    retry_after_s: int = 1            # Retry-After on 503 and 429
    # Calls to workers (tandem/gateway/worker_client.py). connect_timeout_s also bounds a health
    # probe's connect (2 s: one lost SYN is retransmitted after 1 s and still makes it).
    connect_timeout_s: float = 2.0
    # the longest a generate call may wait for the worker's next line (its first one included:
    # a prefill queued behind others): past it the call fails and the request moves elsewhere
    worker_read_timeout_s: float = 120.0
    queue: QueueConfig | None = None  # --queue-db / --queue-url: the asynchronous batch API
    # --accounts: account tokens authenticate too and /admin/* is served (tandem/accounts), from the
    # queue's database; a token revoked elsewhere stops working within token_cache_ttl_s
    accounts: bool = False
    token_cache_ttl_s: float = 5.0
    # rate limits, prices and the usage ledger, in the queue's database (tandem/usage/)
    usage: UsageConfig = field(default_factory=UsageConfig)
    # spans over OTLP with --otlp-endpoint: the request's, and one per call to a worker
    tracing: TracingConfig = field(default_factory=TracingConfig)
