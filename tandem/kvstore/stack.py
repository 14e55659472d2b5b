"""The tiers of one worker, fastest first (the table's order: registry.py), seen as one place to
look up.

A block may sit in several tiers (writes go through all of them); it is loaded from the fastest
that holds it. `locate` answers, for the blocks after a request's device hit, the longest run
that some tier holds and which tier serves each block: local tiers by their in-memory index,
the store with one batched existence query.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.kvstore.tier import Tier

_KNOWN_LIMIT = 1 << 16


@dataclass(frozen=True)
class LoadPlan:
    """Where each block of a load comes from: keys[i] from tiers[i]."""

    keys: tuple[str, ...]
    tiers: tuple[str, ...]

    @property
    def is_async(self) -> bool:
        """Anything below host memory is read on the loader thread while the engine steps."""
        return any(t != "host" for t in self.tiers)

    def runs(self) -> list[tuple[str, int, int]]:
        """(tier, start, end) of consecutive blocks served by the same tier."""
        out: list[tuple[str, int, int]] = []
        for i, tier in enumerate(self.tiers):
            if out and out[-1][0] == tier:
                out[-1] = (tier, out[-1][1], i + 1)
            else:
                out.append((tier, i, i + 1))
        return out


class TierStack:
    def __init__(self, tiers: Sequence[Tier]) -> None:
        """`tiers`: fastest first."""
        self.tiers = list(tiers)
        self.by_name = {t.name: t for t in self.tiers}
        assert len(self.by_name) == len(self.tiers), "one tier of each kind"
        # keys the store is known to hold (written or found): a finishing request's blocks
        # among them are not sent again; bounded, oldest forgotten first
        self._in_store: OrderedDict[str, None] = OrderedDict()
        # per lookup, the first key asked of the store that it lacks (evicted, or a master that
        # restarted empty): reported as `store_removed` so that the gateway's index of the store
        # stops the store's chain there (engine thread only: appended by locate, drained by poll)
        self.store_misses: list[str] = []
        self._reported: OrderedDict[str, None] = OrderedDict()   # misses reported, until held again

    def __getitem__(self, name: str) -> Tier:
        return self.by_name[name]

    def get(self, name: str) -> Tier | None:
        return self.by_name.get(name)

    def locate(self, keys: Sequence[str]) -> list[str]:
        """The tier of each of the leading keys that some tier holds (stops at the first miss)."""
        local = [t for t in self.tiers if t.name != "store"]
        found: list[str | None] = []
        for key in keys:
            found.append(next((t.name for t in local if t.contains(key)), None))
        store = self.by_name.get("store")
        if store is not None and store.available:
            gaps = [i for i, f in enumerate(found) if f is None]
            # only the gaps before the first block no tier could hold matter; ask for them all
            first_missing = None
            for i, held in zip(gaps, store.contains_many([keys[i] for i in gaps])):
                if held:
                    found[i] = "store"
                    self.known_in_store([keys[i]])
                else:
                    self._in_store.pop(keys[i], None)   # gone from the store: a finish saves it again
                    if first_missing is None:
                        first_missing = keys[i]
            # (a failed query knows nothing; a request that waits is looked up again each step)
            if first_missing is not None and store.available and first_missing not in self._reported:
                self.store_misses.append(first_missing)
                self._reported[first_missing] = None
                if len(self._reported) > _KNOWN_LIMIT:
                    self._reported.popitem(last=False)
        out: list[str] = []
        for f in found:
            if f is None:
                break
            out.append(f)
        return out

    def known_in_store(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._reported.pop(key, None)
            self._in_store[key] = None
            self._in_store.move_to_end(key)
        while len(self._in_store) > _KNOWN_LIMIT:
            self._in_store.popitem(last=False)

    def needs_saving(self, key: str) -> bool:
        """Some tier lacks the block, as far as this worker knows."""
        for t in self.tiers:
            held = key in self._in_store if t.name == "store" else t.contains(key)
            if not held:
                return True
        return False

    def close(self) -> None:
        for t in self.tiers:
            t.close()
