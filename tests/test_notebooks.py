"""The notebooks in notebooks/ run top to bottom, and the committed copies carry their outputs.

Each notebook is executed in a fresh Python 3 kernel (nbclient), from the notebooks/ folder as
Jupyter would run it, into memory: the committed file is not rewritten (``python notebooks/run.py``
does that). A cell that raises fails the test with the cell and its traceback. The solves inside
have time limits, so the whole file takes a few minutes on two cores.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
IDS = [p.name.split("_")[0] for p in NOTEBOOKS]
CELL_TIMEOUT_S = 900


def outputs(nb: nbformat.NotebookNode, mime: str) -> list[str]:
    """Every output of ``mime`` type ("text/plain", "image/png", or "stream" for printed text)."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if mime == "stream" and out.output_type == "stream":
                found.append(out.text)
            elif out.output_type in ("execute_result", "display_data") and mime in out.data:
                found.append(out.data[mime])
    return found


def test_there_are_four_notebooks():
    """The notebooks of issues 7 and 17 exist: Hopper, Blackwell, adding an architecture, from a Triton kernel."""
    assert IDS == ["01", "02", "03", "04"], [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_shows_its_outputs(path):
    """The committed copy was executed and saved with its outputs (they read well on a code host)."""
    # given
    nb = nbformat.read(path, as_version=4)
    # when
    code = [c for c in nb.cells if c.cell_type == "code"]
    # then
    assert code and all(c.execution_count is not None for c in code), f"{path.name}: run notebooks/run.py"
    assert outputs(nb, "image/png"), f"{path.name}: no chart among the saved outputs"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_runs_top_to_bottom(path):
    """Every cell runs without an error, a chart is drawn, and a solved II is printed."""
    # given
    nb = nbformat.read(path, as_version=4)
    # when
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    # then
    printed = "".join(outputs(nb, "stream"))
    assert outputs(nb, "image/png"), f"{path.name}: no chart was drawn"
    assert "II = " in printed and ("(optimal" in printed or "(feasible" in printed), printed[-2000:]
