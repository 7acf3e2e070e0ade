"""Concrete sizes lifted into parameters for one isl scheduler call.

isl's whole-component scheduler (``"smart"``'s second candidate, ``scheduler._whole_if_fewer_kernels``)
can take minutes on a program whose sizes are all numbers: the BERT-sized MLP of ``pf.from_torch``
(``128 x 768 -> 3072 -> 768``) did not finish in 10 minutes, and isl's operation budget does not bound
the part of the solver it spends them in. The same constraints with every size turned into a parameter
(``i1 <= 3071`` becomes ``i1 <= c3071``) are solved in 0.01 s (the encoder layer's in 0.12 s): the
solver then works with symbolic bounds instead of large constants. :func:`lift` rewrites the constraints
that way, :func:`lower` puts the numbers back into the schedule isl returns, which is then used (and
checked for legality) like any other.

Only standalone constants of at least :data:`SMALLEST` are lifted: coefficients (``64i1``), divisors
(``floor(i/64)``) and moduli stay numbers, so every constraint stays affine.
"""

from __future__ import annotations

import re

import islpy as isl

SMALLEST = 16
"""Constants below this stay numbers (offsets, unrolled extents: the solver handles them easily)."""

_CONSTANT = re.compile(r"(?<![\w./*])(?<!mod )(\d+)(?![\w*(.])")
_NAME = "pf_size"
_LIFTED = re.compile(rf"{_NAME}(\d+)")


def lift(sc: isl.ScheduleConstraints) -> isl.ScheduleConstraints | None:
    """``sc`` with its large standalone constants turned into parameters (each at least 1), or ``None``
    when ``sc`` already has parameters or holds no constant worth lifting."""
    text = sc.to_str()
    if '"[' in text:
        return None  # parametric already
    values = sorted({int(n) for n in _CONSTANT.findall(text) if int(n) >= SMALLEST})
    if not values:
        return None
    lifted = _CONSTANT.sub(lambda m: f"{_NAME}{m.group(1)}" if int(m.group(1)) >= SMALLEST else m.group(1), text)
    params = ", ".join(f"{_NAME}{v}" for v in values)
    lifted = lifted.replace('"{', f'"[{params}] -> {{')
    context = f'[{params}] -> {{ : {" and ".join(f"{_NAME}{v} >= 1" for v in values)} }}'
    try:
        out = isl.ScheduleConstraints.read_from_str(isl.DEFAULT_CONTEXT, lifted)
        return out.set_context(isl.Set(context))
    except isl.Error:
        return None


def lower(tree: isl.Schedule, domain: isl.UnionSet) -> isl.Schedule | None:
    """The schedule isl computed from :func:`lift`'s constraints with the numbers put back, over the
    concrete ``domain``; ``None`` when it does not read back to that domain."""
    text = _LIFTED.sub(r"\1", tree.to_str())
    text = re.sub(r"\[[\d, ]*\] -> ", "", text)  # the parameter lists, now lists of numbers
    try:
        out = isl.Schedule.read_from_str(isl.DEFAULT_CONTEXT, text)
    except isl.Error:
        return None
    if not out.get_domain().is_equal(domain):
        return None
    return out
