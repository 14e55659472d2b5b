"""The text of an API token and how it is kept at rest.

A token reads `tdm_<key id>_<secret>`: the key id (16 hex digits) is the token's public id (what
lists show and revocation names) and the store's lookup key; the secret (43 URL-safe base64
characters, 256 random bits) is shown once and never stored. The store keeps a random salt per
token and HMAC-SHA256(salt, secret); a presented token is checked by recomputing it and comparing
in constant time (hmac.compare_digest).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

PREFIX = "tdm_"
_TEXT = re.compile(r"tdm_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")


def new_token() -> tuple[str, str, str, str]:
    """A fresh token: (key id, whole text, salt, digest)."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    return key_id, f"{PREFIX}{key_id}_{secret}", salt, digest(salt, secret)


def parse(text: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed token; None for anything else."""
    m = _TEXT.fullmatch(text)
    return (m.group(1), m.group(2)) if m else None


def digest(salt: str, secret: str) -> str:
    return hmac.new(bytes.fromhex(salt), secret.encode(), hashlib.sha256).hexdigest()


def verify(secret: str, salt: str, stored: str) -> bool:
    return hmac.compare_digest(digest(salt, secret), stored)
