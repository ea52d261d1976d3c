"""Re-run the commands shown in the docs and put their current output under them.

    python docs/snippets.py                      # README.md, docs/cli.md, docs/writing-programs.md, docs/arch-format.md
    python docs/snippets.py docs/cli.md          # one file

In a fenced code block whose first line starts with ``$ ``, every ``$ COMMAND`` line is run with bash
in one scratch folder per file, and the lines after it, up to the next ``$`` line or the end of the
block, are replaced by what it printed (stdout, then stderr). Two HTML comments, invisible on a code
host, prepare the folder: ``<!-- snippets: file NAME -->`` right before a fenced block writes that
block to NAME, and ``<!-- snippets: run COMMAND -->`` runs a command whose output is not shown. They
and the blocks run in the order they appear; ``$REPO`` in a command is the repository root. Run it with
twill's environment active (``. .venv/bin/activate``). Outputs change when the arch files or the solver do:
re-run this, read the diff, and fix any prose that quotes a number.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ENV = {**os.environ, "REPO": str(DOCS.parent)}
DEFAULT = [DOCS.parent / "README.md", DOCS / "cli.md", DOCS / "writing-programs.md", DOCS / "arch-format.md"]
DIRECTIVE = re.compile(r"^<!-- snippets: (file|run) (.+?) -->$")
TIMEOUT_S = 600


def run(command: str, cwd: Path) -> list[str]:
    """What ``command`` prints, as lines; a Python traceback means a broken doc command."""
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    text = done.stdout + done.stderr
    if "Traceback (most recent call last)" in text:
        raise SystemExit(f"{command!r} crashed:\n{text}")
    return text.rstrip("\n").splitlines()


def refresh(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="twill-snippets-") as scratch:
        cwd = Path(scratch)
        i, pending_file = 0, None
        while i < len(lines):
            line = lines[i]
            directive = DIRECTIVE.match(line.strip())
            if directive:
                kind, arg = directive.groups()
                if kind == "file":
                    pending_file = arg
                else:
                    run(arg, cwd)
                out.append(line)
                i += 1
                continue
            if not line.startswith("```"):
                out.append(line)
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            block = lines[i + 1:end]
            if pending_file:
                (cwd / pending_file).write_text("\n".join(block) + "\n", encoding="utf-8")
                pending_file = None
            out.append(line)
            if block and block[0].startswith("$ "):
                for command_line in (b for b in block if b.startswith("$ ")):
                    start = time.monotonic()
                    out.append(command_line)
                    out.extend(run(command_line[2:], cwd))
                    print(f"{path.name}: {command_line[2:]}  ({time.monotonic() - start:.1f} s)", flush=True)
            else:
                out.extend(block)
            out.append(lines[end])
            i = end + 1
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


if __name__ == "__main__":
    for doc in [Path(a) for a in sys.argv[1:]] or DEFAULT:
        refresh(doc)
