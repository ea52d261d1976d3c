"""Record every CP-SAT solve of one `twill` run, then replay each under other solver settings.

    python bench/solve_replay.py record DIR -- solve fa_fwd --arch b200 -p subtiles=2 -q
    python bench/solve_replay.py replay DIR --configs as-run,one:quick_restart,one:default

``record`` runs the twill command with every solve's model (text proto), parameters, verdict, deterministic
work and wall seconds written to DIR. ``replay`` solves each recorded model again, in a fresh process (a CP-SAT
abort costs one row, not the run), under each config, with the recorded work budget, and prints per model
and in total the verdicts, units and seconds, grouped by the subsolvers the run used and whether the model was
hinted. Configs: ``as-run`` (the recorded parameters: a check that the replay reproduces the run), ``one:NAME``
(one worker, non-interleaved, the subsolver NAME, or CP-SAT's default search for ``default``), ``two:A+B``
(two workers interleaved as twill runs them, subsolvers A and B).

Why (session 47): a replay is per solve, so it shows which solver settings decide what the run's solves decide
with less work, without the search taking another path after the first difference.
"""

from __future__ import annotations

import argparse
import atexit
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

STATUS = {0: "UNKNOWN", 1: "INVALID", 2: "FEASIBLE", 3: "INFEASIBLE", 4: "OPTIMAL"}
DECIDED = {2, 3, 4}


def record(out: Path, argv: list[str]) -> int:
    """Run ``twill ARGV`` with ``Solver.solve`` wrapped to write each solve to ``out``."""
    from twill.cli import main
    from twill.solver import run

    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    solve = run.Solver.solve

    def recorded(self, model, callback=None):
        k = len(rows)
        params = str(self.parameters)
        model.export_to_file(str(out / f"m{k:04d}.txt"))
        began, spent = time.perf_counter(), self.work.spent
        status = solve(self, model, callback)
        rows.append({"k": k, "status": int(status), "units": self.work.spent - spent,
                     "seconds": time.perf_counter() - began, "hinted": run.has_hint(model),
                     "params": params})
        return status

    run.Solver.solve = recorded
    atexit.register(lambda: (out / "solves.json").write_text(json.dumps(rows, indent=0)))
    return main(argv)


def _params(recorded: str, config: str) -> str:
    """The recorded parameters with ``config``'s workers and subsolvers in place of the run's."""
    if config == "as-run":
        return recorded
    keep = [line for line in recorded.splitlines()
            if not line.startswith(("subsolvers", "num_workers", "interleave_search", "interleave_batch_size"))]
    kind, _, names = config.partition(":")
    if kind == "one":
        keep += ["num_workers: 1", "interleave_search: false"]
        keep += [] if names == "default" else [f'subsolvers: "{names}"']
    elif kind == "two":
        keep += ["num_workers: 2", "interleave_search: true", "interleave_batch_size: 2"]
        keep += [f'subsolvers: "{n}"' for n in names.split("+")]
    else:
        raise SystemExit(f"unknown config {config!r}: as-run, one:NAME or two:A+B")
    return "\n".join(keep)


def _solve_one(model: str, params: str) -> dict:
    """Solve one model file under ``params`` (text format) in this process: verdict, units, seconds."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    m.proto.parse_text_format(Path(model).read_text())
    s = cp_model.CpSolver()
    s.parameters.merge_text_format(params)
    s.parameters.max_time_in_seconds = 600.0
    began = time.perf_counter()
    status = s.solve(m)
    return {"status": int(status), "units": s.response_proto.deterministic_time, "seconds": time.perf_counter() - began}


def replay(d: Path, configs: list[str]) -> None:
    rows = json.loads((d / "solves.json").read_text())
    totals: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0.0, 0.0]))
    for r in rows:
        subs = "+".join(line.split('"')[1] for line in r["params"].splitlines() if line.startswith("subsolvers"))
        group = (subs or "portfolio", "hinted" if r["hinted"] else "cold")
        line = [f"m{r['k']:04d} {group[0]:>30s} {group[1]:6s} run {STATUS[r['status']]:10s} {r['units']:6.2f}u"]
        for c in configs:
            p = subprocess.run([sys.executable, __file__, "_one", str(d / f"m{r['k']:04d}.txt"), _params(r["params"], c)],
                               capture_output=True, text=True)
            got = json.loads(p.stdout) if p.returncode == 0 else {"status": -1, "units": 0.0, "seconds": 0.0}
            t = totals[group][c]
            t[0] += 1
            t[1] += got["status"] in DECIDED
            t[2] += got["units"]
            t[3] += got["seconds"]
            line.append(f"{c} {STATUS.get(got['status'], 'CRASH'):10s} {got['units']:6.2f}u {got['seconds']:5.1f}s")
        print(" | ".join(line), flush=True)
    print("\ntotals by (subsolvers, hint): solves, decided, units, seconds")
    for group, by in totals.items():
        for c, (n, decided, units, seconds) in by.items():
            print(f"  {group[0]:>30s} {group[1]:6s} {c:24s} {n:4.0f} {decided:4.0f} {units:8.2f} {seconds:8.1f}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_one":
        print(json.dumps(_solve_one(sys.argv[2], sys.argv[3])))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="run a twill command and record its solves")
    rec.add_argument("dir", type=Path)
    rec.add_argument("twill", nargs=argparse.REMAINDER, help="-- then the twill arguments")
    rep = sub.add_parser("replay", help="replay recorded solves under other configs")
    rep.add_argument("dir", type=Path)
    rep.add_argument("--configs", default="as-run,one:quick_restart,one:default")
    a = ap.parse_args()
    if a.cmd == "record":
        argv = a.twill[1:] if a.twill[:1] == ["--"] else a.twill
        sys.exit(record(a.dir, argv))
    replay(a.dir, a.configs.split(","))


if __name__ == "__main__":
    main()
