"""The account store's invariants (tandem/accounts/store.py), the same tests on SQLite, Redis and
PostgreSQL, with a fake clock so that every time is exact."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tandem.accounts import token_format
from tandem.accounts.model import (
    Account,
    AccountExists,
    AccountNotFound,
    Token,
    TokenNotFound,
)
from tandem.accounts.open_store import open_account_store
from tandem.accounts.store import AccountStore
from tandem.errors import InvalidRequest


def run(body, target: str):
    """body(store) on a store whose clock reads 100, 101, 102, ... (one tick per change)."""
    ticks = itertools.count(100)

    async def main():
        opened = open_account_store(target)
        store = AccountStore(opened._b, clock=lambda: float(next(ticks)))
        try:
            return await body(store)
        finally:
            await store.close()
    return asyncio.run(main())


def test_accounts_create_list_disable_enable(store_target):
    async def body(s: AccountStore):
        a = await s.create_account("Team A", account_id="team-a")
        assert a == Account(id="team-a", name="Team A", created_at=100.0)
        b = await s.create_account("  Team B ")
        assert b.name == "Team B" and len(b.id) == 32 and int(b.id, 16) >= 0   # Cloudflare's form
        with pytest.raises(AccountExists):
            await s.create_account("again", account_id="team-a")
        assert await s.get_account("team-a") == a                   # unchanged by the refusal
        assert await s.list_accounts() == [a, b]                    # by creation
        # t=102 went to the refused creation
        assert await s.disable("team-a") == Account("team-a", "Team A", 100.0, disabled_at=103.0)
        assert (await s.disable("team-a")).disabled_at == 103.0     # the first disabling holds
        assert await s.enable("team-a") == a
        with pytest.raises(AccountNotFound):
            await s.get_account("nobody")
        for change in (s.disable, s.enable):
            with pytest.raises(AccountNotFound):
                await change("nobody")
        assert await s.list_accounts() == [a, b]
    run(body, store_target)


@pytest.mark.parametrize("bad", ["", "key-0", "key-x", "-lead", "a/b", "a b", "x" * 65, "é"])
def test_account_ids_that_are_refused(tmp_path, bad):
    async def body(s: AccountStore):
        with pytest.raises(InvalidRequest) as e:
            await s.create_account("n", account_id=bad)
        assert e.value.param == "id"
        assert await s.list_accounts() == []
    run(body, str(tmp_path / "q.db"))


def test_tokens_create_list_revoke(store_target):
    async def body(s: AccountStore):
        await s.create_account("A", account_id="acc-a")            # t=100
        await s.create_account("B", account_id="acc-b")            # t=101
        new = await s.create_token("acc-a", "ci", ["ai:batch", "ai:run", "ai:run"], expires_in=3600)
        t1 = new.token
        assert t1 == Token(id=t1.id, account_id="acc-a", name="ci", scopes=("ai:run", "ai:batch"),
                           created_at=102.0, expires_at=3702.0)
        key_id, secret = token_format.parse(new.text)
        assert key_id == t1.id and new.text.startswith("tdm_")
        t2 = (await s.create_token("acc-a", "ops", ["admin"])).token
        assert t2.expires_at is None and t2.scopes == ("admin",)
        tb = (await s.create_token("acc-b", "b's", ["ai:run"])).token
        assert await s.list_tokens("acc-a") == [t1, t2]
        assert await s.list_tokens("acc-b") == [tb]
        # the secret is stored only as its salted hash
        row, account = await s.find_token(t1.id)
        assert row.token == t1 and account.id == "acc-a"
        assert secret not in (row.salt, row.digest) and token_format.verify(secret, row.salt, row.digest)
        assert await s.find_token("0" * 16) is None
        # another account's token is unknown under this one, and stays as it was
        with pytest.raises(TokenNotFound):
            await s.revoke_token("acc-b", t1.id)
        assert (await s.find_token(t1.id))[0].token.revoked_at is None
        revoked = await s.revoke_token("acc-a", t1.id)              # t=106 (the refusal took 105)
        assert revoked.revoked_at == 106.0 and revoked.status(0) == "revoked"
        assert (await s.revoke_token("acc-a", t1.id)).revoked_at == 106.0   # the first holds
        assert [t.revoked_at for t in await s.list_tokens("acc-a")] == [106.0, None]
        with pytest.raises(AccountNotFound):
            await s.list_tokens("nobody")
        with pytest.raises(AccountNotFound):
            await s.create_token("nobody", "x", ["ai:run"])
        with pytest.raises(TokenNotFound):
            await s.revoke_token("nobody", t2.id)
    run(body, store_target)


def test_a_disabled_accounts_tokens_are_found_with_it_disabled(store_target):
    async def body(s: AccountStore):
        await s.create_account("A", account_id="acc-a")
        t = (await s.create_token("acc-a", "t", ["ai:run"])).token
        await s.disable("acc-a")
        _, account = await s.find_token(t.id)
        assert account.disabled and account.disabled_at == 102.0
    run(body, store_target)


@pytest.mark.parametrize("scopes,expires_in,param", [
    ([], None, "scopes"), (["ai:run", "root"], None, "scopes"), ("ai:run", None, "scopes"),
    (["ai:run"], 0, "expires_in"), (["ai:run"], -5, "expires_in"), (["ai:run"], True, "expires_in"),
    (["ai:run"], float("nan"), "expires_in"), (["ai:run"], 1e12, "expires_in")])
def test_token_settings_that_are_refused(tmp_path, scopes, expires_in, param):
    async def body(s: AccountStore):
        await s.create_account("A", account_id="acc-a")
        with pytest.raises(InvalidRequest) as e:
            await s.create_token("acc-a", "t", scopes, expires_in=expires_in)
        assert e.value.param == param
        with pytest.raises(InvalidRequest):
            await s.create_token("acc-a", " ", ["ai:run"])
        assert await s.list_tokens("acc-a") == []
    run(body, str(tmp_path / "q.db"))


def test_two_stores_on_one_database_see_each_others_changes(store_target):
    """Two gateways on one queue database: what one writes, the other reads."""
    async def body(s: AccountStore):
        other = open_account_store(store_target)
        try:
            await s.create_account("A", account_id="acc-a")
            new = await other.create_token("acc-a", "t", ["ai:run"])
            assert (await s.find_token(new.token.id))[0].token == new.token
        finally:
            await other.close()
    run(body, store_target)


def test_the_queue_and_the_accounts_share_one_sqlite_file(tmp_path):
    from tandem.asyncq.open_queue import open_queue

    async def main():
        path = str(tmp_path / "queue.db")
        q = open_queue(path)
        s = open_account_store(path)
        try:
            await s.create_account("A", account_id="acc-a")
            assert await q.list_files("acc-a", "acc-a") == []
            assert [a.id for a in await s.list_accounts()] == ["acc-a"]
        finally:
            await s.close()
            await q.close()
    asyncio.run(main())


def test_unknown_store_url():
    with pytest.raises(ValueError, match="unknown store URL"):
        open_account_store("mysql://x")
