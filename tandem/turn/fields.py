"""Typed reads of JSON request fields: each bad value becomes InvalidRequest naming its param.

JSON has no separate int type guarantees (5.0 vs 5) and Python's bool is an int, so these
helpers are strict about booleans and lenient about integral floats.
"""

from __future__ import annotations

import math
from typing import Any

from tandem.errors import InvalidRequest

_MISSING = object()


def bad(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"'{param}' {why}", param=param)


class Fields:
    """A JSON object being read; `prefix` names nested params (e.g. "stream_options.")."""

    def __init__(self, data: dict, prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def name(self, key: str) -> str:
        return self.prefix + key

    def raw(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key, _MISSING)
        return default if value is _MISSING or value is None else value

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, key: str, default: int | None, lo: int | None = None,
            hi: int | None = None) -> int | None:
        value = self.raw(key, _MISSING)
        if value is _MISSING:
            return default
        if isinstance(value, float) and not isinstance(value, bool) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad(self.name(key), f"must be an integer, got {_show(value)}")
        if lo is not None and value < lo:
            raise bad(self.name(key), f"must be at least {lo}, got {value}")
        if hi is not None and value > hi:
            raise bad(self.name(key), f"must be at most {hi}, got {value}")
        return value

    def float(self, key: str, default: float, lo: float | None = None,
              hi: float | None = None) -> float:
        value = self.raw(key, _MISSING)
        if value is _MISSING:
            return default
        if not isinstance(value, (int, float)) or isinstance(value, bool) \
                or not math.isfinite(value):
            raise bad(self.name(key), f"must be a number, got {_show(value)}")
        if lo is not None and value < lo:
            raise bad(self.name(key), f"must be at least {lo}, got {value}")
        if hi is not None and value > hi:
            raise bad(self.name(key), f"must be at most {hi}, got {value}")
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.raw(key, _MISSING)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise bad(self.name(key), f"must be a boolean, got {_show(value)}")
        return value

    def str(self, key: str, default: str | None = None, nonempty: bool = False) -> str | None:
        value = self.raw(key, _MISSING)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise bad(self.name(key), f"must be a string, got {_show(value)}")
        if nonempty and not value:
            raise bad(self.name(key), "must not be empty")
        return value

    def obj(self, key: str) -> "Fields | None":
        value = self.raw(key, _MISSING)
        if value is _MISSING:
            return None
        if not isinstance(value, dict):
            raise bad(self.name(key), f"must be an object, got {_show(value)}")
        return Fields(value, prefix=self.name(key) + ".")

    def int_list(self, key: str, lo: int, hi: int) -> tuple[int, ...]:
        value = self.raw(key, _MISSING)
        if value is _MISSING:
            return ()
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise bad(self.name(key), "must be an array of integers")
        for v in value:
            if not lo <= v <= hi:
                raise bad(self.name(key), f"contains {v}, outside [{lo}, {hi}]")
        return tuple(value)

    def token_biases(self, key: str, vocab: int) -> tuple[tuple[int, float], ...]:
        """OpenAI's logit_bias: an object mapping token ids (as strings) to numbers in [-100, 100]."""
        value = self.raw(key, _MISSING)
        if value is _MISSING:
            return ()
        if not isinstance(value, dict):
            raise bad(self.name(key), f"must be an object mapping token ids to biases, got {_show(value)}")
        out = []
        for token, bias in value.items():
            if not (isinstance(token, str) and token.strip().isdigit()):
                raise bad(self.name(key), f"has key {token!r}; keys are token ids such as \"50256\"")
            if int(token) >= vocab:
                raise bad(self.name(key), f"has token id {int(token)}, outside the vocabulary [0, {vocab})")
            if not (isinstance(bias, (int, float)) and not isinstance(bias, bool)
                    and math.isfinite(bias) and -100 <= bias <= 100):
                raise bad(self.name(key), f"maps {token} to {_show(bias)}; biases are numbers from -100 to 100")
            out.append((int(token), float(bias)))
        return tuple(out)

    def str_or_list(self, key: str) -> tuple[str, ...]:
        value = self.raw(key, _MISSING)
        if value is _MISSING:
            return ()
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise bad(self.name(key), "must be a string or an array of strings")


def _show(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."
