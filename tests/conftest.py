"""Shared pytest setup: make the repository root importable, so tests can ``import examples.kernels``.

The ``gpu`` and ``slow`` markers are registered in ``pyproject.toml`` ([tool.pytest.ini_options]).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
