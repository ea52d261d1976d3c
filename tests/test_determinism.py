"""The same input, options and worker count give the same schedule, whatever else the machine runs.

Every budget of the search is CP-SAT deterministic work and every CP-SAT solve is reproducible
(one worker, or interleaved batches), so a solve that ends on its budget, not on a proof, must
still come out byte for byte the same beside a CPU-burning process (design.md §3).
"""

from __future__ import annotations

import json
import multiprocessing
import time

from conftest import problem

from twill.options import SolveOptions
from twill.solver import solve


def _burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x = (x * 1103515245 + 12345) % 2**31


def _schedule_json(sched) -> str:
    return json.dumps(sched.reproducible_dict(), sort_keys=True)


def test_a_budget_limited_solve_is_identical_beside_a_cpu_burner():
    """FA forward with one tile on h100 is not proven within two units of work: the answer is the
    budget's, and it must not depend on how fast the machine spent it."""
    p = problem("fa_fwd", "h100")
    options = SolveOptions(workers=2, work_limit=2.0, phase_limit=1.0, time_limit=900)
    quiet = solve(p, options)
    burners = [multiprocessing.Process(target=_burn, args=(600,), daemon=True) for _ in range(2)]
    for b in burners:
        b.start()
    try:
        loaded = solve(p, options)
    finally:
        for b in burners:
            b.terminate()
    assert quiet.status == "feasible" and "work budget" in quiet.proof  # the hard case: no proof in budget
    assert _schedule_json(loaded) == _schedule_json(quiet)
    assert loaded.work == quiet.work
