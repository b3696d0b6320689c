"""The tiles in shared memory, under their old name: the module is :mod:`ptxlab.teach.tiles`.

It moved below the checks and the diagnosis (which name places in a tile), so that they need not
import the exercises. Notebooks, tests and the widgets still say ``ptxlab.exercises.tiles``;
this name is that module itself, not a copy, so patching or pickling through either name is the
same thing (as with the package's face names).
"""
from __future__ import annotations

import sys

from .. import tiles as _tiles
from ..tiles import (ELEM_BYTES, PLACEMENTS, Placement, Tile, mirrored,  # noqa: F401
                     mma_a, mma_b_col_major, mma_b_row_major, mma_cd_f16, side_by_side, stacked)

sys.modules[__name__] = _tiles
