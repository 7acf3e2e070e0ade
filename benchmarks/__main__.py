"""Command line of the benchmarks: ``python -m benchmarks run [--quick] [--out DIR] [options]``.

``--target c`` (the default) runs :mod:`benchmarks.versus`: polyfuse's C back end against numpy, PyTorch
eager, ``torch.compile`` and gcc -O3, in interleaved rounds. ``--target cuda`` runs the CUDA benchmark
(:mod:`benchmarks.dnn_cuda`, needs a GPU). See benchmarks/README.md.

The C benchmark runs in an environment of its own: ``--threads`` (default 2) OpenMP/OpenBLAS/MKL threads and
neither ``OPENBLAS_CORETYPE`` nor ``OPENBLAS_L2_SIZE`` (set on some machines for the test suite; they pin a
slower OpenBLAS kernel). Those are read when the libraries load, so the process re-executes itself once
with that environment (``POLYFUSE_BENCH_ENV=1`` marks the second run; ``--keep-env`` skips all this).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "POLYFUSE_BENCH_ENV"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the benchmarks and write their results under --out")
    run.add_argument("--target", choices=("c", "cuda", "all"), default="c", help="which back end's benchmarks (default: c)")
    run.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds (for CI)")
    run.add_argument("--out", type=Path, help="results folder (default: $XDG_CACHE_HOME/polyfuse/bench)")
    run.add_argument("--only", help="comma-separated workloads (default: all)")
    run.add_argument("--peers", help="comma-separated peers among numpy,torch,torch.compile,gcc (default: all installed)")
    run.add_argument("--rounds", type=int, help="exactly this many rounds per workload (default: as many as --budget allows)")
    run.add_argument("--budget", type=float, help="timing seconds per workload (default: 20; quick: 0.15)")
    run.add_argument("--total-min", type=float, help="whole run in about this many minutes: rows' budgets shrink to fit (default: 17)")
    run.add_argument("--idle-ms", type=float, default=0.0, help="time single calls, each after this idle pause (cold calls)")
    run.add_argument("--threads", type=int, default=2, help="threads for every implementation (default: 2)")
    run.add_argument("--fusion", default="smart", help="polyfuse's fusion policy (default: smart)")
    run.add_argument("--keep-env", action="store_true", help="use this process's environment as it is")
    st = sub.add_parser("cuda-static", help="CUDA without a GPU: ptxas resources, occupancy, modelled bytes (benchmarks/cuda_static.py)")
    st.add_argument("--out", type=Path, help="results folder (default: $XDG_CACHE_HOME/polyfuse/bench)")
    st.add_argument("--arch", default="sm_90", help="architecture for ptxas and the occupancy (default: sm_90)")
    pb = sub.add_parser("polybench", help="PolyBench-style kernels against gcc -O3, Polly and Pluto (benchmarks/polybench.py)")
    pb.add_argument("--sizes", default="MEDIUM,LARGE", help="PolyBench datasets among MINI,SMALL,MEDIUM,LARGE (default: MEDIUM,LARGE)")
    pb.add_argument("--threads", default="1,2", help="comma-separated thread counts (default: 1,2)")
    pb.add_argument("--out", type=Path, help="results folder (default: $XDG_CACHE_HOME/polyfuse/bench)")
    pb.add_argument("--only", help="comma-separated kernels (default: all of tests/kernels)")
    pb.add_argument("--impls", help="comma-separated among gcc,polly,polly-par,pluto,polyfuse (default: all; gcc is the reference)")
    pb.add_argument("--rounds", type=int, help="exactly this many rounds per kernel, size and thread count")
    pb.add_argument("--idle-ms", type=float, default=100.0, help="idle pause before each cold call (default: 100)")
    pb.add_argument("--keep-env", action="store_true", help="use this process's environment as it is")
    return parser


def _split(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def _reexec_with_bench_environment(argv: list[str], threads: int) -> None:
    """Re-execute ``python -m benchmarks argv`` in the benchmark environment, unless this is that run."""
    if os.environ.get(MARK):
        return
    from benchmarks.harness import prepare_environment  # noqa: PLC0415

    env = prepare_environment(threads)
    env[MARK] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "benchmarks", *argv], env)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    status = 0
    if args.command == "polybench":
        return _polybench(args, argv)
    if args.command == "cuda-static":
        from benchmarks import cuda_static  # noqa: PLC0415

        cuda_static.run(args.out, args.arch)
        return 0
    if args.target in ("c", "all"):
        if not args.keep_env:
            _reexec_with_bench_environment(argv, args.threads)
        from benchmarks import versus  # noqa: PLC0415 (after the environment is settled)

        rounds = args.rounds
        results = versus.run(quick=args.quick, out=args.out, only=_split(args.only), peer_names=_split(args.peers),
                             budget_s=args.budget, min_rounds=rounds, max_rounds=rounds, idle_s=args.idle_ms / 1e3,
                             threads=args.threads, fusion=args.fusion,
                             total_s=None if args.total_min is None else args.total_min * 60)
        if any("polyfuse" in r["skipped"] for r in results["rows"]):
            status = 1  # polyfuse failed to compile or gave a wrong result somewhere: the table says where
    if args.target in ("cuda", "all"):
        from benchmarks import dnn_cuda  # noqa: PLC0415

        dnn_cuda.run(quick=args.quick, out=args.out)
    return status


def _polybench(args: argparse.Namespace, argv: list[str]) -> int:
    threads = [int(t) for t in _split(args.threads) or ["1", "2"]]
    if not args.keep_env:
        _reexec_with_bench_environment(argv, max(threads))
    from benchmarks import polybench  # noqa: PLC0415 (after the environment is settled)

    settings = polybench.Settings(idle_s=args.idle_ms / 1e3, rounds=args.rounds)
    impls = _split(args.impls) or list(polybench.IMPLS)
    if "gcc" not in impls:
        impls.insert(0, "gcc")  # the reference every result is checked against
    results = polybench.run(sizes=[s.upper() for s in _split(args.sizes) or ["MEDIUM", "LARGE"]], threads=threads,
                            out=args.out, only=_split(args.only), impls=impls, settings=settings)
    return 1 if any("polyfuse" in r["skipped"] for r in results["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
