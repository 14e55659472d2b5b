"""`tandem serve` flags of the KV tiers become the engine's KVStoreConfig."""

import argparse

import pytest

from tandem.cli.serve import configs_from_args, register


def _parse(*argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["serve", "--model", "/m", "--port", "8123", *argv])


def test_tier_flags():
    engine, _ = configs_from_args(_parse("--kv-host-memory", "4GiB", "--kv-disk-dir", "/d/{port}",
                                         "--kv-disk-size", "512MiB", "--kv-store", "mooncake://10.0.0.2:50051",
                                         "--kv-store-memory", "2GiB"))
    kv = engine.kv_store
    assert (kv.host_bytes, kv.disk_dir, kv.disk_bytes) == (4 * 2**30, "/d/8123", 512 * 2**20)
    assert (kv.store_url, kv.store_segment_bytes, kv.cost_check) == ("mooncake://10.0.0.2:50051", 2 * 2**30, True)
    assert kv.enabled
    assert not configs_from_args(_parse())[0].kv_store.enabled


def test_a_bad_store_url_is_refused(capsys):
    with pytest.raises(SystemExit):
        _parse("--kv-store", "redis://x:1")
    assert "mooncake://HOST:PORT" in capsys.readouterr().err


def test_the_advertised_address_follows_host_unless_given():
    """Mooncake (handoff and store) and the TCP control server advertise one address: --host when
    it is a concrete one, 127.0.0.1 for a wildcard, or --kv-advertise-host (a routable address for
    other hosts)."""
    def transfer(*argv):
        return configs_from_args(_parse(*argv))[0].transfer

    t = transfer()
    assert (t.host, t.mooncake_bind_address, t.mooncake_protocol) == ("127.0.0.1", "127.0.0.1", "tcp")
    t = transfer("--host", "0.0.0.0")
    assert (t.host, t.mooncake_bind_address) == ("127.0.0.1", "127.0.0.1")
    t = transfer("--host", "0.0.0.0", "--kv-advertise-host", "10.1.2.3", "--kv-mooncake-protocol", "rdma",
                 "--kv-mooncake-device", "mlx5_0")
    assert (t.host, t.mooncake_bind_address) == ("10.1.2.3", "10.1.2.3")
    assert (t.mooncake_protocol, t.mooncake_device) == ("rdma", "mlx5_0")
