"""A tiktoken-format BPE (`tiktoken.model`: one "base64(token bytes) rank" per line, as Kimi K2
ships it) turned into an equivalent `tokenizers.Tokenizer`, so the rest of tandem (detokenizer,
grammars, chat prompts) sees one kind of tokenizer.

Equivalence with tiktoken: byte-level BPE over pieces split by the model's `pat_str`; a piece
that is a whole token stays one (ignore_merges); otherwise the adjacent pair whose concatenation
has the lowest rank merges first, which a merge list ordered by the merged token's rank gives.
The pre-tokenizing regex comes from the model's own tokenization_*.py (the class attribute
`pat_str = "|".join([...])`, read with ast: the file is never executed). Oniguruma, which
tokenizers uses, lacks the class intersection `[A&&[^B]]` of tiktoken's regex engine; it is
rewritten as the equivalent `(?:(?![B])[A])`. Special tokens take the ids after the ranks, as
tokenizer_config.json's added_tokens_decoder declares them; undeclared ids up to
`num_reserved_special_tokens` are `<|reserved_token_{id}|>` (as Kimi's tokenizer names them).
"""

from __future__ import annotations

import ast
import base64
import re
from pathlib import Path

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as Backend

from tandem.errors import ModelLoadError

TIKTOKEN_FILE = "tiktoken.model"
NUM_RESERVED_SPECIAL_TOKENS = 256
_INTERSECTION = re.compile(r"\[([^\[\]]*)&&\[\^([^\[\]]*)\]\]")


def read_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as e:
            raise ModelLoadError(f"{path}:{n} is not 'base64-token rank': {line[:60]!r}") from e
    return ranks


def find_pat_str(model_dir: Path) -> str:
    """The pre-tokenizing regex of the model's tokenization_*.py (pat_str = "|".join([...]) or a string)."""
    for f in sorted(model_dir.glob("tokenization_*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["pat_str"]:
                value = node.value
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    return value.value
                if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                        and value.func.attr == "join" and isinstance(value.func.value, ast.Constant)):
                    return value.func.value.value.join(ast.literal_eval(value.args[0]))
    raise ModelLoadError(f"{model_dir} has {TIKTOKEN_FILE} but no tokenization_*.py defining pat_str "
                         "(the regex that splits text before BPE)")


def byte_to_unicode() -> dict[int, str]:
    """Byte-level BPE's printable stand-in for each byte: printable Latin-1 bytes stand for
    themselves, the others map to code points from 256 on, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def onig_pattern(pat_str: str) -> str:
    return _INTERSECTION.sub(r"(?:(?![\2])[\1])", pat_str)


def tiktoken_backend(model_dir: Path, config: dict) -> Backend:
    ranks = read_ranks(model_dir / TIKTOKEN_FILE)
    pat = onig_pattern(find_pat_str(model_dir))
    enc = byte_to_unicode()

    def text(b: bytes) -> str:
        return "".join(enc[x] for x in b)

    vocab = {text(t): r for t, r in ranks.items()}
    merges: list[tuple[int, int, int, str, str]] = []
    for token, rank in ranks.items():
        for i in range(1, len(token)):
            a, b = token[:i], token[i:]
            if a in ranks and b in ranks:
                merges.append((rank, ranks[a], ranks[b], text(a), text(b)))
    merges.sort()
    bpe = models.BPE(vocab=vocab, merges=[(a, b) for *_, a, b in merges], ignore_merges=True)
    backend = Backend(bpe)
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pat), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    _add_specials(backend, len(ranks), config)
    return backend


def _add_specials(backend: Backend, first_id: int, config: dict) -> None:
    """Special tokens at ids first_id.. in id order: declared ones as declared, gaps reserved."""
    declared = {int(k): v for k, v in (config.get("added_tokens_decoder") or {}).items()}
    last = max([first_id + NUM_RESERVED_SPECIAL_TOKENS - 1, *declared])
    tokens = []
    for i in range(first_id, last + 1):
        spec = declared.get(i) or {}
        content = spec.get("content") or f"<|reserved_token_{i}|>"
        tokens.append(AddedToken(content, special=True, normalized=False,
                                 lstrip=spec.get("lstrip", False), rstrip=spec.get("rstrip", False),
                                 single_word=spec.get("single_word", False)))
    backend.add_special_tokens(tokens)
    if backend.get_vocab_size(with_added_tokens=True) != last + 1:
        raise ModelLoadError(f"{TIKTOKEN_FILE}: special tokens do not line up after the {first_id} "
                             "BPE ranks (a declared token repeats a BPE token?)")
