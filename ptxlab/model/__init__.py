"""The model: the instructions' fragment layouts as data, their bit-exact emulation on numpy, the
tensor core's arithmetic, shared-memory tile layouts and the bank model.

The bottom layer: pure numpy, it imports nothing else of ``ptxlab``.
"""
