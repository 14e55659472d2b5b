"""The package's layers import downward only (docs/architecture.md): a module may import its own
package and the packages listed below it, never one above. Lazy imports inside functions count."""

from __future__ import annotations

import ast
from pathlib import Path

import tandem

ROOT = Path(tandem.__file__).parent

# package -> the tandem packages it may import (besides itself)
BASE = {"types", "errors", "config", "cluster_secret", "ports", "compute_threads"}
ALLOWED = {
    "types": {"errors"},
    "errors": set(),
    "config": set(),
    "cluster_secret": set(),
    "ports": set(),
    "compute_threads": set(),
    "kv": BASE,
    "kernels": BASE,
    "layers": BASE | {"kv", "kernels"},
    "models": BASE | {"kv", "kernels", "layers"},
    "tokenization": BASE,
    "grammar": BASE,
    "parsers": BASE,
    "runner": BASE | {"kv", "kernels", "layers", "models", "grammar"},
    "transfer": BASE | {"kv"},
    "kvstore": BASE | {"kv", "layers"},
    "spec": BASE | {"kv", "kernels", "layers", "models", "runner", "tokenization"},
    "engine": BASE | {"kv", "kernels", "layers", "models", "tokenization", "grammar", "runner", "transfer",
               "kvstore", "spec"},
    # the parallel worker builds the engine on rank 0 and runs the runner's forward on every rank
    "parallel": BASE | {"kv", "kernels", "layers", "models", "runner", "tokenization", "grammar", "engine",
                        "transfer", "spec"},
    "router": BASE | {"kv"},
    # the planner's policy reads the router's view of the workers; its driver, the load tracker
    "planner": BASE | {"kv", "router"},
    "http": BASE,
    "asyncq": BASE | {"http"},
    # accounts and tokens, kept in the queue's database through its SQL helpers
    "accounts": BASE | {"asyncq"},
    # rate limits and the usage ledger, in the queue's database (its SQL connection, dialects)
    "usage": BASE | {"asyncq"},
    # the fleet simulator drives the router's policies, the planner and the engine's prefill order
    "sim": BASE | {"kv", "router", "planner", "engine"},
    # a chat turn: its fields read, its tools and structured output made a grammar, its output parsed
    "turn": BASE | {"tokenization", "grammar", "parsers"},
    # the HTTP API over a Backend protocol: it never imports the engine, the gateway or the router
    # tracing: the traceparent header and the tracer (opentelemetry only inside it, when on)
    "tracing": BASE,
    "api": BASE | {"kv", "tokenization", "grammar", "parsers", "turn", "asyncq", "accounts", "usage",
                   "tracing"},
    # a worker process: its engine behind the api routes, and its registration with a gateway
    "worker": BASE | {"http", "api", "engine", "tokenization"},
    "gateway": BASE | {"kv", "api", "http", "models", "planner", "router", "tokenization", "turn",
                       "usage", "tracing"},
    "launcher": BASE | {"kvstore"},
    # the multi-host harness starts the cluster roles with the commands the deployments run
    "testing": BASE | {"layers", "models", "kv", "kernels", "launcher"},
    # the topology runs start `tandem up` and wait for its ready line (launcher.cluster.READY_LINE)
    "bench": BASE | {"engine", "http", "kv", "launcher", "models", "testing", "tokenization"},
}


def _imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "tandem":   # from tandem import cluster_secret
            out.update(f"tandem.{a.name}" for a in node.names)
        out.update([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                   [a.name for a in node.names] if isinstance(node, ast.Import) else [])
    return out


def _imports(path: Path) -> set[str]:
    """The tandem packages `path` imports."""
    return {n.split(".")[1] for n in _imported_modules(path) if n.startswith("tandem.")}


def _package_of(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py")


def test_packages_import_downward_only():
    wrong = []
    for path in ROOT.rglob("*.py"):
        pkg = _package_of(path)
        if pkg not in ALLOWED:
            continue
        for dep in _imports(path) - {pkg}:
            if dep not in ALLOWED[pkg]:
                wrong.append(f"{path.relative_to(ROOT.parent)} imports tandem.{dep}")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_package_never_imports_the_demo_training_code():
    """tandem_demo (training and evaluation of the demo models) sits beside the package and imports it,
    never the reverse."""
    wrong = [f"{path.relative_to(ROOT.parent)} imports {name}" for path in ROOT.rglob("*.py")
             for name in _imported_modules(path) if name.split(".")[0] == "tandem_demo"]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_http_api_never_imports_the_engine_the_gateway_or_the_launcher():
    """tandem/api serves a Backend protocol: the worker's engine and the gateway both plug in below it."""
    wrong = []
    for path in ROOT.rglob("*.py"):
        deps = _imports(path) & {"engine", "gateway", "launcher", "router"}
        if _package_of(path) == "api" and deps:
            wrong.append(f"{path.relative_to(ROOT.parent)} imports {sorted(deps)}")
    assert not wrong, "\n".join(sorted(wrong))
