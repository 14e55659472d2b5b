"""Ports for children: drawn below the kernel's ephemeral range, free when drawn, and used by
every launcher of a listening child (here the Mooncake master's two)."""

import socket

from tandem.kvstore.master import master_command
from tandem.ports import _ephemeral_start, free_port


def test_free_ports_are_drawn_below_the_ephemeral_range_and_bindable(tmp_path):
    start = _ephemeral_start()
    taken = {free_port()}
    for _ in range(20):
        port = free_port(avoid=taken)
        assert port not in taken and (start <= 11000 or 10000 <= port < start)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))    # free indeed
        taken.add(port)
    ranges = tmp_path / "range"
    ranges.write_text("40000\t60999\n")
    assert _ephemeral_start(str(ranges)) == 40000
    assert _ephemeral_start(str(tmp_path / "none")) == 32768


def test_the_mooncake_masters_ports_are_drawn_there_too():
    start = _ephemeral_start()
    for _ in range(5):
        port, cmd = master_command("127.0.0.1")
        metrics = int(next(a for a in cmd if a.startswith("--metrics_port=")).split("=")[1])
        for p in (port, metrics):
            assert start <= 11000 or 10000 <= p < start, (p, start)
