"""polyfuse: a polyhedral whole-program optimizer for affine loop programs.

The public API (see docs/architecture.md): write a program with ``@pf.program``, inspect its
``dependences()``, run it with ``pf.reference``, and compile it with ``pf.compile``.
"""

from polyfuse import ops
from polyfuse.analysis.dependences import Dependence, Dependences
from polyfuse.codegen import codegen
from polyfuse.codegen.code import Code
from polyfuse.compile import Executable, PreparedCall, compile, compile_schedule  # noqa: A004
from polyfuse.errors import (
    BoundsError,
    CodegenError,
    IllegalTransformError,
    PolyfuseError,
    PolyfuseWarning,
    RuntimeUnavailable,
    ShapeError,
    SimulationError,
    SourceError,
)
from polyfuse.frontend.dsl import program
from polyfuse.frontend.graph import Graph, Tensor
from polyfuse.frontend.intrinsics import abs, empty, exp, log, max, min, pow, sqrt, tanh, where  # noqa: A004
from polyfuse.frontend.scop_c import from_c
from polyfuse.frontend.torch import from_torch, torch_report  # torch itself is imported on first use
from polyfuse.ir.program import Access, Array, Program, Statement
from polyfuse.runtime.reference import reference
from polyfuse.schedule import schedule
from polyfuse.schedule.text import load_schedule
from polyfuse.types import DType, Param, f32, f64, i8, i16, i32, i64, params, u8, u16, u32, u64

__all__ = [
    "Code", "Executable", "PreparedCall", "Graph", "Tensor", "codegen", "compile", "compile_schedule", "ops",
    "Access", "Array", "BoundsError", "CodegenError", "DType", "Dependence", "Dependences", "IllegalTransformError",
    "Param", "PolyfuseError", "PolyfuseWarning", "Program", "RuntimeUnavailable", "ShapeError", "SimulationError", "SourceError", "Statement", "abs", "empty", "exp", "f32", "f64", "from_c",
    "i8", "i16", "i32", "load_schedule", "i64", "u8", "u16", "u32", "u64", "log", "max", "min", "params", "pow", "program", "reference", "schedule", "sqrt", "tanh", "where",
]
__all__ += ["from_torch", "torch_report"]
