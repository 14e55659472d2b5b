"""--cluster-secret, --cluster-secret-file and TANDEM_CLUSTER_SECRET on serve and gateway."""

import argparse

import pytest

from tandem.api.config import ServerConfig
from tandem.cli import gateway as gateway_cli
from tandem.cli import serve as serve_cli
from tandem.cli.secret_flags import exposure_warning
from tandem.gateway.config import GatewayConfig


def parse(module, argv):
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers(dest="verb"))
    return parser.parse_args(argv)


SERVE = ["serve", "--model", "/m", "--device", "cpu"]
GATEWAY = ["gateway"]


def serve_secret(argv, monkeypatch, env=None):
    monkeypatch.delenv("TANDEM_CLUSTER_SECRET", raising=False)
    if env is not None:
        monkeypatch.setenv("TANDEM_CLUSTER_SECRET", env)
    engine, server = serve_cli.configs_from_args(parse(serve_cli, SERVE + argv))
    assert engine.transfer.cluster_secret == server.cluster_secret   # the KV handoff checks it too
    return server.cluster_secret


def test_flag_then_file_then_environment(monkeypatch, tmp_path):
    f = tmp_path / "secret"
    f.write_text("from-file\n")
    f.chmod(0o600)
    assert serve_secret([], monkeypatch) is None
    assert serve_secret([], monkeypatch, env=" from-env ") == "from-env"
    assert serve_secret(["--cluster-secret-file", str(f)], monkeypatch, env="from-env") == "from-file"
    assert serve_secret(["--cluster-secret", "from-flag"], monkeypatch, env="from-env") == "from-flag"
    with pytest.raises(SystemExit):   # one or the other
        parse(serve_cli, SERVE + ["--cluster-secret", "a", "--cluster-secret-file", str(f)])
    monkeypatch.setenv("TANDEM_CLUSTER_SECRET", "gw")
    assert gateway_cli.gateway_config_from_args(parse(gateway_cli, GATEWAY)).cluster_secret == "gw"
    config = gateway_cli.gateway_config_from_args(parse(gateway_cli, GATEWAY + ["--cluster-secret-file", str(f)]))
    assert config.cluster_secret == "from-file" and "from-file" not in repr(config)


def test_bad_secrets_are_usage_errors(monkeypatch, tmp_path, capsys):
    empty, loose = tmp_path / "empty", tmp_path / "loose"
    empty.write_text("\n")
    loose.write_text("ok-secret")
    loose.chmod(0o644)
    for argv, env, says in ((["--cluster-secret-file", str(empty)], None, "empty"),
                            (["--cluster-secret-file", str(tmp_path / "none")], None, "No such file"),
                            ([], "", "empty"),
                            (["--cluster-secret", "two words"], None, "printable ASCII"),
                            (["--cluster-secret", "k1", "--api-key", "k0,k1"], None, "differ from every --api-key"),
                            (["--gateway-api-key", "k1"], None, "--cluster-secret-file")):
        with pytest.raises(SystemExit, match=says):
            serve_secret(argv, monkeypatch, env=env)
    assert serve_secret(["--cluster-secret-file", str(loose)], monkeypatch) == "ok-secret"
    assert "readable by other users" in capsys.readouterr().err


def test_who_is_warned_that_internal_routes_lack_a_secret():
    assert exposure_warning(gateway=False, registers=False, api_keys=(), secret=None) is None
    assert exposure_warning(gateway=False, registers=True, api_keys=(), secret="s") is None
    assert exposure_warning(gateway=True, registers=False, api_keys=("k",), secret="s") is None
    assert "answer anyone" in exposure_warning(gateway=False, registers=True, api_keys=(), secret=None)
    assert "answer anyone" in exposure_warning(gateway=True, registers=False, api_keys=(), secret=None)
    assert "closed to everyone" in exposure_warning(gateway=True, registers=False, api_keys=("k",),
                                                     secret=None)


def test_env_var_is_read_only_by_the_cli(monkeypatch):
    """Configs stay plain values: nothing below the CLI looks at the environment."""
    monkeypatch.setenv("TANDEM_CLUSTER_SECRET", "x")
    assert ServerConfig().cluster_secret is None and GatewayConfig().cluster_secret is None
