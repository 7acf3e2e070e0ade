"""Fusion: the base tree under a fusion policy (isl's scheduler, ``scheduler.py``), smart fusion by the
traffic model kernel by kernel (``smart.py``), and why kernels were or were not fused (``explain.py``).
"""
