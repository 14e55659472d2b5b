"""`tandem gateway` flags -> GatewayConfig."""


def test_gateway_flags_build_config():
    import argparse

    from tandem.cli.gateway import gateway_config_from_args, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["gateway", "--prefill", "http://a:1", "--decode", "http://b:2",
                              "--worker", "c:3", "--policy", "prefix_aware", "--decode-policy",
                              "token_aware", "--max-waiting", "7", "--port", "9000"])
    cfg = gateway_config_from_args(args)
    assert (cfg.prefill, cfg.decode, cfg.workers) == (("http://a:1",), ("http://b:2",), ("c:3",))
    assert (cfg.policy, cfg.decode_policy, cfg.port, cfg.admission.max_waiting) == \
        ("prefix_aware", "token_aware", 9000, 7)
    assert cfg.local_prefill_tokens == 0 and cfg.allowed_origins == ("*",)
    args = parser.parse_args(["gateway", "--prefill", "http://a:1", "--decode", "http://b:2",
                              "--local-prefill-tokens", "256", "--allowed-origins", "http://ui:3000"])
    assert gateway_config_from_args(args).local_prefill_tokens == 256
    assert gateway_config_from_args(args).allowed_origins == ("http://ui:3000",)
    assert gateway_config_from_args(args).placement.keep_prefix is False
    args = parser.parse_args(["gateway", "--placement-keep-prefix"])
    assert gateway_config_from_args(args).placement.keep_prefix is True


def test_gateway_parser_flags_reach_its_config():
    import argparse

    from tandem.cli.gateway import gateway_config_from_args, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="verb"))
    cfg = gateway_config_from_args(parser.parse_args(["gateway"]))
    assert (cfg.tool_call_parser, cfg.reasoning_parser, cfg.constrain_auto_tool_calls, cfg.tool_call_guard) \
        == ("auto", None, True, True)
    cfg = gateway_config_from_args(parser.parse_args(
        ["gateway", "--tool-call-parser", "mistral", "--reasoning-parser", "deepseek_r1",
         "--no-auto-tool-grammar", "--no-tool-call-guard"]))
    assert (cfg.tool_call_parser, cfg.reasoning_parser, cfg.constrain_auto_tool_calls, cfg.tool_call_guard) \
        == ("mistral", "deepseek_r1", False, False)


def test_fair_queue_flags_reach_the_config_and_bad_values_are_usage_errors():
    import argparse

    import pytest

    from tandem.cli.gateway import gateway_config_from_args, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="verb"))
    cfg = gateway_config_from_args(parser.parse_args(["gateway"]))
    assert cfg.fair_queue.enabled and cfg.admission.max_tokens is None
    cfg = gateway_config_from_args(parser.parse_args(
        ["gateway", "--fair-queue-max-requests", "5", "--fair-queue-max-tokens", "9000",
         "--fair-queue-max-wait", "2.5", "--fair-queue-aging", "3", "--tenant-weight", "key-0=2",
         "--tenant-weight", "acct=team=0.5", "--max-inflight-tokens-per-worker", "4096"]))
    fq = cfg.fair_queue
    assert (fq.max_requests, fq.max_tokens, fq.max_wait_s, fq.aging_s) == (5, 9000, 2.5, 3.0)
    assert fq.weight("key-0") == 2.0 and fq.weight("acct=team") == 0.5 and fq.weight("other") == 1.0
    assert cfg.admission.max_tokens == 4096
    assert not gateway_config_from_args(parser.parse_args(["gateway", "--no-fair-queue"])).fair_queue.enabled
    for bad, said in ((["--tenant-weight", "key-0"], "TENANT=W"), (["--tenant-weight", "key-0=-1"], "TENANT=W"),
                      (["--fair-queue-max-requests", "0"], "max_requests"),
                      (["--fair-queue-max-wait", "0"], "max_wait_s"),
                      (["--max-inflight-tokens-per-worker", "0"], "at least 1")):
        with pytest.raises(SystemExit, match=said):
            gateway_config_from_args(parser.parse_args(["gateway", *bad]))
