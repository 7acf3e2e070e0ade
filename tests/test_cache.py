"""The compile cache: a hit runs no compiler, a corrupt entry is rebuilt, concurrent builders all succeed."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from polyfuse.errors import CodegenError
from polyfuse.runtime import cache, cpu

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")


def source(tag: str) -> str:
    """A tiny distinct translation unit per test, so tests never share entries."""
    return f"int polyfuse_cache_test_{tag}(int x) {{ return x + {len(tag)}; }}\n"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("POLYFUSE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def compiler_runs(monkeypatch) -> list[Path]:
    """Every output path the compiler is asked to produce, in order."""
    runs: list[Path] = []
    real = cpu.build_shared_library

    def counting(src, output, cc, flags):
        runs.append(output)
        real(src, output, cc, flags)

    monkeypatch.setattr(cpu, "build_shared_library", counting)
    return runs


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("POLYFUSE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "polyfuse"
    monkeypatch.setenv("POLYFUSE_CACHE_DIR", str(tmp_path / "x"))
    assert cache.cache_dir() == tmp_path / "x"


def test_cache_key_depends_on_every_part():
    assert cache.cache_key("a", "b") != cache.cache_key("ab", "")
    assert cache.cache_key("code", "gcc 12", "-O3") != cache.cache_key("code", "gcc 12", "-O2")


def test_hit_avoids_recompilation(cache_dir, compiler_runs):
    lib = cpu.load_library(source("hit"))
    assert lib.polyfuse_cache_test_hit(1) == 4
    assert len(compiler_runs) == 1
    entries = list(cache_dir.glob("*.so"))
    assert len(entries) == 1
    before = entries[0].stat().st_mtime_ns
    again = cpu.load_library(source("hit"))
    assert again.polyfuse_cache_test_hit(2) == 5
    assert len(compiler_runs) == 1 and entries[0].stat().st_mtime_ns == before
    cpu.load_library(source("other"))
    assert len(compiler_runs) == 2


def test_corrupt_entry_is_rebuilt(cache_dir, compiler_runs):
    # Corrupt the entry before this process maps it: a library already loaded is never re-read from disk.
    entry = cpu.library_path(source("corrupt"))
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"\x7fELF truncated by a crash")
    lib = cpu.load_library(source("corrupt"))
    assert lib.polyfuse_cache_test_corrupt(0) == 7
    assert len(compiler_runs) == 1 and cache.STATS.rebuilt_corrupt >= 1
    assert entry.stat().st_size > 1000


def test_extra_flags_reach_the_compiler_and_the_cache_key(cache_dir, compiler_runs, monkeypatch):
    """``$POLYFUSE_CFLAGS``: its words are appended to the compiler's flags, and a library built with other
    flags is another cache entry (never a stale hit)."""
    text = "int polyfuse_cache_test_flags(void) { return PF_TEST_VALUE; }\n"
    monkeypatch.setenv(cpu.EXTRA_FLAGS_VARIABLE, "-DPF_TEST_VALUE=3")
    assert cpu.compiler_flags(cpu.compiler())[-1] == "-DPF_TEST_VALUE=3"
    assert cpu.load_library(text).polyfuse_cache_test_flags() == 3
    monkeypatch.setenv(cpu.EXTRA_FLAGS_VARIABLE, "-DPF_TEST_VALUE=4 -O2")
    assert cpu.load_library(text).polyfuse_cache_test_flags() == 4
    assert len(compiler_runs) == 2
    monkeypatch.setenv(cpu.EXTRA_FLAGS_VARIABLE, "-fno-such-flag-polyfuse")
    with pytest.raises(CodegenError, match="fno-such-flag-polyfuse"):
        cpu.load_library(text)


def test_compiler_error_is_a_codegen_error_with_stderr(cache_dir):
    with pytest.raises(CodegenError, match="undeclared|error"):
        cpu.load_library("int f(void) { return undeclared_name; }\n")
    assert not list(cache_dir.glob("*.so")) and not list(cache_dir.glob(".*"))


def _compile_in_child(args: tuple[str, str]) -> int:
    directory, text = args
    os.environ["POLYFUSE_CACHE_DIR"] = directory
    return cpu.load_library(text).polyfuse_cache_test_concurrent(10)


def test_concurrent_processes_all_succeed(cache_dir):
    text = source("concurrent")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_compile_in_child, [(str(cache_dir), text)] * 4)
    assert results == [20] * 4
    assert len(list(cache_dir.glob("*.so"))) == 1
    assert not list(cache_dir.glob(".*"))  # no temporary file left behind
