#!/usr/bin/env bash
# Everything a session does on the GPU machine, in one device call (see shared/GPU.md and docs/gpu.md):
#
#   bash scripts/gpu-session.sh STAGE...      stages, in the order given:
#     install      the wheels of .whl/ and pycuda (unpacked from .whl/pycuda-site.tgz when an earlier
#                  call brought that back; else built from its archive, and then $OUT/pycuda-site.tgz
#                  so that the next call can skip the 1-2 minute build)
#     acceptance   benchmarks/cuda_acceptance.py ($ACCEPTANCE_ARGS passed on, e.g. "--sweep rows"):
#                  gemm against cuBLAS, softmax/layernorm/sum against
#                  the copy bandwidth, the micro-tile sweep           -> $OUT/cuda_acceptance.{json,md}
#     tests        every gpu-marked test (pytest -m gpu, 12 workers)  -> $OUT/gpu_tests.log
#     dnn          the DNN workloads against torch, torch.compile, CuPy -> $OUT/dnn_cuda.{json,md}
#     sanitizer    compute-sanitizer racecheck and memcheck on nussinov and a micro-tiled gemm
#                                                                     -> $OUT/sanitizer.log
# Each stage has a time limit (seconds) in $LIMIT_<STAGE> and a default below; a stage that fails or runs
# out of time is reported and the next one runs. Carry .whl in the device call:
#   run(command="bash scripts/gpu-session.sh install acceptance tests", carry=[".whl"])
set -uo pipefail

cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export OUT SITE=${SITE:-/tmp/site} PYTHONUNBUFFERED=1
export PYTHONPATH="$SITE:$PWD"

stage() {  # stage NAME DEFAULT_LIMIT COMMAND...
    local name=$1 limit=$2 var t0 rc
    shift 2
    var="LIMIT_${name^^}"
    limit=${!var:-$limit}
    t0=$(date +%s)
    echo "== $name (limit ${limit}s)"
    timeout "$limit" "$@"
    rc=$?
    echo "== $name: rc $rc after $(( $(date +%s) - t0 ))s"
    return $rc
}

install_stage() {
    if [[ -f .whl/pycuda-site.tgz ]]; then
        mkdir -p "$SITE" && tar -xzf .whl/pycuda-site.tgz -C "$SITE"
        bash scripts/gpu-wheels.sh install || return 1
        return 0  # (no tarball back: the call brings back at most 8 files, and the sweeps' stages fill them)
    fi
    bash scripts/gpu-wheels.sh install || return 1
    (cd "$SITE" && tar -czf "$OUT/pycuda-site.tgz" pycuda pycuda-*.dist-info 2>/dev/null) || true
}

sanitizer_stage() {
    local probe='
import numpy as np, polyfuse as pf
from examples import kernels as ex
from tests.test_gpu_device import test_micro_tiles_on_the_gpu_match_the_reference as micro
from tests.test_gpu_device import test_polybench_kernel_on_the_gpu_matches_the_reference as pb
pb("nussinov", False, 129); pb("nussinov", True, 37); micro(ex.gemm, 129, 67, 65, False)
print("probe done")'
    compute-sanitizer --tool racecheck --racecheck-report all python3 -c "$probe"
    compute-sanitizer --tool memcheck python3 -c "$probe"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    for s in "$@"; do
        case $s in
            install) stage install 240 bash -c "$(declare -f install_stage); install_stage" || exit 1 ;;
            acceptance) stage acceptance 300 python3 -m benchmarks.cuda_acceptance --out "$OUT" ${ACCEPTANCE_ARGS:-} ;;
            tests) stage tests 180 python3 -m pytest -m gpu -n 12 -q -p no:cacheprovider --timeout 120 \
                       tests/test_gpu_device.py tests/test_cuda_runtime.py tests/test_graph.py > "$OUT/gpu_tests.log" 2>&1
                   tail -n 30 "$OUT/gpu_tests.log" ;;
            dnn) stage dnn 150 python3 -m benchmarks run --target cuda --out "$OUT" ;;
            sanitizer) stage sanitizer 90 bash -c "$(declare -f sanitizer_stage); sanitizer_stage" > "$OUT/sanitizer.log" 2>&1; tail -n 30 "$OUT/sanitizer.log" ;;
            *) echo "gpu-session: unknown stage $s" >&2 ;;
        esac
    done
} 2>&1 | tee "$OUT/session.log"
