"""A fuzzing campaign that keeps going: ``python -m tests.fuzz.stats N [--all-configs] [--log FILE]``.

Unlike the pytest slices it does not stop (or shrink) at the first failure: every program is checked, each
failure is written to ``tests/regressions/`` unshrunk, and a JSON line per program goes to the log, with a
summary (programs, failures by kind, wall and CPU time) at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import harness
from tests.fuzz.strategies import programs, run_settings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--all-configs", action="store_true", help="all eight (fusion, tile) per program, else one drawn")
    ap.add_argument("--log", default="fuzz-stats.jsonl")
    ap.add_argument("--salt", default="stats")
    args = ap.parse_args()
    counts = {"programs": 0, "variants": 0, "failures": 0}
    start = time.time()
    log = open(args.log, "w")

    @settings(max_examples=args.n, deadline=None, database=None, derandomize=True, phases=["generate"],
              suppress_health_check=list(HealthCheck))
    @given(program=programs(), run=run_settings(),
           config=st.tuples(st.sampled_from(harness.FUSIONS), st.sampled_from(harness.TILES)))
    def one(program, run, config):
        sizes = {k: run[k] for k in program.params}
        chosen = harness.ALL_CONFIGS if args.all_configs else [config]
        t0 = time.time()
        record = {"k": counts["programs"], "statements": program.statements, "configs": len(chosen)}
        try:
            harness.check_source(program.source, sizes, run["seed"], chosen)
            record["ok"] = True
        except Exception as e:  # noqa: BLE001 - every failure is recorded and the campaign goes on
            counts["failures"] += 1
            record.update(ok=False, error=f"{type(e).__name__}: {str(e)[:500]}",
                          saved=str(harness.save_regression(program.source, sizes, run["seed"], e)))
        record["seconds"] = round(time.time() - t0, 2)
        counts["programs"] += 1
        counts["variants"] += len(chosen)
        log.write(json.dumps(record) + "\n")
        log.flush()

    one.hypothesis.inner_test._hypothesis_internal_add_digest = args.salt.encode()
    one()
    cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    summary = {**counts, "wall_s": round(time.time() - start, 1), "cpu_s": round(cpu, 1), "pid": os.getpid()}
    log.write(json.dumps({"summary": summary}) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
