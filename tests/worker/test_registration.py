"""A worker's registration (Heartbeat) against a real gateway app on 127.0.0.1 (no workers)."""

import asyncio
import socket

import uvicorn

from tandem.gateway.app import build_gateway_app
from tandem.gateway.config import GatewayConfig, RegistryConfig
from tandem.worker.registration import Heartbeat, HeartbeatConfig, advertised_url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_advertised_url():
    assert advertised_url("127.0.0.1", 80) == "http://127.0.0.1:80"
    assert advertised_url("0.0.0.0", 81) == f"http://{socket.gethostname()}:81"
    assert advertised_url("::1", 82) == "http://[::1]:82"


def test_register_heartbeat_drain_deregister():
    async def go():
        port = free_port()
        # http://127.0.0.1:1 answers nothing: the first registration's probe is off here
        cfg = GatewayConfig(registry=RegistryConfig(poll_interval_s=30, heartbeat_interval_s=0.1,
                                                    register_probe_timeout_s=0))
        app = build_gateway_app(cfg, tokenizer=None, model_name="m", max_model_len=64)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
        serving = asyncio.create_task(server.serve())
        registry = app.state.gateway.registry
        try:
            for _ in range(100):
                if server.started:
                    break
                await asyncio.sleep(0.05)
            hb = Heartbeat(HeartbeatConfig(f"127.0.0.1:{port}", "http://127.0.0.1:1", "decode",
                                           interval_s=5.0))
            await hb.start()
            await asyncio.wait_for(hb.registered.wait(), 5)
            w = registry.get("http://127.0.0.1:1")
            assert w.role == "decode" and not w.static and not w.draining
            first = w.last_heartbeat
            for _ in range(50):  # the gateway asked for 0.1 s heartbeats
                await asyncio.sleep(0.05)
                if w.last_heartbeat != first:
                    break
            assert w.last_heartbeat != first
            await hb.drain()
            assert w.draining
            await hb.stop()
            assert registry.get("http://127.0.0.1:1") is None
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, 10)
    asyncio.run(go())


def test_a_refused_registration_is_logged_and_retried(caplog):
    """The gateway cannot reach the advertised address: the worker hears a 400 naming it, logs
    it as an error, and keeps trying; an address the gateway reaches gets in."""
    async def go():
        port = free_port()
        cfg = GatewayConfig(registry=RegistryConfig(poll_interval_s=30, heartbeat_interval_s=0.1))
        app = build_gateway_app(cfg, tokenizer=None, model_name="m", max_model_len=64)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
        serving = asyncio.create_task(server.serve())
        registry = app.state.gateway.registry
        try:
            for _ in range(100):
                if server.started:
                    break
                await asyncio.sleep(0.05)
            closed = f"http://127.0.0.1:{free_port()}"   # nothing listens there
            hb = Heartbeat(HeartbeatConfig(f"127.0.0.1:{port}", closed, "decode", interval_s=0.1))
            await hb.start()
            for _ in range(100):
                if sum("refused to register" in r.message for r in caplog.records) >= 2:
                    break
                await asyncio.sleep(0.05)
            assert not hb.registered.is_set() and registry.all() == []
            assert f"cannot reach worker address {closed}" in hb.refusal
            errors = [r for r in caplog.records if "refused to register" in r.getMessage()]
            assert len(errors) >= 2 and errors[0].levelname == "ERROR"   # retried, said each time
            assert closed in errors[0].getMessage()
            await hb.stop()
            # an address the gateway reaches (its own: any HTTP answer to /health will do)
            ok = Heartbeat(HeartbeatConfig(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}", "decode"))
            await ok.start()
            await asyncio.wait_for(ok.registered.wait(), 5)
            assert ok.refusal is None and registry.get(f"http://127.0.0.1:{port}") is not None
            await ok.stop()
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, 10)
    caplog.set_level("ERROR", logger="tandem.worker.registration")
    asyncio.run(go())


def test_gateway_urls():
    from tandem.worker.registration import gateway_urls
    assert gateway_urls("http://a:1") == ["http://a:1"]
    assert gateway_urls(" http://a:1 , b:2,") == ["http://a:1", "b:2"]
    import pytest
    with pytest.raises(ValueError, match="give a gateway URL"):
        gateway_urls(" , ")


def test_a_worker_registers_with_every_gateway_it_is_given():
    """`--gateway URL1,URL2`: the worker's lifecycle beats to each (two gateways on one queue:
    each must know the worker)."""
    from types import SimpleNamespace

    from tandem.api.config import ServerConfig
    from tandem.worker.process import lifecycle

    async def go():
        ports = [free_port(), free_port()]
        apps, servers, serving = [], [], []
        for port in ports:
            cfg = GatewayConfig(registry=RegistryConfig(poll_interval_s=30, register_probe_timeout_s=0))
            apps.append(build_gateway_app(cfg, tokenizer=None, model_name="m", max_model_len=64))
            servers.append(uvicorn.Server(uvicorn.Config(apps[-1], host="127.0.0.1", port=port,
                                                         log_level="error")))
            serving.append(asyncio.create_task(servers[-1].serve()))

        async def start():
            pass

        engine = SimpleNamespace(start=start, shutdown=start, role="both",
                                 tokenizer=SimpleNamespace(chat_template=None))
        config = ServerConfig(host="127.0.0.1", port=1, gateway_url=",".join(
            f"http://127.0.0.1:{p}" for p in ports))
        beats = []
        startup, shutdown = lifecycle(engine, config, beats=beats)
        try:
            for _ in range(100):
                if all(s.started for s in servers):
                    break
                await asyncio.sleep(0.05)
            await startup()
            assert len(beats) == 2
            await asyncio.wait_for(asyncio.gather(*(hb.registered.wait() for hb in beats)), 5)
            for app in apps:
                assert app.state.gateway.registry.get("http://127.0.0.1:1").role == "both"
            await shutdown()   # deregisters from both
            assert all(app.state.gateway.registry.all() == [] for app in apps)
        finally:
            for s in servers:
                s.should_exit = True
            await asyncio.wait_for(asyncio.gather(*serving), 10)
    asyncio.run(go())
