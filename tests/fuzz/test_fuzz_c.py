"""The fuzzer's C-emitting mode: random C kernels (:mod:`tests.fuzz.c_programs`) through ``pf.from_c``, run by
``pf.reference`` and ``pf.compile(target="c")``, against gcc's build of the same source (:mod:`tests.c_oracle`),
at sizes 1, 2 and 9 (1 and 2 hit the boundary pieces of every truncating division).

``FUZZ_C_N`` kernels (default 8) run always; ``-m slow`` (``make fuzz``) runs ``FUZZ_C_FULL_N`` more
(default 300). A failing seed reproduces with ``c_program(seed)``.
"""

from __future__ import annotations

import os

import pytest

import polyfuse as pf
from polyfuse.runtime import cpu
from tests.c_oracle import check_against_gcc
from tests.fuzz.c_programs import c_arguments, c_program, check_tables

pytestmark = pytest.mark.skipif(not cpu.available(), reason="needs a C compiler")

CI_N = int(os.environ.get("FUZZ_C_N", "8"))
FULL_N = int(os.environ.get("FUZZ_C_FULL_N", "300"))
SIZES = (1, 2, 9)


def check_seed(seed: int) -> None:
    kernel = c_program(seed)
    try:
        prog = pf.from_c(kernel.source, function=kernel.name)
        for n in SIZES:
            check_against_gcc(kernel.source, kernel.name, c_arguments(n, seed), program=prog, compile_c=n != 2)
    except BaseException as e:
        raise AssertionError(f"C fuzz seed {seed} failed ({type(e).__name__}):\n{kernel.source}") from e


def test_generator_tables_are_valid_c() -> None:
    check_tables()


@pytest.mark.parametrize("seed", range(CI_N))
def test_random_c_kernel_matches_gcc(seed: int) -> None:
    check_seed(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(CI_N, CI_N + FULL_N))
def test_random_c_kernel_matches_gcc_full(seed: int) -> None:
    check_seed(seed)
