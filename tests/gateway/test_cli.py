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
