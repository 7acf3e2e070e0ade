"""An on-disk cache of compiled artefacts (shared libraries), keyed by what determines their contents.

The key is the sha256 of the source text, the compiler's identity and the flags, so a changed compiler or
flag never reuses a stale binary. Entries are written to a temporary file in the cache directory and moved
into place with ``os.replace``, which is atomic on POSIX: concurrent processes building the same key each
produce a complete file and the last rename wins, so a reader never sees a half-written library. An entry
that fails to load (truncated, corrupt, wrong architecture) is rebuilt once in place.

Where: ``$POLYFUSE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/polyfuse``, else ``~/.cache/polyfuse``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def cache_dir() -> Path:
    """The directory holding cached artefacts (created on first use)."""
    explicit = os.environ.get("POLYFUSE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "polyfuse"


def cache_key(*parts: str) -> str:
    """sha256 over the parts, each length-prefixed so that no two different lists collide."""
    h = hashlib.sha256()
    for p in parts:
        data = p.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@dataclass
class CacheStats:
    """Counters for this process: loads served from disk, and builds (misses plus corrupt rebuilds)."""

    hits: int = 0
    builds: int = 0
    rebuilt_corrupt: int = 0


STATS = CacheStats()


def cached_artifact(
    key: str,
    suffix: str,
    build: Callable[[Path], None],
    load: Callable[[Path], T],
    directory: Path | None = None,
) -> T:
    """Load the artefact stored under ``key``, building it first when it is missing or fails to load.

    ``build(path)`` must write a complete artefact at ``path`` (a fresh temporary name in the cache
    directory); ``load(path)`` turns the stored file into a value and raises ``OSError`` (or ``ValueError``)
    when the file is unusable. Build errors propagate and leave no entry behind.
    """
    root = directory or cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{key}{suffix}"
    if final.exists():
        try:
            value = load(final)
            STATS.hits += 1
            return value
        except (OSError, ValueError):
            STATS.rebuilt_corrupt += 1
    _build_atomically(final, suffix, build)
    STATS.builds += 1
    return load(final)


def _build_atomically(final: Path, suffix: str, build: Callable[[Path], None]) -> None:
    """Run ``build`` into a temporary file next to ``final``, then rename it over ``final``."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.stem[:16]}-", suffix=suffix, dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        build(tmp)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
