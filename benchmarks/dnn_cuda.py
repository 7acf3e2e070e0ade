"""The CUDA half of ``benchmarks/dnn.py`` (``python -m benchmarks run --target cuda``)."""

from benchmarks.dnn import run_cuda as run

TARGET = "cuda"
__all__ = ["TARGET", "run"]
