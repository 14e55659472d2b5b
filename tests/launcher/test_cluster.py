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
