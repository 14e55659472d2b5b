import argparse

import pytest

from tandem.cli.queue_flags import (add_queue_arguments, forwarded_queue_args,
                                     queue_config_from_args)


def parse(*argv: str):
    p = argparse.ArgumentParser()
    add_queue_arguments(p)
    return p.parse_args(list(argv))


def test_the_queue_is_on_by_default_under_the_state_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    cfg = queue_config_from_args(parse(), 8000)
    assert cfg.target == str(tmp_path / "tandem" / "queue-8000.db")
    assert (cfg.interactive_limit, cfg.prefill_concurrency, cfg.event_url_allow) == (0, 1, ())
    assert queue_config_from_args(parse("--no-queue"), 8000) is None
    # a worker under a gateway: off unless named
    assert queue_config_from_args(parse(), 8000, default_on=False) is None
    assert queue_config_from_args(parse("--queue-db"), 8001, default_on=False).target == \
        str(tmp_path / "tandem" / "queue-8001.db")


def test_queue_db_default_path_is_under_the_state_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    cfg = queue_config_from_args(parse("--queue-db"), 8123)
    assert cfg.target == str(tmp_path / "tandem" / "queue-8123.db")
    cfg = queue_config_from_args(parse("--queue-db", "/x/q.db", "--queue-lease", "5",
                                       "--queue-concurrency", "2",
                                       "--queue-interactive-limit", "3",
                                       "--max-file-bytes", "1KiB"), 1)
    assert (cfg.target, cfg.lease_s, cfg.max_concurrency, cfg.interactive_limit, cfg.max_file_bytes) == \
        ("/x/q.db", 5.0, 2, 3, 1024)


def test_queue_url_and_not_both():
    assert queue_config_from_args(parse("--queue-url", "redis://h:1/0"), 1).target == "redis://h:1/0"
    with pytest.raises(SystemExit):
        queue_config_from_args(parse("--queue-db", "a.db", "--queue-url", "redis://h"), 1)
    with pytest.raises(SystemExit):
        queue_config_from_args(parse("--no-queue", "--queue-db", "a.db"), 1)


def test_event_url_allow_prefixes_end_at_a_path():
    cfg = queue_config_from_args(parse("--queue-db", "q.db", "--event-url-allow",
                                       "https://hooks.example.com", "--event-url-allow",
                                       "http://10.0.0.5:9000/events/"), 1)
    assert cfg.event_url_allow == ("https://hooks.example.com/", "http://10.0.0.5:9000/events/")
    with pytest.raises(SystemExit):
        queue_config_from_args(parse("--event-url-allow", "hooks.example.com"), 1)


def test_tandem_up_forwards_only_the_flags_given():
    assert forwarded_queue_args(parse()) == ()
    assert forwarded_queue_args(parse("--no-queue")) == ("--no-queue",)
    assert forwarded_queue_args(parse("--queue-db")) == ("--queue-db",)
    args = parse("--queue-url", "redis://h:1/0", "--queue-interactive-limit", "2",
                 "--queue-lease", "7", "--event-url-allow", "https://h/", "--max-file-bytes", "5")
    fwd = forwarded_queue_args(args)
    assert fwd == ("--queue-url", "redis://h:1/0", "--queue-lease", "7.0",
                   "--queue-interactive-limit", "2", "--max-file-bytes", "5",
                   "--event-url-allow", "https://h/")
    assert queue_config_from_args(parse(*fwd), 1) == queue_config_from_args(args, 1)
