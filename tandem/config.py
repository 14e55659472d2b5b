"""Frozen configuration for the engine's components.

Each setting is documented once, here. CLI modules build these from flags; nothing
below the CLI reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.transfer.base import TransferConfig


@dataclass(frozen=True)
class ModelConfig:
    path: str                         # a Hugging Face model directory
    dtype: str = "auto"               # auto (the checkpoint's torch_dtype) | float32 | bfloat16 | float16
    device: str = "cpu"               # cpu | cuda | cuda:N
    served_name: str | None = None    # name in /v1/models; default: the directory's name
    max_model_len: int | None = None  # default: the config's max_position_embeddings
    show_progress: bool = True        # progress bar while loading weights


@dataclass(frozen=True)
class CacheConfig:
    block_size: int = 16                 # tokens per KV block
    kv_cache_bytes: int = 512 * 2**20    # memory for KV blocks; the block count follows from it
    num_blocks: int | None = None        # overrides kv_cache_bytes when set (tests)
    enable_prefix_caching: bool = True
    hash_seed: int = 0                   # seed of the chained block hashes; equal on every worker


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 512   # token budget of one step (decodes first, then prefill chunks)
    max_num_seqs: int = 64              # requests running at once
    enable_chunked_prefill: bool = True  # split a prompt across steps when it exceeds the budget
    # While other requests wait, one prompt's chunk takes at most this many tokens of a step,
    # so a short prompt (a tool result) is not queued behind a long one. 0: no cap.
    long_prefill_token_threshold: int = 256


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    role: str = "both"                  # both | prefill | decode
    num_threads: int | None = None      # torch threads of this process; None keeps torch's default
    # KV handoff between workers: None (no handoff), "tcp", "shm" (one host) or "mooncake".
    # The prefill and decode roles need one; `resolved_transport` picks "tcp" for them by default.
    kv_transport: str | None = None
    transfer: TransferConfig = field(default_factory=TransferConfig)

    @property
    def resolved_transport(self) -> str | None:
        if self.kv_transport is None and self.role in ("prefill", "decode"):
            return "tcp"
        return self.kv_transport
