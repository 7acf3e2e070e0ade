"""Autotuning, ``pf.compile(..., tune=K)`` (``polyfuse/runtime/tuning.py``), exercised on the C target."""

import json

import numpy as np
import pytest

import polyfuse as pf
from polyfuse.cost.search import Limits, TileSearch, ranked_tiles
from polyfuse.runtime import tuning

N, M, KK = pf.params("N M K")


@pf.program
def scaled_gemm(A: pf.f32[N, KK], B: pf.f32[KK, M], C: pf.f32[N, M]):
    """C += 2 A @ B through a scalar accumulator whose store reads C's old value: ``accumulators.py`` does
    not forward it, so its tiles are searched (gemm's micro-tile has nothing to tune)."""
    for i in range(N):
        for j in range(M):
            acc = 0.0
            for k in range(KK):
                acc += A[i, k] * B[k, j]
            C[i, j] = 2.0 * acc + C[i, j]


GEMM = scaled_gemm
SIZES = {"N": 48, "M": 48, "K": 24}  # enough work for a parallel kernel (tiny work runs serially, untuned)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYFUSE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tuning"


def _model_best(prog, target, sizes, k):
    search = TileSearch(prog, target, sizes, Limits())
    sched = pf.schedule(prog, target=target, params=sizes, tile_search=search)
    return ranked_tiles(search, [kern.statements for kern in sched.kernels], k)


def _inputs(rng):
    n, m, k = SIZES["N"], SIZES["M"], SIZES["K"]
    return {"A": rng.random((n, k), dtype=np.float32), "B": rng.random((k, m), dtype=np.float32),
            "C": np.zeros((n, m), np.float32)}


def test_tune_picks_a_model_candidate_caches_it_and_reuses_it_without_timing(cache):
    best = _model_best(GEMM, "c", SIZES, 3)
    assert len(best) == 3 and best[0]["S1"] == pf.schedule(GEMM, target="c", params=SIZES).kernels[0].tile_sizes

    timed = tuning.STATS.timed
    exe = pf.compile(GEMM, target="c", tune=3, params=SIZES)
    assert tuning.STATS.timed == timed + 3
    (kernel,) = exe.schedule.kernels
    assert kernel.tile_sizes in [spec["S1"] for spec in best]
    assert any(n.startswith("autotuning (tune=3): chose candidate") for n in exe.schedule.notes)
    assert "ms median" in exe.schedule.explain()

    args, want = _inputs(np.random.default_rng(1)), _inputs(np.random.default_rng(1))
    exe(**args)
    pf.reference(GEMM)(**want)
    np.testing.assert_allclose(args["C"], want["C"], rtol=1e-5)

    (path,) = cache.glob("*.json")
    record = json.loads(path.read_text())
    assert record["format"] == tuning.FORMAT and record["k"] == 3 and record["sizes"] == SIZES
    assert [tuple(c["tile"]["S1"]) for c in record["candidates"]] == [spec["S1"] for spec in best]
    assert all(c["seconds"] > 0 for c in record["candidates"])
    assert tuple(record["candidates"][record["winner"]]["tile"]["S1"]) == kernel.tile_sizes

    # same key (at compile time, and at call time without params): the winner is reused, nothing timed
    hits = tuning.STATS.cache_hits
    again = pf.compile(GEMM, target="c", tune=3, params=SIZES)
    assert again.schedule.kernels[0].tile_sizes == kernel.tile_sizes
    assert any("from the tuning cache, nothing timed" in n for n in again.schedule.notes)
    lazy = pf.compile(GEMM, target="c", tune=3)
    args = _inputs(np.random.default_rng(1))
    lazy(**args)
    np.testing.assert_allclose(args["C"], want["C"], rtol=1e-5)
    assert tuning.STATS.timed == timed + 3 and tuning.STATS.cache_hits == hits + 2
    assert list(cache.glob("*.json")) == [path]


def test_a_corrupt_cache_entry_is_retuned(cache):
    sizes = {"N": 40, "M": 40, "K": 16}  # (parallel: tiny work runs serially, with nothing to tune)
    path = tuning.tuning_path(GEMM, "c", sizes, 2, {})
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    hits = tuning.STATS.cache_hits
    exe = pf.compile(GEMM, target="c", tune=2, params=sizes)
    assert tuning.STATS.cache_hits == hits
    record = json.loads(path.read_text())
    assert record["k"] == 2 and record["candidates"][record["winner"]]["tile"]["S1"] == list(exe.schedule.kernels[0].tile_sizes)


@pytest.mark.skipif(pf.compile.__wrapped__.__globals__["cuda_runtime"] is not None
                    and pf.compile.__wrapped__.__globals__["cuda_runtime"].available(), reason="a GPU is usable here")
def test_cuda_tuning_without_a_gpu_is_unavailable():
    with pytest.raises(pf.RuntimeUnavailable, match="autotuning times candidates on a GPU: "):
        pf.compile(GEMM, target="cuda", tune=2, params=SIZES)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_bad_tune_values_are_rejected(bad):
    with pytest.raises(pf.PolyfuseError, match="tune must be a number of candidates"):
        pf.compile(GEMM, target="c", tune=bad)


def test_tune_leaves_the_tile_sizes_to_itself():
    with pytest.raises(pf.PolyfuseError, match="leave tile='auto'"):
        pf.compile(GEMM, target="c", tune=2, tile=(8, 8))
    assert pf.compile(GEMM, target="c", tune=0).tune == 0
    assert pf.compile(GEMM, target="c", tune=None).tune == 0


def test_tuning_needs_every_size(cache):
    with pytest.raises(pf.PolyfuseError, match="missing K"):
        pf.compile(GEMM, target="c", tune=2, params={"N": 8, "M": 8})
