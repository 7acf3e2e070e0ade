"""What the ``torch.compile`` backend took and what it left to eager PyTorch, for ``pf.torch_report()``.

One process-wide tally (no torch import here): ``record(compiled, eager)`` adds the ATen operator names of
one compiled graph, counted per node at compile time; each graph's summary is also logged at INFO on the
``polyfuse.torch`` logger.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable

LOG = logging.getLogger("polyfuse.torch")
_LOCK = threading.Lock()
_COMPILED: Counter[str] = Counter()
_EAGER: Counter[str] = Counter()
_PARTITIONS: list[dict] = []


def record(compiled: Iterable[str], eager: Iterable[str], reasons: dict[str, str] | None = None) -> None:
    """Count one graph's operators: ``compiled`` went to polyfuse, ``eager`` stayed in PyTorch."""
    c, e = Counter(compiled), Counter(eager)
    with _LOCK:
        _COMPILED.update(c)
        _EAGER.update(e)
    LOG.info("polyfuse backend: compiled %s; eager %s", dict(c), dict(e))
    for op, why in (reasons or {}).items():
        LOG.info("polyfuse backend: %s left to eager: %s", op, why)


def torch_report(reset: bool = False) -> dict[str, dict[str, int]]:
    """``{"compiled": {aten_op: count}, "eager": {aten_op: count}}`` for this process; ``reset`` clears it
    (after taking the report)."""
    with _LOCK:
        out = {"compiled": dict(sorted(_COMPILED.items())), "eager": dict(sorted(_EAGER.items()))}
        if reset:
            _COMPILED.clear()
            _EAGER.clear()
    return out


def record_partition(info: dict) -> None:
    """One compiled partition: its program, statement and kernel counts, the fusion policy taken."""
    with _LOCK:
        _PARTITIONS.append(dict(info))
    LOG.info("polyfuse backend: partition %s", info)


def partitions(reset: bool = False) -> list[dict]:
    """The partitions compiled in this process, in order (``reset``: forget them after)."""
    with _LOCK:
        out = [dict(p) for p in _PARTITIONS]
        if reset:
            _PARTITIONS.clear()
    return out
