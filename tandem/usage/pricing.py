"""The price table (`--pricing FILE`): USD per million tokens, by model and token kind.

    {"default": {"input": 0.50, "cached_input": 0.05, "output": 1.50},
     "models": {"tandem-demo-target": {"input": 0.10, "cached_input": 0.01, "output": 0.40}}}

`input` prices prompt tokens the workers computed, `cached_input` prompt tokens read from the
prefix cache (left out: the `input` price; above it is an error, it is a discount), `output` the
generated tokens. A model missing from "models" takes "default"; without a default it is unpriced
(its cost reads null). Prices are non-negative numbers; anything else, or an unknown key, is an
error naming it (a usage error at start-up).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

PER = 1_000_000
_KINDS = ("input", "cached_input", "output")


@dataclass(frozen=True)
class TokenUsage:
    """Tokens of one request, or of a ledger's row, by the kinds priced apart."""

    input_uncached: int = 0
    input_cached: int = 0
    output: int = 0

    @property
    def input(self) -> int:
        return self.input_uncached + self.input_cached

    def __add__(self, other: "TokenUsage") -> "TokenUsage":
        return TokenUsage(self.input_uncached + other.input_uncached,
                          self.input_cached + other.input_cached, self.output + other.output)


@dataclass(frozen=True)
class Price:
    input: float
    cached_input: float
    output: float

    def cost(self, usage: TokenUsage) -> float:
        return (usage.input_uncached * self.input + usage.input_cached * self.cached_input
                + usage.output * self.output) / PER


@dataclass(frozen=True)
class PriceTable:
    models: dict[str, Price] = field(default_factory=dict)
    default: Price | None = None

    def price(self, model: str) -> Price | None:
        return self.models.get(model, self.default)

    def cost(self, model: str, usage: TokenUsage) -> float | None:
        price = self.price(model)
        return None if price is None else price.cost(usage)


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} must be a number (USD per million tokens), not {value!r}")
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{where} must be a finite number >= 0, not {value}")
    return float(value)


def _price(obj, where: str) -> Price:
    if not isinstance(obj, dict):
        raise ValueError(f"{where} must be an object with input, cached_input, output")
    unknown = sorted(set(obj) - set(_KINDS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_KINDS)})")
    for kind in ("input", "output"):
        if kind not in obj:
            raise ValueError(f"{where}: {kind!r} is missing")
    p_in = _number(obj["input"], f"{where}.input")
    cached = _number(obj.get("cached_input", p_in), f"{where}.cached_input")
    if cached > p_in:
        raise ValueError(f"{where}.cached_input ({cached}) is above input ({p_in}): cached input "
                         "is a discount")
    return Price(input=p_in, cached_input=cached, output=_number(obj["output"], f"{where}.output"))


def parse_pricing(text: str, source: str = "pricing") -> PriceTable:
    """The file's JSON -> PriceTable; ValueError naming the problem (the CLI's usage error)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: the top level must be an object")
    unknown = sorted(set(doc) - {"default", "models"})
    if unknown:
        raise ValueError(f"{source}: unknown key {unknown[0]!r} (known: default, models)")
    models = doc.get("models", {})
    if not isinstance(models, dict):
        raise ValueError(f"{source}: 'models' must be an object of model name -> prices")
    default = _price(doc["default"], f"{source}: default") if "default" in doc else None
    table = {name: _price(obj, f"{source}: models[{name!r}]") for name, obj in models.items()}
    if default is None and not table:
        raise ValueError(f"{source}: no price: give 'default' or 'models'")
    return PriceTable(models=table, default=default)
