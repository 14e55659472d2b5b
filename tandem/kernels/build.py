"""Compile a C source shipped with the package into a shared library, once per machine.

The library is cached under a name derived from the source (and the headers beside it, which it
may include), the compiler command and the CPU's
feature flags (`-march=native` code must not run on another CPU), so a cache shared by several
machines never hands one of them code it cannot execute. Concurrent builders are safe: each
writes a private temporary file and renames it into place.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-fPIC", "-shared", "-std=gnu11")


class KernelBuildError(RuntimeError):
    """The C compiler is missing or failed; the message carries its output."""


@dataclass(frozen=True)
class KernelBuildConfig:
    cache_dir: Path | None = None            # default ~/.cache/tandem/kernels
    compiler: str | None = None              # default: the first of cc, gcc, clang on PATH
    flags: tuple[str, ...] = DEFAULT_FLAGS


def _cpu_signature() -> str:
    """The CPU's feature flags (Linux), or the machine name elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler(cfg: KernelBuildConfig) -> str:
    if cfg.compiler:
        return cfg.compiler
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    raise KernelBuildError("no C compiler found (looked for cc, gcc, clang on PATH)")


def library_path(source: Path, cfg: KernelBuildConfig) -> Path:
    """Where the compiled library of `source` lives for this machine and these flags."""
    cc = _compiler(cfg)
    key = hashlib.sha256()
    headers = [h.read_bytes() for h in sorted(source.parent.glob("*.h"))]
    for part in (source.read_bytes(), *headers, cc.encode(), " ".join(cfg.flags).encode(),
                 _cpu_signature().encode(), platform.machine().encode()):
        key.update(part)
        key.update(b"\0")
    cache = cfg.cache_dir or Path.home() / ".cache" / "tandem" / "kernels"
    return cache / f"{source.stem}-{key.hexdigest()[:16]}.so"


def build(source: Path, cfg: KernelBuildConfig = KernelBuildConfig()) -> Path:
    """The compiled library of `source`, compiling it if this machine has none yet."""
    target = library_path(source, cfg)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = [_compiler(cfg), *cfg.flags, "-o", tmp, str(source), "-lm"]
    try:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise KernelBuildError(f"{' '.join(cmd)}: {e}") from e
        if done.returncode != 0:
            raise KernelBuildError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load(source: Path, cfg: KernelBuildConfig = KernelBuildConfig()) -> ctypes.CDLL:
    """Build (if needed) and load the library of `source`. Import torch first: its OpenMP
    runtime is then the one the library binds to."""
    return ctypes.CDLL(str(build(source, cfg)))
