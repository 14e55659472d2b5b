"""Argument types shared by the verbs' flags: sizes in bytes, lists of origins."""

from __future__ import annotations

import argparse
import re

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6,
          "mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12,
          "tib": 2**40}


def parse_bytes(text: str) -> int:
    """'512MiB', '2GiB', '1.5GB', '4096' -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 512MiB or 2GiB)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def origins(text: str) -> tuple[str, ...]:
    """--allowed-origins: "*", "https://a.example,https://b.example", or "" (none)."""
    return tuple(o.strip() for o in text.split(",") if o.strip())
