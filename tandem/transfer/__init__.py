"""KV block transfer between prefill and decode workers (see base.py for the contract)."""

from tandem.transfer.base import (KINDS, KVSink, KVSource, Transport, TransferConfig, TransferConnectionError,
                                  TransferError, TransferSizeMismatch, UnknownTransfer)
from tandem.transfer.factory import allocate_kv, make_transport

__all__ = ["KINDS", "KVSink", "KVSource", "Transport", "TransferConfig", "TransferConnectionError",
           "TransferError", "TransferSizeMismatch", "UnknownTransfer", "allocate_kv", "make_transport"]
