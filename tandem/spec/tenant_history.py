"""Earlier outputs per tenant, for suffix decoding: an agent's next tool call often repeats the
shape (and values) of its earlier ones, in other requests of the same tenant.

Each tenant's outputs are one TokenIndex of `output, SEPARATOR, output, SEPARATOR, ...`, so a
continuation read from it stops at the end of its output. Memory is bounded twice: a tenant
keeps at most `max_tokens` tokens (the oldest outputs are dropped, down to three quarters of
the bound, in one rebuild), and at most `max_tenants` tenants are kept (the least recently used
goes). The key is (tenant, cache salt): outputs are shared only where KV would be.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

from tandem.spec.token_index import SEPARATOR, TokenIndex

TenantKey = tuple[str | None, str | None]


class OutputHistory:
    """One tenant's recent outputs."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.index = TokenIndex()
        self._sizes: deque[int] = deque()   # tokens (separator included) of each kept output, oldest first

    def add(self, output: Sequence[int]) -> None:
        size = len(output) + 1
        if size > self.max_tokens:
            output = output[len(output) - (self.max_tokens - 1):]   # its last tokens only
            size = self.max_tokens
        if self.index.length + size > self.max_tokens:
            keep = (3 * self.max_tokens) // 4 - size
            drop = 0
            while self._sizes and self.index.length - drop > max(keep, 0):
                drop += self._sizes.popleft()
            self.index = self.index.truncate_front(drop)
        self.index.extend(list(output) + [SEPARATOR])
        self._sizes.append(size)


class TenantHistories:
    def __init__(self, max_tokens_per_tenant: int, max_tenants: int) -> None:
        self.max_tokens = max_tokens_per_tenant
        self.max_tenants = max_tenants
        self._tenants: OrderedDict[TenantKey, OutputHistory] = OrderedDict()

    def get(self, key: TenantKey) -> OutputHistory | None:
        history = self._tenants.get(key)
        if history is not None:
            self._tenants.move_to_end(key)
        return history

    def add(self, key: TenantKey, output: Sequence[int]) -> None:
        if len(output) < 2 or self.max_tokens < 2:
            return   # a single token (a handed-over prefill) continues nothing
        history = self.get(key)
        if history is None:
            history = self._tenants[key] = OutputHistory(self.max_tokens)
            while len(self._tenants) > self.max_tenants:
                self._tenants.popitem(last=False)
        history.add(output)

    def __len__(self) -> int:
        return len(self._tenants)
