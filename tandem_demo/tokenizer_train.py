"""Train the demo byte-level BPE tokenizer on the corpus and write the HF tokenizer files.

Ids 0-2 are <|endoftext|>, <|im_start|>, <|im_end|> (special: dropped by decode(skip_special_tokens=True));
the last four ids are <tool_call>, </tool_call>, <tool_response>, </tool_response>, added as non-special
tokens so that decoded text keeps them for tool-call parsers (as Qwen's tokenizers do). All seven are
matched before pre-tokenization, so they are always single tokens.
Digits are split one per token, which helps a small model copy numbers into tool arguments.
Spaces are tokens of their own (`isolate_spaces`, the default; never merged into the word after them): a
value then reads the same in a request ("in Paris") and in a tool call ("city": "Paris"), so a small model
can copy it token for token. With words carrying their leading space (GPT-2's split, isolate_spaces=False)
the two spellings are different tokens, and a small model learns a mapping per value instead of a copy.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from tandem_demo.chat_template import CHAT_TEMPLATE
from tandem_demo.corpus import PARTS, load_texts

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
EOS_TOKEN, PAD_TOKEN = "<|im_end|>", "<|endoftext|>"
# contractions, words with one leading space, single digits, punctuation runs, newlines, other spaces
SPLIT_PATTERN = r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# the same pieces, but no space joins the word, digit or punctuation after it
SPACE_TOKEN_PATTERN = r"'(?:[sdmt]|ll|ve|re)|\p{L}+|\p{N}|[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def new_tokenizer(isolate_spaces: bool = True) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    pattern = SPACE_TOKEN_PATTERN if isolate_spaces else SPLIT_PATTERN
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def _strip_markers(text: str) -> str:
    for t in SPECIAL_TOKENS + TOOL_TOKENS:
        text = text.replace(t, "\n")
    return text


def train_tokenizer(texts, vocab_size: int = 4096, isolate_spaces: bool = True) -> Tokenizer:
    """BPE over `texts` (an iterable of strings); the vocabulary has exactly `vocab_size` entries."""
    tok = new_tokenizer(isolate_spaces)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS), min_frequency=2, show_progress=False,
        special_tokens=list(SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((_strip_markers(t) for t in texts), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return tok


def corpus_texts(corpus_dir: str | Path):
    """Training documents of every part (held-out documents never shape the vocabulary)."""
    for part in PARTS:
        yield from load_texts(corpus_dir, part, "train")


def tokenizer_config(tok: Tokenizer, model_max_length: int) -> dict:
    added = {}
    for t in SPECIAL_TOKENS + TOOL_TOKENS:
        added[str(tok.token_to_id(t))] = {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": t in SPECIAL_TOKENS}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "chat_template": CHAT_TEMPLATE,
    }


def generation_config(tok: Tokenizer) -> dict:
    return {"eos_token_id": [tok.token_to_id(EOS_TOKEN), tok.token_to_id(PAD_TOKEN)],
            "pad_token_id": tok.token_to_id(PAD_TOKEN), "bos_token_id": None}


def save_tokenizer_files(tok: Tokenizer, out_dir: str | Path, model_max_length: int = 2048) -> list[Path]:
    """tokenizer.json, tokenizer_config.json (with the chat template), chat_template.jinja,
    generation_config.json (eos = <|im_end|> and <|endoftext|>)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    files = {
        "tokenizer_config.json": json.dumps(tokenizer_config(tok, model_max_length), indent=2) + "\n",
        "chat_template.jinja": CHAT_TEMPLATE,
        "generation_config.json": json.dumps(generation_config(tok), indent=2) + "\n",
    }
    for name, text in files.items():
        (out / name).write_text(text)
    return [out / "tokenizer.json"] + [out / n for n in files]


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
