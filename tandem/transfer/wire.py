"""Framing of the control channel: each message is a 4-byte big-endian length and a JSON object.

Raw block bytes (tcp kind) follow a reply on the same socket, unframed: the reply says how many.
"""

from __future__ import annotations

import socket
import struct

import orjson

MAX_MESSAGE_BYTES = 16 * 2**20   # a message lists block ids/addresses, never block data
_LEN = struct.Struct(">I")


class PeerClosed(ConnectionError):
    """The peer closed the connection before a whole message or payload arrived."""


def send_msg(sock: socket.socket, msg: dict) -> None:
    body = orjson.dumps(msg)
    if len(body) > MAX_MESSAGE_BYTES:
        raise ValueError(f"control message of {len(body)} bytes exceeds {MAX_MESSAGE_BYTES}")
    sock.sendall(_LEN.pack(len(body)) + body)


def recv_msg(sock: socket.socket) -> dict:
    (n,) = _LEN.unpack(recv_exact(sock, _LEN.size))
    if n > MAX_MESSAGE_BYTES:
        raise ValueError(f"control message of {n} bytes exceeds {MAX_MESSAGE_BYTES}")
    msg = orjson.loads(recv_exact(sock, n))
    if not isinstance(msg, dict):
        raise ValueError("control message is not a JSON object")
    return msg


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    recv_into_exact(sock, memoryview(buf))
    return bytes(buf)


def recv_into_exact(sock: socket.socket, view: memoryview) -> None:
    """Fill `view` (a flat byte view) from the socket, with no intermediate copy."""
    got, total = 0, len(view)
    while got < total:
        n = sock.recv_into(view[got:], total - got)
        if n == 0:
            raise PeerClosed(f"peer closed the connection after {got} of {total} bytes")
        got += n
