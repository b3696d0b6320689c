#!/usr/bin/env python3
"""Build course/source/<a>/<a>.ipynb from course/text/<a>.py (outputs stripped), or check them.

    python3 tools/course/course_build.py          # write the notebooks that changed
    python3 tools/course/course_build.py --check  # exit 1 if a notebook differs or has outputs
    python3 tools/course/course_build.py --from-notebooks  # write text forms from edited notebooks
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ptxlab.authoring import course_notebooks as nt  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--from-notebooks", action="store_true")
    args = ap.parse_args()
    if args.check:
        problems = nt.check_sync()
        print("\n".join(problems) or "notebooks are in sync and output-free")
        return 1 if problems else 0
    if args.from_notebooks:
        import nbformat
        for name in nt.assignments():
            nb = nbformat.read(str(nt.notebook_path(name)), as_version=4)
            (nt.COURSE_DIR / "text" / f"{name}.py").write_text(nt.notebook_to_percent(nb))
            print(f"wrote text/{name}.py")
    for path in nt.build_all():
        print(f"wrote {path.relative_to(nt.COURSE_DIR.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
