"""Chat messages and tools -> prompt token ids, through the model's chat template.

Used by the routes (through tandem/turn/chat_request.py) and by the gateway, which must tokenize
exactly like a worker to hash prefixes: the same messages always render to the same ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tandem.errors import InvalidRequest


@dataclass(frozen=True)
class ChatRender:
    """How a conversation becomes a prompt (vLLM's chat request fields).

    add_generation_prompt: end with the assistant's turn header, so the model answers;
    continue_final_message: end inside the final message, so the model continues its text
    (an assistant prefill). At most one of the two.
    """

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    template_kwargs: dict = field(default_factory=dict)


def _joined(message: dict) -> dict:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    return {**message, "content": "\n".join(part["text"] for part in content)}


def render_chat(tokenizer: Any, messages: list[dict], tools: list[dict] | None,
                how: ChatRender = ChatRender(), param: str = "messages") -> list[int]:
    """Prompt token ids of a conversation, by default ready for the assistant's turn.

    As vLLM's content format "auto": a template that loops over a message's content gets its
    text parts as they came; any other gets them joined with newlines into one string."""
    as_parts = getattr(tokenizer, "content_as_parts_for", None)  # test doubles may lack it
    if not (as_parts is not None and as_parts(tools)):
        messages = [_joined(m) for m in messages]
    try:
        text = tokenizer.apply_chat_template(messages, tools=tools,
                                             add_generation_prompt=how.add_generation_prompt,
                                             **how.template_kwargs)
    except Exception as exc:  # a template's raise_exception() or a malformed message
        raise InvalidRequest(f"the chat template rejected the messages: {exc}", param=param) \
            from None
    if how.continue_final_message:
        text = _cut_after_final_message(text, messages[-1]["content"])
    # The template writes the special tokens (BOS, role markers) itself.
    encode_prompt = getattr(tokenizer, "encode_prompt", None)
    if encode_prompt is None:  # a tokenizer without the piece cache (test doubles)
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(encode_prompt(text))


def _cut_after_final_message(text: str, content: str | list[dict]) -> str:
    """The rendered conversation up to the end of the final message's text (what follows it,
    such as an end-of-turn token, is dropped), so generation continues that message."""
    final = content if isinstance(content, str) else (content[-1]["text"] if content else "")
    core = final.strip()
    at = text.rfind(core) if core else -1
    if at < 0:
        raise InvalidRequest("'continue_final_message' needs a final message whose text the chat "
                             "template renders (it is empty or the template drops it)",
                             param="continue_final_message")
    # keep the message's trailing whitespace when the template kept it
    kept = final.lstrip()
    end = at + len(kept) if text.startswith(kept, at) else at + len(core)
    return text[:end]
