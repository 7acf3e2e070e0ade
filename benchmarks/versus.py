"""polyfuse against what users would pick instead: ``python -m benchmarks run`` (``make bench``).

For every row of :mod:`benchmarks.suite`: build and check each implementation (:mod:`benchmarks.peers`),
calibrate, then time them in interleaved rounds (:mod:`benchmarks.harness`) and report each peer's paired
ratio ``polyfuse time / peer time`` (median and spread over the rounds; below 1 polyfuse is faster), the
median times, GFLOP/s of compute-bound rows and, for memory-bound rows, the effective bandwidth as a
percentage of this machine's copy bandwidth (the same thread count), a copy timed in the row's own rounds.

Writes ``bench[_quick].json``, ``.md`` and ``.png`` (the plot needs matplotlib) to ``--out``, by default
``$XDG_CACHE_HOME/polyfuse/bench`` (``~/.cache/polyfuse/bench``): never into the source tree unless asked.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness, peers
from benchmarks.suite import CASES, CRITERIA, Case

TARGET = "c"
STEM = "bench"
COLUMNS = ("numpy", "torch", "torch.compile", "gcc")
LABELS = {"numpy": "numpy", "torch": "torch eager", "torch.compile": "torch.compile", "gcc": "gcc -O3"}


def default_out() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "polyfuse" / "bench"


@dataclass(frozen=True)
class Settings:
    """How long and how often to time (see benchmarks/README.md)."""

    quick: bool = False
    budget_s: float = 20.0  # timing budget of one row, all implementations together
    sample_s: float = 0.03  # a sample repeats short calls until it lasts this long
    min_rounds: int = 3
    max_rounds: int = 30
    idle_s: float = 0.0  # > 0: one call per sample, after this idle pause
    settle_s: float = 0.15  # pause + untimed call before each sample (harness docstring)
    cold_rounds: int = 5  # then, rows whose calls are all fast: single calls after cold_idle_s idle (0: none)
    cold_idle_s: float = 0.1
    threads: int = 2
    fusion: str = "smart"
    copy_bytes: int = 256 << 20
    total_s: float | None = 17 * 60  # whole run: a row's budget shrinks so that the rows left still fit

    @classmethod
    def for_run(cls, quick: bool, **overrides: Any) -> Settings:
        base = cls(quick=True, budget_s=0.15, sample_s=0.002, min_rounds=3, max_rounds=5, settle_s=0.005, cold_rounds=2, cold_idle_s=0.01,
                       copy_bytes=16 << 20,
                       total_s=None) if quick else cls()
        return cls(**{**base.__dict__, **{k: v for k, v in overrides.items() if v is not None}})


def bench_row(case: Case, s: Settings, peer_names: Sequence[str], cache: Path, budget_s: float | None = None) -> dict[str, Any]:
    """Build, check and time one row (``budget_s`` seconds of timing, default ``s.budget_s``); its record."""
    row = peers.implementations(case, s.quick, peer_names, cache, s.fusion)
    rec: dict[str, Any] = {"workload": case.name, "description": case.description, "sizes": row.sizes,
                           "kernels": row.kernels, "compulsory_bytes": row.nbytes, "memory_bound": case.memory_bound,
                           "skipped": row.skipped, "setup_s": {i.name: i.setup_s for i in row.impls}}
    if not row.impls:
        return rec
    # a memory-bound row times the copy yardstick in its own rounds: the machine's memory bandwidth moves
    # with its load (two copies of one run have differed by a fifth), and a ratio formed within a round cancels it
    yardstick = [harness.copy_impl(s.copy_bytes, s.threads, cache)] if case.memory_bound else []
    impls = [*row.impls, *yardstick]
    inner, once = harness.calibrate(impls, s.sample_s, s.idle_s, s.settle_s)
    rounds = harness.choose_rounds(inner, once, s.budget_s if budget_s is None else budget_s, s.min_rounds, s.max_rounds, s.idle_s, s.settle_s)
    timing = harness.interleaved(impls, rounds, inner, s.idle_s, s.settle_s)
    copy_s = timing.times.pop(harness.COPY, None)
    rec.update(rounds=rounds, order=[n for n in timing.order if n != harness.COPY], inner=timing.inner,
               times_ms={n: harness.quantiles([t * 1e3 for t in ts]) for n, ts in timing.times.items()},
               raw_ms={n: [round(t * 1e3, 5) for t in ts] for n, ts in timing.times.items()})
    if copy_s is not None:
        copy_gbps = [2 * s.copy_bytes / t / 1e9 for t in copy_s]
        rec["copy_GBps"] = harness.quantiles(copy_gbps)
        rec["raw_copy_ms"] = [round(t * 1e3, 5) for t in copy_s]
        rec["pct_of_copy_bw"] = {n: harness.quantiles([100 * row.nbytes / t / 1e9 / c for t, c in zip(ts, copy_gbps)])["median"]
                                 for n, ts in timing.times.items()}
    if "polyfuse" in timing.times:
        rec["ratios"] = harness.paired_ratios(timing)
    if s.cold_rounds and s.idle_s <= 0 and max(once.values()) < harness.SLOW_S:
        cold = harness.interleaved(row.impls, s.cold_rounds, {n: 1 for n in inner}, idle_s=s.cold_idle_s)
        rec["cold_idle_s"] = s.cold_idle_s
        rec["cold_ms"] = {n: harness.quantiles([t * 1e3 for t in ts]) for n, ts in cold.times.items()}
        if "polyfuse" in cold.times:
            rec["cold_ratios"] = harness.paired_ratios(cold)
    med = {n: q["median"] * 1e-3 for n, q in rec["times_ms"].items()}
    if case.flops is not None:
        rec["GFLOPs"] = {n: case.flops(row.sizes) / t / 1e9 for n, t in med.items()}
    rec["GBps"] = {n: row.nbytes / t / 1e9 for n, t in med.items()}
    return rec


def run(quick: bool = False, out: Path | str | None = None, only: Sequence[str] | None = None,
        peer_names: Sequence[str] | None = None, **settings: Any) -> dict[str, Any]:
    """Run the suite (``only``: these rows), write ``bench[_quick].{json,md,png}`` under ``out``, print the
    table, return the results. ``settings`` override :class:`Settings` fields (``None``: the default)."""
    s = Settings.for_run(quick, **settings)
    out_dir = Path(out) if out is not None else default_out()
    cache = out_dir / "build"
    selected = [c for c in CASES if not only or c.name in only]
    unknown = sorted(set(only or ()) - {c.name for c in CASES})
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(c.name for c in CASES)}")
    names = tuple(peer_names) if peer_names is not None else peers.PEERS
    if any(p in names for p in ("torch", "torch.compile")) and peers.available("torch"):
        import torch  # noqa: PLC0415 (optional peer)

        torch.set_num_threads(s.threads)
    started = time.time()
    results: dict[str, Any] = {"benchmark": STEM, "quick": quick, "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
                               "settings": {**s.__dict__, "peers": list(names)}, "machine": harness.machine()}
    results["copy"] = harness.copy_bandwidth(s.copy_bytes, s.threads, cache, budget_s=1.0 if quick else 4.0)
    _log(f"copy bandwidth ({s.threads} threads): {results['copy']['GBps']['median']:.1f} GB/s")
    rows = []
    for k, case in enumerate(selected):
        t0 = time.perf_counter()
        budget = s.budget_s
        if s.total_s is not None:  # half of an even share of the time left is timing; the rest builds and checks
            budget = max(0.0, min(budget, 0.5 * (s.total_s - (time.time() - started)) / (len(selected) - k)))
        rec = bench_row(case, s, names, cache, budget)
        rec["wall_s"] = time.perf_counter() - t0
        rows.append(rec)
        _log(summary_line(rec))
    results["rows"] = rows
    # the copy again at the end: the machine's load moves it; the better of the two is the yardstick
    results["copy_end"] = harness.copy_bandwidth(s.copy_bytes, s.threads, cache, budget_s=1.0 if quick else 4.0)
    results["copy_GBps"] = max(results["copy"]["GBps"]["median"], results["copy_end"]["GBps"]["median"])
    results["wall_s"] = time.time() - started
    results["acceptance"] = acceptance(results)
    results["thread_pools"] = harness.blas_info()  # every pool loaded by now: OpenBLAS, OpenMP runtimes, MKL
    results["machine_after"] = {"load_average": os.getloadavg()}
    write(results, out_dir, STEM + ("_quick" if quick else ""))
    return results


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def summary_line(rec: dict[str, Any]) -> str:
    parts = [f"{rec['workload']}: {rec.get('rounds', 0)} rounds, {rec.get('wall_s', 0):.1f} s"]
    for peer, q in rec.get("ratios", {}).items():
        parts.append(f"{peer} {q['median']:.2f}")
    parts += [f"{k} skipped ({v[:80]})" for k, v in rec["skipped"].items()]
    return "; ".join(parts)


# ----- reports ------------------------------------------------------------------------------------------
def acceptance(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each criterion of :data:`benchmarks.suite.CRITERIA` against this run: per row the measured value
    (median paired ratio, or % of copy bandwidth) and whether it holds; ``holds`` is None when some row was
    not measured (not selected, a peer missing, or a failure)."""
    by_name = {r["workload"]: r for r in results["rows"]}
    out = []
    for c in CRITERIA:
        values: dict[str, float | None] = {}
        for name in c.rows:
            r = by_name.get(name, {})
            if c.peer == "copy":
                values[name] = r.get("pct_of_copy_bw", {}).get("polyfuse")
            else:
                q = r.get("ratios", {}).get(c.peer)
                values[name] = None if q is None else q["median"]
        ok = {n: None if v is None else (v >= c.bound if c.peer == "copy" else (v < c.bound if c.strict else v <= c.bound))
              for n, v in values.items()}
        holds = None if any(v is None for v in ok.values()) else all(ok.values())
        if holds is None and any(v is False for v in ok.values()):
            holds = False
        out.append({"criterion": c.text, "peer": c.peer, "bound": c.bound, "values": values, "ok": ok, "holds": holds})
    return out


def _acceptance_lines(results: dict[str, Any]) -> list[str]:
    lines = ["", "Acceptance criteria of issue 15 measured by this run (median paired ratio, or % of copy bandwidth):", "",
             "| criterion | rows | holds |", "|---|---|---|"]
    for a in results["acceptance"]:
        fmt = "{:.0f} %" if a["peer"] == "copy" else "{:.2f}"
        cells = ", ".join(f"{n} {'—' if v is None else fmt.format(v)}{'' if a['ok'][n] is None else (' ✓' if a['ok'][n] else ' ✗')}"
                          for n, v in a["values"].items())
        verdict = {True: "**yes**", False: "**no**", None: "not measured"}[a["holds"]]
        lines.append(f"| {a['criterion']} | {cells} | {verdict} |")
    return lines


def _ratio_cell(rec: dict[str, Any], peer: str) -> str:
    q = rec.get("ratios", {}).get(peer)
    if q is None:
        why = rec["skipped"].get(peer) or rec["skipped"].get("polyfuse")
        return "—" if why is None else ("n/i" if why == "not installed" else "fails")
    return f"**{q['median']:.2f}** ({q['q1']:.2f}–{q['q3']:.2f})"


def _throughput(rec: dict[str, Any]) -> str:
    if "polyfuse" not in rec.get("times_ms", {}):
        return ""
    if "polyfuse" in rec.get("pct_of_copy_bw", {}):
        return (f"{rec['GBps']['polyfuse']:.1f} GB/s = {rec['pct_of_copy_bw']['polyfuse']:.0f} % copy "
                f"({rec['copy_GBps']['median']:.1f})")
    if "GFLOPs" in rec:
        return f"{rec['GFLOPs']['polyfuse']:.1f} GFLOP/s"
    return ""


def to_markdown(results: dict[str, Any]) -> str:
    m, s, copy = results["machine"], results["settings"], results["copy"]
    cols = [c for c in COLUMNS if c in s["peers"]]
    blas = "; ".join(f"{b.get('internal_api')} {b.get('version') or ''} {b.get('architecture') or ''} "
                     f"({Path(b.get('filepath', '')).name}, {b.get('num_threads')} threads)" for b in results.get("thread_pools") or m["blas"]) or "threadpoolctl not installed"
    lines = [
        f"# polyfuse against numpy, PyTorch and gcc{' (quick sizes)' if results['quick'] else ''}", "",
        f"{m['cpu']}, {m['cpu_count']} CPUs; {s['threads']} threads everywhere; {m['gcc']}; numpy {m['numpy']}; thread pools (threadpoolctl, at the end): {blas}. "
        f"Started {results['started_utc']} UTC, {results['wall_s'] / 60:.1f} min; 1-minute load average "
        f"{m['load_average'][0]:.2f} before, {results['machine_after']['load_average'][0]:.2f} after.", "",
        f"Copy bandwidth ({copy['threads']} threads, {copy['bytes'] >> 20} MiB memcpy, bytes read + written per second): "
        f"{copy['GBps']['median']:.1f} GB/s at the start (range {copy['GBps']['min']:.1f}–{copy['GBps']['max']:.1f}), "
        f"{results['copy_end']['GBps']['median']:.1f} at the end; each memory-bound row also times this copy in its own "
        "rounds and is measured against it.", "",
        "Cells: polyfuse time / peer time, the median of the paired per-round ratios, with the interquartile range; "
        "below 1 polyfuse is faster. Implementations alternate within each round in a rotating order. "
        "Last column: polyfuse's GFLOP/s (compute-bound rows) or effective bandwidth (compulsory bytes per second; "
        "memory-bound rows) as a percentage of the copy bandwidth: the median over the rounds of the ratio to the copy "
        "timed in the same round (in brackets, that copy's median GB/s).", "",
        "| workload | rounds | polyfuse (ms) | " + " | ".join(f"vs {LABELS[c]}" for c in cols) + " | polyfuse throughput |",
        "|---|---:|---:|" + "---:|" * len(cols) + "---|",
    ]
    for r in results["rows"]:
        ms = r.get("times_ms", {}).get("polyfuse")
        ours = f"{ms['median']:.3f}" if ms else "fails"
        lines.append(f"| {r['workload']} | {r.get('rounds', '')} | {ours} | " + " | ".join(_ratio_cell(r, c) for c in cols)
                     + f" | {_throughput(r)} |")
    if results.get("acceptance") and not results["quick"]:  # the criteria speak of the full sizes
        lines += _acceptance_lines(results)
    lines += ["", "Median time per call (ms) and one-off setup (s: polyfuse compile, torch.compile's first call, gcc build); "
              "last column: polyfuse's median single call after an idle pause (rows whose calls all take < 0.25 s; "
              "the peers' cold times and ratios are in the JSON):", "",
              "| workload | what | sizes | kernels | " + " | ".join(["polyfuse", *(LABELS[c] for c in cols)])
              + f" | polyfuse after {s['cold_idle_s'] * 1e3:.0f} ms idle |",
              "|---|---|---|---:|" + "---:|" * (len(cols) + 2)]
    for r in results["rows"]:
        cells = []
        for name in ("polyfuse", *cols):
            q = r.get("times_ms", {}).get(name)
            cells.append(f"{q['median']:.3f} ({r['setup_s'][name]:.1f} s)" if q else "")
        cold = r.get("cold_ms", {}).get("polyfuse")
        cells.append(f"{cold['median']:.3f}" if cold else "")
        sizes = ", ".join(f"{k}={v}" for k, v in r["sizes"].items())
        lines.append(f"| {r['workload']} | {r['description']} | {sizes} | {r['kernels'] if r['kernels'] is not None else ''} | " + " | ".join(cells) + " |")
    problems = [f"- {r['workload']}: {peer}: {why}" for r in results["rows"] for peer, why in r["skipped"].items() if why != "not installed"]
    missing = sorted({peer for r in results["rows"] for peer, why in r["skipped"].items() if why == "not installed"})
    if problems:
        lines += ["", "Not timed (failed to build or gave a wrong result):", "", *problems]
    if missing:
        lines += ["", f"Not installed, skipped: {', '.join(missing)} (`pip install -e '.[bench]'`)."]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> bool:
    """Paired ratios per row and peer (median, IQR whiskers), log scale; False without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415 (optional)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    rows = [r for r in results["rows"] if r.get("ratios")]
    cols = [c for c in COLUMNS if any(c in r["ratios"] for r in rows)]
    if not rows or not cols:
        return False
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) * max(1, len(cols)) / 2 + 1.5))
    height = 0.8 / len(cols)
    for k, peer in enumerate(cols):
        ys, med, lo, hi = [], [], [], []
        for i, r in enumerate(rows):
            q = r["ratios"].get(peer)
            if q is not None:
                ys.append(i + (k - (len(cols) - 1) / 2) * height)
                med.append(q["median"])
                lo.append(q["median"] - q["q1"])
                hi.append(q["q3"] - q["median"])
        ax.barh(ys, [v - 1.0 for v in med], height=height, left=1.0, label=f"vs {LABELS[peer]}")
        ax.errorbar(med, ys, xerr=[lo, hi], fmt="none", ecolor="k", elinewidth=0.8, capsize=2)
    ax.axvline(1.0, color="k", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), [r["workload"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("polyfuse time / peer time (median of paired rounds, IQR whiskers; < 1: polyfuse faster)")
    ax.set_title(f"polyfuse vs peers, {results['settings']['threads']} threads{' (quick sizes)' if results['quick'] else ''}")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(results: dict[str, Any], out_dir: Path, stem: str) -> None:
    harness.write_results(results, out_dir, stem, to_markdown, plot)
