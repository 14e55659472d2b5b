"""The token resolver (tandem/accounts/resolver.py) over a fake lookup and fake clocks: what each
token authenticates as, why a real one is refused, the cache's staleness bound and invalidation."""

from __future__ import annotations

import asyncio

import pytest

from tandem.accounts import token_format
from tandem.accounts.model import Account, Credential, StoredToken, Token
from tandem.accounts.resolver import TokenResolver
from tandem.errors import Unauthorized


class Rows:
    """A fake store: key id -> (row, account), counting lookups."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[StoredToken, Account]] = {}

    def add(self, account: Account, scopes=("ai:run",), **fields) -> str:
        key_id, text, salt, digest = token_format.new_token()
        token = Token(id=key_id, account_id=account.id, name="t", scopes=tuple(scopes),
                      created_at=0.0, **fields)
        self.rows[key_id] = (StoredToken(token, salt, digest), account)
        return text

    async def lookup(self, key_id: str):
        await asyncio.sleep(0)
        return self.rows.get(key_id)


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


ACC = Account("acc-a", "A", 0.0)


def resolver(rows: Rows, clock: Clock, ttl_s: float = 5.0) -> TokenResolver:
    return TokenResolver(rows.lookup, ttl_s=ttl_s, clock=clock, wall=clock)


def test_a_valid_token_is_its_accounts_tenant_with_its_scopes():
    rows, clock = Rows(), Clock()
    text = rows.add(ACC, scopes=("ai:run", "admin"), expires_at=2000.0)
    r = resolver(rows, clock)
    cred = asyncio.run(r.authenticate(text))
    key_id = token_format.parse(text)[0]
    assert cred == Credential(tenant="acc-a", scopes=frozenset({"ai:run", "admin"}), account="acc-a",
                              token_id=key_id)


def test_what_is_not_a_token_of_the_store_is_none():
    rows, clock = Rows(), Clock()
    text = rows.add(ACC)
    key_id, secret = token_format.parse(text)
    wrong_secret = f"tdm_{key_id}_{'A' * 43}"
    unknown = token_format.new_token()[1]
    r = resolver(rows, clock)

    async def main():
        return [await r.authenticate(t) for t in (wrong_secret, unknown, "tdm_", "sk-123", text[:-1],
                                                   text + "x", text.upper())]
    assert asyncio.run(main()) == [None] * 7


@pytest.mark.parametrize("fields,account,message", [
    ({"revoked_at": 5.0}, ACC, "was revoked"),
    ({"expires_at": 1000.0}, ACC, r"expired at 1970-01-01T00:16:40\+00:00"),
    ({}, Account("acc-a", "A", 0.0, disabled_at=3.0), "account of API token .* is disabled"),
])
def test_a_real_token_that_no_longer_authenticates_says_why(fields, account, message):
    rows, clock = Rows(), Clock()
    text = rows.add(account, **fields)
    with pytest.raises(Unauthorized, match=message):
        asyncio.run(resolver(rows, clock).authenticate(text))


def test_a_revoked_token_with_a_wrong_secret_reveals_nothing():
    rows, clock = Rows(), Clock()
    key_id = token_format.parse(rows.add(ACC, revoked_at=1.0))[0]
    assert asyncio.run(resolver(rows, clock).authenticate(f"tdm_{key_id}_{'B' * 43}")) is None


def test_lookups_are_cached_for_the_ttl_then_reread():
    rows, clock = Rows(), Clock()
    text = rows.add(ACC)
    key_id = token_format.parse(text)[0]
    r = resolver(rows, clock, ttl_s=5.0)

    async def main():
        assert await r.authenticate(text) is not None
        row, account = rows.rows[key_id]       # revoked elsewhere (another gateway, the CLI)
        rows.rows[key_id] = (StoredToken(Token(**{**row.token.__dict__, "revoked_at": 1.0}),
                                         row.salt, row.digest), account)
        clock.t += 4.9
        assert await r.authenticate(text) is not None      # still cached: within the bound
        assert r.lookups == 1
        clock.t += 0.2
        with pytest.raises(Unauthorized, match="revoked"):
            await r.authenticate(text)
        assert r.lookups == 2
    asyncio.run(main())


def test_expiry_is_exact_while_cached():
    rows, clock = Rows(), Clock()
    text = rows.add(ACC, expires_at=1001.0)
    r = resolver(rows, clock, ttl_s=60.0)

    async def main():
        assert await r.authenticate(text) is not None
        clock.t = 1001.0
        with pytest.raises(Unauthorized, match="expired"):
            await r.authenticate(text)
        assert r.lookups == 1
    asyncio.run(main())


def test_forget_drops_the_cached_token_and_the_accounts_tokens():
    rows, clock = Rows(), Clock()
    t1, t2 = rows.add(ACC), rows.add(ACC)
    other = rows.add(Account("acc-b", "B", 0.0))
    r = resolver(rows, clock, ttl_s=60.0)

    async def main():
        for t in (t1, t2, other):
            await r.authenticate(t)
        assert r.lookups == 3
        r.forget_token(token_format.parse(t1)[0])
        await r.authenticate(t1)
        assert r.lookups == 4
        r.forget_account("acc-a")
        for t in (t1, t2, other):
            await r.authenticate(t)
        assert r.lookups == 6          # acc-a's two again; acc-b's still cached
    asyncio.run(main())


def test_concurrent_misses_share_one_lookup_and_the_cache_is_bounded():
    rows, clock = Rows(), Clock()
    texts = [rows.add(ACC) for _ in range(3)]
    r = TokenResolver(rows.lookup, ttl_s=60.0, max_entries=2, clock=clock, wall=clock)

    async def main():
        creds = await asyncio.gather(*(r.authenticate(texts[0]) for _ in range(10)))
        assert len({c.token_id for c in creds}) == 1 and r.lookups == 1
        await r.authenticate(texts[1])
        await r.authenticate(texts[2])         # drops texts[0], the least recently used
        await r.authenticate(texts[0])
        assert r.lookups == 4
    asyncio.run(main())
