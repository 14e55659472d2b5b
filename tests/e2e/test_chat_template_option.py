"""--chat-template end to end: a model directory without a chat template, served by `tandem serve`
(the template inline) and by `tandem up` (a file named relative to where it starts, passed on to
the gateway, which renders prompts, and to every worker), prompts checked token for token against
transformers' rendering with the same template."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from tandem.launcher.cluster import free_port
from tandem.testing.server_process import stop, tandem_up, wait_healthy
from tandem.testing.tiny_model import write_test_model

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = ("{% for m in messages %}<<{{ m.role }}>>{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}<<assistant>>{% endif %}")
CHAT = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Capital of France?"}]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def bare_model(tmp_path_factory) -> Path:
    model = Path(write_test_model(tmp_path_factory.mktemp("bare") / "bare-llama", "LlamaForCausalLM", seed=3))
    (model / "chat_template.jinja").unlink()
    return model


@pytest.fixture(scope="module")
def expected_ids(bare_model) -> list[int]:
    hf = transformers.AutoTokenizer.from_pretrained(str(bare_model))
    out = hf.apply_chat_template(CHAT, chat_template=TEMPLATE, tokenize=True, add_generation_prompt=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def serve(model: Path, *extra: str):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "serve", "--model", str(model), "--port", str(port),
         "--threads", "1", "--device", "cpu", "--dtype", "float32", "--kv-cache-memory", "16MiB",
         "--served-model-name", "m", "--log-level", "warning", *extra],
        cwd=REPO, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, 120)
    return proc, url


def test_serve_without_a_template_says_which_option_to_use(bare_model):
    proc, url = serve(bare_model)
    try:
        r = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": CHAT, "max_tokens": 4},
                       timeout=60)
        assert r.status_code == 400
        assert "--chat-template" in r.json()["error"]["message"]
        ok = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": "Hello", "max_tokens": 2},
                        timeout=60)
        assert ok.status_code == 200    # completions need no template
    finally:
        stop(proc)


def test_serve_with_an_inline_template(bare_model, expected_ids):
    proc, url = serve(bare_model, "--chat-template", TEMPLATE)
    try:
        r = httpx.post(url + "/tokenize", json={"model": "m", "messages": CHAT}, timeout=60)
        assert r.status_code == 200 and r.json()["tokens"] == expected_ids
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        out = client.chat.completions.create(model="m", messages=CHAT, max_tokens=4, temperature=0)
        assert out.usage.prompt_tokens == len(expected_ids) and out.usage.completion_tokens == 4
    finally:
        stop(proc)


def test_up_passes_a_relative_template_file_to_the_gateway_and_workers(bare_model, expected_ids, tmp_path):
    (tmp_path / "tpl.jinja").write_text(TEMPLATE)
    port = free_port()
    with tandem_up(["--model", str(bare_model), "--prefill", "1", "--decode", "1", "--port", str(port),
                    "--ready-timeout", "180", "--chat-template", "tpl.jinja",
                    "--worker-arg=--kv-cache-memory=16MiB", "--worker-arg=--dtype=float32",
                    "--worker-arg=--served-model-name=m", "--gateway-arg=--served-model-name=m"],
                   cwd=tmp_path, env=ENV):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0,
                               timeout=120)
        for _ in range(2):   # the second turn's prompt is a prefix-cache hit on the workers
            out = client.chat.completions.create(model="m", messages=CHAT, max_tokens=4, temperature=0)
            assert out.usage.prompt_tokens == len(expected_ids) and out.usage.completion_tokens == 4
