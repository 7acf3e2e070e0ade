"""Schedules as text that can be edited and fed back: ``sched.to_text()``, ``pf.load_schedule(text)``.

The text of a schedule is isl's own schedule-tree format in YAML block style: a ``domain`` and below it
``schedule`` (band), ``sequence``/``set`` of ``filter`` nodes, ``mark`` and so on, each band holding its
partial schedule as an isl multi-union-pw-aff. It is the *base* tree of a :class:`Schedule`: the order and
fusion the scheduler chose, before tiling, mapping and data movement, which ``pf.schedule`` redoes from
it. Read back (``pf.schedule(prog, schedule=text)``) it is checked for legality like any explicit schedule:
an edit that breaks a dependence is an :class:`IllegalTransformError` naming it.

:func:`read_schedule` also accepts isl's one-line (flow) tree text and, as before, the text of an isl union
map (``"[N] -> { S0[i] -> [i, 0]; S1[i] -> [i, 1] }"``).
"""

from __future__ import annotations

import islpy as isl

from polyfuse.errors import PolyfuseError, api_boundary

TREE_KEYS = ("domain:", "{ domain:")
SECTION = "schedule text (polyfuse schedule/codegen/run --schedule FILE reads it back):"
"""The heading under which ``polyfuse schedule`` prints :func:`schedule_text`; ``--schedule FILE`` reads the
lines after it (up to a blank line) when the file holds the whole output of that command."""


def schedule_text(tree: isl.Schedule) -> str:
    """``tree`` in isl's YAML block style, one node per line (ends with a newline)."""
    printer = isl.Printer.to_str(tree.get_ctx()).set_yaml_style(isl.yaml_style.BLOCK)
    text = printer.print_schedule(tree).get_str()
    return text if text.endswith("\n") else text + "\n"


def is_tree_text(text: str) -> bool:
    """Whether ``text`` is a schedule tree (isl's format) rather than a union map."""
    return text.lstrip().startswith(TREE_KEYS)


@api_boundary
def load_schedule(text: str) -> isl.Schedule | isl.UnionMap:
    """The schedule ``text`` describes (``sched.to_text()``, edited or not; or an isl union map), for
    ``pf.schedule(prog, schedule=...)``; :class:`PolyfuseError` when isl cannot read it."""
    return read_schedule(text)


def read_schedule(text: str) -> isl.Schedule | isl.UnionMap:
    """See :func:`load_schedule` (this one raises without hiding polyfuse's frames)."""
    if not isinstance(text, str):
        raise PolyfuseError(f"a schedule text must be a str, not {type(text).__name__}")
    body = section_of(text)
    try:
        if is_tree_text(body):
            return isl.Schedule.read_from_str(isl.DEFAULT_CONTEXT, body)
        return isl.UnionMap(body)
    except isl.Error as e:
        what = "an isl schedule tree" if is_tree_text(body) else "an isl union map (or a schedule tree)"
        reason = str(e).split(" in /")[0]
        raise PolyfuseError(f"cannot parse the schedule as {what}: {reason}\n{_excerpt(body)}") from None


def section_of(text: str) -> str:
    """The schedule in ``text``: the lines after :data:`SECTION` (to the next blank line) when ``text`` is
    the output of ``polyfuse schedule``, else ``text`` itself."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        if line.strip() == SECTION:
            body = []
            for rest in lines[k + 1 :]:
                if not rest.strip():
                    break
                body.append(rest)
            return "\n".join(body) + "\n"
    return text


def _excerpt(text: str, limit: int = 6) -> str:
    lines = text.strip().splitlines()
    shown = "\n".join("    " + line for line in lines[:limit])
    return shown + ("\n    ..." if len(lines) > limit else "")
