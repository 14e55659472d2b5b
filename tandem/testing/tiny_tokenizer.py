"""A small byte-level BPE tokenizer trained locally, plus its tokenizer_config.json and chat template.

Two styles of special tokens:
- "llama": <|bos|> prepended by the post-processor, <|eos|> as eos, ChatML turns;
- "qwen":  no bos, <|im_end|> as eos, <|endoftext|> as pad (Qwen2/Qwen3-like).
Training is deterministic; the trained JSON is cached per process (keyed on vocab size and style).
"""

from __future__ import annotations

import functools

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from tandem.testing.corpus import corpus_lines

STYLES = ("llama", "qwen")
SPECIAL_TOKENS = {
    "llama": ("<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"),
    "qwen": ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
}
# added as whole tokens but not special: they stay in decoded text (tool-call parsing needs them)
EXTRA_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

# ChatML with Hermes/Qwen-style tools: <tools> in the system turn, <tool_call>{json}</tool_call>
# in assistant turns, tool results as <tool_response> inside a user turn.
CHAT_TEMPLATE = """\
{%- macro render_content(content) -%}
{%- if content is string -%}{{ content }}
{%- elif content is iterable and content is not mapping -%}
{%- for part in content if part.type == 'text' -%}{{ part.text }}{%- endfor -%}
{%- elif content is not none -%}{{ raise_exception('unsupported message content') }}
{%- endif -%}
{%- endmacro -%}
{{- bos_token if bos_token is defined and bos_token else '' -}}
{%- set first_is_system = messages and messages[0].role == 'system' -%}
{%- if tools -%}
{{- '<|im_start|>system\\n' -}}
{%- if first_is_system -%}{{ render_content(messages[0].content) + '\\n\\n' }}{%- endif -%}
{{- '# Tools\\n\\nYou may call one or more functions. Their signatures are inside <tools></tools>:\\n<tools>' -}}
{%- for tool in tools -%}{{ '\\n' + (tool | tojson) }}{%- endfor -%}
{{- '\\n</tools>\\n\\nTo call a function, answer with a JSON object inside <tool_call></tool_call> tags:\\n' -}}
{{- '<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' -}}
{%- elif first_is_system -%}
{{- '<|im_start|>system\\n' + render_content(messages[0].content) + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' -%}
{%- if not loop.first -%}{{ raise_exception('only the first message may have role system') }}{%- endif -%}
{%- elif message.role == 'user' -%}
{{- '<|im_start|>user\\n' + render_content(message.content) + '<|im_end|>\\n' -}}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant\\n' + render_content(message.content) -}}
{%- for call in message.tool_calls or [] -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- if loop.first and message.content -%}{{ '\\n' }}{%- elif not loop.first -%}{{ '\\n' }}{%- endif -%}
{{- '<tool_call>\\n{"name": "' + fn.name + '", "arguments": ' -}}
{{- fn.arguments if fn.arguments is string else (fn.arguments | tojson) -}}
{{- '}\\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\\n' -}}
{%- elif message.role == 'tool' -%}
{{- '<|im_start|>user\\n<tool_response>\\n' + render_content(message.content) + '\\n</tool_response><|im_end|>\\n' -}}
{%- else -%}
{{- raise_exception('unknown role: ' + message.role) -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}
"""


@functools.lru_cache(maxsize=8)
def trained_tokenizer_json(vocab_size: int, style: str) -> str:
    """tokenizer.json text of a byte-level BPE trained on the built-in corpus (deterministic)."""
    if style not in STYLES:
        raise ValueError(f"unknown tokenizer style {style!r}; choose one of {STYLES}")
    specials = SPECIAL_TOKENS[style]
    min_vocab = 256 + len(specials) + len(EXTRA_TOKENS)
    if vocab_size < min_vocab:
        raise ValueError(f"vocab_size must be at least {min_vocab} (256 bytes + special tokens)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(EXTRA_TOKENS),
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(), trainer)
    tok.add_tokens(list(EXTRA_TOKENS))
    if style == "llama":
        bos = "<|bos|>"
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok.to_str()


def tokenizer_config(tokenizer: Tokenizer, style: str, model_max_length: int) -> dict:
    """tokenizer_config.json for the trained tokenizer (chat template written separately)."""
    decoder = {}
    for content in SPECIAL_TOKENS[style] + EXTRA_TOKENS:
        decoder[str(tokenizer.token_to_id(content))] = {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": content in SPECIAL_TOKENS[style]}
    if style == "llama":
        tokens = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>"}
    else:
        tokens = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    return {
        "added_tokens_decoder": decoder,
        **tokens,
        "add_bos_token": style == "llama",
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def eos_tokens(style: str) -> tuple[str, ...]:
    """Tokens that end generation (the first is the tokenizer's eos_token)."""
    return ("<|eos|>", "<|im_end|>") if style == "llama" else ("<|im_end|>", "<|endoftext|>")
