"""Code generation: from a :class:`~polyfuse.schedule.model.Schedule` to a :class:`Code` value.

``codegen(sched)`` dispatches on ``sched.target``: ``"c"`` prints C99 + OpenMP (:mod:`.c`), ``"cuda"`` prints
CUDA C (:mod:`.cuda`). Neither needs the hardware it targets.
"""

from __future__ import annotations

from polyfuse.codegen.c import generate_c
from polyfuse.codegen.code import Argument, Code
from polyfuse.errors import CodegenError, PolyfuseError, api_boundary
from polyfuse.schedule.model import Schedule

try:
    from polyfuse.codegen.cuda import generate_cuda
except ModuleNotFoundError as e:  # the CUDA printer is optional while it is being written
    if e.name != "polyfuse.codegen.cuda":
        raise
    generate_cuda = None

__all__ = ["Argument", "Code", "codegen", "generate_c"]


@api_boundary
def codegen(sched: Schedule) -> Code:
    """The source code for a scheduled program, for the schedule's target."""
    if not isinstance(sched, Schedule):
        raise PolyfuseError(f"pf.codegen expects a pf.Schedule (from pf.schedule(...)), got {type(sched).__name__}")
    if sched.target == "c":
        return generate_c(sched)
    if sched.target == "cuda":
        if generate_cuda is None:
            raise CodegenError("the CUDA code generator is not available in this installation")
        return generate_cuda(sched)
    raise CodegenError(f"unknown target {sched.target!r} (expected 'c' or 'cuda')")
