"""``python -m ptxlab.cli``: the ``ptxlab`` command."""
import sys

from . import main

sys.exit(main())
