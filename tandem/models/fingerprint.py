"""A short name for a checkpoint's weights, so that KV computed by one checkpoint is never read by
another of the same shape (a base model and its fine-tune, two revisions of one model): the KV
layout's model identity carries it, and the handoff and the storage tiers compare identities.

Reading every weight would cost a full read of the checkpoint at each start; instead each
safetensors file contributes its name, size and header (tensor names, dtypes, shapes, offsets)
and, for every tensor, `sample_bytes` from the middle of its data, plus `file_samples` slices at
evenly spaced offsets of the whole data region. A training run that touches a tensor changes
nearly all of its values, so a checkpoint that differs in any trained tensor gets another name;
identical files always agree (the name is a pure function of the bytes read), on every worker
and host. One small read per tensor: cheap next to loading the weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path


def weights_fingerprint(files: Sequence[Path], sample_bytes: int = 64, file_samples: int = 16,
                        file_sample_bytes: int = 4096) -> str:
    """16 hex digits naming the weights in `files` (safetensors, in the checkpoint's order)."""
    h = hashlib.blake2b(digest_size=8)
    for path in files:
        size = path.stat().st_size
        h.update(f"{path.name}\0{size}\0".encode())
        fd = os.open(path, os.O_RDONLY)
        try:
            (header_len,) = struct.unpack("<Q", os.pread(fd, 8, 0))
            header = os.pread(fd, header_len, 8)
            h.update(header)
            start = 8 + header_len
            for name, info in sorted(json.loads(header).items()):
                if name == "__metadata__":
                    continue
                begin, end = info["data_offsets"]
                n = min(sample_bytes, end - begin)
                h.update(os.pread(fd, n, start + begin + (end - begin - n) // 2))
            span = max(0, size - start - file_sample_bytes)
            for i in range(file_samples):
                h.update(os.pread(fd, file_sample_bytes, start + span * i // max(1, file_samples - 1)))
        finally:
            os.close(fd)
    return h.hexdigest()
