"""`tandem up`'s cluster secret: in the children's environment, never on their command line; its
readiness probe presents it and stops at once when a child refuses it."""

from __future__ import annotations

import argparse
import sys
import time

import pytest

from tandem.cli import up as up_cli
from tandem.launcher import cluster as cluster_mod
from tandem.launcher.cluster import LocalCluster, ProcSpec, curl_line, free_port, plan

DUMP_ENV = "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('TANDEM_CLUSTER_SECRET', '-'))"
# answers every request 401, as a gateway given another secret would
REFUSE = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(401); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def run_up(monkeypatch, argv):
    seen = {}
    monkeypatch.setattr(up_cli, "run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["up", "--model", "/m", *argv])
    assert args.func(args) == 0
    return seen["spec"]


def test_up_takes_a_given_secret_and_keeps_it_off_command_lines(monkeypatch):
    monkeypatch.delenv("TANDEM_CLUSTER_SECRET", raising=False)
    assert run_up(monkeypatch, []).cluster_secret is None      # run_cluster generates one
    spec = run_up(monkeypatch, ["--cluster-secret", "given-secret"])
    assert spec.cluster_secret == "given-secret" and "given-secret" not in repr(spec)
    assert all("given-secret" not in " ".join(p.cmd) for p in plan(spec))
    monkeypatch.setenv("TANDEM_CLUSTER_SECRET", "from-env")
    assert run_up(monkeypatch, []).cluster_secret == "from-env"


def test_children_get_exactly_the_cluster_secret_in_their_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_CLUSTER_SECRET", "inherited")   # never leaks past the cluster's own
    for secret, want in (("s1", "s1"), (None, "-")):
        out = tmp_path / f"env-{want}"
        c = LocalCluster([ProcSpec("w", (sys.executable, "-c", DUMP_ENV, str(out)), "http://x", None, "both")],
                         cluster_secret=secret)
        c.start()
        try:
            assert c.running["w"].wait(30) == 0
        finally:
            c.stop()
        assert out.read_text() == want


def test_readiness_stops_at_once_when_a_child_refuses_the_secret():
    port = free_port()
    c = LocalCluster([ProcSpec("gateway", (sys.executable, "-c", REFUSE, str(port)),
                               f"http://127.0.0.1:{port}", None)], cluster_secret="s")
    c.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match="refused this cluster's secret"):
            c.wait_ready(60)
        assert time.monotonic() - t0 < 30
    finally:
        c.stop()


def test_curl_line_names_the_key_without_printing_it():
    assert "Bearer $API_KEY" in curl_line("http://h:1", "m", keyed=True)
    assert "Authorization" not in curl_line("http://h:1", "m")
    assert cluster_mod.ClusterSpec(model="m").cluster_secret is None
