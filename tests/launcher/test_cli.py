"""`tandem up` flags -> the cluster it starts."""

from tandem.launcher.cluster import plan


def test_up_passes_gateway_args_to_the_gateway(monkeypatch):
    import argparse

    from tandem.cli import up as cli

    seen = {}
    monkeypatch.setattr(cli, "run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["up", "--model", "/m", "--prefill", "1", "--decode", "1",
                              "--gateway-arg=--local-prefill-tokens=64", "--worker-arg=--dtype=float32"])
    assert args.func(args) == 0
    spec = seen["spec"]
    # the two workers share a GPU's 0.9 (ignored on the CPU); a --worker-arg comes after and wins
    assert spec.gateway_args == ("--local-prefill-tokens=64",)
    assert spec.worker_args == ("--gpu-memory-utilization=0.45", "--dtype=float32")
    gateway = plan(spec)[-1]
    assert gateway.role is None and "--local-prefill-tokens=64" in gateway.cmd


def test_up_passes_the_output_parsers_to_the_gateway_and_every_worker(monkeypatch, capsys):
    import argparse

    import pytest

    from tandem.cli import up as cli

    seen = {}
    monkeypatch.setattr(cli, "run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["up", "--model", "/m", "--tool-call-parser", "qwen3_coder",
                              "--reasoning-parser", "qwen3"])
    assert args.func(args) == 0
    flags = ("--tool-call-parser=qwen3_coder", "--reasoning-parser=qwen3")
    for proc in plan(seen["spec"]):
        assert all(f in proc.cmd for f in flags), proc.cmd
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--model", "/m", "--tool-call-parser", "hermes2"])
    assert "known: auto" in capsys.readouterr().err


def test_up_gives_the_queue_to_the_gateway_and_none_to_the_workers(monkeypatch):
    import argparse

    from tandem.cli import up as cli

    seen = {}
    monkeypatch.setattr(cli, "run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["up", "--model", "/m", "--colocated", "2", "--queue-url",
                              "redis://127.0.0.1:6379/0", "--queue-interactive-limit", "2"])
    assert args.func(args) == 0
    *workers, gateway = plan(seen["spec"])
    assert all("--no-queue" in w.cmd and "--queue-url" not in w.cmd for w in workers)
    g = " ".join(gateway.cmd)
    assert "--queue-url redis://127.0.0.1:6379/0" in g and "--queue-interactive-limit 2" in g
    assert "--no-queue" not in gateway.cmd


def test_up_forwards_the_planner_targets_to_its_gateway(monkeypatch):
    import argparse

    from tandem.cli import up as cli

    seen = {}
    monkeypatch.setattr("tandem.cli.up.run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    cli.up(parser.parse_args(["up", "--model", "m", "--slo-ttft-ms", "800", "--slo-itl-ms", "50.5",
                              "--gateway-arg=--slo-itl-ms=60"]))
    args = seen["spec"].gateway_args
    assert args[:2] == ("--slo-ttft-ms=800", "--slo-itl-ms=50.5")
    assert args.index("--slo-itl-ms=60") > 1     # an explicit --gateway-arg comes later and wins


def test_up_passes_the_model_name_and_chat_template_to_the_gateway_and_every_worker(monkeypatch, tmp_path, capsys):
    import argparse

    from tandem.cli import up as cli

    seen = {}
    monkeypatch.setattr(cli, "run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="verb"))
    (tmp_path / "t.jinja").write_text("{{ messages[0].content }}")
    monkeypatch.chdir(tmp_path)
    args = parser.parse_args(["up", "--model", "/m", "--colocated", "2", "--served-model-name", "m",
                              "--chat-template", "t.jinja"])
    assert args.func(args) == 0
    flags = ("--served-model-name=m", f"--chat-template={tmp_path / 't.jinja'}")
    procs = plan(seen["spec"])
    assert len(procs) == 3
    for proc in procs:
        assert all(f in proc.cmd for f in flags), proc.cmd
    args = parser.parse_args(["up", "--model", "/m", "--chat-template", "missing.jinja"])
    assert args.func(args) == 2 and "no such file" in capsys.readouterr().err


def test_up_gives_accounts_to_the_gateway_only(monkeypatch):
    import argparse

    from tandem.cli import up as cli

    seen = {}
    monkeypatch.setattr(cli, "run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["up", "--model", "/m", "--accounts"])
    assert args.func(args) == 0
    procs = plan(seen["spec"])
    assert [p.role for p in procs if "--accounts" in p.cmd] == [None]   # the gateway alone
