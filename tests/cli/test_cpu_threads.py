"""How many threads a worker runs and how they wait (tandem/cli/cpu_threads.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from tandem.cli.cpu_threads import cgroup_cpu_limit, set_wait_policy, threads_arg, usable_cores


def test_cgroup_v2_quota_rounds_up_to_whole_cpus(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cgroup_cpu_limit(tmp_path) is None


def test_usable_cores_is_the_affinity_capped_by_the_quota():
    assert usable_cores({0, 1, 2, 3}, cgroup_limit=2) == 2
    assert usable_cores({0, 1}, cgroup_limit=8) == 2
    assert usable_cores({5}, cgroup_limit=None) == 1   # whatever quota the machine has
    assert usable_cores({3}) == 1


@pytest.mark.parametrize("text", ["0", "-1", "3", "many"])
def test_threads_outside_the_usable_cores_are_a_usage_error_naming_them(text):
    with pytest.raises(argparse.ArgumentTypeError) as e:
        threads_arg(text, usable=2)
    assert "2 core(s)" in str(e.value) or "not a number" in str(e.value)


def test_threads_within_the_usable_cores_are_taken():
    assert threads_arg("1", usable=2) == 1
    assert threads_arg("2", usable=2) == 2


def test_threads_spin_briefly_unless_the_environment_chose_a_spin_count():
    env = {}
    set_wait_policy(env)
    assert env == {"GOMP_SPINCOUNT": "10000"}
    env = {"GOMP_SPINCOUNT": "0"}
    set_wait_policy(env)
    assert env == {"GOMP_SPINCOUNT": "0"}


def test_the_cli_sets_the_wait_policy_before_torch_loads():
    code = ("import os, sys\nfrom tandem.cli import main\n"
            "try:\n    main(['sim', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "10000 False"


def test_serve_refuses_more_threads_than_cores():
    have = usable_cores()
    out = subprocess.run([sys.executable, "-m", "tandem.cli", "serve", "--model", "nowhere",
                          "--threads", str(have + 1)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert f"may use {have} core(s)" in out.stderr
