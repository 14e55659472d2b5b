from tandem.launcher.cluster import ClusterSpec, curl_line, gateway_proc, plan, plan_cores, worker_proc


def test_plan_cores_splits_or_shares():
    assert plan_cores([0, 1], 2) == [(0,), (1,)]
    assert plan_cores([0, 1, 2, 3, 4], 2) == [(0, 1, 2), (3, 4)]
    assert plan_cores([0, 1], 3) == [(0,), (1,), (0,)]
    assert plan_cores([0, 1], 0) == []


def test_commands_pin_threads_and_name_roles():
    w = worker_proc("prefill-0", "/m", "prefill", "127.0.0.1", 9001, (2, 3))
    assert w.cmd[1:4] == ("-m", "tandem.cli", "serve")
    assert "--threads" in w.cmd and w.cmd[w.cmd.index("--threads") + 1] == "2"
    assert w.cmd[w.cmd.index("--role") + 1] == "prefill" and w.url == "http://127.0.0.1:9001"
    d = worker_proc("decode-1", "/m", "decode", "127.0.0.1", 9002, (1,))
    b = worker_proc("both-2", "/m", "both", "127.0.0.1", 9003, None)
    g = gateway_proc("/m", "127.0.0.1", 8000, [w, d, b], "token_aware")
    s = " ".join(g.cmd)
    assert "--prefill http://127.0.0.1:9001" in s and "--decode http://127.0.0.1:9002" in s
    assert "--worker http://127.0.0.1:9003" in s and "--policy token_aware" in s


def test_plan_has_workers_then_gateway_on_distinct_ports():
    procs = plan(ClusterSpec(model="/m", prefill=1, decode=2, port=8123))
    assert [p.role for p in procs] == ["prefill", "decode", "decode", None]
    ports = [p.url.rsplit(":", 1)[1] for p in procs]
    assert len(set(ports)) == 4 and ports[-1] == "8123"
    assert all(p.cores for p in procs[:-1]) and procs[-1].cores is None


def test_curl_line():
    line = curl_line("http://127.0.0.1:8000", "tiny")
    assert line.startswith("curl http://127.0.0.1:8000/v1/chat/completions") and '"model": "tiny"' in line


def test_several_gateways_listen_on_their_own_ports_behind_the_balancer():
    procs = plan(ClusterSpec(model="/m", prefill=1, decode=1, port=8123, gateways=2))
    gateways = [p for p in procs if p.role is None]
    assert [p.name for p in gateways] == ["gateway", "gateway-1"]
    ports = {p.url.rsplit(":", 1)[1] for p in procs}
    assert len(ports) == 4 and "8123" not in ports   # the balancer's
    for g in gateways:   # each polls every worker
        s = " ".join(g.cmd)
        assert f"--prefill {procs[0].url}" in s and f"--decode {procs[1].url}" in s


def test_several_gateways_share_the_default_queue_file(monkeypatch, tmp_path):
    import argparse

    from tandem.cli import up as up_cli
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    shared = str(tmp_path / "tandem" / "queue-8123.db")
    for argv, want in ((["--gateways", "2"], ("--queue-db", shared)),
                       (["--gateways", "2", "--queue-db"], ("--queue-db", shared)),
                       (["--gateways", "2", "--queue-db", "/q.db"], ("--queue-db", "/q.db")),
                       (["--gateways", "2", "--no-queue"], ("--no-queue",)),
                       ([], ())):
        args = parser.parse_args(["up", "--model", "/m", "--port", "8123", *argv])
        assert up_cli.shared_queue_args(args) == want, argv
