"""Backend notes: the feedback says where the kernels of a graded notebook ran.

Every cell whose kernels were launched (by the notebook in the sandbox, or by the judge for a
kernel answer) gets a line saying where they ran -- the GPU, or the CPU model on a machine
without one -- and the notebook a note at the top summing it up. The grading steps before this
one leave their launch records in ``resources[LAUNCHES_KEY]``; :class:`BackendNotes` writes
them into the notebook, so this is the one step that words them.
"""
from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor
from nbformat.notebooknode import NotebookNode

from ..teach.nbgrader_cells import grade_id

__all__ = ["BackendNotes", "BACKEND_NOTE_TAG", "LAUNCHES_KEY", "grading_note",
           "note_cell_launches"]

#: Cell tag of the note the grader puts at the top of a graded notebook.
BACKEND_NOTE_TAG = "ptxlab-grading-note"
#: Where the grading steps keep a notebook's launch records in nbconvert's ``resources``:
#: ``[(grade id or cell index, [record, ...]), ...]``.
LAUNCHES_KEY = "ptxlab_kernel_launches"


class BackendNotes(NbGraderPreprocessor):
    """Write the launch records of the steps before into the notebook."""

    def preprocess(self, nb: NotebookNode, resources: dict):
        launches = (resources or {}).get(LAUNCHES_KEY) or []
        every: list[dict] = []
        for where, records in launches:
            cell = _find_cell(nb, where)
            if cell is not None and records:
                note_cell_launches(cell, records)
            every.extend(records)
        _note_notebook_backend(nb, every)
        return nb, resources


def _find_cell(nb: NotebookNode, where) -> NotebookNode | None:
    if isinstance(where, int):
        return nb.cells[where] if 0 <= where < len(nb.cells) else None
    for cell in nb.cells:
        if grade_id(cell) == where:
            return cell
    return None


def _where(record: dict) -> str:
    backend, device = record.get("backend", ""), record.get("device", "")
    if backend == "gpu":
        return f"the GPU, {device}" if device else "the GPU"
    if backend == "cpu":
        return "the CPU backend (PTX interpreter)"
    return "no backend (the launch failed before one was chosen)"


def _launch_summary(records: list[dict]) -> str:
    """``"the GPU, NVIDIA H100 ... (2 launches of 'load_tile')"``, per place the kernels ran."""
    groups: dict[str, list[dict]] = {}
    for rec in records:
        groups.setdefault(_where(rec), []).append(rec)
    parts = []
    for where, recs in groups.items():
        kernels = ", ".join(dict.fromkeys(f"'{r.get('kernel', '?')}'" for r in recs))
        n = len(recs)
        failed = sum(r.get("outcome") != "ok" for r in recs)
        detail = f"{n} launch{'es' if n != 1 else ''} of {kernels}"
        if failed:
            detail += f", {failed} of them stopped or failed"
        parts.append(f"{where} ({detail})")
    return "; ".join(parts)


def note_cell_launches(cell: NotebookNode, records: list[dict]) -> None:
    """A line in the cell's output, and its metadata, saying where its kernels ran."""
    cell.setdefault("outputs", []).append(NotebookNode(
        output_type="stream", name="stdout",
        text=f"[grader] the kernels of this cell ran on {_launch_summary(records)}\n"))
    meta = cell.setdefault("metadata", NotebookNode()).setdefault("ptxlab", NotebookNode())
    meta["kernel_launches"] = [
        {k: r.get(k) for k in ("kernel", "backend", "device", "outcome", "seconds", "route")}
        for r in records]


def grading_note(records: list[dict]) -> str:
    """The note at the top of a graded notebook: where its kernels ran, and why there."""
    backends = sorted({r.get("backend", "") for r in records if r.get("backend")})
    summary = _launch_summary(records)
    if backends == ["cpu"]:
        why = next((r.get("reason", "") for r in records if r.get("reason")), "")
        why = why.removeprefix("auto: ").removesuffix("; using the CPU model")
        text = ("**Grading note.** The grading machine has no GPU that could run your kernels"
                + (f" ({why})" if why else "") + ", so they ran on " + summary + ", which "
                "reproduces each PTX instruction's result bit for bit but not its speed.")
    else:
        text = f"**Grading note.** Your kernels ran on {summary}."
    return text


def _note_notebook_backend(nb: NotebookNode, records: list[dict]) -> None:
    """A note at the top of the graded notebook (so in the feedback) naming the backend."""
    nb.cells = [c for c in nb.cells if BACKEND_NOTE_TAG not in c.get("metadata", {}).get("tags", [])]
    if not records:
        return
    backends = sorted({r.get("backend", "") for r in records if r.get("backend")})
    nb.metadata.setdefault("ptxlab", {})["kernel_backends"] = backends
    from nbformat.v4 import new_markdown_cell

    note = new_markdown_cell(grading_note(records), metadata={"tags": [BACKEND_NOTE_TAG]})
    if nb.get("nbformat", 4) == 4 and nb.get("nbformat_minor", 5) < 5:
        note.pop("id", None)           # cell ids exist from nbformat 4.5 on
    nb.cells.insert(0, note)
