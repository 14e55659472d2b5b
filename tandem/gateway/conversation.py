"""A conversation recognised from its own prompt: the session key of a request without
`x-session-affinity` (most agent harnesses send none).

Every turn of a chat resends the conversation so far, rendered by the same chat template, so every
turn's prompt starts with the same tokens: the template's opening, the system prompt, the first
user message, then the first assistant turn's header, which the template writes before the first
answer exactly as it writes the generation prompt that ends the first request. The fingerprint is
a hash of the prompt up to and including the first occurrence of that header (`marker`):

    fingerprint = blake2b(tenant, cache salt, prompt[: end of the first marker])

The first request's prompt ends with the marker, so its fingerprint covers all of it; a later
turn's covers the same tokens, whatever followed. Two conversations share a key only when they
opened with the same messages (a retried or forked conversation, which shares the cache anyway).
The key includes the tenant and the cache salt, so equal prompts of two tenants never share a key
(nor, through the block hashes, a cache). As SGLang's and others' routers do, only the first
messages are used: later messages may be edited (reasoning stripped) without losing the session.

The marker is found once, from the chat template: render [user] with and without the generation
prompt, and [user, assistant]; the header is what the generation prompt adds that the assistant
turn also starts with. No marker (no template, a template without a header, a raw completion
prompt that holds none): no fingerprint, and the request is placed by prefix and load alone.
The header wins: a request with `x-session-affinity` keeps that id as its key.
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from collections.abc import Sequence

from tandem.tokenization.chat_prompt import ChatRender, render_chat
from tandem.types import RequestContext

log = logging.getLogger(__name__)

PREFIX = "conv-"   # fingerprint keys, apart from header ids in logs


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def assistant_marker(tokenizer) -> tuple[int, ...] | None:
    """The token ids the chat template opens an assistant turn with; None if it has none."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    user = [{"role": "user", "content": "Hello."}]
    try:
        bare = render_chat(tokenizer, user, None, ChatRender(add_generation_prompt=False))
        asked = render_chat(tokenizer, user, None)
        answered = render_chat(tokenizer, [*user, {"role": "assistant", "content": "Hi."}], None,
                               ChatRender(add_generation_prompt=False))
    except Exception as exc:   # a template that wants other messages: no fingerprints
        log.warning("conversation fingerprints off: the chat template did not render a probe: %s", exc)
        return None
    gen = asked[_common(asked, bare):]
    turn = answered[_common(answered, bare):]
    marker = tuple(gen[:_common(gen, turn)])
    return marker or None


def _find(tokens: Sequence[int], marker: tuple[int, ...]) -> int:
    """Index just past the first occurrence of `marker` in `tokens`, or -1."""
    first, n = marker[0], len(marker)
    i = 0
    end = len(tokens) - n
    while i <= end:
        try:
            i = tokens.index(first, i, end + 1)
        except ValueError:
            return -1
        if tuple(tokens[i:i + n]) == marker:
            return i + n
        i += 1
    return -1


def fingerprint(tokens: Sequence[int], marker: tuple[int, ...] | None,
                context: RequestContext) -> str | None:
    """The conversation's key, or None when the prompt holds no assistant header."""
    if not marker:
        return None
    end = _find(tokens, marker)
    if end < 0:
        return None
    h = hashlib.blake2b(digest_size=12)
    h.update(repr((context.tenant, context.cache_salt)).encode())
    h.update(b"\x00")
    h.update(array("q", tokens[:end]).tobytes())
    return PREFIX + h.hexdigest()


def session_key(tokens: Sequence[int], marker: tuple[int, ...] | None,
                context: RequestContext) -> str | None:
    """`x-session-affinity` when sent, else the fingerprint."""
    if context.session_id is not None:
        return context.session_id
    return fingerprint(tokens, marker, context)
