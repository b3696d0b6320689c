"""A kernel's parameter list, read from its PTX, and the check of a launch's arguments against it.

A raw CuPy launch packs whatever it is given: one argument too few and the driver reads the
missing parameter from past the end of the argument buffer. On the H100 that was a segmentation
fault of the whole process, not a Python error. Code that launches kernels without
:func:`ptxlab.run.backends.launch` (the capstone benchmark) checks every launch here first.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from . import cpu
from .ptx.parser import parse_module

__all__ = ["KernelArgumentError", "param_sizes", "check_args"]


class KernelArgumentError(TypeError):
    """A launch's arguments do not match the kernel's parameters; the message says how."""


@lru_cache(maxsize=None)
def param_sizes(source: str, kernel: str) -> tuple[int, ...]:
    """Bytes of each parameter of ``kernel`` in ``source``, in order (compiled to PTX once).

    Raises ``CompilerNotFound`` where no CUDA-to-PTX compiler is installed.
    """
    module = parse_module(cpu.compile_ptx(source))
    fn = module.functions.get(kernel)
    if fn is None or not fn.is_entry:
        entries = sorted(n for n, f in module.functions.items() if f.is_entry)
        raise KernelArgumentError(f"no kernel '{kernel}' in this source (kernels: "
                                  f"{', '.join(entries) or 'none'})")
    return tuple(p.size for p in fn.params)


def _is_array(arg) -> bool:
    return isinstance(arg, np.ndarray) or hasattr(arg, "__cuda_array_interface__")


def check_args(kernel: str, sizes: Sequence[int], args: Sequence) -> None:
    """Raise :class:`KernelArgumentError` unless ``args`` fit parameters of ``sizes`` bytes.

    An array (numpy or device) is passed as a pointer: its parameter must be 8 bytes. A numpy
    scalar is passed by value: its size must equal the parameter's. Anything else cannot be
    packed unambiguously and is refused.
    """
    if len(args) != len(sizes):
        raise KernelArgumentError(
            f"kernel '{kernel}' takes {len(sizes)} parameters ({', '.join(f'{s} B' for s in sizes)})"
            f"; the launch passes {len(args)} arguments")
    for i, (arg, size) in enumerate(zip(args, sizes)):
        if _is_array(arg):
            if size != 8:
                raise KernelArgumentError(f"kernel '{kernel}', parameter {i}: an array is passed "
                                          f"as an 8-byte pointer, the parameter has {size} bytes")
        elif isinstance(arg, np.generic):
            if arg.itemsize != size:
                raise KernelArgumentError(
                    f"kernel '{kernel}', parameter {i} has {size} bytes; the {arg.dtype} scalar "
                    f"passed has {arg.itemsize}")
        else:
            raise KernelArgumentError(
                f"kernel '{kernel}', parameter {i}: a Python {type(arg).__name__}; pass arrays, "
                f"or numpy scalars of the parameter's type (e.g. np.int32)")
