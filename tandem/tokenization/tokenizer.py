"""Tokenizer: a `tokenizers.Tokenizer` plus the special tokens and chat template of a model directory.

Reads tokenizer.json, tokenizer_config.json (special tokens, added_tokens_decoder, chat_template),
chat_template.jinja (transformers 5) or chat_template.json, additional_chat_templates/*.jinja,
and generation_config.json (extra eos ids).

A model may have several named chat templates; as in transformers (and vLLM), a conversation
with tools is rendered by the one named "tool_use" if there is one, else by "default".
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import AddedToken
from tokenizers import Tokenizer as Backend

from tandem.errors import ChatTemplateError, ModelLoadError
from tandem.tokenization.chat_template import compile_template, loops_over_content, render
from tandem.tokenization.segment_encoder import SegmentEncoder
from tandem.tokenization.tiktoken_bpe import TIKTOKEN_FILE, tiktoken_backend

_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class Tokenizer:
    def __init__(self, backend: Backend, config: dict, chat_template: str | dict[str, str] | None,
                 extra_eos_ids: Sequence[int] = ()) -> None:
        self.backend = backend
        self.config = config
        self.special_tokens: dict[str, str | None] = {k: _token_text(config.get(k)) for k in _SPECIAL_KEYS}
        self._add_declared_tokens(config.get("added_tokens_decoder") or {})
        self.bos_token_id = self._id_of(self.special_tokens["bos_token"])
        eos_id = self._id_of(self.special_tokens["eos_token"])
        ids = ([eos_id] if eos_id is not None else []) + list(extra_eos_ids)
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(ids))  # eos_token first, no repeats
        # name -> jinja source; "default" is the one without tools
        self.chat_templates: dict[str, str] = chat_template if isinstance(chat_template, dict) \
            else ({"default": chat_template} if chat_template else {})
        self.chat_template = self.chat_templates.get("default")
        # compiled on first use: jinja2 costs ~0.1 s that an engine may never need
        self._compiled: dict[str, object] = {}
        self._loops_over_content: dict[str, bool] = {}
        self._prompt_encoder: SegmentEncoder | None = None  # made on first chat prompt

    @classmethod
    def from_dir(cls, path: str | Path, chat_template: str | None = None) -> "Tokenizer":
        """The tokenizer of a model directory; `chat_template` (a template's source, --chat-template)
        replaces every chat template the directory has."""
        path = Path(path)
        tok_file = path / "tokenizer.json"
        config = _read_json(path / "tokenizer_config.json")
        if tok_file.is_file():
            backend = Backend.from_file(str(tok_file))
        elif (path / TIKTOKEN_FILE).is_file():   # Kimi K2: a tiktoken BPE and its regex
            backend = tiktoken_backend(path, config)
        else:
            raise ModelLoadError(f"missing file {tok_file}: tandem needs a fast tokenizer "
                                 f"(tokenizer.json) or a tiktoken BPE ({TIKTOKEN_FILE})")
        gen = _read_json(path / "generation_config.json")
        eos = gen.get("eos_token_id")
        extra = eos if isinstance(eos, list) else ([eos] if isinstance(eos, int) else [])
        templates = {"default": chat_template} if chat_template else _find_chat_templates(path, config)
        return cls(backend, config, templates, extra)

    # -- text <-> ids -------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        # encode_batch releases the GIL while it works, so a long prompt tokenized on a
        # thread does not stall the HTTP event loop
        return self.backend.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def encode_prompt(self, text: str) -> list[int]:
        """Ids of a rendered chat prompt (its special tokens written as text, no BOS/EOS added):
        encode(text, add_special_tokens=False), with the pieces between special tokens cached
        across requests (see SegmentEncoder)."""
        if self._prompt_encoder is None:
            self._prompt_encoder = SegmentEncoder(self.backend)
        return self._prompt_encoder.encode(text)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str | None]:
        return [self.backend.id_to_token(i) for i in ids]

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    # -- chat -----------------------------------------------------------------------------------
    def template_name(self, tools: list[dict] | None) -> str:
        return "tool_use" if tools and "tool_use" in self.chat_templates else "default"

    def compiled_chat_template(self, name: str = "default"):
        """The jinja2 template `name`, compiled once (servers compile them at start-up so that
        the first chat request does not pay for it). Raises ChatTemplateError when the model has
        none or it does not parse."""
        source = self.chat_templates.get(name)
        if not source:
            raise ChatTemplateError("this model has no chat template: start the server with --chat-template "
                                    "FILE, or send a completion prompt instead")
        if name not in self._compiled:
            self._compiled[name] = compile_template(source)
        return self._compiled[name]

    def template_reads_parts(self, name: str) -> bool:
        """Template `name` loops over a message's content: it takes OpenAI's text parts as a
        list (and joins them its own way) rather than one string."""
        if name not in self._loops_over_content:
            source = self.chat_templates.get(name)
            self._loops_over_content[name] = bool(source) and loops_over_content(source)
        return self._loops_over_content[name]

    def content_as_parts_for(self, tools: list[dict] | None) -> bool:
        """template_reads_parts of the template that renders a conversation with these tools."""
        return self.template_reads_parts(self.template_name(tools))

    @property
    def content_as_parts(self) -> bool:
        """content_as_parts_for a conversation without tools."""
        return self.content_as_parts_for(None)

    def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                            add_generation_prompt: bool = True, **kwargs) -> str:
        """Render the conversation as the model's prompt text (special tokens included as text).

        Raises ChatTemplateError when the model has no template or the template rejects the input.
        """

        template = self.compiled_chat_template(self.template_name(tools))
        # as transformers: a token the model lacks is undefined ({{ bos_token }} renders ""),
        # and documents is always defined
        variables = {k: v for k, v in self.special_tokens.items() if v is not None}
        variables["documents"] = None
        variables.update(kwargs)
        return render(template, messages=messages, tools=tools,
                      add_generation_prompt=add_generation_prompt, **variables)

    # -- internals ------------------------------------------------------------------------------
    def _add_declared_tokens(self, decoder: dict) -> None:
        """Make sure every token tokenizer_config.json declares exists in the backend, as declared."""
        specials, normal = [], []
        for _, spec in sorted(decoder.items(), key=lambda kv: int(kv[0])):
            content = spec.get("content") if isinstance(spec, dict) else None
            if not content or self.backend.token_to_id(content) is not None:
                continue
            token = AddedToken(content, single_word=spec.get("single_word", False),
                               lstrip=spec.get("lstrip", False), rstrip=spec.get("rstrip", False),
                               normalized=spec.get("normalized", False), special=spec.get("special", False))
            (specials if spec.get("special") else normal).append(token)
        if specials:
            self.backend.add_special_tokens(specials)
        if normal:
            self.backend.add_tokens(normal)

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)


def _token_text(value) -> str | None:
    # tokenizer_config writes special tokens either as strings or as AddedToken dicts
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{path} is not valid JSON: {e}") from e


def warm_chat_template(tokenizer: Tokenizer) -> None:
    """Compile the chat template, read its content format and make the prompt piece encoder
    (whose self-check tokenizes a few probes per special token: ~0.1 s with 256 of them) at a
    server's start-up instead of in its first chat request. A template that does not parse is
    logged, not fatal: completions still work, and chat requests get the parse error as a 400."""
    if not tokenizer.chat_template:
        return
    tokenizer.encode_prompt("")
    for name in tokenizer.chat_templates:
        try:
            tokenizer.compiled_chat_template(name)
        except ChatTemplateError as exc:
            logging.getLogger(__name__).warning("chat completions will fail (template %r): %s", name, exc)
            continue
        tokenizer.template_reads_parts(name)


def _find_chat_templates(path: Path, config: dict) -> dict[str, str]:
    """Named chat templates. The default: chat_template.jinja, else chat_template.json's, else
    tokenizer_config.json's chat_template (a string, or a list of {"name", "template"}, whose
    first stands in for a missing "default"); others from that list and from
    additional_chat_templates/NAME.jinja (as transformers saves them)."""
    templates: dict[str, str] = {}
    raw = _read_json(path / "chat_template.json").get("chat_template") or config.get("chat_template")
    if isinstance(raw, list):
        for t in raw:
            if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str):
                templates.setdefault(t["name"], t["template"])
        if templates and "default" not in templates:
            templates["default"] = next(iter(templates.values()))
    elif isinstance(raw, str) and raw:
        templates["default"] = raw
    jinja_file = path / "chat_template.jinja"
    if jinja_file.is_file():
        templates["default"] = jinja_file.read_text()
    extra = path / "additional_chat_templates"
    if extra.is_dir():
        for f in sorted(extra.glob("*.jinja")):
            templates[f.stem] = f.read_text()
    return templates


__all__ = ["Tokenizer", "ChatTemplateError"]
