"""The cluster roles' command lines (tandem/launcher/role_commands.py): exact argv, and every
tandem argv parses with tandem's own CLI into the values it was built from."""

from __future__ import annotations

from tandem.cli import build_parser
from tandem.launcher.role_commands import GatewayCommand, MasterCommand, RedisCommand, WorkerCommand


def test_a_prefill_worker_registers_and_serves_its_kv_on_its_own_address():
    cmd = WorkerCommand(model="/m", role="prefill", host="10.0.0.7", gateway="http://gw:8000",
                        kv_store="mooncake://master:50051", options=("--device", "cpu"))
    assert cmd.argv() == ["serve", "--model", "/m", "--role", "prefill", "--host", "10.0.0.7",
                          "--port", "8100", "--log-level", "info", "--device", "cpu",
                          "--kv-transport", "tcp", "--kv-transfer-port", "7100",
                          "--kv-store", "mooncake://master:50051", "--gateway", "http://gw:8000"]
    args = build_parser("serve").parse_args(cmd.argv())
    assert (args.role, args.host, args.port, args.gateway, args.kv_transport, args.kv_transfer_port,
            args.kv_store, args.device) == ("prefill", "10.0.0.7", 8100, "http://gw:8000", "tcp", 7100,
                                            "mooncake://master:50051", "cpu")


def test_a_worker_of_role_both_has_no_handoff_transport():
    argv = WorkerCommand(model="/m", role="both", host="10.0.0.7").argv()
    assert "--kv-transport" not in argv and "--kv-transfer-port" not in argv


def test_a_gateway_without_a_queue_url_runs_without_a_queue_unless_its_options_name_one():
    base = dict(model="/m", host="10.0.0.2", served_model_name="m", prefill=("http://p:8100",),
                decode=("http://d:8100",))
    argv = GatewayCommand(**base).argv()
    assert argv == ["gateway", "--model", "/m", "--host", "10.0.0.2", "--port", "8000",
                    "--served-model-name", "m", "--log-level", "info", "--prefill", "http://p:8100",
                    "--decode", "http://d:8100", "--no-queue"]
    assert build_parser("gateway").parse_args(argv).no_queue
    with_queue = GatewayCommand(**base, queue_url="redis://r:6379/0").argv()
    assert with_queue[-2:] == ["--queue-url", "redis://r:6379/0"] and "--no-queue" not in with_queue
    assert build_parser("gateway").parse_args(with_queue).queue_url == "redis://r:6379/0"
    in_options = GatewayCommand(**base, options=("--queue-url", "redis://r:6379/0")).argv()
    assert "--no-queue" not in in_options


def test_master_and_redis_bind_the_given_address_only():
    assert MasterCommand(host="10.0.0.9").argv() == [
        "--rpc_address=10.0.0.9", "--rpc_port=50051", "--metrics_host=10.0.0.9", "--metrics_port=50052"]
    assert RedisCommand(host="10.0.0.9", data_dir="/data").argv() == [
        "--bind", "10.0.0.9", "--port", "6379", "--save", "", "--appendonly", "no",
        "--protected-mode", "no", "--dir", "/data"]
