"""Differential fuzzing: random affine programs (``strategies.py``), compiled to C under the fusion policies
and tilings and compared with ``pf.reference``; their CUDA code compiled by nvcc in one batch and run
through the CPU emulation of ``tests/test_codegen_cuda.py``.

Two slices, each split into shards so ``pytest -n 2`` runs them in parallel (every shard draws its own
programs: its digest salt differs):

* CI (always collected): ``FUZZ_CI_N`` programs (default 200), with ``max_statements=4``, each compiled
  under **one** ``(fusion, tile)`` drawn for it (the policies rotate over the programs rather than all
  eight per program: that keeps the slice within its time budget), plus ``FUZZ_CI_CUDA_N`` programs
  (default 40) through nvcc and the emulation. Profile ``polyfuse-ci``: derandomized, no deadline.
* full (``-m slow``, ``make fuzz``): ``FUZZ_N`` programs (default 2000), every program under all eight
  ``(fusion, tile)`` C variants and through ``pf.compile`` once, and a quarter of them through nvcc.
  Profile ``polyfuse-fuzz`` (random unless ``FUZZ_SEED`` is set; ``FUZZ_DERANDOMIZE=1`` to fix it).

A failing C program is shrunk by hypothesis and written to ``tests/regressions/`` by
:func:`harness.save_regression` during hypothesis' final replay of the minimal example. CUDA failures are
found after a batch compile, so they are saved unshrunk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context

from tests.fuzz import harness
from tests.fuzz.strategies import programs, run_settings

CI_N = int(os.environ.get("FUZZ_CI_N", "200"))
CI_CUDA_N = int(os.environ.get("FUZZ_CI_CUDA_N", "40"))
FULL_N = int(os.environ.get("FUZZ_N", "2000"))
SHARDS = 4

_common = dict(deadline=None, database=None, print_blob=False,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.register_profile("polyfuse-ci", derandomize=True, **_common)
settings.register_profile("polyfuse-fuzz", derandomize=os.environ.get("FUZZ_DERANDOMIZE") == "1", **_common)

configs = st.tuples(st.sampled_from(harness.FUSIONS), st.sampled_from(harness.TILES))


def _is_final() -> bool:
    try:
        return current_build_context().is_final
    except Exception:
        return False


def _check(program, run, chosen, through_compile=None) -> None:
    sizes = {k: run[k] for k in program.params}
    try:
        harness.check_source(program.source, sizes, run["seed"], chosen, through_compile=through_compile)
    except Exception as e:
        if _is_final():
            path = harness.save_regression(program.source, sizes, run["seed"], e)
            e.add_note(f"saved as regression test {path}")
        raise


def _salted(test, salt: str):
    """Give a shard its own derandomized seed (hypothesis hashes the test function plus this digest)."""
    test.hypothesis.inner_test._hypothesis_internal_add_digest = salt.encode()
    return test


def _ci_shard(k: int):
    @settings(settings.get_profile("polyfuse-ci"), max_examples=max(1, CI_N // SHARDS))
    @given(program=programs(max_statements=4), run=run_settings(), config=configs)
    def test(program, run, config):
        _check(program, run, [config])

    return _salted(test, f"ci-{k}")


def _full_shard(k: int):
    seed = os.environ.get("FUZZ_SEED")

    @settings(settings.get_profile("polyfuse-fuzz"), max_examples=max(1, FULL_N // SHARDS))
    @given(program=programs(), run=run_settings(), config=configs)
    def test(program, run, config):
        _check(program, run, harness.ALL_CONFIGS, through_compile=config)

    test = pytest.mark.slow(_salted(test, f"full-{k}"))
    if seed is not None:
        from hypothesis import seed as fix_seed

        test = fix_seed(int(seed) * SHARDS + k)(test)
    return test


test_fuzz_c_0, test_fuzz_c_1, test_fuzz_c_2, test_fuzz_c_3 = (_ci_shard(k) for k in range(SHARDS))
test_fuzz_full_0, test_fuzz_full_1, test_fuzz_full_2, test_fuzz_full_3 = (_full_shard(k) for k in range(SHARDS))


# ----- CUDA: collect, compile once, emulate ---------------------------------------------------------


def _cuda_batch(n: int, salt: str, profile: str, per_program: int, tmp_path: Path) -> None:
    cases: list[harness.CudaCase] = []

    @settings(settings.get_profile(profile), max_examples=max(1, n))
    @given(program=programs(max_statements=4), run=run_settings(), chosen=st.lists(configs, min_size=per_program, max_size=per_program, unique=True))
    def collect(program, run, chosen):
        prog = harness.load_source(program.source)
        sizes = {k: run[k] for k in prog.params}
        cases.append(harness.CudaCase(f"p{len(cases)}", program.source, prog, sizes, run["seed"], harness.cuda_variants(prog, chosen)))

    _salted(collect, salt)()
    failures = harness.nvcc_failures(cases, tmp_path)
    failures.update({k: v for k, v in harness.emulate_cases([c for c in cases if c.key not in failures], tmp_path).items()})
    saved = []
    for c in cases:
        if c.key in failures:
            saved.append(harness.save_regression(c.source, c.sizes, c.seed, failures[c.key], kind="cuda"))
    assert not failures, f"{len(failures)} of {len(cases)} programs failed on CUDA (saved: {saved}): {failures}"


def test_fuzz_cuda(tmp_path) -> None:
    _cuda_batch(CI_CUDA_N, "cuda-ci", "polyfuse-ci", 1, tmp_path)


@pytest.mark.slow
def test_fuzz_cuda_full(tmp_path) -> None:
    _cuda_batch(max(1, FULL_N // 4), "cuda-full", "polyfuse-fuzz", 2, tmp_path)
