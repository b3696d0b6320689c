"""PTX Matrix Lab: the warp-level matrix instructions as data, a bit-exact model, and the tools
that teach and grade them.

Submodules are imported on demand so that ``import ptxlab`` stays fast and never touches CuPy.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["layouts", "emulator", "sources", "__version__"]
