"""The value code generation produces: source text plus what a runtime needs to call it.

A :class:`Code` is target-neutral. ``text`` is the whole translation unit (C99 + OpenMP, or CUDA C);
``signature`` lists the arguments of the entry point in order, so a runtime can marshal a call without
parsing the text; ``launch`` is a target-specific plan (the CUDA back end records its host loops and kernel
launches there; the C back end leaves it ``None`` because its entry function runs the whole program).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polyfuse.schedule.model import Kernel
from polyfuse.types import DType

ARGUMENT_KINDS = ("size", "array", "scalar")


@dataclass(frozen=True)
class Argument:
    """One argument of the generated entry point.

    ``kind`` is ``size`` (a param, passed as a 64-bit integer), ``array`` (a pointer to the first element of
    a C-contiguous buffer of ``dtype``; temporaries the runtime allocates appear here too), or ``scalar``
    (a value of ``dtype``).
    """

    name: str
    kind: str
    dtype: DType | None = None


@dataclass(frozen=True)
class Code:
    """Generated source for one scheduled program.

    ``entry`` names the function a runtime calls (C: the ``<program>_kernel`` function). ``temporaries``
    names the temporary arrays that have a buffer (they are in ``signature``; the caller allocates them);
    contracted temporaries and 0-d temporaries never appear in the signature.
    """

    text: str
    target: str
    kernels: tuple[Kernel, ...]
    entry: str = ""
    signature: tuple[Argument, ...] = ()
    temporaries: tuple[str, ...] = ()
    launch: Any = None

    def __str__(self) -> str:
        return self.text

    def resources(self, sizes: Mapping[str, int] | None = None, arch: str = "sm_90") -> Any:
        """CUDA: each kernel's registers, spills, shared memory and barriers (``ptxas -v`` for ``arch``) and,
        at ``sizes``, its launches and theoretical occupancy (:func:`polyfuse.codegen.cuda_resources.cuda_resources`;
        ``print()`` the result for a table)."""
        from polyfuse.codegen.cuda_resources import cuda_resources  # (it imports this module)

        return cuda_resources(self, sizes, arch)
