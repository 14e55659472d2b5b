"""Fixtures of the multi-host tests: each process on a test host of its own (a network namespace
with its own address on a bridge, tandem/testing/netns.py), started through
tandem/testing/hosts.py.

- `net`: a Network (bridge + hosts added by the test with `net.add_host(name)`), removed after
  the test. Skips, with the reason, where namespaces cannot be made (not root, no iproute2);
  with TANDEM_REQUIRE_NETNS=1 (CI, which runs as root) that is a failure instead.
- `cluster`: a HostCluster on `net` (logs under the test's tmp_path); every process is stopped
  after the test, before the network goes.
- `model`: the tiny test checkpoint (one per session); `reference(prompt, max_tokens)`: the
  greedy completion of one engine in this process, to compare with what the hosts answer.
"""

from __future__ import annotations

import os
import threading

import pytest

from tandem.config import CacheConfig, EngineConfig, ModelConfig
from tandem.engine.llm import LLM
from tandem.testing import netns
from tandem.testing.hosts import HostCluster
from tandem.testing.tiny_model import write_test_model
from tandem.types import SamplingParams


@pytest.fixture(scope="session")
def model(tmp_path_factory) -> str:
    return str(write_test_model(tmp_path_factory.mktemp("hosts-model"), "LlamaForCausalLM", seed=1))


@pytest.fixture
def net():
    reason = netns.unavailable()
    if reason is not None:
        if os.environ.get("TANDEM_REQUIRE_NETNS") == "1":
            pytest.fail(f"TANDEM_REQUIRE_NETNS=1 but {reason}")
        pytest.skip(reason)
    network = netns.Network.open()
    try:
        yield network
    finally:
        network.close()


@pytest.fixture
def cluster(net, tmp_path, model):
    c = HostCluster(net, tmp_path / "logs", model)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def reference(model):
    """reference(prompt_ids, max_tokens) -> (text, token ids) of one engine, greedy, ignore_eos."""
    llm = LLM(EngineConfig(model=ModelConfig(path=model, dtype="float32", show_progress=False),
                           cache=CacheConfig(num_blocks=256)))
    memo: dict[tuple, tuple[str, list[int]]] = {}
    lock = threading.Lock()     # tests call it from their client threads; the engine is not shared

    def complete(prompt: list[int], max_tokens: int) -> tuple[str, list[int]]:
        key = (tuple(prompt), max_tokens)
        with lock:
            if key not in memo:
                out = llm.generate([prompt], SamplingParams(max_tokens=max_tokens, temperature=0.0,
                                                            ignore_eos=True))[0]
                memo[key] = (out.text, out.token_ids)
            return memo[key]

    yield complete
    llm.shutdown()
