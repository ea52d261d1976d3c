"""Replay a stored CP-SAT model with twill's solver settings, several times, to see what CP-SAT 9.15's hint phase
does with it (issue 16, session 19: a feasible window refuted; docs/benchmarks_notes.md). Not a test: it prints
each run's status, deterministic units and objective, one run per subprocess, so that a run that corrupts the heap
or aborts is reported instead of ending the replay.

    python bench/cpsat_hint_replay.py tests/data/cpsat_hint_false_infeasible.pb --runs 3 --hcl 10   # CP-SAT's default
    python bench/cpsat_hint_replay.py tests/data/cpsat_hint_false_infeasible.pb --runs 3 --hcl 2    # a short phase
    python bench/cpsat_hint_replay.py tests/data/cpsat_hint_false_infeasible.pb --workers 1 --hcl 10
    python bench/cpsat_hint_replay.py tests/data/cpsat_hint_false_infeasible.pb --no-hint
    python bench/cpsat_hint_replay.py tests/data/cpsat_hint_false_infeasible.pb --seed 0 --units 12 --runs 9
    python bench/cpsat_hint_replay.py tests/data/cpsat_hint_false_infeasible.pb --seed 0 --units 12 \
        --params 'ignore_subsolvers: "fixed"'
    python bench/cpsat_hint_replay.py tests/data/cpsat_hint_false_infeasible.pb --seed 0 --units 12 --params swap
    python bench/cpsat_hint_replay.py tests/data/cpsat_empty_hint_abort.pb.gz --runs 5 --units 3 --seed 0 \
        --params 'subsolvers: "max_lp" subsolvers: "quick_restart"' --empty-hint   # session 55: aborts

``--hcl`` sets ``hint_conflict_limit`` (the conflicts the hint phase may spend); the other parameters are
``twill.solver.run.solver``'s (interleaved search in batches of the worker count, presolve probing level 1), straight
to CP-SAT, without twill's own pass (``Solver.solve`` confirms a hinted multi-worker refutation without the hint).
``--params`` adds CP-SAT parameters in text format (``swap``: ``run.HINT_SAFE_FIXED``, the subsolver twill runs in
place of CP-SAT's `fixed`, whose heap corruption session 21 measured this way, with twill's seed: ``--seed 0``;
session 19's runs kept CP-SAT's default seed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

_RUN = """
import gzip
import sys
from google.protobuf import text_format
from ortools.sat import cp_model_pb2
from ortools.sat.python import cp_model
from twill.solver.run import HINT_SAFE_FIXED, PROBING_LEVEL
raw = cp_model_pb2.CpModelProto()
raw.ParseFromString((gzip.open if sys.argv[1].endswith(".gz") else open)(sys.argv[1], "rb").read())
m = cp_model.CpModel()
m.proto.parse_text_format(text_format.MessageToString(raw))
workers, hcl, units, hint, extra = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
if hint != "1":
    m.clear_hints()
if hint == "empty":  # reading the hint adds an empty one, as twill's solver did before session 55
    len(m.proto.solution_hint.vars)
s = cp_model.CpSolver()
s.parameters.num_workers = workers
if workers > 1:
    s.parameters.interleave_search, s.parameters.interleave_batch_size = True, workers
s.parameters.hint_conflict_limit = hcl
s.parameters.cp_model_probing_level = PROBING_LEVEL
s.parameters.max_deterministic_time = units
s.parameters.merge_text_format(HINT_SAFE_FIXED if extra == "swap" else extra)
if sys.argv[7]:
    s.parameters.random_seed = int(sys.argv[7])
class Seen(cp_model.CpSolverSolutionCallback):  # reads what twill's progress lines read
    def on_solution_callback(self) -> None:
        self.last = (self.objective_value, self.best_objective_bound)
status = s.solve(m, Seen() if sys.argv[8] == "1" else None)
found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
print(s.status_name(status), f"{s.response_proto.deterministic_time:.2f}", int(s.objective_value) if found else "-")
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a CP-SAT model in binary protobuf (CpModel.export_to_file)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hcl", type=int, default=10, help="hint_conflict_limit (CP-SAT's default, which twill keeps: 10)")
    ap.add_argument("--units", type=float, default=15.0, help="deterministic units per run (default 15)")
    ap.add_argument("--no-hint", action="store_true", help="drop the model's solution hint")
    ap.add_argument("--empty-hint", action="store_true", help="replace the model's solution hint by an empty one "
                    "(what reading model.proto.solution_hint leaves; CP-SAT runs its hint phase on it)")
    ap.add_argument("--params", default="", help="more CP-SAT parameters in text format, or 'swap' for twill's "
                    "replacement of the fixed subsolver (run.HINT_SAFE_FIXED)")
    ap.add_argument("--callback", action="store_true", help="a solution callback that reads the objective and its "
                    "bound on each solution, as twill's progress lines do")
    ap.add_argument("--seed", default="", help="CP-SAT's random_seed (twill's solves use 0; default: CP-SAT's own)")
    args = ap.parse_args(argv)
    print("| run | workers | hint_conflict_limit | hint | status | units | objective |")
    print("|---|---|---|---|---|---|---|")
    for k in range(args.runs):
        out = subprocess.run([sys.executable, "-c", _RUN, args.model, str(args.workers), str(args.hcl), str(args.units),
                              "empty" if args.empty_hint else "0" if args.no_hint else "1", args.params, args.seed,
                              "1" if args.callback else "0"], capture_output=True, text=True, timeout=3600)
        if out.returncode == 0:
            status, units, objective = out.stdout.split()
        else:
            last = [line for line in out.stderr.splitlines() if line.strip() and not line.startswith("    @")]
            status, units, objective = f"crashed (exit {out.returncode}: {last[-1][:60] if last else ''})", "-", "-"
        print(f"| {k} | {args.workers} | {args.hcl} | {'empty' if args.empty_hint else 'no' if args.no_hint else 'yes'} | {status} | {units} | {objective} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
