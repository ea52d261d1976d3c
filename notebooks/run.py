"""Execute the notebooks top to bottom and save them with their outputs.

    python notebooks/run.py            # all notebooks
    python notebooks/run.py 01 03      # those whose names start with 01 or 03

Each notebook runs in a fresh Python 3 kernel with notebooks/ as its working directory, as
Jupyter would run it; a cell that raises stops the run and leaves the file unchanged.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
CELL_TIMEOUT_S = 900


def execute(path: Path) -> tuple[nbformat.NotebookNode, float]:
    """Run the notebook at ``path`` and return it with its outputs, and the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb, time.monotonic() - start


def main(prefixes: list[str]) -> int:
    paths = sorted(p for p in HERE.glob("*.ipynb") if not prefixes or p.name.startswith(tuple(prefixes)))
    if not paths:
        print(f"no notebook in {HERE} starts with {' or '.join(prefixes)}", file=sys.stderr)
        return 2
    for path in paths:
        nb, seconds = execute(path)
        nbformat.write(nb, path)
        print(f"{path.name}: executed in {seconds:.0f} s, saved with its outputs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
