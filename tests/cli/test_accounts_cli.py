"""`tandem accounts` on a queue's SQLite file, then an app over that file: the token the CLI
printed works on the API, and a revocation through the CLI reaches the app; --accounts on serve
and gateway, and its usage errors."""

from __future__ import annotations

import argparse
import json
import time

import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.queue.service import QueueConfig, QueueSetup
from tandem.cli import gateway as gateway_cli
from tandem.cli import main
from tandem.cli import serve as serve_cli
from tandem.cli.accounts import duration
from tests.api.fakes import FakeBackend

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def cli(capsys, db, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["accounts", *argv, "--queue-db", str(db)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_accounts_cli_round_trip(capsys, tmp_path):
    db = tmp_path / "queue.db"
    rc, out, err = cli(capsys, db, "create", "Team A", "--id", "team-a")
    assert (rc, out) == (0, "team-a\n") and "does not exist yet" in err
    rc, out, _ = cli(capsys, db, "create", "Ops")
    ops = out.strip()
    assert rc == 0 and len(ops) == 32
    rc, out, _ = cli(capsys, db, "list")
    assert [line.split()[0] for line in out.splitlines()] == ["ID", "team-a", ops]
    rc, token, err = cli(capsys, db, "token-create", "team-a", "--name", "ci", "--scope", "ai:run",
                         "--expires-in", "30d")
    token = token.strip()
    assert rc == 0 and token.startswith("tdm_") and "shown this once" in err
    token_id = token.split("_")[1]
    rc, out, _ = cli(capsys, db, "token-list", "team-a", "--json")
    (listed,) = json.loads(out)["data"]
    assert listed["id"] == token_id and listed["scopes"] == ["ai:run"] and listed["status"] == "active"
    assert listed["expires_at"] - listed["created_at"] in range(30 * 86400 - 1, 30 * 86400 + 2)
    assert "token" not in listed and token not in out

    setup = QueueSetup(QueueConfig(target=str(db)), headroom=lambda: True)
    app = build_app(FakeBackend(), ServerConfig(accounts=True, token_cache_ttl_s=0.01), queue=setup)
    with TestClient(app) as c:
        auth = {"Authorization": f"Bearer {token}"}
        assert c.post("/v1/chat/completions", headers=auth, json=CHAT).status_code == 200
        assert c.get("/v1/files", headers=auth).status_code == 403        # no ai:batch
        rc, out, _ = cli(capsys, db, "token-revoke", "team-a", token_id, "--json")
        assert rc == 0 and json.loads(out)["status"] == "revoked"
        time.sleep(0.05)                                                   # > the TTL
        r = c.post("/v1/chat/completions", headers=auth, json=CHAT)
        assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]

    rc, _, err = cli(capsys, db, "disable", "team-a")
    assert rc == 0 and "disabled" in err
    rc, out, _ = cli(capsys, db, "list", "--json")
    assert [a["disabled"] for a in json.loads(out)["data"]] == [True, False]
    rc, _, _ = cli(capsys, db, "enable", "team-a")
    assert rc == 0


def test_accounts_cli_errors(capsys, tmp_path):
    db = tmp_path / "queue.db"
    assert cli(capsys, db, "create", "A", "--id", "a")[0] == 0
    for argv, message in ((("create", "B", "--id", "a"), "account a exists"),
                          (("create", "B", "--id", "key-1"), "account id"),
                          (("token-list", "nobody"), "no account nobody"),
                          (("token-revoke", "a", "0123456789abcdef"), "no token"),
                          (("disable", "nobody"), "no account nobody")):
        rc, out, err = cli(capsys, db, *argv)
        assert rc == 1 and out == "" and message in err, (argv, err)
    with pytest.raises(SystemExit):
        main(["accounts", "token-create", "a", "--name", "x", "--scope", "root", "--queue-db", str(db)])
    capsys.readouterr()
    assert main(["accounts", "list", "--queue-url", "mysql://h/db"]) == 2
    assert "unknown store URL" in capsys.readouterr().err


def test_durations():
    assert [duration(t) for t in ("90", "90s", "15m", "12h", "30d", "1.5h")] == \
        [90, 90, 900, 43200, 2592000, 5400]
    for bad in ("0", "-1", "1w", "d", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            duration(bad)


def parse(module, argv):
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers(dest="verb"))
    return parser.parse_args(argv)


def test_accounts_flag_on_serve_and_gateway(tmp_path):
    db = str(tmp_path / "q.db")
    g = gateway_cli.gateway_config_from_args(parse(gateway_cli, ["gateway", "--accounts", "--queue-db", db,
                                                                 "--token-cache-ttl", "2"]))
    assert g.accounts and g.token_cache_ttl_s == 2.0 and g.queue.target == db
    assert not gateway_cli.gateway_config_from_args(parse(gateway_cli, ["gateway"])).accounts
    _, server = serve_cli.configs_from_args(parse(serve_cli, ["serve", "--model", "/m", "--device", "cpu",
                                                              "--accounts"]))
    assert server.accounts and server.token_cache_ttl_s == 5.0
    for module, argv in ((gateway_cli, ["gateway", "--accounts", "--no-queue"]),
                         (serve_cli, ["serve", "--model", "/m", "--device", "cpu", "--accounts",
                                      "--role", "prefill"]),
                         (serve_cli, ["serve", "--model", "/m", "--device", "cpu", "--accounts",
                                      "--gateway", "http://g"]),
                         (gateway_cli, ["gateway", "--accounts", "--token-cache-ttl", "0"])):
        build = gateway_cli.gateway_config_from_args if module is gateway_cli else serve_cli.configs_from_args
        with pytest.raises(SystemExit) as e:
            build(parse(module, argv))
        assert "--accounts" in str(e.value) or "--token-cache-ttl" in str(e.value)
