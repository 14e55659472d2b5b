"""`tandem serve` flags of the KV tiers below the device (tandem.kvstore):

  --kv-host-memory SIZE       host-memory tier (pinned on CUDA), e.g. 4GiB
  --kv-disk-dir DIR           disk tier: one file per block, kept across restarts; "{port}" in DIR
                              becomes the worker's port (workers of one host, each its own directory)
  --kv-disk-size SIZE         the disk tier's capacity (least recently used blocks go)
  --kv-store mooncake://HOST:PORT   Mooncake Store: this worker is a client of that master
  --kv-store-memory SIZE      memory this worker lends to the store
  --kv-store-timeout S        a store call without an answer this long fails (the store is then
                              left alone for a few seconds; requests are served from local tiers)
  --kv-tier-no-cost-check     load every hit below the device, even where recomputing is cheaper
"""

from __future__ import annotations

import argparse

from tandem.cli.arg_types import parse_bytes
from tandem.config import KVStoreConfig
from tandem.kvstore.mooncake_store import parse_store_url


def _store_url(text: str) -> str:
    try:
        parse_store_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def add_kv_store_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("KV tiers below the device cache")
    g.add_argument("--kv-host-memory", type=parse_bytes, default=0, metavar="SIZE",
                   help="host-memory KV tier, e.g. 4GiB (pinned when the KV cache is on CUDA)")
    g.add_argument("--kv-disk-dir", default=None, metavar="DIR",
                   help="disk KV tier: one file per block under DIR; a worker restarted on DIR finds them. "
                        "'{port}' in DIR becomes this worker's --port (one directory per worker of a host)")
    g.add_argument("--kv-disk-size", type=parse_bytes, default=KVStoreConfig.disk_bytes, metavar="SIZE",
                   help="most bytes the disk tier keeps (default 16GiB)")
    g.add_argument("--kv-store", type=_store_url, default=None, metavar="mooncake://HOST:PORT",
                   help="Mooncake Store shared by the workers: the mooncake_master's RPC address")
    g.add_argument("--kv-store-memory", type=parse_bytes, default=KVStoreConfig.store_segment_bytes,
                   metavar="SIZE", help="memory this worker lends to the store (default 1GiB)")
    g.add_argument("--kv-store-timeout", type=float, default=KVStoreConfig.store_timeout_s, metavar="S",
                   help="seconds a store call may go unanswered (plus 1 s per 25 MB it moves) before "
                        "the store counts as unreachable and is left alone for a few seconds")
    g.add_argument("--kv-tier-no-cost-check", dest="kv_tier_cost_check", action="store_false",
                   help="load every hit below the device, even where recomputing it is measured faster")


def kv_store_config_from_args(args: argparse.Namespace) -> KVStoreConfig:
    disk_dir = args.kv_disk_dir.replace("{port}", str(args.port)) if args.kv_disk_dir else None
    return KVStoreConfig(host_bytes=args.kv_host_memory, disk_dir=disk_dir,
                         disk_bytes=args.kv_disk_size, store_url=args.kv_store,
                         store_segment_bytes=args.kv_store_memory, store_timeout_s=args.kv_store_timeout,
                         cost_check=args.kv_tier_cost_check)
