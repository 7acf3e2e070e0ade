"""The dtypes ``pf.i8``, ``pf.u8``, ``pf.i16`` and ``pf.i64`` in the DSL: arithmetic in the element type, wrapping
as numpy's does (the reference interpreter), and the compiled C agreeing exactly, overflowing values included.
(In the C frontend, C's integer promotion makes such operations ``int`` ones: see ``tests/test_c_vs_gcc.py``.)"""

from __future__ import annotations

import numpy as np

import polyfuse as pf

N = pf.params("N")


@pf.program
def narrow(A: pf.i8[N], B: pf.i8[N], C: pf.i8[N], U: pf.u8[N], V: pf.u8[N], H: pf.i16[N], L: pf.i64[N]):
    for i in range(N):
        C[i] = (A[i] * B[i]) // 3 + A[i] % 5 - pf.max(A[i], B[i]) * 2
        V[i] = (U[i] + U[i]) // 2
        H[i] = H[i] * H[i] + 7
        L[i] = L[i] * 3000000 + pf.abs(L[i]) // 7


def _arguments(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 40
    return {"A": rng.integers(-128, 128, n).astype(np.int8), "B": rng.integers(-128, 128, n).astype(np.int8),
            "C": np.zeros(n, np.int8), "U": rng.integers(0, 256, n).astype(np.uint8), "V": np.zeros(n, np.uint8),
            "H": rng.integers(-32768, 32768, n).astype(np.int16), "L": rng.integers(-2**40, 2**40, n).astype(np.int64)}


def test_dtypes_are_exported_and_printed() -> None:
    assert [pf.i8.name, pf.u8.name, pf.i16.name, pf.i64.name] == ["i8", "u8", "i16", "i64"]
    assert "A          i8[N]  input" in str(narrow) and "L          i64[N]  inout" in str(narrow)


def test_reference_wraps_like_numpy() -> None:
    args = _arguments(0)
    a, b, u, h, ell = (args[k].copy() for k in "ABUHL")
    with np.errstate(all="ignore"):
        want_c = (a * b) // np.int8(3) + a % np.int8(5) - np.maximum(a, b) * np.int8(2)
        want_v = (u + u) // np.uint8(2)
        want_h = h * h + np.int16(7)
        want_l = ell * np.int64(3000000) + np.abs(ell) // np.int64(7)
    pf.reference(narrow)(**args)
    for name, want in (("C", want_c), ("V", want_v), ("H", want_h), ("L", want_l)):
        np.testing.assert_array_equal(args[name], want, err_msg=name)


def test_compiled_c_agrees_exactly_with_the_reference() -> None:
    for seed in (1, 2):
        ref, got = _arguments(seed), _arguments(seed)
        pf.reference(narrow)(**ref)
        pf.compile(narrow, target="c")(**got)
        for name in ref:
            np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
