"""Pickling support for the pipeline's values: ``Program``, ``Schedule`` and ``Executable`` (issue 13), so
they can be cached and shipped to other processes.

islpy pickles sets and maps (not all of them: see :data:`_BY_TEXT`) but not schedule trees, and a tree's mark nodes may carry Python
objects (``isl.Id`` user objects: a kernel mark's :class:`~polyfuse.schedule.model.Kernel`, a micro-tile or
row-reduction record) that text cannot hold. :func:`register` teaches :mod:`pickle` (through
:mod:`copyreg`) to write an ``isl.Schedule`` as its text plus the user objects of its marks in a fixed
traversal order, and to put those objects back on the marks of the re-read tree in the same order.

A value's own ``__reduce__`` (see :func:`fields_state`) leaves out what is recomputed on demand (caches of
compiled functions) and turns read-only mapping views into dicts its constructor accepts again.
"""

from __future__ import annotations

import copyreg
import dataclasses
from types import MappingProxyType
from typing import Any

import islpy as isl

_MARK = isl.schedule_node_type.mark


def _mark_users(tree: isl.Schedule) -> list[Any]:
    """The user objects of the tree's mark nodes (None where a mark has none), in bottom-up order."""
    found: list[Any] = []

    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() == _MARK:
            found.append(_user(node.mark_get_id()))
        return node

    tree.get_root().map_descendant_bottom_up(visit)
    return found


def _user(ident: isl.Id) -> Any:
    """An id's Python user object; None when it has none (islpy raises for an id read from text)."""
    try:
        return ident.user
    except TypeError:
        return None


def _read_tree(text: str, users: list[Any]) -> isl.Schedule:
    """The tree of ``text`` with ``users`` put back on its marks (the order of :func:`_mark_users`)."""
    tree = _without_identity_filters(isl.Schedule.read_from_str(isl.DEFAULT_CONTEXT, text))
    if not any(u is not None for u in users):
        return tree
    pending = iter(users)

    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() != _MARK:
            return node
        user = next(pending)
        if user is None:
            return node
        name = node.mark_get_id().get_name()
        return node.delete().insert_mark(isl.Id(name, user=user))

    return tree.get_root().map_descendant_bottom_up(visit).get_schedule()


def _reduce_schedule(tree: isl.Schedule) -> tuple[Any, ...]:
    return _read_tree, (_with_mark_children(tree).to_str(), _mark_users(tree))


def _with_mark_children(tree: isl.Schedule) -> isl.Schedule:
    """``tree`` with a filter of its own domain under every mark whose child is a leaf (a kernel of one
    0-d statement): isl prints such a mark with no child and its reader refuses that. The reader drops
    these filters again (:func:`_without_identity_filters`)."""
    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() == _MARK and node.child(0).get_type() == isl.schedule_node_type.leaf:
            return node.child(0).insert_filter(node.get_domain()).parent()
        return node

    return tree.get_root().map_descendant_bottom_up(visit).get_schedule()


def _without_identity_filters(tree: isl.Schedule) -> isl.Schedule:
    """``tree`` without the filters :func:`_with_mark_children` added (a mark's only child, a leaf
    below it, filtering nothing out)."""
    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if (node.get_type() == isl.schedule_node_type.filter and node.has_parent()
                and node.parent().get_type() == _MARK and node.child(0).get_type() == isl.schedule_node_type.leaf
                and node.filter_get_filter().is_equal(node.get_domain())):
            return node.delete()
        return node

    return tree.get_root().map_descendant_bottom_up(visit).get_schedule()


def fields_state(value: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """The init fields of a dataclass ``value`` (minus ``drop``), mapping views as dicts."""
    state = {}
    for f in dataclasses.fields(value):
        if not f.init or f.name in drop:
            continue
        v = getattr(value, f.name)
        state[f.name] = dict(v) if isinstance(v, MappingProxyType) else v
    return state


def rebuild(cls: type, state: dict[str, Any], extra: dict[str, Any] | None = None) -> Any:
    """``cls(**state)``, then ``extra`` set on the new object's non-init fields' dicts (e.g. ``_lazy``)."""
    obj = cls(**state)
    for name, values in (extra or {}).items():
        getattr(obj, name).update(values)
    return obj


_BY_TEXT = (isl.BasicSet, isl.Set, isl.UnionSet, isl.BasicMap, isl.Map, isl.UnionMap)
"""Pickled as their isl text: islpy's own pickling of these fails on a space with repeated dimension
names (a copy statement's access ``copy[o0] -> A[o0]``), which the text form handles."""


def _reduce_by_text(obj: Any) -> tuple[Any, ...]:
    return type(obj), (obj.to_str(),)


def register() -> None:
    """Make ``isl.Schedule`` picklable, and isl sets and maps picklable by text (idempotent)."""
    copyreg.pickle(isl.Schedule, _reduce_schedule)
    for cls in _BY_TEXT:
        copyreg.pickle(cls, _reduce_by_text)


register()
