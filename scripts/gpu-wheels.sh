#!/usr/bin/env bash
# Bring polyfuse's GPU-side Python dependencies to the GPU machine, which has no internet and lacks
# islpy, pytools, platformdirs, mako, siphash24 and pycuda (see shared/GPU.md).
#
#   scripts/gpu-wheels.sh download     on the development machine, in the project root, once:
#                                      downloads the wheels and the pycuda source archive into .whl/
#                                      (and keeps .whl/ out of git through .git/info/exclude)
#   scripts/gpu-wheels.sh install      on the GPU machine, in each device call that carries .whl:
#                                      installs the wheels into $SITE (default /tmp/site) and builds
#                                      pycuda from its archive there (1-2 minutes; skipped when
#                                      $SITE already has a working pycuda, as on a warm machine)
#
# A device call then reads, for example:
#   bash scripts/gpu-wheels.sh install && export PYTHONPATH=/tmp/site:$PWD && python3 -m pytest -m gpu -q
#
# Versions: islpy and pycuda follow the pins in pyproject.toml; the helpers (pytools, platformdirs,
# mako, siphash24) are pinned below to versions known to satisfy them.
set -euo pipefail

cd "$(dirname "$0")/.."
WHL=.whl
SITE=${SITE:-/tmp/site}

pin() {  # the version pinned in pyproject.toml for package $1
    local v
    v=$(grep -oE "\"$1==[^\"]+\"" pyproject.toml | head -n1 | tr -d '"' | cut -d= -f3)
    [[ -n $v ]] || { echo "gpu-wheels: no pin for $1 in pyproject.toml" >&2; exit 1; }
    echo "$v"
}

HELPERS=(pytools==2026.1.1 platformdirs==4.14.5 mako==1.4.3 siphash24==1.9 "pycparser==$(pin pycparser)")

download() {
    local py=${PYTHON:-python3}
    mkdir -p "$WHL"
    if [[ -d .git ]] && ! grep -qxF "/$WHL/" .git/info/exclude 2>/dev/null; then
        echo "/$WHL/" >> .git/info/exclude
    fi
    "$py" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$WHL" "islpy==$(pin islpy)" "${HELPERS[@]}"
    # --no-binary for pycuda alone: with :all: pip would also build its build dependencies from source.
    "$py" -m pip download --no-deps --no-binary=pycuda -d "$WHL" "pycuda==$(pin pycuda)"
    ls -l "$WHL"
}

have_pycuda() {
    PYTHONPATH="$SITE" python3 -c "import pycuda.driver" 2>/dev/null
}

build_pycuda() {
    local archive src libdir
    archive=$(ls "$WHL"/pycuda-*.tar.gz | head -n1)
    src=$(mktemp -d /tmp/pycuda-src.XXXXXX)
    tar -xzf "$archive" -C "$src"
    cd "$src"/pycuda-*
    local configure=(python3 configure.py --cuda-root="${CUDA_ROOT:-/usr/local/cuda}" --no-cuda-enable-curand)
    local install=(python3 -m pip install -q --no-build-isolation --no-deps --no-index --target "$SITE" .)
    if "${configure[@]}" && PYTHONPATH="$SITE" "${install[@]}"; then
        return 0
    fi
    # Linking failed on -lcuda: point the build at the driver library the machine has. When only the
    # versioned libcuda.so.1 exists, link through a private folder holding an unversioned name for it.
    echo "gpu-wheels: first pycuda build failed; retrying with the driver library's folder" >&2
    libdir=$(ldconfig -p | grep -m1 -E 'libcuda\.so(\.1)? ' | sed 's/.*=> //' | xargs -r dirname)
    if [[ -z $libdir ]]; then
        libdir="${CUDA_ROOT:-/usr/local/cuda}/lib64/stubs"
    elif [[ ! -e $libdir/libcuda.so ]]; then
        mkdir -p /tmp/cudadrv && ln -sf "$libdir/libcuda.so.1" /tmp/cudadrv/libcuda.so && libdir=/tmp/cudadrv
    fi
    rm -f siteconf.py
    "${configure[@]}" --cudadrv-lib-dir="$libdir"
    PYTHONPATH="$SITE" "${install[@]}"
}

install() {
    compgen -G "$WHL/*.whl" > /dev/null || { echo "gpu-wheels: no wheels in $WHL (run 'download' first and carry .whl)" >&2; exit 1; }
    mkdir -p "$SITE"
    python3 -m pip install -q --no-index --no-deps --upgrade --target "$SITE" "$WHL"/*.whl
    if have_pycuda; then
        echo "gpu-wheels: pycuda already built in $SITE"
    else
        (build_pycuda)
    fi
    PYTHONPATH="$SITE:$PWD" python3 -c "import islpy, pycuda.driver as d; d.init(); print('gpu-wheels: ok:', d.Device(0).name(), 'islpy', islpy.__version__)"
}

case "${1:-}" in
    download) download ;;
    install) install ;;
    *) echo "usage: $0 download|install" >&2; exit 2 ;;
esac
