"""Held-out random bodies: judge a change to the search on loop bodies nobody has looked at.

Run from the repository root (never as a test; each body takes about a minute on 2 cores):
    python bench/suite/heldout.py --seed 17139 --count 32 [--max-ops 39] [--jobs 1]
                                  [--base REV [--differs-on TEXT]] [--out FILE]

Why: both halves of the suite have been looked at while the search was tuned (the fresh half's rows were
named in the notes that chose rules), so a rule measured on them is not measured on bodies it was not chosen
on. This script draws a new set of random bodies for each judgement (seeds the suite and earlier checks have
not used: the caller keeps count in docs/benchmarks_notes.md), in every profile of the suite, solves each at
the suite's settings (``--time-limit 900 --work-limit 30 --workers 2``: budgets in CP-SAT's deterministic
work, so a row's II, bound and status come out the same on any machine) with this checkout's code, and with
``--base REV`` also with the code of a revision (``git archive`` of twill/ and archs/ into a temporary folder).

``--differs-on TEXT`` saves the base runs a change cannot affect: a change that only acts after it reports
itself in the progress log (a line containing TEXT) leaves every other body's search as it was, so the base
runs only where this checkout's log has the line. Results: one JSON line per run to ``--out`` (appended, so an
interrupted run keeps what it did) and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, so that "suite" is importable

from suite.cases import ROOT  # noqa: E402
from suite.generate import ARCHS, RANDOM_PROFILES  # noqa: E402
from twill.random_loops import PROFILE_ARCHS  # noqa: E402

Body = tuple[int, int, str, str]  # seed, ops, profile, arch

# One solve in a fresh interpreter whose twill is the code under ROOT (argv[1]): the base revision's modules
# must not mix with this checkout's, so every run is its own process.
_CHILD = r"""
import json, sys, time
root, seed, n, profile, arch, marker = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
sys.path.insert(0, root)
from twill.arch.registry import get_arch
from twill.options import SolveOptions
from twill.problem import build_problem
from twill.random_loops import random_body
from twill.solver import solve
from twill.validate import validate
problem = build_problem(random_body(seed, n, profile=profile), get_arch(arch))
seen = []
start = time.monotonic()
s = solve(problem, SolveOptions(time_limit=900, workers=2, work_limit=30,
                                progress=lambda m: seen.append(m) if marker and marker in m else None))
print(json.dumps({"status": str(s.status), "ii": s.ii, "bound": s.ii_lower_bound, "marked": bool(seen),
                  "seconds": round(time.monotonic() - start, 1), "valid": not validate(problem, s)}))
"""


def bodies(seed: int, count: int, max_ops: int) -> list[Body]:
    """``count`` bodies from seed ``seed`` on: the suite's profiles in turn, each on the suite's archs it runs on
    in turn, sizes drawn from 8..max_ops by a generator seeded with the first seed (so a set is named by its
    first seed, count and size cap)."""
    rng = random.Random(f"twill.heldout:{seed}:{max_ops}")
    out = []
    for i in range(count):
        profile = RANDOM_PROFILES[i % len(RANDOM_PROFILES)]
        archs = [a for a in ARCHS if a in PROFILE_ARCHS[profile]]
        out.append((seed + i, rng.randint(8, max_ops), profile, archs[(i // len(RANDOM_PROFILES)) % len(archs)]))
    return out


def solve_one(root: Path, body: Body, code: str, marker: str) -> dict[str, Any]:
    """Solve ``body`` with the code under ``root``; a crash is recorded with the end of its error output."""
    row: dict[str, Any] = dict(zip(("seed", "ops", "profile", "arch"), body, strict=True)) | {"code": code}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(root), *map(str, body), marker],
                          capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return row | {"error": done.stderr.strip()[-400:] or f"exit {done.returncode}"}
    return row | json.loads(lines[-1])


def extract(rev: str, into: Path) -> Path:
    """The twill package and arch files of revision ``rev``, unpacked under ``into``."""
    archive = subprocess.run(["git", "archive", rev, "twill", "archs"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def run(args: argparse.Namespace, base_root: Path | None) -> list[dict[str, Any]]:
    """Every body with this checkout's code, then with the base's where asked; rows as they finish."""
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(args.jobs) as pool, open(args.out, "a") as out:
        todo: dict[Future[dict[str, Any]], Body] = {
            pool.submit(solve_one, ROOT, b, "this", args.differs_on): b for b in bodies(args.seed, args.count,
                                                                                         args.max_ops)}
        while todo:
            done = next(as_completed(todo))
            body = todo.pop(done)
            row = done.result()
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(_line(row), flush=True)
            wanted = base_root is not None and row["code"] == "this" and (not args.differs_on or row.get("marked"))
            if wanted:
                todo[pool.submit(solve_one, base_root, body, args.base, args.differs_on)] = body
    return rows


def _line(row: dict[str, Any]) -> str:
    head = f"{row['code']:>8} {row['seed']} {row['profile']:<10} {row['ops']:>2} ops {row['arch']}:"
    if "error" in row:
        return f"{head} error: {row['error'].splitlines()[-1]}"
    return (f"{head} {row['ii']} {'optimal' if row['status'] == 'optimal' else '>= ' + str(row['bound'])}"
            f"{' (marked)' if row.get('marked') else ''}, {row['seconds']} s{'' if row['valid'] else ', INVALID'}")


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "as this checkout (not run)"
    if "error" in row:
        return "error"
    return f"{row['ii']} optimal" if row["status"] == "optimal" else f"{row['ii']} >= {row['bound']}"


def table(rows: list[dict[str, Any]], base: str | None) -> str:
    """A markdown table, one line per body in seed order, with the base's column where one ran."""
    this = {r["seed"]: r for r in rows if r["code"] == "this"}
    other = {r["seed"]: r for r in rows if r["code"] != "this"}
    head = ["seed", "profile", "ops", "arch", "this checkout"] + ([f"base {base}"] if base else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for seed, r in sorted(this.items()):
        cells = [str(seed), r["profile"], str(r["ops"]), r["arch"], _cell(r)] + ([_cell(other.get(seed))] if base
                                                                                  else [])
        lines.append("| " + " | ".join(cells) + " |")
    proven = sum(r.get("status") == "optimal" for r in this.values())
    lines.append(f"\nthis checkout: {proven}/{len(this)} proven optimal")
    if base:
        ran = [s for s in other if "error" not in other[s]]
        gained = sum(this[s].get("status") == "optimal" and other[s]["status"] != "optimal" for s in ran)
        lost = sum(this[s].get("status") != "optimal" and other[s]["status"] == "optimal" for s in ran)
        lines.append(f"base {base} ran on {len(ran)}: proofs gained {gained}, lost {lost}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True, help="the first seed (choose one no check has used)")
    ap.add_argument("--count", type=int, default=32, help="how many bodies (default 32)")
    ap.add_argument("--max-ops", type=int, default=39, help="largest body, in ops (default 39; the least is 8)")
    ap.add_argument("--jobs", type=int, default=1, help="bodies solved at once, two CP-SAT workers each")
    ap.add_argument("--base", help="also solve with this revision's code (a git revision)")
    ap.add_argument("--differs-on", default="", metavar="TEXT",
                    help="run the base only where this checkout's progress log has a line containing TEXT")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "heldout.jsonl",
                    help="JSON lines, appended (default bench/results/heldout.jsonl)")
    args = ap.parse_args(argv)
    if args.count < 1 or args.max_ops < 8 or args.jobs < 1:
        ap.error("--count and --jobs must be at least 1 and --max-ops at least 8")
    with tempfile.TemporaryDirectory(prefix="twill-base-") as tmp:
        try:
            base_root = extract(args.base, Path(tmp)) if args.base else None
        except subprocess.CalledProcessError:
            print(f"heldout: error: cannot read revision {args.base!r} with git archive", file=sys.stderr)
            return 2
        rows = run(args, base_root)
    print(table(rows, args.base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
