"""DNN operators on :class:`pf.Graph` tensors (see ``polyfuse/frontend/graph.py`` for how they lower).

Every operator records a tensor; ``g.build(**outputs)`` lowers them to statements of one Program, and the
general scheduler fuses them.
"""

from polyfuse.ops.conv import conv2d
from polyfuse.ops.elementwise import abs, add, div, exp, log, maximum, minimum, mul, neg, rsqrt, sqrt, sub, tanh  # noqa: A004
from polyfuse.ops.linalg import matmul
from polyfuse.ops.nn import gelu, layernorm, relu, sigmoid, softmax
from polyfuse.ops.reduce import max, mean, min, sum  # noqa: A004
from polyfuse.ops.shape import transpose

__all__ = [
    "abs", "add", "conv2d", "div", "exp", "gelu", "layernorm", "log", "matmul", "max", "maximum", "mean", "min", "minimum",
    "mul", "neg", "relu", "rsqrt", "sigmoid", "softmax", "sqrt", "sub", "sum", "tanh", "transpose",
]
