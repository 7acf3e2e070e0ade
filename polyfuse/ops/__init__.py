"""DNN operators on :class:`pf.Graph` tensors (see ``polyfuse/frontend/graph.py`` for how they lower).

Every operator records a tensor; ``g.build(**outputs)`` lowers them to statements of one Program, and the
general scheduler fuses them.
"""

from polyfuse.errors import api_boundary as _api_boundary
from polyfuse.ops import methods as _methods  # noqa: F401 - gives graph tensors x.T, x.sum(), x[1:-1], ...
from polyfuse.ops.conv import conv2d
from polyfuse.ops.elementwise import abs, add, div, exp, log, maximum, minimum, mul, neg, rsqrt, sqrt, sub, tanh  # noqa: A004
from polyfuse.ops.linalg import matmul
from polyfuse.ops.nn import gelu, layernorm, log_softmax, relu, sigmoid, silu, softmax
from polyfuse.ops.norm import batch_norm, rms_norm
from polyfuse.ops.reduce import max, mean, min, sum  # noqa: A004
from polyfuse.ops.select import concat, equal, greater, greater_equal, less, less_equal, not_equal, where
from polyfuse.ops.shape import expand, permute, reshape, select, slice_axis, squeeze, transpose, unsqueeze

__all__ = [
    "abs", "add", "conv2d", "div", "exp", "gelu", "layernorm", "log", "matmul", "max", "maximum", "mean", "min", "minimum",
    "mul", "neg", "relu", "rsqrt", "sigmoid", "softmax", "sqrt", "sub", "sum", "tanh", "transpose",
    "batch_norm", "expand", "log_softmax", "permute", "reshape", "rms_norm", "select", "silu", "slice_axis", "squeeze", "unsqueeze",
    "concat", "equal", "greater", "greater_equal", "less", "less_equal", "not_equal", "where",
]

# Each operator is a public entry point: a shape error ends its traceback at the user's line.
for _name in __all__:
    globals()[_name] = _api_boundary(globals()[_name])
