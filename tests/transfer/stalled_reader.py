"""A decode process that opens a read and then hangs, to be killed mid-pull by a test.

It speaks the control protocol with its own few lines (no torch, no tandem imports) so it starts fast.
"""

from __future__ import annotations

import json
import socket
import struct


def _send(sock: socket.socket, msg: dict) -> None:
    body = json.dumps(msg).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)


def _recv(sock: socket.socket) -> dict:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("source closed the connection")
            buf += chunk
        return buf
    (n,) = struct.unpack(">I", exact(4))
    return json.loads(exact(n))


def stalled_reader_main(conn, address: str, request_id: str, layout_d: dict, kind: str) -> None:
    """When told, open a read like a sink, take the reply (and a few data bytes), then hang until killed."""
    conn.send("ready")
    conn.recv()
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    _send(sock, {"op": "read", "request_id": request_id, "indices": None, "layout": layout_d, "kind": kind})
    reply = _recv(sock)
    if kind == "tcp" and reply.get("ok"):
        assert sock.recv(64)
    conn.send(reply.get("ok"))
    conn.recv()     # never answered: the test kills this process
