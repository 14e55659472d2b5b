"""The package's layers import downward only (docs/architecture.md): a module may import its own
package and the packages listed below it, never one above. Lazy imports inside functions count."""

from __future__ import annotations

import ast
from pathlib import Path

import tandem

ROOT = Path(tandem.__file__).parent

# package -> the tandem packages it may import (besides itself)
BASE = {"types", "errors", "config"}
ALLOWED = {
    "types": {"errors"},
    "errors": set(),
    "config": set(),
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
    # the fleet simulator drives the router's policies, the planner and the engine's prefill order
    "sim": BASE | {"kv", "router", "planner", "engine"},
}
# the serving layers may import anything below them, but not the demo's training code
SERVING = ("server", "gateway", "launcher")


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        out.update(n.split(".")[1] for n in names if n.startswith("tandem."))
    return out


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


def test_serving_never_imports_training_code_and_server_never_imports_the_gateway():
    wrong = []
    for path in ROOT.rglob("*.py"):
        pkg = _package_of(path)
        deps = _imports(path)
        if pkg in SERVING and "demo" in deps:
            wrong.append(f"{path.relative_to(ROOT.parent)} imports tandem.demo")
        if pkg == "server" and deps & {"gateway", "launcher"}:
            wrong.append(f"{path.relative_to(ROOT.parent)} imports {sorted(deps & {'gateway', 'launcher'})}")
    assert not wrong, "\n".join(sorted(wrong))
