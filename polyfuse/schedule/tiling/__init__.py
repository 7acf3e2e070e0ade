"""Tiling levels shared by the targets: tile sizes and rectangular tiling (``sizes.py``), and the C kernel
shapes: the point-loop interchange (``interchange.py``), register micro-tiles for contractions
(``microtile.py``) and row-wise kernels (``rowwise.py``).
"""
