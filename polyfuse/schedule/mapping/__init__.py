"""Mapping kernels onto the machine: the host/kernel split with C parallel loops and CUDA grids and
blocks (``kernels.py``), and CUDA's cooperative rows (``rows.py``, ``row_staging.py``).
"""
