"""Process plumbing shared by the bench/gpu/codegen_*.py harnesses (no torch needed to import it).

Each kernel of those harnesses runs in a child process of the same script: a hang is bounded by a
timeout and a device fault (which leaves the CUDA context unusable for the rest of its process) costs
that kernel only. The child prints one ``RESULT <json>`` line; the parent relays the child's log and
keeps the last such line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path


def log(msg: str) -> None:
    print(msg, flush=True)


def _text(out: str | bytes | None) -> str:
    """A timed-out child's output: subprocess hands it over as bytes even with ``text=True``."""
    if out is None:
        return ""
    return out.decode(errors="replace") if isinstance(out, bytes) else out


def child(script: str | Path, args: list[str], timeout: float) -> dict:
    """Run ``python script args`` and return the dict of its last ``RESULT`` line, or why there is none."""
    try:
        p = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        return {"ok": False, "error": f"timed out after {timeout} s (hang?)",
                "log": (_text(err.stdout) + _text(err.stderr))[-4000:]}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    relay = "\n".join(ln for ln in p.stdout.splitlines() if not ln.startswith("RESULT ")).rstrip()
    if relay:  # the child's progress lines; its RESULT JSON goes to the results file, not the log
        log(relay)
    if p.returncode or not lines:
        return {"ok": False, "error": f"exit {p.returncode}", "log": (p.stdout + p.stderr)[-4000:]}
    return json.loads(lines[-1][len("RESULT "):])


def respond(work: Callable[[], dict]) -> int:
    """The child's side of ``child``: print ``RESULT <json>`` of ``work()``, or its traceback and exit 1."""
    try:
        print("RESULT " + json.dumps(work()), flush=True)
    except Exception:  # the parent records the failure from the exit status and the log
        traceback.print_exc()
        return 1
    return 0


def generate(schedules: list[str], where: Path, fit: bool = False) -> list[Path]:
    """Write the kernel module of each schedule with ``twill codegen`` into ``where``, one file per schedule;
    ``fit``: as ``twill codegen --fit-registers`` (budgets raised where ptxas spills; needs triton here)."""
    from twill.codegen import generate_file
    from twill.codegen.fit import fit_registers
    from twill.schedule import Schedule

    where.mkdir(parents=True, exist_ok=True)
    out = []
    for s in schedules:
        path = where / f"{Path(s).stem}.py"
        if fit:
            path.write_text(fit_registers(Schedule.read(s), Path(s).name).generated.source, encoding="utf-8")
        else:
            generate_file(s, path)
        out.append(path)
    return out


def device_info() -> dict:
    """GPU name and the torch/Triton versions, for the top of a results file."""
    import torch
    import triton

    return {"name": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__}
