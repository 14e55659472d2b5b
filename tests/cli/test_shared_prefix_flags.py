"""--shared-prefixes FILE on tandem serve, tandem gateway and tandem up: the declarations reach the
configs; a file that cannot be read, does not parse or declares nothing is a usage error naming it,
before anything starts; `tandem up` forwards the file to its gateway."""

from __future__ import annotations

import argparse
import json

import pytest

from tandem.cli import gateway, serve, up
from tandem.cli.shared_prefix_flags import forwarded_shared_prefix_args

DOC = {"prefixes": [{"messages": [{"role": "system", "content": "Be brief."}]}, {"token_ids": [1, 2]}]}


def parse(module, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers(dest="verb"))
    return parser.parse_args(list(argv))


def test_the_declarations_reach_the_gateways_and_the_workers_configs(tmp_path):
    f = tmp_path / "shared.json"
    f.write_text(json.dumps(DOC))
    cfg = gateway.gateway_config_from_args(parse(gateway, "gateway", "--no-queue", "--shared-prefixes", str(f)))
    assert [d.token_ids for d in cfg.shared_prefixes] == [None, (1, 2)]
    assert cfg.shared_prefixes[0].messages == DOC["prefixes"][0]["messages"]
    _, server = serve.configs_from_args(parse(serve, "serve", "--model", "/m", "--device", "cpu",
                                              "--shared-prefixes", str(f)))
    assert server.shared_prefixes == cfg.shared_prefixes
    assert gateway.gateway_config_from_args(parse(gateway, "gateway", "--no-queue")).shared_prefixes == ()


@pytest.mark.parametrize("text, problem", [
    ("", "not JSON"),
    ("{oops", "not JSON"),
    ('{"prefixes": []}', '"prefixes" must be a non-empty array'),
    ('{"prefixes": [{"text": 5}]}', "prefixes[0].text: must be a non-empty string"),
])
@pytest.mark.parametrize("verb", ["gateway", "serve", "up"])
def test_a_bad_file_is_a_usage_error_naming_it(tmp_path, text, problem, verb):
    f = tmp_path / "shared.json"
    f.write_text(text)
    with pytest.raises(SystemExit) as err:
        if verb == "gateway":
            gateway.gateway_config_from_args(parse(gateway, "gateway", "--no-queue", "--shared-prefixes", str(f)))
        elif verb == "serve":
            serve.configs_from_args(parse(serve, "serve", "--model", "/m", "--device", "cpu",
                                          "--shared-prefixes", str(f)))
        else:   # refused before any child starts
            up.up(parse(up, "up", "--model", "/m", "--no-queue", "--shared-prefixes", str(f)))
    assert f"--shared-prefixes {f}" in str(err.value) and problem in str(err.value)


def test_a_missing_file_is_a_usage_error_naming_it(tmp_path):
    f = tmp_path / "absent.json"
    with pytest.raises(SystemExit, match=f"--shared-prefixes {f}: No such file"):
        gateway.gateway_config_from_args(parse(gateway, "gateway", "--shared-prefixes", str(f)))


def test_tandem_up_forwards_the_file_to_its_gateway_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = parse(up, "up", "--model", "/m", "--shared-prefixes", "s.json")
    assert forwarded_shared_prefix_args(args) == ("--shared-prefixes", str(tmp_path / "s.json"))
    assert forwarded_shared_prefix_args(parse(up, "up", "--model", "/m")) == ()
