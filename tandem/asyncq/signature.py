"""The webhook signature: `x-tandem-signature: t=<unix seconds>,v1=<hex>` where hex is
HMAC-SHA256(subscription secret, "<t>." + body). The timestamp is signed with the body so a
receiver can refuse replays older than its tolerance; `verify` is what a receiver runs."""

from __future__ import annotations

import hashlib
import hmac

HEADER = "x-tandem-signature"


def sign(secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, now: float, tolerance_s: float = 300.0) -> bool:
    """True if `header` signs `body` with `secret` and its timestamp is within tolerance of now."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = sign(secret, body, timestamp).split(",v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))
