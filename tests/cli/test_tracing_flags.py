"""--otlp-endpoint and --otlp-service-name -> TracingConfig on serve and gateway; the environment's
OTEL_EXPORTER_OTLP_ENDPOINT as the default; `tandem up` forwards the endpoint to every process."""

from __future__ import annotations

import argparse

import pytest

from tandem.cli import gateway as gateway_cli
from tandem.cli import serve as serve_cli
from tandem.cli import up as up_cli
from tandem.launcher.cluster import plan


def parse(module, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers(dest="verb"))
    return parser.parse_args(list(argv))


def test_off_unless_an_endpoint_is_given(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert not gateway_cli.gateway_config_from_args(parse(gateway_cli, "gateway")).tracing.enabled
    _, server = serve_cli.configs_from_args(parse(serve_cli, "serve", "--model", "/m", "--device", "cpu"))
    assert not server.tracing.enabled


def test_the_flags_reach_the_gateways_and_each_workers_config(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    g = gateway_cli.gateway_config_from_args(
        parse(gateway_cli, "gateway", "--otlp-endpoint", "http://col:4318")).tracing
    assert (g.traces_url, g.service_name) == ("http://col:4318/v1/traces", "tandem-gateway")
    for role, name in (("prefill", "tandem-prefill"), ("decode", "tandem-decode"), ("both", "tandem-worker")):
        _, server = serve_cli.configs_from_args(parse(
            serve_cli, "serve", "--model", "/m", "--device", "cpu", "--role", role,
            "--otlp-endpoint", "http://col:4318"))
        assert (server.tracing.otlp_endpoint, server.tracing.service_name) == ("http://col:4318", name)
    _, named = serve_cli.configs_from_args(parse(
        serve_cli, "serve", "--model", "/m", "--device", "cpu", "--otlp-endpoint", "http://col:4318",
        "--otlp-service-name", "pool-a"))
    assert named.tracing.service_name == "pool-a"


def test_the_environments_endpoint_is_the_default_and_the_flag_wins(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318")
    assert gateway_cli.gateway_config_from_args(
        parse(gateway_cli, "gateway")).tracing.otlp_endpoint == "http://env:4318"
    assert gateway_cli.gateway_config_from_args(
        parse(gateway_cli, "gateway", "--otlp-endpoint", "http://flag:4318")).tracing.otlp_endpoint \
        == "http://flag:4318"


def test_an_endpoint_that_is_not_a_url_is_a_usage_error(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    with pytest.raises(SystemExit, match="tandem gateway: --otlp-endpoint: .*http"):
        gateway_cli.gateway_config_from_args(parse(gateway_cli, "gateway", "--otlp-endpoint", "col:4318"))


def test_up_forwards_the_endpoint_to_the_gateway_and_every_worker(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(up_cli, "run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    args = parse(up_cli, "up", "--model", "/m", "--prefill", "1", "--decode", "1",
                 "--otlp-endpoint", "http://col:4318")
    assert args.func(args) == 0
    procs = plan(seen["spec"])
    assert len(procs) == 3
    for p in procs:
        assert "--otlp-endpoint=http://col:4318" in p.cmd, p.cmd
        assert not any(a.startswith("--otlp-service-name") for a in p.cmd)
    args = parse(up_cli, "up", "--model", "/m", "--otlp-service-name", "x")
    assert args.func(args) == 2 and "name every process alike" in capsys.readouterr().err
    args = parse(up_cli, "up", "--model", "/m", "--otlp-endpoint", "nope")
    with pytest.raises(SystemExit, match="--otlp-endpoint"):
        args.func(args)
