"""Running kernels: CUDA sources, the GPU backend (CuPy), the CPU backend (a PTX interpreter that
executes warp instructions through the model), the choice between them, and launch isolation.

Imports only :mod:`ptxlab.model`.
"""
