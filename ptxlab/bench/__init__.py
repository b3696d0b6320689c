"""The capstone benchmark (``ptxlab bench``): GEMM and transpose kernels timed against cuBLAS,
the mma.sync ceiling and copy bandwidth, the bank-conflict study, and its report.
"""
