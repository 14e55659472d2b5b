"""config.json's field names in every spelling transformers reads, folded to one before parsing.

transformers' config classes accept a field under an alias (`attribute_map`, alias -> the name
the class stores) and write the stored name when they save. Which name is stored has changed
between releases: Qwen3-MoE checkpoints published with transformers 4 say `num_experts`, and
transformers 5 saves `num_local_experts`. tandem parses config.json without importing
transformers (the gateway reads configs without torch), so the tables are copied here, keyed by
`model_type`; tests/models/test_config_aliases.py checks them against the installed
transformers' classes.
"""

from __future__ import annotations

from tandem.errors import ModelLoadError

# model_type -> {alias: the name transformers stores}: each class's `attribute_map`
ATTRIBUTE_MAPS: dict[str, dict[str, str]] = {
    "llama": {},
    "mistral": {},
    "qwen2": {},
    "qwen3": {},
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_experts": "num_local_experts"},
    "deepseek_v3": {"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
    # Kimi K2 ships DeepSeek-V3's code under its own model_type (no transformers class)
    "kimi_k2": {"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
}


def canonical_config(cfg: dict) -> dict:
    """A copy of `cfg` where each aliased field is under the name transformers stores.

    A field given under two spellings must agree; otherwise which one transformers keeps
    depends on the order of the file, so the config is refused."""
    aliases = ATTRIBUTE_MAPS.get(str(cfg.get("model_type", "")), {})
    out = dict(cfg)
    for alias, stored in aliases.items():
        if alias not in out:
            continue
        value = out.pop(alias)
        if stored in out and out[stored] != value:
            raise ModelLoadError(f"config.json gives {alias}={value!r} and {stored}={out[stored]!r}, "
                                 f"two spellings of one field; keep one ({stored!r})")
        out[stored] = value
    return out
