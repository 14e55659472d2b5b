"""KV tiers below the device as hit/capacity models: a worker's host memory, the shared store.

Each tier is a set of block hashes with a capacity in blocks, evicting least recently written or
read first, as tandem/kvstore's host tier and Mooncake Store do. Writes are write-through of a
prompt's computed full blocks (tandem/kvstore/connector.py); a read is the longest leading run of
a prompt's blocks the tier holds, loaded instead of computed (time: tandem/sim/cost_model.py).
The shared store is one for the fleet: every worker loads from it; its contents are reported to
the gateway's prefix index as the pseudo-worker "store" (`on_stored` / `on_removed`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence


class BlockTier:
    def __init__(self, name: str, capacity_blocks: int,
                 on_stored: Callable[[list[int]], None] | None = None,
                 on_removed: Callable[[list[int]], None] | None = None) -> None:
        self.name = name
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.on_stored = on_stored or (lambda hs: None)
        self.on_removed = on_removed or (lambda hs: None)

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, hashes: Sequence[int]) -> int:
        """Leading blocks held; a hit refreshes them."""
        n = 0
        for h in hashes:
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            n += 1
        return n

    def write(self, hashes: Sequence[int]) -> None:
        if self.capacity <= 0:
            return
        new = [h for h in hashes if h not in self._blocks]
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        gone = []
        while len(self._blocks) > self.capacity:
            gone.append(self._blocks.popitem(last=False)[0])
        new_set = set(new) - set(gone)
        if new_set:
            self.on_stored([h for h in new if h in new_set])
        if gone:
            self.on_removed(gone)
