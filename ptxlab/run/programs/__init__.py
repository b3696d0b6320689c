"""Whole CUDA programs as printed: ``ptxlab run FILE.cu`` and the ``%%cuda`` cell magic."""
