import argparse

import pytest

from tandem.cli.arg_types import parse_bytes
from tandem.cli.serve import configs_from_args, register
from tandem.config import GrammarConfig


def parse(argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="verb"))
    return parser.parse_args(argv)


def test_parse_bytes():
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("2GiB") == 2 * 2**30
    assert parse_bytes("1.5GB") == 1_500_000_000
    assert parse_bytes("4096") == 4096
    for bad in ("", "12XB", "-1MiB", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_bytes(bad)


def test_flags_build_configs():
    args = parse(["serve", "--model", "/m", "--role", "prefill", "--port", "9001", "--dtype", "bfloat16",
                  "--device", "cpu", "--block-size", "32", "--kv-cache-memory", "64MiB",
                  "--max-num-batched-tokens", "256", "--max-num-seqs", "8", "--no-prefix-caching",
                  "--threads", "2", "--served-model-name", "demo", "--api-key", "a,b",
                  "--api-key", "c", "--gateway", "http://gw:8000", "--max-model-len", "1024",
                  "--no-fused-layers", "--kv-cache-dtype", "fp8_e5m2",
                  "--allowed-origins", "https://a.example, https://b.example",
                  "--max-grammar-chars", "5000", "--max-grammar-choices", "20",
                  "--grammar-compile-timeout", "2.5"])
    engine, server = configs_from_args(args)
    assert args.func.__name__ == "serve"
    assert engine.model.path == "/m" and engine.model.dtype == "bfloat16" and engine.model.device == "cpu"
    assert engine.model.served_name == "demo" and engine.model.max_model_len == 1024
    assert not engine.model.fused_layers
    assert engine.cache.block_size == 32 and engine.cache.kv_cache_bytes == 64 * 2**20
    assert not engine.cache.enable_prefix_caching and engine.cache.kv_cache_dtype == "fp8_e5m2"
    assert engine.scheduler.max_num_batched_tokens == 256 and engine.scheduler.max_num_seqs == 8
    assert engine.role == "prefill" and engine.num_threads == 2
    assert server.api_keys == ("a", "b", "c") and server.gateway_url == "http://gw:8000"
    assert server.port == 9001 and server.host == "127.0.0.1" and server.served_model_name == "demo"
    assert server.allowed_origins == ("https://a.example", "https://b.example")
    assert engine.grammar == GrammarConfig(max_chars=5000, max_choices=20, compile_timeout_s=2.5)
    _, closed = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu", "--allowed-origins", ""]))
    assert closed.allowed_origins == ()


def test_defaults(monkeypatch):
    monkeypatch.delenv("TANDEM_GRAMMAR_COMPILE_TIMEOUT")   # tests/conftest.py sets it for the servers tests start
    engine, server = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu"]))
    assert engine.role == "both" and engine.model.dtype == "auto" and engine.cache.enable_prefix_caching
    assert engine.model.fused_layers and engine.cache.kv_cache_dtype == "auto"
    assert server.api_keys == () and server.port == 8000 and server.gateway_url is None
    assert server.allowed_origins == ("*",)
    assert engine.grammar == GrammarConfig()
    no_timeout, _ = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu",
                                             "--grammar-compile-timeout", "0"]))
    assert no_timeout.grammar.compile_timeout_s is None   # compiles in the worker's process
    assert (server.tool_call_parser, server.reasoning_parser, server.constrain_auto_tool_calls,
            server.tool_call_guard) == ("auto", None, True, True)


def test_output_parser_flags():
    _, server = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu",
                                         "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2",
                                         "--enable-auto-tool-choice", "--no-tool-call-guard"]))
    assert (server.tool_call_parser, server.reasoning_parser) == ("kimi_k2", "kimi_k2")
    assert not server.tool_call_guard


class _Tokenizer:
    chat_template = "{{ messages[0].content }}"
    chat_templates = {"default": chat_template}

    def __init__(self):
        self.compiled = 0

    def compiled_chat_template(self, name="default"):
        self.compiled += 1

    def encode_prompt(self, text):
        return []

    def template_reads_parts(self, name):
        return False


def test_lifecycle_without_gateway_starts_the_engine_then_compiles_the_chat_template():
    import asyncio

    calls = []

    class Engine:
        tokenizer = _Tokenizer()

        async def start(self):
            calls.append(("start", self.tokenizer.compiled))

        async def shutdown(self): ...

    e = Engine()
    _, server = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu"]))
    from tandem.worker.process import lifecycle
    start, stop = lifecycle(e, server)
    asyncio.run(start())
    assert calls == [("start", 0)] and e.tokenizer.compiled == 1
    assert stop == e.shutdown


def test_the_worker_process_starts_the_grammar_helper_before_the_engine_and_warms_it_after():
    import asyncio

    from tandem.worker.process import lifecycle

    calls = []

    class Engine:
        tokenizer = _Tokenizer()

        async def start(self):
            calls.append("start")

        def prepare_grammars(self):
            calls.append("prepare")

        def warm_grammars(self):
            calls.append("warm")

        async def shutdown(self): ...

    _, server = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu"]))
    asyncio.run(lifecycle(Engine(), server)[0]())
    assert calls == ["start"]                    # library use starts no helper process
    asyncio.run(lifecycle(Engine(), server, warm_grammars=True)[0]())
    assert calls == ["start", "prepare", "start", "warm"]   # the helper starts before the load


def test_the_worker_process_freezes_its_start_up_heap_once_the_engine_is_up():
    import asyncio
    import gc

    from tandem.worker.process import lifecycle

    class Engine:
        tokenizer = _Tokenizer()

        async def start(self):
            assert gc.get_freeze_count() == before   # not before the engine exists

        async def shutdown(self): ...

    _, server = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu"]))
    before = gc.get_freeze_count()               # 0 unless a test before this one in the process froze
    asyncio.run(lifecycle(Engine(), server)[0]())
    assert gc.get_freeze_count() == before       # library use (tests, embedding) leaves the heap alone
    try:
        asyncio.run(lifecycle(Engine(), server, freeze_heap=True)[0]())
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()


def test_lifecycle_registers_with_the_gateway_after_start_and_leaves_before_shutdown():
    import asyncio
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tandem.worker.process import lifecycle

    calls = []

    async def register(request):
        calls.append(("register", (await request.json())["url"]))
        return JSONResponse({"heartbeat_interval_s": 0.05})

    async def deregister(request):
        calls.append(("deregister", (await request.json())["url"]))
        return JSONResponse({})

    class Engine:
        role = "decode"
        tokenizer = _Tokenizer()

        async def start(self):
            calls.append(("start", None))

        async def shutdown(self):
            calls.append(("shutdown", None))

    async def main():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        gw = uvicorn.Server(uvicorn.Config(
            Starlette(routes=[Route("/internal/register", register, methods=["POST"]),
                              Route("/internal/deregister", deregister, methods=["POST"])]),
            host="127.0.0.1", port=port, log_level="warning"))
        task = asyncio.create_task(gw.serve())
        try:
            for _ in range(200):
                if gw.started:
                    break
                await asyncio.sleep(0.02)
            _, server = configs_from_args(parse([
                "serve", "--model", "/m", "--device", "cpu", "--port", "9123",
                "--gateway", f"127.0.0.1:{port}"]))
            start, stop = lifecycle(Engine(), server)
            await start()
            for _ in range(200):
                if sum(c[0] == "register" for c in calls) >= 2:
                    break
                await asyncio.sleep(0.02)
            await stop()
        finally:
            gw.should_exit = True
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
    kinds = [c[0] for c in calls]
    assert kinds[0] == "start" and kinds.count("register") >= 2
    assert kinds[-2:] == ["deregister", "shutdown"]
    assert ("register", "http://127.0.0.1:9123") in calls


def test_an_unknown_kv_cache_dtype_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        parse(["serve", "--model", "/m", "--kv-cache-dtype", "fp8"])
    assert "fp8_e5m2" in capsys.readouterr().err


def test_the_scheduling_policy_flags(capsys):
    engine, _ = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu"]))
    assert engine.scheduler.scheduling_policy == "priority" and engine.scheduler.priority_aging_s == 5.0
    engine, _ = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu", "--scheduling-policy",
                                         "fcfs", "--priority-aging-s", "0.5"]))
    assert engine.scheduler.scheduling_policy == "fcfs" and engine.scheduler.priority_aging_s == 0.5
    for bad in (["--scheduling-policy", "lifo"], ["--priority-aging-s", "0"]):
        with pytest.raises(SystemExit):
            parse(["serve", "--model", "/m", *bad])
    assert "must be a positive number" in capsys.readouterr().err


def test_the_shm_transport_on_a_gpu_is_a_usage_error():
    with pytest.raises(SystemExit, match="--kv-transport shm keeps the KV cache in host memory; on cuda"):
        configs_from_args(parse(["serve", "--model", "/m", "--role", "prefill", "--kv-transport", "shm",
                                 "--device", "cuda"]))
    engine, _ = configs_from_args(parse(["serve", "--model", "/m", "--kv-transport", "shm", "--device", "cpu"]))
    assert engine.resolved_transport == "shm"


def test_vllm_command_lines_start_unchanged():
    engine, _ = configs_from_args(parse(
        ["serve", "--model", "/m", "--device", "cpu", "--trust-remote-code", "--enforce-eager",
         "--disable-log-requests", "--disable-log-stats", "--enable-prefix-caching", "--seed", "7",
         "--enable-prompt-tokens-details"]))
    assert engine.seed == 7 and engine.cache.enable_prefix_caching
    off, _ = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu", "--no-enable-prefix-caching"]))
    assert not off.cache.enable_prefix_caching and off.seed is None
    with pytest.raises(SystemExit):
        parse(["serve", "--model", "/m", "--seed", "x"])


def test_the_environment_sets_the_compile_timeout_default(monkeypatch):
    monkeypatch.setenv("TANDEM_GRAMMAR_COMPILE_TIMEOUT", "3")
    engine, _ = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu"]))
    assert engine.grammar.compile_timeout_s == 3.0
    engine, _ = configs_from_args(parse(["serve", "--model", "/m", "--device", "cpu", "--grammar-compile-timeout", "7"]))
    assert engine.grammar.compile_timeout_s == 7.0   # the flag wins
