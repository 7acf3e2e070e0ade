"""CUDA data movement made explicit as statements: the pass (``data_movement.py``), its driver and
accumulators (``promotion.py``), shared buffers with copy-in/out (``shared.py``), register windows
(``registers.py``), and their helpers.
"""
