"""KV blocks below the device cache: host memory, local disk and Mooncake Store.

One KV connector (`connector.py`) over a stack of tiers (`tier.py`: `host.py`, `disk.py`,
`mooncake_store.py`, by name in `registry.py`), fastest first. A finished request's full blocks
are written through every tier; an admitted request loads the longest run of its next blocks that
the tiers hold, while loading them is cheaper than recomputing them (`cost.py`). Keys are the
chained block hashes qualified by model, layout and tenant salt (`keys.py`); values on disk and in
the store carry a header and a checksum (`frame.py`): a value that does not check out is a miss.
"""
