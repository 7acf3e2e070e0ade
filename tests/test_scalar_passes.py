"""A scalar temporary that several passes reset and use (deriche's ``ym1``, set to 0 at the start of every
row of the causal row pass and of the causal column pass) gets one private copy per pass, so every pass runs
its rows in parallel (``privatize.contract``, ``bands.DepView.privatizable``, and the C printer declaring
the scalar inside each parallel loop); and ``fusion="smart"`` does not fuse the final row-major statement
into the column pass, where its innermost loop would stride down columns (``fusion/locality.py``). Results
are gcc's on the original C at odd sizes."""

from __future__ import annotations

import dataclasses
import importlib
import re
from types import MappingProxyType

import islpy as isl
import numpy as np
import pytest

import polyfuse as pf
from tests.c_oracle import GccKernel, assert_same
from tests.kernels import BY_NAME, inputs

locality = importlib.import_module("polyfuse.schedule.fusion.locality")


def _deriche(w: int, h: int):
    kernel = dataclasses.replace(BY_NAME["deriche"], sizes=MappingProxyType({"W": w, "H": h}))
    prog = pf.from_c(str(kernel.path), function=kernel.function, defines=kernel.defines, assume=kernel.assume)
    return kernel, prog, {p: kernel.sizes[p.upper()] for p in prog.params}


def _parallel_loop_bodies(code: str) -> list[str]:
    """The text of each ``omp (parallel) for`` loop, from the pragma to its closing brace."""
    lines, out = code.splitlines(), []
    for k, line in enumerate(lines):
        if re.match(r"\s*#pragma omp (parallel )?for", line):
            depth, body = 0, []
            for text in lines[k + 1:]:
                body.append(text)
                depth += text.count("{") - text.count("}")
                if depth <= 0 and "}" in text:
                    break
            out.append("\n".join(body))
    return out


@pytest.mark.parametrize("w, h", [(3, 2), (37, 29), (720, 480)])
def test_every_deriche_pass_runs_its_rows_in_parallel_and_matches_gcc(w, h):
    kernel, prog, params = _deriche(w, h)
    exe = pf.compile(prog, target="c", params=params)
    code = exe.code.text
    if w * h >= 100_000:  # (small sizes run on one thread: too little work per launch)
        passes = [k for k in exe.schedule.kernels if len(k.statements) >= 7]
        assert len(passes) == 4 and not any(k.without_parallel_loop for k in passes), exe.schedule.explain()
        bodies = _parallel_loop_bodies(code)
        for name in ("ym1", "ym2", "yp1", "yp2", "xm1", "tm1", "tp1"):
            users = [b for b in bodies if re.search(rf"\b{name} = ", b)]
            assert users and all(f"float {name};" in b for b in users), name  # a private copy in each
    args = inputs(kernel)
    want = GccKernel(kernel.path, kernel.function, kernel.defines)(**args)
    got = {n: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for n, v in args.items()}
    exe(**{n: got[n] for n in prog.arguments})
    names = [n for n in want if n in prog.arguments and isinstance(want[n], np.ndarray)]
    assert_same({n: got[n] for n in names}, {n: want[n] for n in names}, f"deriche {w}x{h}", rtol=1e-4, atol=1e-4)


def test_smart_fusion_keeps_the_row_major_statement_out_of_the_column_pass():
    _, prog, params = _deriche(720, 480)
    sched = pf.schedule(prog, target="c", params=params)
    final = next(k for k in sched.kernels if "S46" in k.statements)
    assert final.statements == ("S46",), sched.explain()
    assert "stride along the innermost loop" in sched.explain()
    walks = locality.strided_walks(prog, sched, params)
    assert walks[final.name] == 0


def test_strided_walks_counts_each_access_that_strides_down_a_column():
    """deriche's causal column pass walks ``y1`` (written and read back) and ``imgOut`` (read twice) down
    columns: 4 strided accesses per instance; fused into it, the final statement adds 3 more."""
    _, prog, params = _deriche(720, 480)
    area = 720 * 480
    fused = pf.schedule(prog, target="c", params=params, fusion="max")
    walks = locality.strided_walks(prog, fused, params)
    column = next(k for k in fused.kernels if "S33" in k.statements)
    assert "S46" in column.statements and walks[column.name] == 7 * area
    smart = pf.schedule(prog, target="c", params=params)
    walks = locality.strided_walks(prog, smart, params)
    assert walks[next(k.name for k in smart.kernels if "S33" in k.statements)] == 4 * area


def test_innermost_iterator_reads_the_last_loop_of_a_schedule():
    assert locality._innermost_iterator(isl.Map("{ S[i, j] -> [0, j, i, 0] }")) == 0
    assert locality._innermost_iterator(isl.Map("{ S[i, j] -> [1, i, j] }")) == 1
    assert locality._innermost_iterator(isl.Map("{ S[i, j] -> [i + j, j] }")) == 1
    assert locality._innermost_iterator(isl.Map("{ S[i, j] -> [i, i + j] }")) is None  # a skew: not modelled
