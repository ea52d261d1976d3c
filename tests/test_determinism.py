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
    # the proof names the static bound and what the search refuted above it
    assert "(lower bound 2048: unit 'tc'" in quiet.proof
    refuted = f"; CP-SAT refuted [2048, {quiet.ii_lower_bound - 1}]"
    assert (refuted in quiet.proof) == (quiet.ii_lower_bound > 2048), quiet.proof
    assert _schedule_json(loaded) == _schedule_json(quiet)
    assert loaded.work == quiet.work


_MODELS = """
import hashlib
from twill.arch.registry import get_arch
from twill.problem import build_problem
from twill.random_loops import random_body
from twill.solver import SolveOptions
from twill.solver.model import build_model
from twill.solver.structure import build_structure
for seed, n, profile, arch, ii in ((16515, 63, "recurrence", "b200", 3720), (16517, 17, "units", "b200", 1300),
                                   (16000, 10, "fa", "h100", 2200)):
    p = build_problem(random_body(seed, n, profile=profile), get_arch(arch))
    for m in (build_structure(p, SolveOptions(workers=1), ii).m, build_model(p, SolveOptions(workers=1), ii, ii).m):
        print(hashlib.sha256(str(m.proto).encode()).hexdigest())
"""


def test_the_models_do_not_depend_on_the_processs_string_hashing():
    """Two processes with different hash seeds build the same structure and joint models. The dependence
    cycles, the ops between a value and its readers and the automorphisms come from networkx, which walks
    sets of nodes: on names, their order followed the hash seed, and with it the models' constraint and
    variable order and which cycles and automorphisms fell within their caps (random-units-16517's joint
    model and most bodies' structure models differed from run to run)."""
    import os
    import subprocess
    import sys

    out = [subprocess.run([sys.executable, "-c", _MODELS], env={**os.environ, "PYTHONHASHSEED": seed},
                          capture_output=True, text=True, check=True).stdout for seed in ("1", "2")]
    assert out[0] == out[1] and len(out[0].split()) == 6
