"""Compile time of polyfuse on the 30 PolyBench/C 4.2.1-style kernels (``tests/kernels/*.c``), per stage.

``python -m benchmarks.compile_time [--out DIR] [--only gemm,lu] [--repeat 3] [--no-load] [--no-polly]``
(also ``python -m benchmarks compile ...`` and ``make bench-compile``).

For every kernel, each repeat runs the whole pipeline from the C file, as ``scripts/kernel_table.py`` and a
user do: ``pf.from_c`` (sizes symbolic), ``prog.dependences()``, ``pf.schedule(target="c",
fusion="smart")``, ``pf.codegen``, then (unless ``--no-load``) the C compiler and ``dlopen``
(``polyfuse.runtime.cpu.CFunction``, with an empty compile cache so the compiler really runs). Two totals:
**source → C** (the first four stages) and **source → loaded library** (all five).

Inside ``schedule`` the big passes are timed too, *exclusively* (a pass nested in another is charged to
itself only, so the passes and "other" add up to the stage): isl's scheduler, band flags, C kernel shapes
(contraction distribution), mapping and tiling, the tile search, contraction, the legality checks, and the
traffic model. The passes are found by wrapping those functions where polyfuse's modules hold them, so
nothing in polyfuse knows it is being timed.

Where ``clang-16`` with Polly works (Debian's ``libpolly-16-dev``), each kernel's C file is also built with
``clang-16 -O3 -mllvm -polly -fPIC -shared`` (and the library loaded), in the same run, and its median is
reported next to polyfuse's source → loaded library; otherwise the report says Polly was not found.

Each figure is the median over ``--repeat`` runs. Results go to ``--out`` (default
``$XDG_CACHE_HOME/polyfuse/bench``, never the source tree unless asked): ``compile_time.json`` (every
run's every stage) and ``compile_time.md`` (the tables).
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import polyfuse as pf  # noqa: E402
from polyfuse.runtime import cpu  # noqa: E402
from tests.kernels import KERNELS, Kernel  # noqa: E402

STEM = "compile_time"
STAGES = ("from_c", "dependences", "schedule", "codegen", "cc + load")
TO_C = STAGES[:4]
POLLY_CC = "clang-16"
POLLY_FLAGS = ("-O3", "-mllvm", "-polly", "-fPIC", "-shared")
TARGET_S = {"median": 0.3, "max": 3.0}  # issue 11's acceptance for source -> C

PASSES: tuple[tuple[str, str, str], ...] = (
    # (label, module, attribute: a function, or Class.method)
    ("isl scheduler", "polyfuse.schedule.fusion.scheduler", "IslBudget.compute"),
    ("band flags", "polyfuse.schedule.bands", "annotate"),
    ("C kernel shapes", "polyfuse.schedule.tiling.microtile", "distribute_contractions"),
    ("mapping + tiling", "polyfuse.schedule.mapping.kernels", "split"),
    ("tile search", "polyfuse.cost.search", "TileSearch.__call__"),
    ("contraction", "polyfuse.schedule.privatize", "contract"),
    ("legality", "polyfuse.analysis.legality", "check_schedule"),
    ("legality", "polyfuse.analysis.legality", "check_parallel"),
    ("traffic model", "polyfuse.cost.traffic", "program_traffic"),
    ("traffic model", "polyfuse.cost.footprint", "region_counts"),
)
PASS_LABELS = tuple(dict.fromkeys(label for label, _, _ in PASSES)) + ("other",)


def default_out() -> Path:
    """``$XDG_CACHE_HOME/polyfuse/bench`` (``~/.cache/polyfuse/bench``), as the other benchmarks."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "polyfuse" / "bench"


class PassTimer:
    """Exclusive wall time per labelled pass: while a pass runs, the pass around it does not count.

    A pass that calls itself (``annotate``, ``split`` recurse) is timed once, at its outermost call."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._stack: list[list[Any]] = []  # [label, start, time of the passes nested in it]

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._stack and self._stack[-1][0] == label:
                return fn(*args, **kwargs)
            frame = [label, time.perf_counter(), 0.0]
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                spent = time.perf_counter() - frame[1]
                self.totals[label] = self.totals.get(label, 0.0) + spent - frame[2]
                if self._stack:
                    self._stack[-1][2] += spent
        timed.__wrapped_pass__ = fn  # type: ignore[attr-defined]
        return timed

    def take(self) -> dict[str, float]:
        out, self.totals = self.totals, {}
        return out


@contextmanager
def timed_passes(timer: PassTimer) -> Iterator[None]:
    """Wrap every function of :data:`PASSES` wherever a ``polyfuse`` module holds it (``from x import f``
    copies the reference), and restore them all afterwards."""
    import importlib  # noqa: PLC0415

    restore: list[tuple[object, str, object]] = []
    for label, module, attr in PASSES:
        owner: object = importlib.import_module(module)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        wrapped = timer.wrap(label, original)
        if path:  # a method: its class is the only holder
            restore.append((owner, name, original))
            setattr(owner, name, wrapped)
            continue
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("polyfuse") and getattr(mod, name, None) is original:
                restore.append((mod, name, original))
                setattr(mod, name, wrapped)
    try:
        yield
    finally:
        for owner, name, original in reversed(restore):
            setattr(owner, name, original)


def run_polyfuse(kernel: Kernel, timer: PassTimer, load: bool) -> dict[str, Any]:
    """One run of the pipeline on ``kernel``: seconds per stage and per schedule pass."""
    stages: dict[str, float] = {}
    start = time.perf_counter()
    prog = pf.from_c(str(kernel.path), function=kernel.function, defines=kernel.defines, assume=kernel.assume)
    stages["from_c"] = time.perf_counter() - start
    start = time.perf_counter()
    prog.dependences()
    stages["dependences"] = time.perf_counter() - start
    timer.take()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (cholesky's notes; the schedule is what it is)
        sched = pf.schedule(prog, target="c", fusion="smart")
    stages["schedule"] = time.perf_counter() - start
    passes = timer.take()
    passes["other"] = max(0.0, stages["schedule"] - sum(passes.values()))
    start = time.perf_counter()
    code = pf.codegen(sched)
    stages["codegen"] = time.perf_counter() - start
    if load:
        with tempfile.TemporaryDirectory() as cache:  # an empty compile cache: the compiler runs
            saved = os.environ.get("POLYFUSE_CACHE_DIR")
            os.environ["POLYFUSE_CACHE_DIR"] = cache
            try:
                start = time.perf_counter()
                cpu.CFunction(code)
                stages["cc + load"] = time.perf_counter() - start
            finally:
                if saved is None:
                    del os.environ["POLYFUSE_CACHE_DIR"]
                else:
                    os.environ["POLYFUSE_CACHE_DIR"] = saved
    return {"stages": stages, "passes": passes, "kernels": len(sched.kernels), "lines": code.text.count("\n")}


def polly_available() -> str | None:
    """Why clang-16 with Polly cannot be used here (None: it can)."""
    cc = shutil.which(POLLY_CC)
    if cc is None:
        return f"{POLLY_CC} not found (Debian: apt-get install clang-16 libpolly-16-dev)"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "probe.c"
        src.write_text("void f(int n, double *a) { for (int i = 0; i < n; i++) a[i] += 1.0; }\n")
        proc = subprocess.run([cc, *POLLY_FLAGS, str(src), "-o", str(Path(d) / "probe.so")], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"{cc} -mllvm -polly does not work here (libpolly-16-dev missing?): {proc.stderr.strip().splitlines()[-1:]}"
    return None


def run_polly(kernel: Kernel) -> float:
    """Seconds for ``clang-16 -O3 -mllvm -polly -fPIC -shared`` on the kernel's C file, plus ``dlopen``."""
    defines = [f"-D{k}={v}" for k, v in kernel.defines.items()]
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / f"{kernel.name}.so"
        start = time.perf_counter()
        proc = subprocess.run([POLLY_CC, *POLLY_FLAGS, *defines, str(kernel.path), "-o", str(out), "-lm"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{POLLY_CC} failed on {kernel.path.name}: {proc.stderr.strip()[:300]}")
        ctypes.CDLL(str(out))
        return time.perf_counter() - start


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarise(kernel: Kernel, runs: list[dict[str, Any]], polly: list[float]) -> dict[str, Any]:
    """Medians per stage and pass over the runs of one kernel, and the two totals."""
    stages = {s: _median([r["stages"][s] for r in runs if s in r["stages"]]) for s in STAGES if s in runs[0]["stages"]}
    passes = {p: _median([r["passes"].get(p, 0.0) for r in runs]) for p in PASS_LABELS}
    to_c = _median([sum(r["stages"][s] for s in TO_C) for r in runs])
    loaded = _median([sum(r["stages"].values()) for r in runs]) if "cc + load" in stages else None
    return {"kernel": kernel.name, "category": kernel.category, "kernels": runs[0]["kernels"], "lines": runs[0]["lines"],
            "stages": stages, "passes": passes, "source_to_c": to_c, "source_to_library": loaded,
            "polly": _median(polly) if polly else None, "runs": runs, "polly_runs": polly}


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The markdown report."""
    ms = lambda s: "" if s is None else f"{s * 1000:.0f}"  # noqa: E731
    to_c = [r["source_to_c"] for r in rows]
    loaded = [r["source_to_library"] for r in rows if r["source_to_library"] is not None]
    polly = [r["polly"] for r in rows if r["polly"] is not None]
    out = ["# Compile time: PolyBench/C 4.2.1-style kernels", "",
           f"`python -m benchmarks.compile_time` on {meta['machine']}, {meta['when']}; medians of {meta['repeat']} runs, "
           "milliseconds. source → C = from_c + dependences + schedule + codegen; → library adds the C compiler "
           f"and dlopen ({' '.join(meta['cc'])}).", ""]
    if to_c:
        verdict = ("meets" if statistics.median(to_c) <= TARGET_S["median"] and max(to_c) <= TARGET_S["max"]
                   else "misses")
        out += [f"**source → C: median {ms(statistics.median(to_c))} ms, max {ms(max(to_c))} ms** "
                f"({max(rows, key=lambda r: r['source_to_c'])['kernel']}); target median ≤ "
                f"{TARGET_S['median'] * 1000:.0f} ms, max ≤ {TARGET_S['max'] * 1000:.0f} ms: {verdict}.", ""]
    if loaded:
        line = f"**source → loaded library: median {ms(statistics.median(loaded))} ms**"
        if polly:
            line += (f"; `{POLLY_CC} {' '.join(POLLY_FLAGS)}` (+ dlopen) on the same files: median "
                     f"{ms(statistics.median(polly))} ms")
        out += [line + ".", ""]
    out += [f"Polly: {meta['polly']}", ""]
    head = ["kernel", *STAGES[: 4 + bool(loaded)], "source → C", *(["→ library"] if loaded else []),
            *(["clang-16 Polly"] if polly else []), "kernels"]
    out += ["## Per stage", "", "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        cells = [r["kernel"], *(ms(r["stages"].get(s)) for s in STAGES[: 4 + bool(loaded)]), ms(r["source_to_c"]),
                 *([ms(r["source_to_library"])] if loaded else []), *([ms(r["polly"])] if polly else []), str(r["kernels"])]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "## Inside schedule (exclusive time per pass)", "",
            "| kernel | " + " | ".join(PASS_LABELS) + " |", "|---|" + "---:|" * len(PASS_LABELS)]
    for r in rows:
        out.append(f"| {r['kernel']} | " + " | ".join(ms(r["passes"][p]) for p in PASS_LABELS) + " |")
    totals = {p: sum(r["passes"][p] for r in rows) for p in PASS_LABELS}
    out.append("| **all** | " + " | ".join(f"**{ms(totals[p])}**" for p in PASS_LABELS) + " |")
    if meta["failures"]:
        out += ["", "## Failures", ""] + [f"- `{name}`: {why}" for name, why in meta["failures"]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compile_time", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="results folder (default: $XDG_CACHE_HOME/polyfuse/bench)")
    ap.add_argument("--only", default="", help="comma-separated kernel names (default: all 30)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per kernel; medians are reported (default: 3)")
    ap.add_argument("--no-load", action="store_true", help="stop at the C text (no C compiler, no Polly)")
    ap.add_argument("--no-polly", action="store_true", help="do not time clang-16 -mllvm -polly")
    args = ap.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    unknown = only - {k.name for k in KERNELS}
    if unknown:
        ap.error(f"unknown kernels: {', '.join(sorted(unknown))}")
    load = not args.no_load
    polly_why = "not timed (--no-polly / --no-load)" if args.no_polly or not load else polly_available()
    use_polly = polly_why is None
    cc = cpu.compiler() if load else ""
    meta = {"machine": f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs",
            "when": time.strftime("%Y-%m-%d %H:%M"), "repeat": args.repeat,
            "cc": [cc, *cpu.compiler_flags(cc)] if load else [],
            "polly": f"`{POLLY_CC} {' '.join(POLLY_FLAGS)}` timed on each kernel's C file" if use_polly else polly_why,
            "failures": []}
    timer = PassTimer()
    rows = []
    chosen = [k for k in KERNELS if not only or k.name in only]
    with timed_passes(timer):
        if chosen:  # one untimed run: first-call costs (lazy imports, compiler probes, cold disk cache) are no kernel's
            run_polyfuse(chosen[0], timer, load)
            if use_polly:
                run_polly(chosen[0])
        for kernel in chosen:
            try:
                runs, polly = [], []
                for _ in range(args.repeat):  # polyfuse and Polly alternate: drift on a shared machine hits both
                    runs.append(run_polyfuse(kernel, timer, load))
                    if use_polly:
                        polly.append(run_polly(kernel))
            except Exception as e:  # noqa: BLE001 - a failure is a result to record, not a reason to stop
                meta["failures"].append((kernel.name, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
                print(f"{kernel.name:16s} FAILED {meta['failures'][-1][1]}", file=sys.stderr)
                continue
            rows.append(summarise(kernel, runs, polly))
            r = rows[-1]
            extra = f"  → library {r['source_to_library'] * 1000:7.0f} ms" if r["source_to_library"] is not None else ""
            extra += f"  polly {r['polly'] * 1000:6.0f} ms" if r["polly"] is not None else ""
            print(f"{kernel.name:16s} source → C {r['source_to_c'] * 1000:7.0f} ms{extra}", file=sys.stderr)
    out = args.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{STEM}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    text = render(rows, meta)
    (out / f"{STEM}.md").write_text(text)
    print(text)
    print(f"wrote {out / STEM}.md and .json", file=sys.stderr)
    return 1 if meta["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
