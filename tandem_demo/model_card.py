"""README.md model cards for the demo models, generated from the files next to the weights:
config.json, train_log.json (training), corpus_manifest.json (data), eval_results.json (figures)."""

from __future__ import annotations

import json
from pathlib import Path

from tandem_demo.tools import tool_catalog

EVAL_COMMAND = ("python -m tandem_demo.evaluate --target models/tandem-demo-target "
                "--draft models/tandem-demo-draft --corpus /tmp/tandem-demo/corpus-dense")


def _eval_command(ev: dict | None) -> str:
    """The command that produced `ev` (its corpus and baseline), or the default one."""
    if not ev:
        return EVAL_COMMAND
    c = ev["config"]
    cmd = (f"python -m tandem_demo.evaluate --target models/tandem-demo-target --draft models/tandem-demo-draft "
           f"--corpus {c['corpus_dir']}")
    defaults = {"toolcall_transcripts": 100, "unseen_transcripts": 60, "ppl_docs": 100, "agreement_transcripts": 60}
    for key, default in defaults.items():   # counts that differ from evaluate.py's defaults
        if c.get(key, default) != default:
            cmd += f" --{key.replace('_', '-')} {c[key]}"
    if c.get("dtype", "bfloat16") != "bfloat16":
        cmd += f" --dtype {c['dtype']}"
    return cmd + (f" --baseline {c['baseline_dir']}" if c.get("baseline_dir") else "")


def _setup_commands(train_cfg: dict) -> str:
    """The commands that build the training inputs, with the tokenizer path the run used."""
    tokenizer = train_cfg.get("tokenizer_dir", "/tmp/tandem-demo/tokenizer")
    return ("apt-get install -y bible-kjv   # provides the `bible` command\n"
            "python -m tandem_demo build-corpus --layout dense --agent-train 8000 --out /tmp/tandem-demo/corpus-dense\n"
            "python -m tandem_demo build-corpus --layout drill --agent-train 16000 --out /tmp/tandem-demo/corpus-drill\n"
            f"python -m tandem_demo train-tokenizer --corpus /tmp/tandem-demo/corpus-dense --out {tokenizer}")


def _finetune_commands(log: dict, corpus: dict | None) -> list[str]:
    """For a run started from another model's weights: that model's commands, then this run's inputs."""
    init = log.get("init")
    if not init:
        return []
    cfg = log["config"]
    extras = [(d, e["config"]) for d, e in zip(cfg.get("extra_corpus_dirs", []), (corpus or {}).get("extra_corpora", []))]
    start = ["# the starting weights: the previous model, trained from scratch by", *[c for _, c in init["segments"]]]
    if init.get("commit"):   # the run read the previous model where this one now lies
        start += [f"# (or, as committed: git checkout {init['commit']} -- {init['from']})"]
    tokenizer = [] if cfg["tokenizer_dir"] == init["from"] else [
        f"mkdir -p {cfg['tokenizer_dir']} && cp {init['from']}/tokenizer* {init['from']}/chat_template.jinja "
        f"{init['from']}/generation_config.json {cfg['tokenizer_dir']}/"]
    return [*start, "# then fine-tuned (this model), its tokenizer unchanged:",
            *[f"python -m tandem_demo build-corpus --layout {c['layout']} --agent-train {c['agent_train']} --out {d}"
              for d, c in extras],
            f"python -m tandem_demo build-corpus --layout {(corpus or {}).get('config', {}).get('layout', 'pool')} "
            f"--agent-train {(corpus or {}).get('config', {}).get('agent_train', '?')} --out {cfg['corpus_dir']}",
            *tokenizer]


def _unseen_lines(ev: dict) -> list[str]:
    u = ev.get("unseen_tools")
    if not u:
        return []
    hand, none, chat = u["handwritten"], u["no_tools_offered"], u["tools_offered_no_call"]
    lines = [f"- **Unseen tools (target, greedy, no grammar)**: {u['valid_share'] * 100:.1f}% of {u['call_turns']} "
             "tool-call turns over tools whose names never occur in training (generated from held-out name pools, "
             "and a hand-written `lookup_invoice` / `schedule_meeting` pair) call an offered tool with "
             f"schema-valid arguments (goal: at least 80%); {u['right_tool_share'] * 100:.1f}% call the right "
             f"tool(s), {u['exact_share'] * 100:.1f}% match the reference calls exactly. Hand-written pair: "
             f"{hand['valid_share'] * 100:.0f}% valid, {hand['exact_share'] * 100:.0f}% exact of "
             f"{hand['call_turns']} requests.",
             f"- **No call where words are right**: {none['no_call_share'] * 100:.1f}% of {none['word_turns']} turns "
             "with no tools offered hold no call (goal: 100%; prompts include scripture questions and requests "
             f"that look like tool requests); {chat['no_call_share'] * 100:.1f}% of {chat['word_turns']} chat "
             "turns with tools offered (greetings, thanks, scripture, requests no offered tool serves)."]
    base = ev.get("baseline")
    if base:
        bu, bt, tc = base["unseen_tools"], base["tool_calls"], ev["tool_calls"]
        row = lambda name, t, x: (f"| {name} | {t['valid_share'] * 100:.1f}% | {x['valid_share'] * 100:.1f}% | "
                                  f"{x['right_tool_share'] * 100:.1f}% | {x['handwritten']['valid_share'] * 100:.0f}% | "
                                  f"{x['no_tools_offered']['no_call_share'] * 100:.1f}% | "
                                  f"{x['tools_offered_no_call']['no_call_share'] * 100:.1f}% |")
        lines += ["", f"Against the target it replaces (`{base['model']}`), on the same turns:", "",
                  "| target | held-out valid | unseen valid | unseen right tool | hand-written valid | "
                  "no call, no tools | no call, chat with tools |", "|---|---|---|---|---|---|---|",
                  row("previous", bt, bu), row("this one", tc, u), ""]
    return lines


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _eval_section(role: str, ev: dict | None) -> list[str]:
    if ev is None:
        return ["Not evaluated yet: run", "", f"    {_eval_command(ev)}", ""]
    lines = ["Measured by `tandem_demo/evaluate.py` on the held-out splits (never seen in training), "
             f"weights in {ev['config']['dtype']}:", "",
             "| model | held-out KJV loss | KJV perplexity | held-out agent loss | agent perplexity |",
             "|---|---|---|---|---|"]
    for name, ppl in ev["perplexity"].items():
        lines.append(f"| {name} | {ppl['kjv']['loss']} | {ppl['kjv']['perplexity']} | {ppl['agent']['loss']} | "
                     f"{ppl['agent']['perplexity']} |")
    tc = ev["tool_calls"]
    lines += ["", f"- **Tool calls (target, greedy)**: {tc['valid_share'] * 100:.1f}% of {tc['turns']} held-out "
              "tool-call turns are well-formed `<tool_call>` JSON naming an offered tool with arguments that "
              "validate against its schema (goal: at least 80%); "
              f"{tc['tool_name_match_share'] * 100:.1f}% call the same tool(s) as the reference, "
              f"{tc['exact_match_share'] * 100:.1f}% match the reference calls exactly."]
    lines += _unseen_lines(ev)
    if "draft_agreement" in ev:
        da = ev["draft_agreement"]
        lines.append(f"- **Draft top-1 agreement with the target** (teacher forcing on held-out agent transcripts): "
                     f"{da['top1_agreement'] * 100:.1f}% of {da['positions']} positions; "
                     f"{da['assistant_top1_agreement'] * 100:.1f}% on the {da['assistant_positions']} positions "
                     "inside assistant replies (goal: at least 50%).")
    lines += ["", f"Evaluation took {ev['minutes']} minutes. Reproduce with:", "", f"    {_eval_command(ev)}", ""]
    if role == "target" and ev.get("examples"):
        lines += ["## Examples", "", "Greedy replies of this model:", ""]
        for ex in ev["examples"]:
            last = ex["messages"][-1]
            said = last["content"] if last["role"] == "user" else f"(tool result) {last['content']}"
            offered = ", ".join(ex["tools"]) if ex["tools"] else "none"
            lines += [f"**{ex['name']}** (tools offered: {offered}), last message: `{said}`", "", "```", ex["reply"],
                      "```", ""]
    return lines


def _copying_limitation(tc: dict) -> str:
    values = tc.get("argument_values")
    exact = f"{tc['exact_match_share'] * 100:.1f}% of its calls match the reference exactly"
    if values is None:
        return f"Argument values: {exact}."
    copied = (f"it reproduces {values['copied_share'] * 100:.1f}% of the {values['values']} reference string "
              "values that appear in the conversation")
    if values["copied_share"] >= 0.5:
        return (f"Argument values: {copied}, and {exact}. The other calls carry a wrong value or miss an "
                "argument, and replies after a tool result can misstate it: check a call before acting on it.")
    return (f"Undertrained for copying: the target picks the right tool and emits schema-valid arguments, but "
            f"{copied} and {exact} (see the examples). Training is resumable (`--resume` with a larger "
            "`--minutes`) when the machine has CPU to spare.")


def _schedule(cfg: dict) -> str:
    share = cfg.get("decay_fraction", 1.0)
    if share >= 1.0:
        return "cosine decay"
    return f"held at the peak, then cosine decay over the last {share * 100:.0f}% of the run"


def render_card(model_dir: Path, role: str) -> str:
    cfg = json.loads((model_dir / "config.json").read_text())
    log = _read(model_dir / "train_log.json") or {}
    corpus = _read(model_dir / "corpus_manifest.json")
    ev = _read(model_dir / "eval_results.json")
    name = model_dir.name
    other = "tandem-demo-draft" if role == "target" else "tandem-demo-target"
    params = log.get("parameters")
    lines = [
        f"# {name}", "",
        f"The {role} model of tandem's demo family: a {params / 1e6:.2f}M-parameter Llama-architecture model "
        + ("trained from scratch, then fine-tuned to read the tools it is offered, "
           if log.get("init") else "trained from scratch ")
        + "on this project's CPU with tandem's own code (`tandem_demo/`), so that "
        "`make run` serves something that chats and calls tools, and speculative decoding can be measured "
        f"with a real draft/target pair ({other} is its {'draft' if role == 'target' else 'target'}; both share "
        "one tokenizer). It is a toy: it knows the King James Bible's style and the tool-call format of its "
        "training transcripts, nothing else.", "",
        "## Architecture", "",
        "| field | value |", "|---|---|",
        f"| class | `{cfg['architectures'][0]}` |",
        f"| parameters | {params:,} (embeddings tied with the output layer) |" if params else "| parameters | ? |",
        f"| hidden size / intermediate | {cfg['hidden_size']} / {cfg['intermediate_size']} |",
        f"| layers / heads / kv heads | {cfg['num_hidden_layers']} / {cfg['num_attention_heads']} / "
        f"{cfg['num_key_value_heads']} |",
        f"| vocabulary | {cfg['vocab_size']} (byte-level BPE) |",
        f"| context | trained on 1024-token windows; max_position_embeddings {cfg['max_position_embeddings']} |",
        f"| weights | `model.safetensors`, {cfg.get('dtype')} |", "",
        "## Data", "",
        "- King James Bible (public domain), from Debian's `bible-kjv` package: one document per chapter; "
        "a seeded 3% of chapters is held out.",
        "- Generated agent transcripts (`tandem_demo/agent_transcripts.py`, `scenarios.py`): a system prompt, "
        f"a few of {len(tool_catalog())} tools with JSON-schema parameters "
        f"({', '.join(t['function']['name'] for t in tool_catalog())}), user requests, "
        "tool calls (single, parallel and chained) whose arguments validate against the schema and match the "
        "request, tool results and final answers, plus some greetings and tool-free chat. Three layouts: "
        "`sparse` (1-3 requests, 2-5 tools offered), `dense` (1-5 requests using only the 2-4 tools offered: "
        "about 1.7x more tool calls per token) and `drill` (1-2 requests over 1-3 tools: short transcripts, "
        "so that copying a value from a request into a call is seen often). Held-out transcripts come from a "
        "separate seed stream, with exact duplicates of training transcripts removed.",
        "- Layout `pool` (`tandem_demo/tool_pool.py`, `pool_transcripts.py`): every transcript offers one to five "
        "freshly generated tools (verb x noun names such as `fetch_order_status`, argument names from base x "
        "qualifier pools such as `billing_email`, string/integer/number/boolean/enum types, pooled descriptions) "
        "or none; requests name the tool's verb and noun and carry each argument value, which the calls copy; "
        "parallel calls, tool results and follow-up requests; turns whose right answer is words although tools "
        "are offered (greetings, scripture, requests no offered tool serves); and transcripts with no tools, "
        "answered in prose even when the request sounds like a tool call. Held-out transcripts draw from "
        "disjoint noun and qualifier pools, so their tool names never occur in training.",
    ]
    if corpus:
        f = corpus["files"]
        lines.append(f"- Corpus (layout `{corpus['config'].get('layout', 'sparse')}`, seed {corpus['config']['seed']}): {f['kjv.train.jsonl']['documents']} training / "
                     f"{f['kjv.heldout.jsonl']['documents']} held-out chapters, "
                     f"{f['agent.train.jsonl']['documents']} training / {f['agent.heldout.jsonl']['documents']} "
                     f"held-out transcripts; transcripts are {corpus['agent_share_of_train_characters'] * 100:.0f}% "
                     "of its training characters. The held-out figures below are on its held-out splits.")
        for extra in corpus.get("extra_corpora", []):
            lines.append(f"- Extra training transcripts (`--extra-corpus`, layout `{extra['config']['layout']}`, "
                         f"seed {extra['config']['seed']}): {extra['files']['agent.train.jsonl']['documents']} "
                         "transcripts.")
    lines += ["", "## Chat format", "",
              "ChatML (`<|im_start|>role ... <|im_end|>`) with Hermes/Qwen-style tools: the system turn lists the "
              "tools inside `<tools></tools>` (one JSON function per line); the assistant calls them as "
              "`<tool_call>\\n{\"name\": ..., \"arguments\": {...}}\\n</tool_call>`; results come back in a user turn "
              "as `<tool_response>...</tool_response>`. The template is in `tokenizer_config.json` and "
              "`chat_template.jinja`; generation stops at `<|im_end|>` or `<|endoftext|>` (generation_config.json).",
              "", "## Training", ""]
    if log:
        ev_loss = log.get("heldout_loss", {})
        resumes = [str(first_step) for first_step, _ in log.get("segments", [])[1:]]
        lines += [
            f"- Command(s): the last lines of the pipeline below"
            + (f" (one per segment; the run resumed from its checkpoint at step{'s' if len(resumes) > 1 else ''} "
               f"{', '.join(resumes)})" if resumes else "")
            + ".",
            f"- Loss: next-token cross-entropy on every token, with tokens inside assistant replies weighted "
            f"{log['config'].get('assistant_loss_weight', 1.0)}x"
            + (f" and tokens from `<tool_call>` to `</tool_call>` {log['config']['tool_call_loss_weight']}x"
               if log["config"].get("tool_call_loss_weight") is not None else "")
            + " (the logged and plotted loss is the plain mean).",
            f"- {log['steps']} AdamW steps of {log['config']['batch_size']} x {log['config']['seq_len']} "
            + ("positions, documents packed whole into rows (`--packing aligned`; padding carries no loss) "
               if log["config"].get("packing") == "aligned" else "packed tokens ")
            + f"({log['tokens'] / 1e6:.2f}M tokens), peak lr {log['config']['lr']}, {_schedule(log['config'])}, "
            f"bfloat16 autocast={log['config']['bf16_autocast']}, {log['config']['threads']} CPU thread(s).",
            f"- Training time: {log['train_minutes']} minutes ({log['tokens_per_second']:.0f} tokens/s); final "
            f"training loss (mean of the last 50 steps) {log['final_train_loss_last50']}; held-out loss at the end "
            f"of training (first rows of each part): {ev_loss}.",
            *([f"- Fine-tuned from `{log['init']['from']}` (itself {log['init']['train_minutes']} minutes and "
               f"{log['init']['tokens'] / 1e6:.2f}M tokens from scratch): {log['init']['total_minutes_with_init']} "
               "minutes of training in all, counting that run."] if log.get("init") else []),
            *([f"- Note: {log['notes']}"] if log.get("notes") else []),
            f"- Versions: {log['versions']}.", "",
            "![loss curve](loss_curve.png)", "",
        ]
    commands = [cmd for _, cmd in log.get("segments", [])] or [log.get("command", "")]
    setup = _setup_commands({} if log.get("init") else log.get("config", {}))
    lines += ["Full pipeline:", "", "```", setup, *_finetune_commands(log, corpus), *commands, "```", "",
              "## Evaluation", ""]
    lines += _eval_section(role, ev)
    lines += ["## Limitations", "",
              "Tiny and narrow: it imitates its templates, invents facts, and degrades past 1024 tokens of context. "
              "Use it for demos and for measuring the serving stack, never for answers."]
    if ev is not None:
        lines += ["", _copying_limitation(ev["tool_calls"])]
    lines.append("")
    return "\n".join(lines)


def write_card(model_dir: Path, role: str, _results: dict | None = None) -> Path:
    path = Path(model_dir) / "README.md"
    path.write_text(render_card(Path(model_dir), role))
    return path
