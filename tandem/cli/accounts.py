"""`tandem accounts`: accounts and their API tokens, in the queue's database of a gateway (or of a
standalone `tandem serve`) started with --accounts. The same operations as the admin API
(tandem/api/admin/admin_api.py), straight on the database: how an operator makes the first
admin token.

  tandem accounts create NAME [--id ID]             prints the new account's id
  tandem accounts list
  tandem accounts disable|enable ACCOUNT_ID
  tandem accounts token-create ACCOUNT_ID --name NAME [--scope ai:run|ai:batch|admin ...]
                               [--expires-in 90d]   prints the token, the only time it is shown
  tandem accounts token-list ACCOUNT_ID
  tandem accounts token-revoke ACCOUNT_ID TOKEN_ID
Each takes the database as the server does: --queue-db FILE, --queue-url postgresql://...|redis://...,
or --port N for the default file of the server on port N (queue-N.db under the state directory);
--json prints the objects as the admin API returns them. A gateway sees a revocation or a
disabled account within its token cache's TTL (5 s by default).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable

from tandem.accounts.model import (
    DEFAULT_SCOPES,
    SCOPES,
    account_view,
    new_token_view,
    token_view,
)
from tandem.accounts.open_store import open_account_store
from tandem.accounts.store import AccountStore
from tandem.cli.queue_flags import state_dir
from tandem.errors import TandemError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """'90' or '90s', '15m', '12h', '30d' -> seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if m is None or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a duration such as 3600, 90s, 15m, 12h or 30d")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def register(subparsers: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_mutually_exclusive_group()
    where.add_argument("--queue-db", default=None, metavar="FILE",
                       help="the SQLite file of the server's queue")
    where.add_argument("--queue-url", default=None, metavar="URL",
                       help="the server's --queue-url (postgresql://... or redis://...)")
    common.add_argument("--port", type=int, default=8000,
                        help="without --queue-db/--queue-url: the default queue file of the server "
                             "on this port (default 8000)")
    common.add_argument("--json", action="store_true", help="print JSON, as the admin API returns it")

    a = subparsers.add_parser("accounts", help="accounts and API tokens (the queue's database)",
                              description=__doc__.splitlines()[0])
    verbs = a.add_subparsers(dest="accounts_verb", required=True)
    p = verbs.add_parser("create", parents=[common], help="create an account; prints its id")
    p.add_argument("name")
    p.add_argument("--id", default=None, help="the account id (default: 32 random hex digits)")
    verbs.add_parser("list", parents=[common], help="list the accounts")
    for verb, text in (("disable", "disable an account: all its tokens stop working"),
                       ("enable", "enable a disabled account again")):
        p = verbs.add_parser(verb, parents=[common], help=text)
        p.add_argument("account_id")
    p = verbs.add_parser("token-create", parents=[common],
                         help="create an API token; prints it (shown this once)")
    p.add_argument("account_id")
    p.add_argument("--name", required=True, help="what the token is for")
    p.add_argument("--scope", action="append", choices=SCOPES, default=None,
                   help=f"repeatable (default: {' '.join(DEFAULT_SCOPES)}); admin makes an operator")
    p.add_argument("--expires-in", type=duration, default=None, metavar="DURATION",
                   help="e.g. 3600, 90s, 15m, 12h, 30d (default: never)")
    p = verbs.add_parser("token-list", parents=[common], help="list an account's tokens")
    p.add_argument("account_id")
    p = verbs.add_parser("token-revoke", parents=[common], help="revoke a token")
    p.add_argument("account_id")
    p.add_argument("token_id")
    a.set_defaults(func=accounts)


def store_target(args: argparse.Namespace) -> str:
    return args.queue_url or args.queue_db or str(state_dir() / f"queue-{args.port}.db")


def _when(t: int | None) -> str:
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _say(text: str) -> None:
    print(text, file=sys.stderr)


async def _run(args: argparse.Namespace, store: AccountStore) -> None:
    verb, now = args.accounts_verb, time.time()
    out: object
    if verb == "create":
        out = account_view(await store.create_account(args.name, args.id))
        if not args.json:
            _say(f"created account {out['id']} ({out['name']})")
            print(out["id"])
            return
    elif verb == "list":
        out = {"object": "list", "data": [account_view(a) for a in await store.list_accounts()]}
        if not args.json:
            rows = [["ID", "NAME", "STATUS", "CREATED"]] + [
                [a["id"], a["name"], "disabled" if a["disabled"] else "active", _when(a["created_at"])]
                for a in out["data"]]
            print(_table(rows))
            return
    elif verb in ("disable", "enable"):
        change: Callable[[str], Awaitable] = store.disable if verb == "disable" else store.enable
        out = account_view(await change(args.account_id))
        if not args.json:
            _say(f"account {args.account_id} {verb}d" + (
                "; its tokens stop working within the gateways' token cache TTL (5 s by default)"
                if verb == "disable" else ""))
            return
    elif verb == "token-create":
        new = await store.create_token(args.account_id, args.name, args.scope or DEFAULT_SCOPES,
                                       args.expires_in)
        out = new_token_view(new, now)
        if not args.json:
            _say(f"token {new.token.id} for account {args.account_id}, scopes "
                 f"{' '.join(new.token.scopes)}, expires {_when(out['expires_at'])}: shown this once, "
                 "store it now")
            print(new.text)
            return
    elif verb == "token-list":
        out = {"object": "list", "data": [token_view(t, now) for t in await store.list_tokens(args.account_id)]}
        if not args.json:
            rows = [["ID", "NAME", "SCOPES", "STATUS", "CREATED", "EXPIRES"]] + [
                [t["id"], t["name"], ",".join(t["scopes"]), t["status"], _when(t["created_at"]),
                 _when(t["expires_at"])] for t in out["data"]]
            print(_table(rows))
            return
    else:   # token-revoke
        out = token_view(await store.revoke_token(args.account_id, args.token_id), now)
        if not args.json:
            _say(f"token {args.token_id} revoked; it stops working within the gateways' token "
                 "cache TTL (5 s by default)")
            return
    print(json.dumps(out, indent=2))


def accounts(args: argparse.Namespace) -> int:
    target = store_target(args)
    if "://" not in target and not os.path.exists(target):
        _say(f"tandem accounts: {target} does not exist yet; creating it (a server whose queue is "
             "this file will see these accounts)")
    try:
        store = open_account_store(target)
    except ValueError as exc:
        _say(f"tandem accounts: {exc}")
        return 2

    async def main() -> None:
        try:
            await _run(args, store)
        finally:
            await store.close()
    try:
        asyncio.run(main())
    except TandemError as exc:
        _say(f"tandem accounts: {exc.message}")
        return 1
    return 0
