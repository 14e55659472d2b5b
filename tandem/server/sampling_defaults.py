"""The model's recommended sampling settings (generation_config.json) as request defaults.

As vLLM's `--generation-config auto`, its default: an OpenAI request that leaves temperature,
top_p, top_k, min_p or repetition_penalty out gets the model's value, and the model's
max_new_tokens caps a chat request that sets no max_tokens. `--generation-config vllm` keeps the
API's own defaults. A value of the wrong type or out of range in the file is ignored (logged).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, fields
from pathlib import Path

log = logging.getLogger(__name__)

GENERATION_CONFIG_MODES = ("auto", "vllm")


@dataclass(frozen=True)
class SamplingDefaults:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                  # 0 = off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int | None = None   # generation_config's max_new_tokens; None: the context's room

    @classmethod
    def from_generation_config(cls, gen: dict) -> "SamplingDefaults":
        values = {}
        for name, key, ok in (("temperature", "temperature", lambda v: 0.0 <= v <= 2.0),
                              ("top_p", "top_p", lambda v: 0.0 < v <= 1.0),
                              ("top_k", "top_k", lambda v: v >= 0),
                              ("min_p", "min_p", lambda v: 0.0 <= v <= 1.0),
                              ("repetition_penalty", "repetition_penalty", lambda v: 0.0 < v <= 10.0),
                              ("max_tokens", "max_new_tokens", lambda v: v >= 1)):
            value = gen.get(key)
            if value is None:
                continue
            integral = name in ("top_k", "max_tokens")
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or (integral and not isinstance(value, int)) or not math.isfinite(value) or not ok(value):
                log.warning("generation_config.json: ignoring %s=%r", key, value)
                continue
            values[name] = int(value) if integral else float(value)
        return cls(**values)

    @classmethod
    def for_model(cls, model_dir: str | Path, mode: str = "auto") -> "SamplingDefaults":
        """`mode` auto: the model directory's generation_config.json (if any); vllm: none."""
        if mode not in GENERATION_CONFIG_MODES:
            raise ValueError(f"generation config mode {mode!r}; expected one of {GENERATION_CONFIG_MODES}")
        path = Path(model_dir) / "generation_config.json"
        if mode == "vllm" or not path.is_file():
            return cls()
        try:
            gen = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            log.warning("%s unreadable (%s): the API's sampling defaults apply", path, e)
            return cls()
        defaults = cls.from_generation_config(gen if isinstance(gen, dict) else {})
        if changed := defaults.overrides():
            log.info("sampling defaults from the model's generation_config.json: %s "
                     "(--generation-config vllm keeps the API's)", changed)
        return defaults

    def overrides(self) -> dict:
        """The settings that differ from the API's defaults."""
        base = SamplingDefaults()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(base, f.name)}
