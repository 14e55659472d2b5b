"""A block's value on disk and in the store: a fixed header, then the block's KV bytes.

    header (80 bytes, little-endian): magic "TKVB", version u16, reserved u16,
        payload bytes u64, crc32 of the payload u32, key (ascii, zero-padded to 56), 4 zero bytes

A value is used only if the magic, version, key, size and checksum all agree with what the
reader expects: a truncated file, a value written under another layout (its key differs) or a
flipped bit is a miss, never wrong output.
"""

from __future__ import annotations

import struct
import zlib

import torch

MAGIC = b"TKVB"
VERSION = 1
_HEADER = struct.Struct("<4sHHQI56s4x")
HEADER_BYTES = _HEADER.size   # 80


class CorruptValue(Exception):
    """A stored value that does not check out; the reason says which check failed."""


def checksum(payload: torch.Tensor) -> int:
    """crc32 of a contiguous CPU uint8 tensor (zlib releases the GIL on large buffers)."""
    return zlib.crc32(payload.numpy())


def header(key: str, payload: torch.Tensor) -> bytes:
    """The header of `payload` (a contiguous CPU uint8 tensor) stored under `key`."""
    return _HEADER.pack(MAGIC, VERSION, 0, payload.numel(), checksum(payload), key.encode("ascii"))


def write_frame(dst: torch.Tensor, key: str, payload: torch.Tensor) -> None:
    """Fill dst ([HEADER_BYTES + n] uint8, CPU) with the header and `payload` ([n] uint8)."""
    dst[HEADER_BYTES:].copy_(payload)
    dst[:HEADER_BYTES].copy_(torch.frombuffer(bytearray(header(key, dst[HEADER_BYTES:])), dtype=torch.uint8))


def check_frame(frame: torch.Tensor, key: str, payload_nbytes: int) -> torch.Tensor:
    """The payload of `frame` ([HEADER_BYTES + payload_nbytes] uint8, CPU) if it is the value of
    `key`; raises CorruptValue otherwise."""
    if frame.numel() != HEADER_BYTES + payload_nbytes:
        raise CorruptValue(f"value is {frame.numel()} bytes, expected {HEADER_BYTES + payload_nbytes}")
    magic, version, _, nbytes, crc, stored_key = _HEADER.unpack(frame[:HEADER_BYTES].numpy().tobytes())
    if magic != MAGIC or version != VERSION:
        raise CorruptValue(f"not a tandem KV block (magic {magic!r}, version {version})")
    if stored_key.rstrip(b"\0").decode("ascii", "replace") != key:
        raise CorruptValue("the value names another key")
    if nbytes != payload_nbytes:
        raise CorruptValue(f"payload is {nbytes} bytes, expected {payload_nbytes}")
    payload = frame[HEADER_BYTES:]
    if checksum(payload) != crc:
        raise CorruptValue("checksum mismatch")
    return payload
