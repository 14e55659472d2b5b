import argparse

import pytest

from tandem.server.queue_cli import add_queue_arguments, queue_config_from_args


def parse(*argv: str):
    p = argparse.ArgumentParser()
    add_queue_arguments(p)
    return p.parse_args(list(argv))


def test_no_flag_no_queue():
    assert queue_config_from_args(parse(), 8000) is None


def test_queue_db_default_path_is_under_the_state_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    cfg = queue_config_from_args(parse("--queue-db"), 8123)
    assert cfg.target == str(tmp_path / "tandem" / "queue-8123.db")
    cfg = queue_config_from_args(parse("--queue-db", "/x/q.db", "--queue-lease", "5",
                                       "--queue-concurrency", "2"), 1)
    assert (cfg.target, cfg.lease_s, cfg.max_concurrency) == ("/x/q.db", 5.0, 2)


def test_queue_url_and_not_both():
    assert queue_config_from_args(parse("--queue-url", "redis://h:1/0"), 1).target == "redis://h:1/0"
    with pytest.raises(SystemExit):
        queue_config_from_args(parse("--queue-db", "a.db", "--queue-url", "redis://h"), 1)
