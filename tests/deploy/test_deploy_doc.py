"""docs/deploy.md's commands are true: every `tandem ...` line of its code blocks parses with
tandem's own CLI, and the store host's lines are the ones tandem/launcher/role_commands.py builds
(what the tests and the pods run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tandem.cli import build_parser
from tandem.launcher.role_commands import MasterCommand, RedisCommand

DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def command_lines() -> list[list[str]]:
    blocks = re.findall(r"^```\n(.*?)^```", DOC.read_text(), re.S | re.M)
    return [shlex.split(ln) for b in blocks for ln in b.splitlines() if ln.strip()]


def test_every_tandem_command_parses():
    tandem = [argv for argv in command_lines() if argv[0] == "tandem"]
    assert {argv[1] for argv in tandem} == {"up", "gateway", "serve"}
    for argv in tandem:
        try:
            build_parser(argv[1]).parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"docs/deploy.md: {shlex.join(argv)} does not parse")


def test_the_store_hosts_commands_are_role_commands():
    lines = {argv[0]: argv[1:] for argv in command_lines() if argv[0] in ("mooncake_master", "redis-server")}
    assert lines["mooncake_master"] == MasterCommand(host="10.0.0.4").argv()
    assert lines["redis-server"] == RedisCommand(host="10.0.0.4", data_dir="/var/lib/redis").argv()
