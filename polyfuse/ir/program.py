"""The polyhedral program: arrays, statements with iteration domains and access relations, and the
source-order schedule.

All values here are immutable. A statement instance is a point of its ``domain`` (an ``isl.Set`` whose
tuple is the statement's name, e.g. ``[N] -> { S0[i, j] : 0 <= i < N and 0 <= j < N }``); each access maps
the domain to the elements of one array. ``Program.schedule`` is the isl schedule tree of the source
order, and it is the reference every transformation is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

import islpy as isl

from polyfuse.errors import api_boundary
from polyfuse.ir.expr import Expr
from polyfuse.ir.pickling import fields_state, rebuild
from polyfuse.ir.printer import format_program
from polyfuse.types import DType, SizeExpr

if TYPE_CHECKING:
    from polyfuse.analysis.dependences import Dependences

ACCESS_KINDS = ("read", "write", "update")
ARRAY_ROLES = ("input", "output", "inout", "temp")
ASSIGN_OPS = ("=", "+=", "-=", "*=")


@dataclass(frozen=True)
class Array:
    """A multidimensional array; ``shape`` entries are affine in the program's size params.

    ``role`` says how it crosses the program boundary: ``input`` (only read), ``output`` (written, and
    nothing it held before the call is read), ``inout`` (both), ``temp`` (lives only inside the program;
    local scalars are 0-d temps).
    """

    name: str
    shape: tuple[SizeExpr, ...]
    dtype: DType
    role: str

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def concrete_shape(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The shape at the given size values."""
        return tuple(e.constant + sum(c * sizes[n] for n, c in e.terms) for e in self.shape)


@dataclass(frozen=True)
class Access:
    """One array access of a statement: ``relation`` maps each instance to the element it touches.

    ``kind`` is ``read``, ``write``, or ``update`` (the read-modify-write target of ``+=``, ``-=``, ``*=``,
    which dependence analysis treats as both and marks as a reduction).
    """

    array: str
    kind: str
    relation: isl.Map
    text: str = ""

    @cached_property
    def function(self) -> isl.PwMultiAff:
        """The access as a function of the instance (every polyfuse access is single-valued)."""
        return isl.PwMultiAff.from_map(self.relation)


@dataclass(frozen=True)
class Statement:
    """``target op value`` executed once for every point of ``domain``.

    ``accesses[target]`` is the written (or updated) element; :class:`~polyfuse.ir.expr.Read` nodes in
    ``value`` refer to the other entries by position.
    """

    name: str
    domain: isl.Set
    accesses: tuple[Access, ...]
    target: int
    op: str
    value: Expr
    line: int
    text: str = ""

    @property
    def iterators(self) -> tuple[str, ...]:
        return tuple(self.domain.get_dim_name(isl.dim_type.set, k) for k in range(self.domain.dim(isl.dim_type.set)))

    @property
    def depth(self) -> int:
        return self.domain.dim(isl.dim_type.set)

    @property
    def write(self) -> Access:
        return self.accesses[self.target]

    @property
    def reads(self) -> tuple[Access, ...]:
        return tuple(a for k, a in enumerate(self.accesses) if k != self.target)

    @property
    def is_reduction(self) -> bool:
        return self.write.kind == "update"


@dataclass(frozen=True)
class Assumption:
    """A constraint on the sizes derived from one access (like Polly's assumed context): the access is
    inside its array exactly when the sizes satisfy ``condition`` (a parameter set), so the program assumes
    it and every call checks it. ``access`` is the access's source text, ``statement`` and ``line`` locate it."""

    condition: isl.Set
    access: str
    statement: str
    line: int

    def describe(self) -> str:
        """The condition as constraints, e.g. ``n > 0``, then where it comes from."""
        text = self.condition.to_str()
        body = text[text.index("{") + 1 : text.rindex("}")].split(":", 1)[-1].strip()
        return f"{body}    (derived: {self.statement}'s `{self.access}`, line {self.line}, is inside its array only then)"

    def holds(self, sizes: Mapping[str, int]) -> bool:
        """Whether ``sizes`` (every param of the condition by name) satisfy the condition."""
        point = self.condition
        for k in range(point.dim(isl.dim_type.param)):
            value = isl.Val.int_from_si(point.get_ctx(), int(sizes[point.get_dim_name(isl.dim_type.param, k)]))
            point = point.fix_val(isl.dim_type.param, k, value)
        return not point.is_empty()


@dataclass(frozen=True, eq=False)
class Program:
    """A whole affine program: what every pass of polyfuse consumes.

    ``arguments`` lists the call signature in order (arrays and scalars); ``context`` holds what is
    assumed of the size params (their ``assume=`` constraints, non-negativity, and the ``assumptions``
    derived from accesses that are in bounds only for some sizes, see :class:`Assumption`).
    """

    name: str
    params: tuple[str, ...]
    context: isl.Set
    arrays: Mapping[str, Array]
    scalars: Mapping[str, DType]
    arguments: tuple[str, ...]
    statements: tuple[Statement, ...]
    schedule: isl.Schedule
    filename: str = "<program>"
    line: int = 0
    assumptions: tuple[Assumption, ...] = ()
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arrays", MappingProxyType(dict(self.arrays)))
        object.__setattr__(self, "scalars", MappingProxyType(dict(self.scalars)))

    def statement(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def domains(self) -> isl.UnionSet:
        """The union of every statement's iteration domain."""
        out = isl.UnionSet.empty(self.context.get_space())
        for s in self.statements:
            out = out.union(isl.UnionSet.from_set(s.domain))
        return out

    def access_relations(self, kinds: tuple[str, ...]) -> isl.UnionMap:
        """Union of the access relations of the given kinds, domains tagged by statement."""
        out = isl.UnionMap.empty(self.context.get_space())
        for s in self.statements:
            for a in s.accesses:
                if a.kind in kinds:
                    out = out.union(isl.UnionMap.from_map(a.relation))
        return out

    @api_boundary
    def dependences(self) -> Dependences:
        """Exact dependences of the source order (computed once, then cached)."""
        if "dependences" not in self._cache:
            # Imported here: analysis depends on this module, not the other way round.
            from polyfuse.analysis.dependences import compute_dependences

            self._cache["dependences"] = compute_dependences(self)
        return self._cache["dependences"]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled without ``_cache`` (compiled interpreters and analyses are recomputed on demand)."""
        return rebuild, (type(self), fields_state(self))

    def __str__(self) -> str:
        return format_program(self)

    def __repr__(self) -> str:
        return f"<pf.Program {self.name}: {len(self.statements)} statements, arrays {', '.join(self.arrays)}>"

