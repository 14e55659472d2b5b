"""Settings of the HTTP layer (worker or gateway). Built by the CLI; nothing here reads the environment."""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.tracing.config import TracingConfig
from tandem.turn.sampling_defaults import SamplingDefaults
from tandem.turn.shared_prefix_file import SharedPrefixDecl
from tandem.usage.meter import UsageConfig


@dataclass(frozen=True)
class ServerConfig:
    served_model_name: str | None = None  # name clients must send; None: the backend's model_name
    api_keys: tuple[str, ...] = ()        # tenants' Bearer keys; empty: no authentication
    # the cluster's credential, the only one /internal/* routes accept (tandem/api/auth.py has the
    # rule without one); a worker also presents it to its --gateway. Kept out of the repr.
    cluster_secret: str | None = field(default=None, repr=False)
    # account tokens (tandem/accounts, `tandem accounts`) authenticate too, and the admin API
    # (/admin/*) is served: both from the queue's database, so the app needs its queue
    accounts: bool = False
    token_cache_ttl_s: float = 5.0        # a token revoked elsewhere stops working within this
    # tenants (API keys) share prefix-cache entries of equal prompts: off, every tenant's KV is
    # its own (tandem/kv/block_hash.py: cache_keys); requests may still salt theirs (cache_salt)
    share_prefix_cache: bool = False
    # prefixes the operator declares shared by every tenant (--shared-prefixes): their whole
    # blocks are keyed without the tenant, the rest of a prompt per tenant as before
    # (tandem/kv/shared_prefixes.py); tokenized when the app starts
    shared_prefixes: tuple[SharedPrefixDecl, ...] = ()
    allowed_origins: tuple[str, ...] = ("*",)  # CORS (as vLLM's default); empty: no CORS headers
    max_body_bytes: int = 32 * 2**20      # larger request bodies get 413
    max_n: int = 128                      # largest `n` (choices per prompt; OpenAI allows 128)
    max_prompts: int = 64                 # largest list of prompts in one completions request
    sampling_defaults: SamplingDefaults = SamplingDefaults()  # for what requests leave out
    # output parsers (tandem/turn/parser_setup.py): "auto" = the chat template's format, "none", or a name
    tool_call_parser: str = "auto"
    reasoning_parser: str | None = None   # None: no reasoning split
    constrain_auto_tool_calls: bool = True  # tool_choice auto: calls held to the tools once opened
    tool_call_guard: bool = True          # no tools / tool_choice none: the call opening masked
    # rate limits, prices and the usage ledger (tandem/usage/), kept in the queue's database:
    # used only by an app with a queue
    usage: UsageConfig = UsageConfig()
    host: str = "127.0.0.1"
    port: int = 8000
    gateway_url: str | None = None        # --gateway: the gateway this worker registers with
    advertise_url: str | None = None      # how the gateway reaches this worker; None: from host/port
    # spans exported over OTLP when tracing.otlp_endpoint is set (tandem/api/tracing.py)
    tracing: TracingConfig = TracingConfig()
    log_level: str = "info"
    access_log: bool = False
