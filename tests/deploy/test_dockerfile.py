"""The Dockerfile, read statically (no Docker engine here): it installs what `make install` does
(the pins of pyproject.toml and the Makefile, Debian packages that scripts/system-deps.sh names),
on a Python that pyproject.toml accepts; every stage it builds from exists for each VARIANT; what
it copies exists and passes .dockerignore; the image provides the programs the manifests run as
the user they run as."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VARIANTS = ("cpu", "cuda")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(ln for ln in DOCKERFILE.splitlines() if not ln.lstrip().startswith("#")))
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in text.splitlines() if ln.strip()]


def pin(requirements: list[str], name: str) -> str:
    return next(r for r in requirements if re.match(rf"{re.escape(name)}\s*==", r))


def test_the_image_pins_torch_as_pyproject_and_the_makefile_do():
    want = pin(PYPROJECT["project"]["dependencies"], "torch")
    assert f"pip install -q {want}" in (ROOT / "Makefile").read_text()
    installs = [rest for op, rest in instructions() if op == "RUN" and "pip install" in rest and "torch" in rest]
    assert len(installs) == len(VARIANTS)
    assert all(re.findall(r"torch==[\w.+]+", r) == [want] for r in installs), installs


def test_its_python_is_one_pyproject_accepts():
    bases = [rest.split()[0] for op, rest in instructions() if op == "FROM" and rest.startswith("python:")]
    assert bases, "no python:X.Y base image"
    accepts = SpecifierSet(PYPROJECT["project"]["requires-python"])
    for image in bases:
        version = re.match(r"python:(\d+\.\d+)", image).group(1)
        assert accepts.contains(version + ".0"), f"{image}: pyproject.toml requires Python {accepts}"


def test_its_debian_packages_are_ones_system_deps_installs():
    deps = (ROOT / "scripts" / "system-deps.sh").read_text()
    want = set(re.search(r"want=\(([^)]*)\)", deps).group(1).split())
    apt = [rest for op, rest in instructions() if op == "RUN" and "apt-get install" in rest]
    assert apt
    packages = {w for r in apt for w in r.split("apt-get install", 1)[1].split("&&")[0].split()
                if not w.startswith("-")}
    assert packages and packages <= want, packages - want


def test_every_variant_builds_from_a_stage_that_exists():
    ops = instructions()
    stages = {m.group(1) for op, rest in ops if op == "FROM" for m in [re.search(r"\bAS\s+(\S+)", rest, re.I)] if m}
    final = [rest for op, rest in ops if op == "FROM"][-1]
    default = re.search(r"ARG VARIANT=(\w+)", DOCKERFILE).group(1)
    assert default == "cpu"
    for variant in VARIANTS:
        assert final.replace("${VARIANT}", variant) in stages, f"no stage for VARIANT={variant}"


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore's rule: the last pattern matching the path (or a parent) decides."""
    ignored = False
    parts = path.split("/")
    for p in patterns:
        negate, pat = p.startswith("!"), p.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatch("/".join(parts[:i]), pat) for i in range(1, len(parts) + 1)):
            ignored = not negate
    return ignored


def test_what_it_copies_exists_and_is_not_ignored():
    patterns = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    sources = [src for op, rest in instructions() if op == "COPY" for src in rest.split()[:-1]
               if not src.startswith("--")]
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), src
        assert not _ignored(src, patterns), f".dockerignore drops {src}"
    assert _ignored(".venv", patterns) and _ignored(".git", patterns)
    assert not _ignored("tandem/kernels/paged_decode.c", patterns)   # package data pip installs


def test_it_provides_the_programs_and_user_the_manifests_run():
    """`python -m tandem.cli` (tandem installed), `mooncake_master` (a dependency's script), as uid 1000."""
    assert any(op == "RUN" and re.search(r"pip install /tmp/src\b", rest) for op, rest in instructions())
    assert any(d.startswith("mooncake-transfer-engine") for d in PYPROJECT["project"]["dependencies"])
    assert ("USER", "1000") in instructions()
    for manifest in (ROOT / "deploy" / "kubernetes" / "base").glob("*.yaml"):
        for uid in re.findall(r"runAsUser: (\d+)", manifest.read_text()):
            assert uid == "1000" or manifest.name == "redis.yaml", f"{manifest.name}: runAsUser {uid}"
