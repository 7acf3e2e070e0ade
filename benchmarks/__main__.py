"""Command line of the benchmarks: ``python -m benchmarks run [--target c|cuda|all] [--quick]``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from types import ModuleType

import benchmarks


def discover() -> list[ModuleType]:
    """Every benchmark module of this package (those defining ``TARGET`` and ``run``), by name."""
    found = []
    for info in sorted(pkgutil.iter_modules(benchmarks.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        if hasattr(module, "TARGET") and hasattr(module, "run"):
            found.append(module)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the benchmarks and write benchmarks/results/")
    run.add_argument("--target", choices=("c", "cuda", "all"), default="c", help="which back end's benchmarks (default: c)")
    run.add_argument("--quick", action="store_true", help="small sizes, a few seconds (for CI)")
    args = parser.parse_args(argv)
    selected = [m for m in discover() if args.target in ("all", m.TARGET)]
    if not selected:
        print(f"no benchmarks for target {args.target!r}", file=sys.stderr)
        return 1
    for module in selected:
        module.run(quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
