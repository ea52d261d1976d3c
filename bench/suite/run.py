"""Run the generalization suite: solve each case of a frozen manifest, validate, record, report.

Run from the repository root (never as a test; the full suite takes hours):
    python bench/suite/run.py --half tuned|fresh|both [--time-limit 120] [--workers 2]
                              [--only ID,...] [--jobs 1] [--redo] [--no-page]

Every case's body is rebuilt and hashed first; if one no longer matches its manifest the run
stops before solving anything (exit 2): the suite is the one frozen before tuning. Results go to
bench/results/suite_<half>.json after each case, so an interrupted run resumes where it stopped;
a case already measured with the same time limit, workers and work by the same code (``cases.code_version``:
the solver's sources and arch files) is skipped unless ``--redo``, so a plain run re-solves exactly the rows that
another version of the code gave.
Graph cases need ../shared/ddg and are skipped without it. At the end the page
docs/benchmarks.md is rewritten (``python bench/run.py --sections none``: nothing else is rerun)
with the "Generalization suite" section and docs/suite.png.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, so that "suite" is importable

import ortools  # noqa: E402

from suite.cases import (  # noqa: E402
    HALVES,
    ROOT,
    CaseUnavailable,
    body_hash,
    build_case,
    code_version,
    describe,
    read_manifest,
)
from twill.bounds import bound_and_reason  # noqa: E402
from twill.errors import InfeasibleError  # noqa: E402
from twill.options import SolveOptions  # noqa: E402
from twill.problem import Problem  # noqa: E402
from twill.solver import solve  # noqa: E402
from twill.validate import validate  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def results_path(half: str) -> Path:
    return RESULTS / f"suite_{half}.json"


def checked_cases(half: str, only: set[str]) -> list[tuple[dict[str, Any], Problem | None]]:
    """The manifest's cases (those in ``only``, when given) with their problems, after checking
    the hash of every case of the half, chosen or not; None for a case whose input is absent
    here. Exits 2 on the first mismatch."""
    out = []
    for case in read_manifest(half)["cases"]:
        try:
            problem = build_case(case)
        except CaseUnavailable:
            out.append((case, None))
            continue
        got = body_hash(problem.body)
        if got != case["sha256"]:
            print(f"suite {half}: case {case['id']} no longer matches its frozen body (sha256 {got[:12]}, "
                  f"manifest {case['sha256'][:12]}); the suite must not change after it was frozen", file=sys.stderr)
            sys.exit(2)
        out.append((case, problem))
    return [(case, problem) for case, problem in out if not only or case["id"] in only]


def static_bound(problem: Problem) -> tuple[int | None, str]:
    """The static lower bound (units, recurrences, holds, memories) and what binds it."""
    try:
        return bound_and_reason(problem, SolveOptions())
    except InfeasibleError as err:
        return None, f"infeasible: {err.reason or err}"


def solve_case(case: dict[str, Any], time_limit: float, workers: int, work_limit: float | None = None) -> dict[str, Any]:
    """Solve one case and describe the outcome; never raises (a failure is a row)."""
    problem = build_case(case)
    row = row_head(case, problem, time_limit, workers, work_limit)
    start = time.monotonic()
    try:
        sched = solve(problem, SolveOptions(time_limit=time_limit, workers=workers, work_limit=work_limit))
    except InfeasibleError as err:
        return {**row, **_failure("infeasible", str(err), time.monotonic() - start, err.proven_lb)}
    except Exception as err:  # noqa: BLE001 — a crash is a result of this case, not the end of the suite
        return {**row, **_failure("error", f"{type(err).__name__}: {err}", time.monotonic() - start, None)}
    total = time.monotonic() - start
    violations = [str(v) for v in validate(problem, sched)]
    first = getattr(sched, "first_seconds", None)
    return {
        **row, "status": sched.status, "ii": sched.ii, "bound": sched.ii_lower_bound,
        "gap_pct": gap_pct(sched.ii, sched.ii_lower_bound), "groups": len(sched.groups),
        "first_seconds": first, "ii_seconds": sched.ii_seconds,
        "proof_seconds": sched.ii_seconds if sched.status == "optimal" else None,
        "solve_seconds": sched.solve_seconds, "total_seconds": total,
        "valid": not violations, "violations": violations[:3], "error": "",
        "work": sched.work, "cut": "wall-clock cap" in sched.proof,  # cut: the answer depends on the load
    }


def row_head(case: dict[str, Any], problem: Problem, time_limit: float, workers: int,
             work_limit: float | None) -> dict[str, Any]:
    """What a row says about its case and run before the solve: the body's size and its static bound."""
    bound, binding = static_bound(problem)
    return {
        "id": case["id"], "source": describe(case), "arch": case["arch"], "ops": len(problem.ops),
        "edges": len(problem.edges), "sha256": case["sha256"], "static_bound": bound, "static_binding": binding,
        "time_limit": time_limit, "workers": workers, "work_limit": work_limit, "date": dt.date.today().isoformat(),
        "code": code_version(),
    }


def _failure(status: str, message: str, seconds: float, proven_lb: int | None) -> dict[str, Any]:
    return {"status": status, "ii": None, "bound": proven_lb, "gap_pct": None, "groups": None,
            "first_seconds": None, "ii_seconds": None, "proof_seconds": None, "solve_seconds": None,
            "total_seconds": seconds, "valid": False, "violations": [], "error": " ".join(message.split())[:300]}


def gap_pct(ii: int, bound: int | None) -> float | None:
    """(II - proven bound) / proven bound, in percent."""
    return 100.0 * (ii - bound) / bound if bound else None


def load_results(half: str) -> dict[str, Any]:
    path = results_path(half)
    return json.loads(path.read_text()) if path.is_file() else {"half": half, "rows": {}}


def save_results(half: str, data: dict[str, Any]) -> None:
    """Write atomically: an interrupted run never leaves half a file."""
    path = results_path(half)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def machine() -> dict[str, Any]:
    return {"machine": platform.machine(), "cores": os.cpu_count(), "python": platform.python_version(),
            "ortools": ortools.__version__, "load_average": round(os.getloadavg()[0], 2)}


def progress_line(k: int, total: int, row: dict[str, Any]) -> str:
    ii = row["ii"] if row["ii"] is not None else "-"
    extra = "" if row["valid"] or row["status"] in ("infeasible", "error") else " INVALID"
    note = f" ({row['error'][:80]})" if row["error"] else ""
    return (f"[{k}/{total}] {row['id']}: II {ii} >= {row['bound']} {row['status']}{extra}, "
            f"{row['total_seconds']:.1f} s{note}")


def run_half(half: str, time_limit: float, workers: int, only: set[str], jobs: int, redo: bool,
             work_limit: float | None = None) -> None:
    cases = checked_cases(half, only)
    data = load_results(half)
    data.update({"half": half, "updated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                 "machine": machine()})
    rows: dict[str, Any] = data.setdefault("rows", {})
    code, todo = code_version(), []
    for case, problem in cases:
        old = rows.get(case["id"])
        if problem is None:
            print(f"{half}: {case['id']}: skipped ({describe(case)} is not on this machine)", flush=True)
        elif (not redo and old and old.get("sha256") == case["sha256"] and old.get("time_limit") == time_limit
              and old.get("workers") == workers and old.get("work_limit") == work_limit and old.get("code") == code):
            print(f"{half}: {case['id']}: done earlier (II {old['ii']}, {old['status']})", flush=True)
        else:
            todo.append(case)
    print(f"{half}: {len(todo)} of {len(cases)} cases to solve at --time-limit {time_limit:g} --workers {workers}"
          f"{f' --jobs {jobs}' if jobs > 1 else ''}", flush=True)
    for k, row in enumerate(_solved(todo, time_limit, workers, jobs, work_limit), 1):
        rows[row["id"]] = row
        save_results(half, data)
        print(f"{half} " + progress_line(k, len(todo), row), flush=True)


def _solved(todo: list[dict[str, Any]], time_limit: float, workers: int, jobs: int, work_limit: float | None):
    """Rows in the order they finish; ``jobs`` cases at once, each in a process of its own."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(isolated, case, time_limit, workers, work_limit) for case in todo]
        for future in as_completed(futures):
            yield future.result()


def isolated(case: dict[str, Any], time_limit: float, workers: int, work_limit: float | None) -> dict[str, Any]:
    """``solve_case`` in a child process: a solver that aborts the process (CP-SAT 9.15's heap corruption under
    interleaved search with hints, google/or-tools#5048: "corrupted size vs. prev_size" ended a suite half in
    session 49) is an error row of its case, not the end of the run."""
    start = time.monotonic()
    with ProcessPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(solve_case, case, time_limit, workers, work_limit).result()
        except BrokenProcessPool:
            row = row_head(case, build_case(case), time_limit, workers, work_limit)
            return {**row, **_failure("error", "the solver process died (an abort or a signal)",
                                      time.monotonic() - start, None)}


def rewrite_page() -> None:
    """docs/benchmarks.md with the suite section, every other section kept from its results."""
    subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--sections", "none"], cwd=ROOT, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=(*HALVES, "both"), required=True)
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per case (default 120)")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers per solve (default 2)")
    ap.add_argument("--work-limit", type=float, default=None,
                    help="deterministic work per case (default: the default for --time-limit, 0.25 per second); "
                         "with a larger --time-limit, a loaded machine still gives the reproducible answer")
    ap.add_argument("--only", default="", help="comma-separated case ids")
    ap.add_argument("--jobs", type=int, default=1, help="cases solved at once (each with --workers)")
    ap.add_argument("--redo", action="store_true", help="solve cases that already have a result")
    ap.add_argument("--no-page", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = ap.parse_args()
    halves = HALVES if args.half == "both" else (args.half,)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    known = {c["id"] for h in halves for c in read_manifest(h)["cases"]}
    if only - known:
        sys.exit(f"unknown case ids for --half {args.half}: {', '.join(sorted(only - known))}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for half in halves:
        run_half(half, args.time_limit, args.workers, only, args.jobs, args.redo, args.work_limit)
    if not args.no_page:
        rewrite_page()


if __name__ == "__main__":
    main()
