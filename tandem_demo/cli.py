"""`python -m tandem_demo build-corpus | train-tokenizer | train | evaluate`: build the demo models from scratch.

The shipped models' exact commands are on their cards; in short (spaces as tokens, so that a value
reads the same in a request and in a tool call; short drill transcripts beside the dense ones; tool
calls weighted in the loss):

    python -m tandem_demo build-corpus --layout dense --agent-train 8000 --out /tmp/tandem-demo/corpus-dense
    python -m tandem_demo build-corpus --layout drill --agent-train 16000 --out /tmp/tandem-demo/corpus-drill
    python -m tandem_demo train-tokenizer --corpus /tmp/tandem-demo/corpus-dense --out /tmp/tandem-demo/tokenizer
    python -m tandem_demo train --size draft --minutes 40 --batch-size 2 --lr 4e-3 --assistant-loss-weight 4 \
        --tool-call-loss-weight 8 --corpus /tmp/tandem-demo/corpus-dense \
        --extra-corpus /tmp/tandem-demo/corpus-drill --out models/tandem-demo-draft
    python -m tandem_demo train --size target ... (the same flags, --minutes 200) --out models/tandem-demo-target
    python -m tandem_demo evaluate --target models/tandem-demo-target --draft models/tandem-demo-draft

To teach a model to read the tools it is offered, fine-tune it on generated tools (layouts `pool`
and `pool-drill`), with documents packed whole into rows (`--packing aligned`: with stream packing
half of such calls lose their tool list to the previous row). Not yet enough on a CPU without
bfloat16 units within the demo's budget (the target's card lists the attempts):

    python -m tandem_demo build-corpus --layout pool-drill --agent-train 25000 --out /tmp/t/pool-drill
    python -m tandem_demo build-corpus --layout pool --agent-train 14000 --out /tmp/t/pool
    python -m tandem_demo train --init-from models/tandem-demo-target --tokenizer models/tandem-demo-target \
        --packing aligned --corpus /tmp/t/pool-drill --extra-corpus /tmp/t/pool ...
    python -m tandem_demo evaluate ... --baseline DIR-OF-THE-PREVIOUS-TARGET   (unseen-tool figures, old vs new)

v3 (issue 33: 16k context, a larger target, for one GPU): every step in one command,
`scripts/train-demo-v3.sh` (python -m tandem_demo v3 --device cuda ...; tandem_demo/v3.py).
"""

from __future__ import annotations

import argparse
import json

from tandem_demo import evaluate, train, v3
from tandem_demo.corpus import CorpusConfig, build_corpus
from tandem_demo.tokenizer_train import corpus_texts, save_tokenizer_files, train_tokenizer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tandem_demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build-corpus", help="KJV + generated agent transcripts, with held-out splits")
    p.add_argument("--out", default="/tmp/tandem-demo/corpus")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--agent-train", type=int, default=6000)
    p.add_argument("--agent-heldout", type=int, default=300)
    p.add_argument("--layout", default="dense", choices=["dense", "drill", "sparse", "pool", "pool-drill", "pool-wide"],
                   help="sparse: 1-3 requests, 2-5 tools; dense: 1-5 requests over 2-4 tools; "
                        "drill: 1-2 requests over 1-3 tools (these three over the fixed catalog); "
                        "pool: generated tools, held-out tools from disjoint name pools; "
                        "pool-drill: pool's tools, one exchange over 1-3 tools, mostly a call; "
                        "pool-wide: pool over 6-12 tools (long tool lists, as agent harnesses send)")
    p.set_defaults(func=_build_corpus)

    p = sub.add_parser("train-tokenizer", help="byte-level BPE on the training split")
    p.add_argument("--corpus", default="/tmp/tandem-demo/corpus")
    p.add_argument("--out", default="/tmp/tandem-demo/tokenizer")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--isolate-spaces", action=argparse.BooleanOptionalAction, default=True,
                   help="spaces as tokens of their own, so values read the same in prose and in JSON "
                        "(default; --no-isolate-spaces joins a space to the word after it, as GPT-2 does)")
    p.set_defaults(func=_train_tokenizer)

    p = sub.add_parser("train", help="train the target or the draft model")
    train.add_train_args(p)
    p.set_defaults(func=_train)

    p = sub.add_parser("evaluate", help="perplexity, tool-call validity, draft agreement; updates model cards")
    evaluate.add_eval_args(p)
    p.set_defaults(func=_evaluate)

    p = sub.add_parser("v3", help="the v3 models in one GPU run: corpora, target, draft, EAGLE-3 head, "
                                  "held-out evaluation, cards, checksums (scripts/train-demo-v3.sh)")
    v3.add_args(p)
    p.set_defaults(func=_v3)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.func(args)
    return 0


def _build_corpus(a: argparse.Namespace) -> None:
    m = build_corpus(a.out, CorpusConfig(seed=a.seed, agent_train=a.agent_train, agent_heldout=a.agent_heldout,
                                        layout=a.layout))
    print(json.dumps(m, indent=1))


def _train_tokenizer(a: argparse.Namespace) -> None:
    tok = train_tokenizer(corpus_texts(a.corpus), vocab_size=a.vocab_size, isolate_spaces=a.isolate_spaces)
    for f in save_tokenizer_files(tok, a.out):
        print(f)


def _train(a: argparse.Namespace) -> None:
    train.train(train.config_from_args(a))


def _v3(a: argparse.Namespace) -> None:
    v3.run(v3.config_from_args(a))


def _evaluate(a: argparse.Namespace) -> None:
    res = evaluate.evaluate(evaluate.config_from_args(a))
    print(json.dumps({k: v for k, v in res.items() if k != "config"}, indent=1))
