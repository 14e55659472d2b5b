"""Stored responses, for `previous_response_id` and `GET /v1/responses/{id}`: in memory, per
server (a worker's or the gateway's app), bounded, least recently used out first.

Each entry keeps the response object as sent and the conversation it ended (chat messages: the
history it continued, its input, its output; never the instructions, which OpenAI does not carry
over). A response asked with `store: false` is never put here.

A stored response belongs to the tenant that created it (RequestContext.tenant; None: the
anonymous tenant of a server without API keys): `get` and `delete` for another tenant act as if
the id were unknown (the same 404), so neither retrieval nor `previous_response_id` reveals it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from tandem.errors import TandemError


class ResponseNotFound(TandemError):
    """An unknown (or evicted, or never stored) response id (404)."""

    status = 404
    code = "response_not_found"


@dataclass(frozen=True)
class StoredResponse:
    response: dict                    # the Response object as the client got it
    conversation: tuple[dict, ...]    # chat messages up to and including its output
    tenant: str | None                # who created it: only this tenant reads or deletes it


class ResponseStore:
    def __init__(self, max_entries: int = 1024) -> None:
        assert max_entries >= 1
        self.max_entries = max_entries
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, response_id: str, entry: StoredResponse) -> None:
        self._entries[response_id] = entry
        self._entries.move_to_end(response_id)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get(self, response_id: str, tenant: str | None, param: str | None = None) -> StoredResponse:
        """The tenant's entry (now the most recently used); ResponseNotFound naming `param` when
        there is none, or it is another tenant's."""
        entry = self._entries.get(response_id)
        if entry is None or entry.tenant != tenant:
            raise ResponseNotFound(f"Response with id '{response_id}' not found.", param=param)
        self._entries.move_to_end(response_id)
        return entry

    def delete(self, response_id: str, tenant: str | None) -> bool:
        """Remove the tenant's entry; False (nothing removed) when it has none by that id."""
        entry = self._entries.get(response_id)
        if entry is None or entry.tenant != tenant:
            return False
        del self._entries[response_id]
        return True
