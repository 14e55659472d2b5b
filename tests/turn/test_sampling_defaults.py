"""The model's generation_config.json as the defaults of what a request leaves out (vLLM's
--generation-config auto), for workers and the gateway alike."""

import argparse
import json
import logging

import pytest
from starlette.testclient import TestClient

from tests.api.fakes import ByteTokenizer, FakeBackend
from tandem.cli.gateway import gateway_config_from_args
from tandem.cli.gateway import register as register_gateway
from tandem.api.app import build_app
from tandem.cli.serve import configs_from_args
from tandem.cli.serve import register as register_serve
from tandem.api.config import ServerConfig
from tandem.api.openai.openai_protocol import ParseContext, parse_chat, parse_completion
from tandem.turn.sampling_defaults import SamplingDefaults

QWEN_LIKE = {"bos_token_id": 1, "do_sample": True, "eos_token_id": [2, 3], "temperature": 0.7,
             "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "max_new_tokens": 64}
MSG = [{"role": "user", "content": "hi"}]


def test_reads_the_sampling_keys_and_ignores_bad_values(caplog):
    d = SamplingDefaults.from_generation_config(QWEN_LIKE)
    assert d == SamplingDefaults(temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05, max_tokens=64)
    assert d.overrides() == {"temperature": 0.7, "top_p": 0.8, "top_k": 20,
                             "repetition_penalty": 1.05, "max_tokens": 64}
    with caplog.at_level(logging.WARNING):
        bad = SamplingDefaults.from_generation_config(
            {"temperature": "hot", "top_p": 0.0, "top_k": 2.5, "min_p": True, "max_new_tokens": 0,
             "repetition_penalty": float("nan")})
    assert bad == SamplingDefaults() and caplog.text.count("ignoring") == 6


def test_for_model_modes(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN_LIKE))
    assert SamplingDefaults.for_model(tmp_path).top_k == 20
    assert SamplingDefaults.for_model(tmp_path, "vllm") == SamplingDefaults()
    assert SamplingDefaults.for_model(tmp_path / "nowhere") == SamplingDefaults()
    (tmp_path / "generation_config.json").write_text("{not json")
    assert SamplingDefaults.for_model(tmp_path) == SamplingDefaults()


def test_requests_take_the_defaults_for_what_they_leave_out():
    ctx = ParseContext("m", ByteTokenizer(), 4096, defaults=SamplingDefaults.from_generation_config(QWEN_LIKE))
    sp = parse_chat({"model": "m", "messages": MSG}, ctx).sampling
    assert (sp.temperature, sp.top_p, sp.top_k, sp.repetition_penalty, sp.max_tokens) == (0.7, 0.8, 20, 1.05, 64)
    # what the request says wins, null included as "not said"
    sp = parse_chat({"model": "m", "messages": MSG, "temperature": 0, "top_k": -1, "top_p": None,
                     "max_tokens": 100}, ctx).sampling
    assert (sp.temperature, sp.top_k, sp.top_p, sp.max_tokens) == (0.0, 0, 0.8, 100)
    # max_new_tokens never raises a chat request past the context's room; completions keep 16
    small = ParseContext("m", ByteTokenizer(), 40, defaults=ctx.defaults)
    assert parse_chat({"model": "m", "messages": MSG}, small).sampling.max_tokens < 40
    assert parse_completion({"model": "m", "prompt": "x"}, ctx).sampling.max_tokens == 16
    assert parse_completion({"model": "m", "prompt": "x"}, ctx).sampling.top_k == 20


def test_the_app_applies_its_configured_defaults():
    backend = FakeBackend()
    config = ServerConfig(sampling_defaults=SamplingDefaults(temperature=0.3, top_k=5))
    with TestClient(build_app(backend, config)) as client:
        r = client.post("/v1/chat/completions", json={"model": "fake-model", "messages": MSG, "max_tokens": 2})
        assert r.status_code == 200, r.text
    assert (backend.seen[0].sampling.temperature, backend.seen[0].sampling.top_k) == (0.3, 5)


def _parse(register, argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="verb"))
    return parser.parse_args(argv)


def test_serve_and_gateway_flags(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN_LIKE))
    _, server = configs_from_args(_parse(register_serve, ["serve", "--model", str(tmp_path), "--device", "cpu"]))
    assert server.sampling_defaults.top_k == 20
    _, server = configs_from_args(_parse(register_serve, ["serve", "--model", str(tmp_path), "--device", "cpu",
                                                          "--generation-config", "vllm"]))
    assert server.sampling_defaults == SamplingDefaults()
    gw = gateway_config_from_args(_parse(register_gateway, ["gateway", "--model", str(tmp_path)]))
    assert gw.sampling_defaults.top_k == 20
    gw = gateway_config_from_args(_parse(register_gateway, ["gateway", "--model", str(tmp_path),
                                                            "--generation-config", "vllm"]))
    assert gw.sampling_defaults == SamplingDefaults()


def test_override_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN_LIKE))
    over = '{"temperature": 0.2, "max_new_tokens": 8}'
    _, server = configs_from_args(_parse(register_serve, ["serve", "--model", str(tmp_path), "--device", "cpu",
                                                          "--override-generation-config", over]))
    assert (server.sampling_defaults.temperature, server.sampling_defaults.max_tokens,
            server.sampling_defaults.top_k) == (0.2, 8, 20)          # over the file's, the rest kept
    _, server = configs_from_args(_parse(register_serve, ["serve", "--model", str(tmp_path), "--device", "cpu",
                                                          "--generation-config", "vllm",
                                                          "--override-generation-config", over]))
    assert server.sampling_defaults == SamplingDefaults(temperature=0.2, max_tokens=8)   # over the API's
    gw = gateway_config_from_args(_parse(register_gateway, ["gateway", "--model", str(tmp_path),
                                                            "--override-generation-config", over]))
    assert gw.sampling_defaults == SamplingDefaults(temperature=0.2, top_p=0.8, top_k=20,
                                                   repetition_penalty=1.05, max_tokens=8)
    for bad in ('{"temperature": 9}', '{"top_k": 2.5}', '{"colour": 1}', "[1]", "{nope"):
        with pytest.raises(SystemExit) as exit_:
            _parse(register_serve, ["serve", "--model", str(tmp_path), "--override-generation-config", bad])
        assert exit_.value.code == 2
