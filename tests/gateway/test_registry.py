import pytest

from tandem.gateway.config import RegistryConfig
from tandem.gateway.registry import Registry, normalize_url


def reg(**kw):
    return Registry(RegistryConfig(**kw))


def test_static_workers_get_role_and_health_from_stats():
    r = reg()
    w = r.add_static("127.0.0.1:9001/", None)
    assert w.url == "http://127.0.0.1:9001" and not w.healthy and r.pool("both") == []
    r.poll_ok(w.url, {"role": "prefill", "kv_layout": {"block_size": 16}}, now=1.0)
    assert w.healthy and w.role == "prefill" and w.block_size == 16
    assert [x.url for x in r.pool("prefill")] == [w.url] and r.has_live("prefill")


def test_unhealthy_after_n_consecutive_failures_and_back():
    r = reg(unhealthy_after=3)
    w = r.add_static("http://a:1", "both")
    r.poll_ok(w.url, {"role": "both"}, 0.0)
    w.kv_since = 42
    assert [r.poll_failed(w.url) for _ in range(3)] == [False, False, True]
    assert not w.healthy and w.kv_since == 0 and w.epoch == 1
    assert r.poll_failed(w.url) is False  # already unhealthy
    r.poll_ok(w.url, {"role": "both"}, 5.0)
    assert w.healthy and w.failures == 0
    # a success in between resets the count
    r.poll_failed(w.url); r.poll_failed(w.url); r.poll_ok(w.url, {}, 6.0); r.poll_failed(w.url)
    assert w.healthy


def test_mark_dead_is_immediate():
    r = reg()
    w = r.add_static("http://a:1", "decode")
    r.poll_ok(w.url, {}, 0.0)
    assert r.mark_dead(w.url) and not w.healthy and not r.has_live("decode")
    assert not r.mark_dead(w.url)


def test_registration_heartbeat_expiry_and_drain():
    r = reg(heartbeat_ttl_s=10.0)
    w = r.heartbeat("http://b:2", "decode", now=0.0)
    r.heartbeat("http://c:3", "both", now=0.0)
    r.add_static("http://d:4", "both")
    r.heartbeat("http://b:2", "decode", now=8.0)
    assert [x.url for x in r.expire(now=12.0)] == ["http://c:3"]
    assert sorted(x.url for x in r.all()) == ["http://b:2", "http://d:4"]
    r.poll_ok(w.url, {}, 12.0)
    assert r.drain("http://b:2/") and w.draining and not r.has_live("decode")
    assert not r.drain("http://nope:1")
    r.heartbeat("http://b:2", "decode", now=13.0, draining=False)
    assert w.draining and not r.has_live("decode")   # a heartbeat does not lift the gateway's drain
    r.undrain("http://b:2")
    assert r.has_live("decode")
    assert r.remove("http://b:2") is w and r.get("http://b:2") is None


def test_a_heartbeat_that_says_draining_drains_until_one_says_otherwise():
    r = reg()
    w = r.heartbeat("http://b:2", "decode", now=0.0)
    r.poll_ok(w.url, {}, 0.0)
    r.heartbeat("http://b:2", "decode", now=1.0, draining=True)
    assert w.draining and not r.has_live("decode")
    r.heartbeat("http://b:2", "decode", now=2.0, draining=False)
    assert not w.draining and r.has_live("decode")


def test_bad_role_rejected():
    with pytest.raises(ValueError, match="unknown worker role"):
        reg().heartbeat("http://x:1", "mixed", 0.0)


def test_normalize_url():
    assert normalize_url(" localhost:80/ ") == "http://localhost:80"
    assert normalize_url("https://h") == "https://h"


def test_a_worker_whose_stats_say_it_drains_takes_nothing_new():
    """A static worker (no heartbeat) draining on SIGTERM says so in /internal/stats."""
    r = reg()
    w = r.add_static("http://a:1", "decode")
    r.poll_ok(w.url, {"role": "decode", "draining": False}, 0.0)
    assert r.has_live("decode")
    r.poll_ok(w.url, {"role": "decode", "draining": True}, 1.0)
    assert w.healthy and w.draining and not r.has_live("decode")
