"""Frozen configuration for the engine's components.

Each setting is documented once, here. CLI modules build these from flags; nothing
below the CLI reads the environment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TransferConfig:
    """KV handoff between workers (tandem.transfer)."""
    host: str = "127.0.0.1"            # address the control server binds (and advertises)
    port: int = 0                      # control server port; 0 = a free port
    # address put in KV handles instead of `host`: where decode workers reach the control server
    # when that is not where it binds (a relay or NAT in front of it); None: `host`
    advertise_host: str | None = None
    pin_timeout_s: float = 30.0        # offered blocks are released if no pull is in progress by then
    connect_timeout_s: float = 3.0     # sink: connecting to a source's control server (2 SYN tries)
    # any socket wait without progress (a recv, a send of at most 4 MiB): how long a stalled or
    # vanished peer holds a pull, and the source's pins, before the pull fails (the decode worker
    # then recomputes the prompt)
    io_timeout_s: float = 10.0
    max_concurrent_pulls: int = 4      # sink: threads serving pull_async
    shm_dir: str = "/dev/shm"          # where allocate_kv(kind="shm") puts the KV file
    mooncake_protocol: str = "tcp"     # tcp | rdma
    mooncake_device: str = ""          # rdma device names for Mooncake ("" = auto / none for tcp)
    mooncake_bind_address: str = "127.0.0.1"  # MC_TCP_BIND_ADDRESS: the address Mooncake advertises
    # the cluster secret (tandem/cluster_secret.py): a sink presents it in every read and release,
    # a source with one answers nothing to a connection without it. None: no check. Not in the repr.
    cluster_secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ModelConfig:
    path: str                         # a Hugging Face model directory
    dtype: str = "auto"               # auto (the checkpoint's torch_dtype) | float32 | bfloat16 | float16
    device: str = "cpu"               # cpu | cuda | cuda:N
    served_name: str | None = None    # name in /v1/models; default: the directory's name
    max_model_len: int | None = None  # default: the config's max_position_embeddings
    # a chat template's source (--chat-template) in place of the model directory's templates
    chat_template: str | None = None
    show_progress: bool = True        # progress bar while loading weights
    # CPU bfloat16: linear weights packed once into oneDNN's layout (tandem.layers.linear), faster
    # matrix products for one copy of them in RAM in place of the memory-mapped checkpoint
    pack_weights: bool = True
    # attention kernels (tandem.models.attention_choice): "auto" = the native CPU decode kernel
    # (tandem.kernels, compiled on first use) for float32/bfloat16 and, in bfloat16 on a CPU with
    # AMX tiles, the AMX prefill kernel; torch SDPA otherwise or when no C compiler is found;
    # "native" = the decode kernel or a start-up error (prefill as "auto"); "sdpa" = torch SDPA only;
    # "triton" = the Triton kernels (tandem.kernels.triton: decode, prefill, MLA) on a GPU, else as
    # "auto" with a warning naming why
    attention: str = "auto"
    # MoE layers' experts: "loop" = a loop over the experts (torch ops); "triton" = two grouped
    # GEMMs in Triton (tandem.kernels.triton.fused_moe) on a GPU, else the loop with a warning
    moe_kernel: str = "loop"
    # decode batch sizes whose forward is captured as a CUDA graph at start-up (a batch is padded
    # up to the next size; larger ones run eagerly); () = none. Needs a CUDA device, one rank,
    # attention "triton" and, for MoE models, moe_kernel "triton" (tandem/runner/graph_policy.py)
    cuda_graph_sizes: tuple[int, ...] = ()
    enforce_eager: bool = False       # no CUDA graph at all, whatever cuda_graph_sizes says (vLLM's)
    # CPU float32/bfloat16: RMSNorm (with the residual add), SiLU-mul and rotary as single-pass C
    # kernels (tandem.kernels.fused_ops, compiled on first use); torch ops when off, on other
    # devices or without a C compiler
    fused_layers: bool = True
    # a checkpoint with a checksums.sha256 manifest (tandem/models/checksums.py) is refused when a
    # listed file's SHA-256 differs; False skips the check (it reads every byte once: ~1-2 GB/s)
    verify_checksums: bool = True


CPU_KV_CACHE_BYTES = 512 * 2**20    # a CPU worker's KV memory unless told (--kv-cache-memory)


@dataclass(frozen=True)
class CacheConfig:
    block_size: int = 16                 # tokens per KV block
    # memory for KV blocks, the block count follows from it; None: 512 MiB on the CPU, on a GPU what
    # gpu_memory_utilization leaves (tandem/runner/kv_budget.py)
    kv_cache_bytes: int | None = None
    num_blocks: int | None = None        # overrides kv_cache_bytes when set (tests)
    gpu_memory_utilization: float = 0.9  # share of a GPU's memory the worker may use (vLLM's meaning)
    enable_prefix_caching: bool = True
    hash_seed: int = 0                   # seed of the chained block hashes; equal on every worker
    # storage type of the KV cache: "auto" = the model's dtype; "fp8_e5m2" = 8-bit floats (5-bit
    # exponent, 2-bit mantissa, no scale), half the bytes of bfloat16 per position: twice the
    # blocks in the same budget, and cheaper decode attention where reading K/V bounds it, at the
    # cost of K/V rounded to 3 significant bits (values past +-57344 become inf)
    kv_cache_dtype: str = "auto"

    KV_CACHE_DTYPES = ("auto", "fp8_e5m2")

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_cache_dtype not in self.KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype {self.kv_cache_dtype!r}: choose one of "
                             f"{', '.join(self.KV_CACHE_DTYPES)}")


@dataclass(frozen=True)
class RetentionConfig:
    """KV retention across an agent's tool calls (tandem/kv/retention.py: the policy)."""

    # of the device blocks at most retained at once; 0 turns retention off. Holds keep blocks only
    # from worse priorities (aging bounds that) and go last to equal ones, so the share is what
    # worse-priority work always keeps: at 0.5 a tenant's system prompt alone filled it on a
    # tight cache and no session history survived a priority-10 flood (docs/benchmarks.md 19)
    share: float = 0.9
    default_gap_s: float = 5.0  # retention of a session (and tenant) with no observed gap yet
    min_gap_s: float = 1.0      # the learned retention is never shorter
    max_s: float = 600.0        # nor longer, a client's hint included
    alpha: float = 0.3          # weight of a new gap in the running mean and deviation
    deviations: float = 2.0     # retention = mean + deviations x mean absolute deviation
    # a hint of h seconds holds h x (1 + hint_slack) + min_gap_s: the next turn reaches the worker
    # after the client's pause plus its time queued at the gateway and in transit
    hint_slack: float = 0.5
    max_sessions: int = 4096    # sessions (and tenants) whose gaps are remembered, least recent out

    @property
    def enabled(self) -> bool:
        return self.share > 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"kv retention share must be in [0, 1], got {self.share}")
        if not 0 < self.min_gap_s <= self.default_gap_s <= self.max_s:
            raise ValueError("kv retention: need 0 < min_gap_s <= default_gap_s <= max_s, got "
                             f"{self.min_gap_s}, {self.default_gap_s}, {self.max_s}")


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 512   # token budget of one step (decodes first, then prefill chunks)
    max_num_seqs: int = 64              # requests running at once
    enable_chunked_prefill: bool = True  # split a prompt across steps when it exceeds the budget
    # While other requests wait, one prompt's chunk takes at most this many tokens of a step,
    # so a short prompt (a tool result) is not queued behind a long one. 0: no cap.
    long_prefill_token_threshold: int = 256
    # A background prompt (priority >= background_priority: the queue's batch work runs at 10) is
    # computed at most background_chunk_tokens a step, whatever else runs: an interactive request
    # that arrives meanwhile waits for one short step (the step in flight cannot be cut). 0: no cap.
    background_chunk_tokens: int = 32
    background_priority: int = 10
    # Who goes first (vLLM's --scheduling-policy). "priority": RequestContext.priority, lower
    # first (the waiting queue, prefill chunks, preemption; tandem/engine/priority.py), fcfs
    # within a priority; "fcfs": arrival order, priority only weighs in the prefill order's key.
    # Priority 0 everywhere schedules the same under both.
    scheduling_policy: str = "priority"
    # the starvation bound of "priority": a waiting request counts one priority level better per
    # this many seconds waited (never better than the best priority present)
    priority_aging_s: float = 5.0

    SCHEDULING_POLICIES = ("priority", "fcfs")

    def __post_init__(self) -> None:
        if self.scheduling_policy not in self.SCHEDULING_POLICIES:
            raise ValueError(f"scheduling_policy {self.scheduling_policy!r}: choose one of "
                             f"{', '.join(self.SCHEDULING_POLICIES)}")
        if not self.priority_aging_s > 0:
            raise ValueError(f"priority_aging_s must be positive (it bounds how long a request of a "
                             f"worse priority waits), got {self.priority_aging_s}")

    @classmethod
    def offline(cls, max_num_seqs: int = 256) -> "SchedulerConfig":
        """Throughput settings for offline batches (LLM.generate), where no stream waits for its
        next token: larger steps run the model's matrix products at better efficiency on the CPU
        (on the 125M model of `tandem bench engine`, bfloat16, 1 thread: 2048 tokens beat 512, 1024
        and 4096 by 20-40%; float32 showed no difference), and no chunk cap."""
        return cls(max_num_batched_tokens=2048, max_num_seqs=max_num_seqs, long_prefill_token_threshold=0)


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding (vLLM's --speculative-config): a proposer drafts tokens that the
    target verifies in one step (tandem/spec). The method's name and whether it needs `model`
    are checked against the proposers' table (tandem/spec/registry.py) where it is built."""
    method: str                         # a name in the proposers' table (ngram, suffix, ...)
    num_speculative_tokens: int = 4     # most draft tokens per request per step
    model: str | None = None            # the draft's directory, for a method that drafts with a model
    prompt_lookup_min: int = 2          # ngram: shortest suffix matched in the context
    prompt_lookup_max: int = 5          # ngram: longest suffix matched in the context
    # per request, proposals shrink to what its acceptance says pays (none when it stops paying;
    # a single probe now and then) and the step's drafts are capped as the batch grows
    adaptive: bool = True
    max_draft_tokens_per_step: int = 64   # all requests' drafts in one step, at most

    def __post_init__(self) -> None:
        if not 1 <= self.num_speculative_tokens <= 64:
            raise ValueError(f"num_speculative_tokens must be in 1..64, got {self.num_speculative_tokens}")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max, got "
                             f"{self.prompt_lookup_min} and {self.prompt_lookup_max}")

    @classmethod
    def from_json(cls, text: str) -> "SpeculativeConfig":
        """From vLLM's JSON form, e.g. '{"method": "ngram", "num_speculative_tokens": 4}'."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--speculative-config is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError("--speculative-config must be a JSON object")
        unknown = sorted(raw.keys() - cls.__dataclass_fields__.keys())
        if unknown:
            raise ValueError(f"--speculative-config has unknown keys {unknown}; known: "
                             f"{sorted(cls.__dataclass_fields__)}")
        if "method" not in raw:
            raise ValueError("--speculative-config needs 'method'")
        return cls(**raw)


@dataclass(frozen=True)
class KVStoreConfig:
    """Tiers of KV blocks below the device cache (tandem.kvstore): host memory, local disk and
    Mooncake Store, shared by the prefix cache of every worker that uses the same store."""
    host_bytes: int = 0                  # host-memory tier (pinned on CUDA); 0: no host tier
    disk_dir: str | None = None          # disk tier: one file per block under this directory
    disk_bytes: int = 16 * 2**30         # most bytes the disk tier keeps (least recently used go)
    store_url: str | None = None         # mooncake://HOST:PORT of a mooncake_master; None: no store
    store_segment_bytes: int = 1 * 2**30  # memory this worker lends to the store's pool
    retry_s: float = 5.0                 # a store that failed (or a full disk) is left alone this long
    # a store call that gets no answer within this long (plus 1 s per 25 MB it moves) fails: the
    # store is unavailable for retry_s (a master or peer host that vanished must not stall the
    # engine's lookups or a load for the RPC layer's own 10-30 s)
    store_timeout_s: float = 2.0
    batch_blocks: int = 32               # blocks per tier read or write call: transfers are bounded
    # a hit below the device is loaded only while its measured cost is below recomputing it
    cost_check: bool = True
    prefill_s_per_token: float | None = None   # recompute cost; None: measured when the engine starts
    cost_explore_s: float | None = 30.0   # a tier unmeasured this long is tried once; None: never
    max_pending_save_bytes: int = 256 * 2**20  # copies awaiting disk or store writes; saves past it skip

    @property
    def enabled(self) -> bool:
        return bool(self.host_bytes or self.disk_dir or self.store_url)


@dataclass(frozen=True)
class GrammarConfig:
    """Bounds on compiling a request's structured-output constraint (tandem/grammar/compiler.py).
    Each one exceeded is a 400 naming its flag; a spec that failed is refused again from the
    compiler's cache, without compiling."""
    # characters of a constraint's text: the schema's JSON, the regex, the EBNF, the structural tag
    # (tools included) or the choices as a JSON list (--max-grammar-chars)
    max_chars: int = 256 * 1024
    # guided_choice options: xgrammar's compile time grows faster than their square (2,000 short
    # options take 0.1 s for a 4k vocabulary, 20,000 take minutes) (--max-grammar-choices)
    max_choices: int = 1000
    # a new spec's trial compile, in a child process at low CPU priority, is killed after this long
    # or when its request goes; one that passed is compiled again in this process
    # (--grammar-compile-timeout); None: no trial, compiled in this process, unbounded (offline use)
    compile_timeout_s: float | None = 10.0


@dataclass(frozen=True)
class ThreadGovernorConfig:
    """A served CPU worker's compute threads, fewer while other processes take some of its cores
    (tandem/engine/thread_governor.py)."""

    enabled: bool = True            # --no-adaptive-threads: the configured count throughout
    window_s: float = 1.0           # how often the run-queue wait is read
    contended_ratio: float = 0.2    # run-queue wait per second run above which cores are taken
    probe_s: float = 10.0           # how long a reduced count holds at most before all are tried again
    max_probe_s: float = 80.0       # ... doubled after each probe that found the cores still taken
    idle_to_restore: float = 0.5    # ... or until the cores given up sit idle this share of a window
    min_busy: float = 0.2           # a window counts when the threads ran this share of it, each

    def __post_init__(self) -> None:
        if not (self.window_s > 0 and self.contended_ratio > 0 and self.probe_s >= self.window_s
                and self.max_probe_s >= self.probe_s
                and 0 <= self.min_busy <= 1 and 0 < self.idle_to_restore <= 1):
            raise ValueError(f"thread governor: bad config {self}")


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    role: str = "both"                  # both | prefill | decode
    num_threads: int | None = None      # torch threads of this process; None keeps torch's default
    # fewer of them while other processes take some of the cores (a served CPU worker, num_threads > 1)
    threads: ThreadGovernorConfig = field(default_factory=ThreadGovernorConfig)
    # KV handoff between workers: None (no handoff), "tcp", "shm" (one host) or "mooncake".
    # The prefill and decode roles need one; `resolved_transport` picks "tcp" for them by default.
    kv_transport: str | None = None
    transfer: TransferConfig = field(default_factory=TransferConfig)
    speculative: SpeculativeConfig | None = None   # speculative decoding; None: off
    kv_store: KVStoreConfig = field(default_factory=KVStoreConfig)   # tiers below the device
    grammar: GrammarConfig = field(default_factory=GrammarConfig)    # structured outputs' bounds
    retention: RetentionConfig = field(default_factory=RetentionConfig)   # KV kept across tool calls
    # torch's global random generator at start-up (--seed): requests without a seed sample from it
    seed: int | None = None

    @property
    def resolved_transport(self) -> str | None:
        if self.kv_transport is None and self.role in ("prefill", "decode"):
            return "tcp"
        return self.kv_transport
