"""Parsing SSE bodies in tests."""

from __future__ import annotations

import json


def events(text: str) -> list:
    """`data:` payloads in order: parsed JSON objects, and the string "[DONE]"."""
    out = []
    for block in text.split("\n\n"):
        block = block.strip()
        if not block:
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
