"""The model's recommended sampling settings (generation_config.json) as request defaults.

As vLLM's `--generation-config auto`, its default: an OpenAI request that leaves temperature,
top_p, top_k, min_p or repetition_penalty out gets the model's value, and the model's
max_new_tokens caps a chat request that sets no max_tokens. `--generation-config vllm` keeps the
API's own defaults. A value of the wrong type or out of range in the file is ignored (logged).
`--override-generation-config JSON` (vLLM's) sets some of these keys over the file's (auto) or
over the API's defaults (vllm); there a bad key or value is a usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import dataclass, fields
from pathlib import Path

log = logging.getLogger(__name__)

GENERATION_CONFIG_MODES = ("auto", "vllm")
# generation_config.json's keys read here: SamplingDefaults field, key, valid values
_KEYS = (("temperature", "temperature", lambda v: 0.0 <= v <= 2.0),
         ("top_p", "top_p", lambda v: 0.0 < v <= 1.0),
         ("top_k", "top_k", lambda v: v >= 0),
         ("min_p", "min_p", lambda v: 0.0 <= v <= 1.0),
         ("repetition_penalty", "repetition_penalty", lambda v: 0.0 < v <= 10.0),
         ("max_tokens", "max_new_tokens", lambda v: v >= 1))


def _valid(name: str, value, ok) -> bool:
    integral = name in ("top_k", "max_tokens")
    return not (isinstance(value, bool) or not isinstance(value, (int, float))
                or (integral and not isinstance(value, int)) or not math.isfinite(value) or not ok(value))


def add_override_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--override-generation-config", type=generation_override_arg, default=None, metavar="JSON",
                   help='sampling defaults over generation_config.json\'s (or over the API\'s with '
                        '--generation-config vllm), as vLLM: e.g. {"temperature": 0.6, "max_new_tokens": 1024}')


def generation_override_arg(text: str) -> dict:
    """argparse type of --override-generation-config: a JSON object of generation_config keys."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('a JSON object, e.g. {"temperature": 0.6, "top_p": 0.95}')
    known = {key: (name, ok) for name, key, ok in _KEYS}
    for key, v in value.items():
        if key not in known:
            raise argparse.ArgumentTypeError(f"unknown key {key!r}; supported: {', '.join(known)}")
        if not _valid(known[key][0], v, known[key][1]):
            raise argparse.ArgumentTypeError(f"{key}={v!r} is out of range or of the wrong type")
    return value


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
        for name, key, ok in _KEYS:
            value = gen.get(key)
            if value is None:
                continue
            if not _valid(name, value, ok):
                log.warning("generation_config.json: ignoring %s=%r", key, value)
                continue
            values[name] = int(value) if name in ("top_k", "max_tokens") else float(value)
        return cls(**values)

    @classmethod
    def for_model(cls, model_dir: str | Path, mode: str = "auto", override: dict | None = None) -> "SamplingDefaults":
        """`mode` auto: the model directory's generation_config.json (if any); vllm: none;
        `override` (generation_config keys, checked by generation_override_arg) over either."""
        if mode not in GENERATION_CONFIG_MODES:
            raise ValueError(f"generation config mode {mode!r}; expected one of {GENERATION_CONFIG_MODES}")
        path = Path(model_dir) / "generation_config.json"
        gen: dict = {}
        if mode == "auto" and path.is_file():
            try:
                read = json.loads(path.read_text())
                gen = read if isinstance(read, dict) else {}
            except (OSError, json.JSONDecodeError) as e:
                log.warning("%s unreadable (%s): the API's sampling defaults apply", path, e)
        defaults = cls.from_generation_config({**gen, **(override or {})})
        if changed := defaults.overrides():
            log.info("sampling defaults (generation_config.json, --override-generation-config): %s", changed)
        return defaults

    def overrides(self) -> dict:
        """The settings that differ from the API's defaults."""
        base = SamplingDefaults()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(base, f.name)}
