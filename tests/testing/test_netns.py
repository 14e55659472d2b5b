"""Test hosts in network namespaces (tandem/testing/netns.py) and the loopback rule of
tandem/testing/hosts.py: a cut link loses packets (a connect times out, nothing refuses), a
rate limit is a tbf on both ends, everything is removed on close, and a process that listens on
a loopback or wildcard address is reported."""

import os
import subprocess
import sys
import time

import pytest

from tandem.testing import netns
from tandem.testing.hosts import HostCluster

pytestmark = pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))

SERVE = "import socket,sys,time; s=socket.create_server((sys.argv[1], 9000)); time.sleep(60)"


def test_hosts_cut_limit_and_teardown():
    with netns.Network.open() as net:
        a, b = net.add_host("a"), net.add_host("b")
        assert a.addr == str(net.subnet.network_address + 2) and b.addr == str(net.subnet.network_address + 3)
        server = subprocess.Popen(net.argv(b, [sys.executable, "-c", SERVE, b.addr]))
        try:
            deadline = time.monotonic() + 10
            while not net.sockets(b, listening=True):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            net.run(a, [sys.executable, "-c", f"import socket; socket.create_connection(('{b.addr}', 9000), 2)"])
            net.cut(b)
            t0 = time.monotonic()
            with pytest.raises(netns.NetnsError, match="timed out"):
                net.run(a, [sys.executable, "-c",
                            f"import socket; socket.create_connection(('{b.addr}', 9000), 1)"])
            assert time.monotonic() - t0 >= 0.9          # lost, not refused
            net.restore(b)
            net.limit(b, rate_mbit=20)
            shown = subprocess.run(["tc", "qdisc", "show", "dev", b.link], capture_output=True, text=True).stdout
            assert "tbf" in shown and "20Mbit" in shown
            assert "tbf" in net.run(b, ["tc", "qdisc", "show", "dev", "eth0"])
        finally:
            server.kill()
            server.wait()
        names = [h.netns for h in net.hosts.values()] + [h.link for h in net.hosts.values()]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout + \
        subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names) and net.prefix not in listed


def test_a_process_on_loopback_or_every_interface_is_reported(tmp_path):
    with netns.Network.open() as net, HostCluster(net, tmp_path, model="unused") as c:
        h = net.add_host("h")
        c.start("local", h, [sys.executable, "-c", SERVE, "127.0.0.1"])
        c.start("wild", h, [sys.executable, "-c", SERVE.replace("9000", "9001"), "0.0.0.0"])
        c.start("fine", h, [sys.executable, "-c", SERVE.replace("9000", "9002"), h.addr])
        c.wait_until("three listeners", lambda: all(c.listening(n) for n in ("local", "wild", "fine")), 10)
        with pytest.raises(AssertionError) as failed:
            c.check_addresses()
        report = str(failed.value)
        assert "local listens on loopback 127.0.0.1:9000" in report
        assert "wild listens on every interface (:9001)" in report
        assert "fine" not in report


def test_what_a_killed_run_left_is_swept_and_nothing_else():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                   # a pid that no longer runs (reused: not swept)
    stale = f"th{dead.pid:06x}g-left"
    mine = f"th{os.getpid():06x}z-mine"
    for name in (stale, mine, "thother"):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        gone = netns.sweep_stale()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert stale in gone and stale not in listed
        assert mine in listed and "thother" in listed     # a live run's, and a name not ours
    finally:
        for name in (stale, mine, "thother"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
