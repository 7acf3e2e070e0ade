"""The sizes ``fusion="smart"`` rates its candidate schedules at when ``params=`` does not give them all
(``smart.py`` compares their traffic and micro-tiles there): a large representative value for each
size, a small one for the extent of a sliding window, both within the program's assumptions."""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from polyfuse.cost.footprint import fixed_params
from polyfuse.ir.program import Program

REPRESENTATIVE_SIZE = 1024
"""The size given to every param without a value when ``fusion="smart"`` compares traffic."""

REPRESENTATIVE_WINDOW = 3
"""The size given instead to a param without a value that is only the extent of sliding windows (a
convolution's ``KH``, ``KW``): a filter is small, and at 1024 its traffic would dwarf the tensors'."""


def representative_sizes(prog: Program, params: Mapping[str, int]) -> dict[str, int]:
    """The sizes smart fusion compares traffic at: ``params``, and for each size it does not give,
    :data:`REPRESENTATIVE_WINDOW` for a window's extent (:func:`window_params`), else
    :data:`REPRESENTATIVE_SIZE`, or else the largest power of two below it that the program's assumptions
    (with the sizes chosen so far) allow (``assume="C <= 128"``: 128)."""
    sizes = {p: int(params[p]) for p in prog.params if p in params}
    windows = window_params(prog)
    for p in prog.params:
        if p in sizes:
            continue
        if p in windows and not fixed_params(prog, {**sizes, p: REPRESENTATIVE_WINDOW}).is_empty():
            sizes[p] = REPRESENTATIVE_WINDOW
            continue
        value = REPRESENTATIVE_SIZE
        while value >= 1 and fixed_params(prog, {**sizes, p: value}).is_empty():
            value //= 2
        sizes[p] = value if value >= 1 else REPRESENTATIVE_SIZE
    return sizes


def window_params(prog: Program) -> frozenset[str]:
    """The size params that only bound sliding windows: every loop they bound is a reduction loop whose
    iterator is added to an output iterator in some subscript (``x[oh + kh]`` with ``kh < KH`` not in the
    written element: a convolution's filter). Such extents are small in practice."""
    window: set[str] = set()
    other: set[str] = set()
    for st in prog.statements:
        names = st.iterators
        written = _iterators_used(st.write.relation, names)
        slides: set[str] = set()
        for acc in st.reads:
            for dim in _subscript_iterators(acc.relation, names):
                if len(dim) >= 2 and dim & written:
                    slides |= dim - written
        for pos, it in enumerate(names):
            extent = _extent_param(st.domain, pos)
            if extent is not None:
                (window if it in slides else other).add(extent)
    return frozenset(window - other)


def _subscript_iterators(relation: isl.Map, names: tuple[str, ...]) -> list[set[str]]:
    """For each subscript of a single-valued access, the iterators it depends on."""
    fn = isl.PwMultiAff.from_map(relation)
    return [{name for _, aff in fn.get_pw_aff(d).get_pieces() for k, name in enumerate(names)
             if not aff.get_coefficient_val(isl.dim_type.in_, k).is_zero()}
            for d in range(fn.dim(isl.dim_type.out))]


def _iterators_used(relation: isl.Map, names: tuple[str, ...]) -> set[str]:
    return set().union(*_subscript_iterators(relation, names))


def _extent_param(domain: isl.Set, pos: int) -> str | None:
    """The param ``P`` when the loop at ``pos`` runs to ``P - 1`` plus a constant, else None."""
    try:
        pieces = domain.dim_max(pos).get_pieces()
    except isl.Error:
        return None
    found: set[str] = set()
    for _, aff in pieces:
        if any(not aff.get_coefficient_val(isl.dim_type.in_, k).is_zero() for k in range(aff.dim(isl.dim_type.in_))):
            return None
        coeffs = [(aff.get_dim_name(isl.dim_type.param, k), aff.get_coefficient_val(isl.dim_type.param, k))
                  for k in range(aff.dim(isl.dim_type.param))]
        used = [(name, c) for name, c in coeffs if not c.is_zero()]
        if len(used) != 1 or not used[0][1].is_one():
            return None
        found.add(used[0][0])
    return found.pop() if len(found) == 1 else None
