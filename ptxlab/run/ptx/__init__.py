"""Run CUDA kernels without a GPU: compile to PTX (NVRTC) and interpret the PTX on numpy.

``nvrtc`` finds a compiler and caches PTX; ``parser`` reads PTX into instructions; ``program``
decodes them once into Python closures; ``interpreter`` runs a launch block by block, warp by
warp, each warp's 32 lanes as numpy vectors. Warp-collective matrix instructions are executed
by :mod:`ptxlab.model.emulator`, so the layouts live in one place only.

The instruction families (``instructions/``) compile against an interface below both the
decoder and the interpreter: ``decode_context`` (code entries, their kinds, operand access),
``lanes`` (lane masks) and ``flow`` (a warp's flow through one function); a ``call`` runs its
callee through the warp it is given. So nothing here imports in a circle.
"""
from __future__ import annotations
