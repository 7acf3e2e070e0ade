# polyfuse: `make demo` and `make test` work on a fresh machine (they create .venv when it is missing).
#
# The venv is (re)installed only when pyproject.toml or setup.cfg change: $(STAMP) records the install.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed
export PYTHONDONTWRITEBYTECODE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: all venv demo test pytest lint fuzz bench bench-quick bench-polybench clean

all: test

$(STAMP): pyproject.toml setup.cfg
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# gpu-marked tests skip themselves where there is no GPU or pycuda; nothing is deselected here.
test: pytest lint

pytest: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow" --durations=15

lint: $(STAMP)
	$(BIN)/ruff check polyfuse

# Long property/fuzz tests (marked `slow`). pytest exits 5 when none are collected: not a failure here.
FUZZ_N ?= 2000
fuzz: $(STAMP)
	FUZZ_N=$(FUZZ_N) $(PY) -m pytest -q -n 2 -m slow || test $$? -eq 5

# polyfuse against numpy, PyTorch eager, torch.compile and gcc -O3 (benchmarks/README.md). Results go to
# $$XDG_CACHE_HOME/polyfuse/bench unless BENCH_OUT names a folder; BENCH_ARGS passes more options
# (e.g. BENCH_ARGS="--only matmul_1024,softmax_4096x1024 --rounds 9"). bench-quick: tiny sizes, about a minute.
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_OUT ?=
BENCH_ARGS ?=
BENCH_RUN = $(PY) -m benchmarks run $(if $(BENCH_OUT),--out $(BENCH_OUT)) $(BENCH_ARGS)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BENCH_RUN)

bench-quick: $(BENCH_STAMP)
	$(BENCH_RUN) --quick

# PolyBench-style kernels at MEDIUM and LARGE, 1 and 2 threads, against gcc -O3, Polly (clang-16) and Pluto
# (polycc, found through $$POLYCC or the PATH); peers not installed are skipped. About 45 minutes on 2 cores.
# PB_ARGS passes more options (e.g. PB_ARGS="--sizes MEDIUM --only gemm,lu --threads 2").
PB_ARGS ?=
# (unlimited stack: Polly's pattern-matched 3mm keeps an 8.8 MB packed array on the main thread's stack)
bench-polybench: $(STAMP)
	ulimit -s unlimited; $(PY) -m benchmarks polybench $(if $(BENCH_OUT),--out $(BENCH_OUT)) $(PB_ARGS)

# CUDA without a GPU: ptxas -v resources, occupancy and modelled bytes of every DNN workload and PolyBench-style
# kernel (benchmarks/cuda_static.py; needs nvcc; about 1.5 minutes).
.PHONY: bench-cuda-static
bench-cuda-static: $(STAMP)
	$(PY) -m benchmarks cuda-static $(if $(BENCH_OUT),--out $(BENCH_OUT))

# Compile time per kernel and stage, source -> C and source -> loaded library, next to clang-16 -mllvm -polly
# where it is installed (benchmarks/compile_time.py; a few minutes). Results go to $$XDG_CACHE_HOME/polyfuse/bench
# unless BENCH_OUT names a folder; COMPILE_ARGS passes more options (e.g. COMPILE_ARGS="--only deriche --repeat 5").
.PHONY: bench-compile
COMPILE_ARGS ?=
bench-compile: $(STAMP)
	$(PY) -m benchmarks.compile_time $(if $(BENCH_OUT),--out $(BENCH_OUT)) $(COMPILE_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
