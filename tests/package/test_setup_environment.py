"""What ``./lab setup`` leaves in the environment, beyond the packages pyproject names."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="the environment is not the one ./lab setup made")
def test_the_setup_leaves_out_the_parsers_every_jupyter_start_would_build():
    """jsonschema builds rfc3987-syntax's Earley parsers on import, for a format no notebook
    schema uses (about 3 s per start of nbformat, nbgrader and Jupyter): the setup removes it,
    and jsonschema's format checker still checks the rest."""
    assert importlib.util.find_spec("rfc3987_syntax") is None, (
        "rfc3987-syntax is installed: ./lab setup removes it (see leave_out_slow_imports)")
    from jsonschema import Draft7Validator

    checker = Draft7Validator.FORMAT_CHECKER
    assert checker.conforms("2026-11-28", "date") and not checker.conforms("28.11.", "date")

