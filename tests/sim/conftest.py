"""A small synthetic Mooncake-format trace for the simulator's tests."""

import json
import random

import pytest


@pytest.fixture
def trace_path(tmp_path):
    """12 sessions x 4 turns sharing a 4-block system prompt; each turn resends the last one."""
    rng = random.Random(7)
    rows, next_id = [], 100
    for s in range(12):
        ids = [0, 1, 2, 3]
        t = s * 150
        for turn in range(4):
            grow = rng.randint(2, 6)
            ids = ids + list(range(next_id, next_id + grow))
            next_id += grow
            rows.append({"timestamp": t, "input_length": len(ids) * 512 - rng.randint(1, 300),
                         "output_length": rng.randint(20, 120), "hash_ids": list(ids)})
            t += rng.randint(800, 3000)
    rows.sort(key=lambda r: r["timestamp"])
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)
