"""vLLM side of benchmarks/peers/engine_vs_vllm.py; runs inside the vLLM venv (no tandem there).

    VENV/bin/python vllm_engine_child.py serve CONFIG_JSON    # answers requests on stdin, one per line
    VENV/bin/python vllm_engine_child.py cold CONFIG_JSON     # import, build, 1-token request, exit

CONFIG_JSON: {"model": DIR, "dtype": "float32", "threads": 2, "max_num_seqs": 64,
"kv_cache_bytes": N, "eager": false, "max_num_batched_tokens": null}.

Every answer is one stdout line starting with MARKER followed by JSON; everything else on
stdout (vLLM logs, progress bars) is noise the parent skips. Requests (`serve`), one JSON per line:
  {"op": "throughput", "prompts": [[ids]], "output_lens": [n]}
      -> seconds of `LLM.generate` alone, the output token ids, cached prompt tokens
  {"op": "decode", "prompt": [ids], "max_tokens": n}
      -> per-token timestamps from an `LLMEngine.step` loop (output kind DELTA: each step hands
         back only its new tokens, stamped when `step` returns them), as ttft_s and tpot_s
  {"op": "quit"}

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0 and the "uni" executor, set
by the parent), like tandem's: no EngineCore or worker process, `torch.set_num_threads(threads)`.
"""

from __future__ import annotations

import json
import sys
import time

MARKER = "@@engine-child "


def reply(obj: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(obj) + "\n")
    sys.stdout.flush()


def build(cfg: dict):
    """-> vllm.LLM for cfg (construction is not part of any timed figure except cold start)."""
    import torch

    torch.set_num_threads(cfg["threads"])
    from vllm import LLM

    extra = {}
    if cfg.get("max_num_batched_tokens"):
        extra["max_num_batched_tokens"] = cfg["max_num_batched_tokens"]
    return LLM(model=cfg["model"], dtype=cfg["dtype"], max_num_seqs=cfg["max_num_seqs"],
               kv_cache_memory_bytes=cfg["kv_cache_bytes"], enforce_eager=cfg["eager"],
               skip_tokenizer_init=True,   # token ids in and out; no detokenizing
               distributed_executor_backend=cfg.get("executor") or None, seed=0, **extra)


def greedy(max_tokens: int, delta: bool = False):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    kind = RequestOutputKind.DELTA if delta else RequestOutputKind.FINAL_ONLY
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, output_kind=kind)


def throughput(llm, prompts: list[list[int]], output_lens: list[int]) -> dict:
    inputs = [{"prompt_token_ids": p} for p in prompts]
    params = [greedy(n) for n in output_lens]
    t0 = time.perf_counter()
    outs = llm.generate(inputs, params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    tokens = [list(o.outputs[0].token_ids) for o in outs]   # generate keeps the input order
    for toks, n in zip(tokens, output_lens):
        if len(toks) != n:
            raise RuntimeError(f"vLLM produced {len(toks)} tokens, {n} requested")
    cached = sum(o.num_cached_tokens or 0 for o in outs)
    return {"seconds": seconds, "tokens": tokens, "cached_tokens": cached}


def decode(llm, prompt: list[int], max_tokens: int, request_id: str) -> dict:
    engine = llm.llm_engine
    engine.add_request(request_id, {"prompt_token_ids": prompt}, greedy(max_tokens, delta=True))
    t0 = time.perf_counter()
    stamps: list[float] = []
    tokens: list[int] = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            now = time.perf_counter()
            for token in out.outputs[0].token_ids:
                stamps.append(now)
                tokens.append(token)
    if len(stamps) < 2:
        raise RuntimeError("decode measurement needs at least 2 output tokens")
    return {"ttft_s": stamps[0] - t0, "tpot_s": (stamps[-1] - stamps[0]) / (len(stamps) - 1),
            "tokens": tokens}


def serve(cfg: dict) -> None:
    t0 = time.perf_counter()
    llm = build(cfg)
    import torch
    import vllm

    reply({"ready": True, "build_s": time.perf_counter() - t0, "vllm": vllm.__version__,
           "torch": torch.__version__})
    for n, line in enumerate(sys.stdin):
        req = json.loads(line)
        if req["op"] == "quit":
            break
        if req["op"] == "throughput":
            reply(throughput(llm, req["prompts"], req["output_lens"]))
        elif req["op"] == "decode":
            reply(decode(llm, req["prompt"], req["max_tokens"], f"decode-{n}"))
        else:
            raise ValueError(f"unknown op {req['op']!r}: throughput, decode or quit")


def cold(cfg: dict) -> None:
    t0 = time.perf_counter()
    import torch  # noqa: F401 - counted in import_s, as in tandem's cold-start child
    import vllm  # noqa: F401

    t1 = time.perf_counter()
    llm = build(cfg)
    t2 = time.perf_counter()
    out = llm.generate([{"prompt_token_ids": [16, 17, 18, 19]}], greedy(1), use_tqdm=False)
    if len(out[0].outputs[0].token_ids) != 1:
        raise RuntimeError("cold-start request did not produce its token")
    t3 = time.perf_counter()
    reply({"import_s": t1 - t0, "load_s": t2 - t1, "first_request_s": t3 - t2})


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in ("serve", "cold"):
        raise SystemExit(__doc__)
    cfg = json.loads(sys.argv[2])
    serve(cfg) if sys.argv[1] == "serve" else cold(cfg)


if __name__ == "__main__":
    main()
