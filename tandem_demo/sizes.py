"""Model shapes of the demo family (Llama architecture, one shared 4096-token vocabulary)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int = 4096
    # trained on 1024-token windows; positions up to 2048 run, with lower quality past 1024
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    rope_theta: float = 10000.0


SIZES = {
    "target": ModelSize(hidden_size=256, intermediate_size=768, num_layers=6, num_heads=8, num_kv_heads=4),
    "draft": ModelSize(hidden_size=128, intermediate_size=384, num_layers=2, num_heads=4, num_kv_heads=2),
    # v3 (issue 33): trained on one GPU at 16k tokens a row. The target's shape was chosen for
    # `make run`'s speed on the project's 2-core CPU: a random-weight model of it decodes at 11.8
    # ms/token at batch 1 in bfloat16 (~85 tokens/s; `tandem bench engine --dtypes bfloat16
    # --threads 2 --hidden-size 512 --num-layers 6 --num-heads 8 --num-kv-heads 4
    # --intermediate-size 1536 --vocab-size 4096 --parts decode`, measured on a shared, loaded
    # machine, where the v2 target's shape took 4.75 ms); ~21M parameters, 3.6x v2's.
    "target-v3": ModelSize(hidden_size=512, intermediate_size=1536, num_layers=6, num_heads=8, num_kv_heads=4,
                           max_position_embeddings=16384, rope_theta=100000.0),
    "draft-v3": ModelSize(hidden_size=128, intermediate_size=384, num_layers=2, num_heads=4, num_kv_heads=2,
                          max_position_embeddings=16384, rope_theta=100000.0),
    # for tests only
    "tiny": ModelSize(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1),
}


def llama_config(size: ModelSize, eos_ids: list[int], pad_id: int):
    """A transformers LlamaConfig for `size`."""
    # lazy: transformers is an extra (demo, test), not a dependency, and takes ~0.6 s to import
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=size.vocab_size, hidden_size=size.hidden_size, intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_layers, num_attention_heads=size.num_heads,
        num_key_value_heads=size.num_kv_heads, max_position_embeddings=size.max_position_embeddings,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": size.rope_theta},
        tie_word_embeddings=size.tie_word_embeddings, bos_token_id=None, eos_token_id=eos_ids,
        pad_token_id=pad_id, attention_bias=False, mlp_bias=False, use_cache=True,
    )
