"""--rate-limits, --rate-limit, --pricing and --no-usage-ledger -> UsageConfig: every malformed
file or value is a usage error at start-up naming the problem; `tandem up` forwards the flags."""

from __future__ import annotations

import argparse
import json

import pytest

from tandem.cli.gateway import gateway_config_from_args, register
from tandem.cli.usage_flags import forwarded_usage_args
from tandem.usage.limits import BATCH, INTERACTIVE, Limit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="verb"))
    return parser.parse_args(["gateway", *argv])


def test_files_and_flags_reach_the_gateways_config(tmp_path):
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"default": {"requests_per_minute": 60},
                                  "limits": [{"account": "key-1", "input_tokens_per_minute": 100}]}))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"default": {"input": 1, "cached_input": 0.1, "output": 4}}))
    cfg = gateway_config_from_args(parse("--queue-db", str(tmp_path / "q.db"), "--rate-limits",
                                         str(limits), "--rate-limit", "batch.requests_per_minute=5",
                                         "--pricing", str(prices)))
    u = cfg.usage
    assert u.ledger and u.limits.limit_for("key-0", "m", INTERACTIVE) == Limit(requests=60)
    assert u.limits.limit_for("key-0", "m", BATCH) == Limit(requests=5)
    assert u.limits.limit_for("key-1", "m", INTERACTIVE) == Limit(input_tokens=100)
    assert u.prices.price("m").cached_input == 0.1
    plain = gateway_config_from_args(parse("--no-usage-ledger")).usage
    assert (plain.limits, plain.prices, plain.ledger) == (None, None, False)


@pytest.mark.parametrize("flag, text, problem", [
    ("--rate-limits", '{"default": {"requests_per_minute": 0}}',
     "default.requests_per_minute must be positive, not 0"),
    ("--rate-limits", '{"default": {"output_tokens_per_minute": -1}}', "must be positive, not -1"),
    ("--rate-limits", "not json", "not JSON"),
    ("--pricing", '{"models": {"m": {"input": 1}}}', "models['m']: 'output' is missing"),
    ("--pricing", '{"models": {"m": {"input": 1, "output": -2}}}', "models['m'].output must be"),
    ("--pricing", "[1]", "the top level must be an object"),
])
def test_a_malformed_file_is_a_usage_error_naming_the_problem(tmp_path, flag, text, problem):
    path = tmp_path / "f.json"
    path.write_text(text)
    with pytest.raises(SystemExit) as err:
        gateway_config_from_args(parse(flag, str(path)))
    assert f"{flag} {path}" in str(err.value) and problem in str(err.value)


def test_other_usage_errors(tmp_path):
    with pytest.raises(SystemExit, match="requests_per_minute must be positive, not 0"):
        gateway_config_from_args(parse("--rate-limit", "requests_per_minute=0"))
    with pytest.raises(SystemExit, match="No such file"):
        gateway_config_from_args(parse("--pricing", str(tmp_path / "absent.json")))
    with pytest.raises(SystemExit, match="drop --no-queue"):
        gateway_config_from_args(parse("--no-queue", "--rate-limit", "requests_per_minute=5"))


def test_tandem_up_forwards_the_flags_with_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = parse("--rate-limits", "l.json", "--rate-limit", "requests_per_minute=5",
                 "--pricing", "p.json", "--no-usage-ledger")
    assert forwarded_usage_args(args) == (
        "--rate-limits", str(tmp_path / "l.json"), "--rate-limit", "requests_per_minute=5",
        "--pricing", str(tmp_path / "p.json"), "--no-usage-ledger")
    assert forwarded_usage_args(parse()) == ()
