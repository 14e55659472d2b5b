"""A random Llama-shaped checkpoint with a 4096-token BPE tokenizer from the demo model family.

`tandem model make-test` trains its tokenizer on a small built-in corpus (about 1,000 tokens of
vocabulary, ~3.4 tokens per English word), which would make a "few thousand token" system prompt
a few hundred words. The tokenizer in benchmarks/disagg/tokenizer/ (the demo models' first one,
4096 tokens, words carrying their leading space: ~1.45 tokens per word of the agentic generator) is
closer to real vocabularies, so this script writes the random weights with `write_test_model` and
then adds that tokenizer, its chat template and special-token ids. It is kept here, apart from the
shipped models, so that the workloads of docs/benchmarks.md keep their token counts.

  python benchmarks/disagg/make_model.py OUT_DIR [--hidden-size 512] [--layers 8] [--heads 8] [--kv-heads 4]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repo root, for `tandem`
from tokenizers import Tokenizer

from tandem.testing.tiny_model import write_test_model

TOKENIZER_DIR = Path(__file__).resolve().parent / "tokenizer"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--hidden-size", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--max-position-embeddings", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    gen = json.loads((TOKENIZER_DIR / "generation_config.json").read_text())
    vocab_size = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    out = write_test_model(a.out_dir, "LlamaForCausalLM", hidden_size=a.hidden_size, num_layers=a.layers,
                           num_heads=a.heads, num_kv_heads=a.kv_heads, intermediate_size=2 * a.hidden_size,
                           vocab_size=vocab_size, max_position_embeddings=a.max_position_embeddings,
                           dtype="bfloat16", seed=a.seed)
    for name in TOKENIZER_FILES:
        shutil.copyfile(TOKENIZER_DIR / name, out / name)
    cfg = json.loads((out / "config.json").read_text())
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        cfg[key] = gen[key]
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
