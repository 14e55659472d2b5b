"""Kernel builds: compiled once per source, flags and CPU; a failing compiler is a clear error."""

from __future__ import annotations

import ctypes

import pytest

from tandem.kernels.build import KernelBuildConfig, KernelBuildError, build, library_path, load


def test_compiles_once_and_reuses_the_library(tmp_path):
    src = tmp_path / "add.c"
    src.write_text("int add(int a, int b) { return a + b; }\n")
    cfg = KernelBuildConfig(cache_dir=tmp_path / "cache")
    first = build(src, cfg)
    mtime = first.stat().st_mtime_ns
    assert build(src, cfg) == first and first.stat().st_mtime_ns == mtime
    assert load(src, cfg).add(2, 3) == 5
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.name]  # no temporary left
    src.write_text("int add(int a, int b) { return a + b + 1; }\n")     # a new source: a new library
    assert library_path(src, cfg) != first
    lib = ctypes.CDLL(str(build(src, cfg)))
    assert lib.add(2, 3) == 6


def test_compiler_errors_are_reported(tmp_path):
    src = tmp_path / "bad.c"
    src.write_text("int broken( {\n")
    with pytest.raises(KernelBuildError, match="failed"):
        build(src, KernelBuildConfig(cache_dir=tmp_path))
    with pytest.raises(KernelBuildError, match="nonexistent"):
        build(src, KernelBuildConfig(cache_dir=tmp_path, compiler="/nonexistent/cc"))
    assert not list(tmp_path.glob("*.so"))


def test_a_changed_header_beside_the_source_makes_a_new_library(tmp_path):
    (tmp_path / "one.h").write_text("#define ONE 1\n")
    src = tmp_path / "inc.c"
    src.write_text('#include "one.h"\nint one(void) { return ONE; }\n')
    cfg = KernelBuildConfig(cache_dir=tmp_path / "cache")
    assert load(src, cfg).one() == 1
    (tmp_path / "one.h").write_text("#define ONE 2\n")
    assert load(src, cfg).one() == 2
