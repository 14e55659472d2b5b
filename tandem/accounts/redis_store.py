"""Accounts on Redis (the queue's server, when the queue is on Redis): an account is a hash, a
token is a hash, and two sorted sets by creation time list accounts and each account's tokens.
Every change is one Lua script, atomic on the server.

Keys (prefix `tandem:accounts:`): `ids` (account ids), `a:<id>` (an account), `t:<key id>` (a
token, its salt and hash), `at:<id>` (an account's token ids).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from tandem.accounts.model import Account, StoredToken, Token

_INSERT_ACCOUNT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'name', ARGV[2], 'created_at', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
"""

# ARGV[1]: the time to disable at ('' enables); keeps the first disabling
_SET_DISABLED = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
if ARGV[1] == '' then redis.call('HDEL', KEYS[1], 'disabled_at')
else redis.call('HSETNX', KEYS[1], 'disabled_at', ARGV[1]) end
return redis.call('HGETALL', KEYS[1])
"""

# KEYS: account, token, account's tokens; ARGV: token id, created_at, then field/value pairs
_INSERT_TOKEN = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV, 3))
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
return 1
"""

# ARGV: account id, time; keeps the first revocation
_REVOKE = """
if redis.call('HGET', KEYS[1], 'account_id') ~= ARGV[1] then return {} end
redis.call('HSETNX', KEYS[1], 'revoked_at', ARGV[2])
return redis.call('HGETALL', KEYS[1])
"""


def _pairs(flat: list) -> dict[str, str]:
    return dict(zip(flat[0::2], flat[1::2]))


def _opt(h: dict, key: str) -> float | None:
    return float(h[key]) if key in h else None


def _account(h: dict) -> Account:
    return Account(id=h["id"], name=h["name"], created_at=float(h["created_at"]),
                   disabled_at=_opt(h, "disabled_at"))


def _token(h: dict) -> Token:
    return Token(id=h["id"], account_id=h["account_id"], name=h["name"],
                 scopes=tuple(h["scopes"].split(",")), created_at=float(h["created_at"]),
                 expires_at=_opt(h, "expires_at"), revoked_at=_opt(h, "revoked_at"))


class RedisAccounts:
    """An `AccountBackend` (store.py) on a Redis server."""

    def __init__(self, url: str, prefix: str = "tandem:accounts:") -> None:
        self._r = aioredis.Redis.from_url(url, decode_responses=True)
        self._p = prefix
        self._insert_account = self._r.register_script(_INSERT_ACCOUNT)
        self._set_disabled = self._r.register_script(_SET_DISABLED)
        self._insert_token = self._r.register_script(_INSERT_TOKEN)
        self._revoke = self._r.register_script(_REVOKE)

    def _k(self, kind: str, key: str = "") -> str:
        return f"{self._p}{kind}{key}"

    async def insert_account(self, a: Account) -> bool:
        return bool(await self._insert_account(keys=[self._k("a:", a.id), self._k("ids")],
                                               args=[a.id, a.name, repr(a.created_at)]))

    async def get_account(self, account_id: str) -> Account | None:
        h = await self._r.hgetall(self._k("a:", account_id))
        return _account(h) if h else None

    async def _hashes(self, kind: str, ids: list[str]) -> list[dict]:
        pipe = self._r.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(self._k(kind, i))
        return [h for h in await pipe.execute() if h]

    async def list_accounts(self) -> list[Account]:
        ids = await self._r.zrange(self._k("ids"), 0, -1)
        return [_account(h) for h in await self._hashes("a:", ids)]

    async def set_disabled(self, account_id: str, when: float | None) -> Account | None:
        flat = await self._set_disabled(keys=[self._k("a:", account_id)],
                                        args=["" if when is None else repr(when)])
        return _account(_pairs(flat)) if flat else None

    async def insert_token(self, row: StoredToken) -> bool:
        t = row.token
        fields = {"id": t.id, "account_id": t.account_id, "name": t.name, "scopes": ",".join(t.scopes),
                  "created_at": repr(t.created_at), "salt": row.salt, "digest": row.digest}
        if t.expires_at is not None:
            fields["expires_at"] = repr(t.expires_at)
        flat = [x for kv in fields.items() for x in kv]
        return bool(await self._insert_token(
            keys=[self._k("a:", t.account_id), self._k("t:", t.id), self._k("at:", t.account_id)],
            args=[t.id, repr(t.created_at), *flat]))

    async def list_tokens(self, account_id: str) -> list[Token]:
        ids = await self._r.zrange(self._k("at:", account_id), 0, -1)
        return [_token(h) for h in await self._hashes("t:", ids)]

    async def revoke_token(self, account_id: str, token_id: str, when: float) -> Token | None:
        flat = await self._revoke(keys=[self._k("t:", token_id)], args=[account_id, repr(when)])
        return _token(_pairs(flat)) if flat else None

    async def find_token(self, token_id: str) -> tuple[StoredToken, Account] | None:
        h = await self._r.hgetall(self._k("t:", token_id))
        if not h:
            return None
        a = await self._r.hgetall(self._k("a:", h["account_id"]))
        if not a:
            return None
        return StoredToken(_token(h), salt=h["salt"], digest=h["digest"]), _account(a)

    async def close(self) -> None:
        await self._r.aclose()
