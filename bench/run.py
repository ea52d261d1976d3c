"""Benchmark suite: built-in programs, the shared Triton graphs and random-graph scaling.

Run from the repository root:  python bench/run.py
(defaults: --repeat 3 --time-limit 120 --scaling-cap 300; ``--sections programs,graphs,scaling``;
``suite`` runs the generalization suite too, bench/suite/run.py --half both, for hours; ``none``
reruns nothing and only rewrites the page).
It rewrites docs/benchmarks.md (with docs/benchmarks_notes.md appended), docs/scaling.png and docs/suite.png.
Never run as a test; timings depend on the machine. The page records machine, date and versions.
A solve that runs into its time limit is not repeated: its median would be the limit itself.
A section left out of ``--sections`` (or a row left out by ``--only``) keeps its last results (bench/results/table.json for the
programs and graphs rows, bench/results/scaling.json), and the page says when they were measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import time
from pathlib import Path

import ortools

from twill.arch.registry import get_arch
from twill.bounds import compute_bounds
from twill.errors import InfeasibleError
from twill.frontend.programs import load_program
from twill.problem import build_problem
from twill.random_loops import random_body
from twill.solver import SolveOptions, lower_bound, solve

ROOT = Path(__file__).resolve().parents[1]
SUITE_WORKERS = 2  # the suite is measured with 2 workers per solve (bench/suite/run.py)
SHARED = ROOT.parent / "shared" / "ddg"
PUBLISHED = {  # Twill (OSDI'26) search times, one Xeon Platinum 8570 core (../shared/research/twill.md §5.6)
    ("fa_fwd subtiles=2", "h100"): "28 s (paper)",
    ("fa_fwd_subtiled.b200 (graph)", "b200"): "19 s (3rd party)",
    ("fa_bwd.b200 (graph)", "b200"): "269 s (3rd party)",
}
CASES = [
    ("toy", {}), ("gemm", {}), ("fa_fwd", {}), ("fa_fwd", {"subtiles": 2}), ("fa_bwd", {}),
]


def timed_solves(p, opts: SolveOptions, repeat: int):
    """(seconds of each solve, seconds until II was settled in each, last schedule or None, error
    text, the distinct (II, status) answers); stops repeating after a run that is not proven optimal,
    so a row repeated N times was proven in every one of its N runs."""
    times, settled, sched, error, answers = [], [], None, "", []
    for _ in range(repeat):
        t = time.monotonic()
        try:
            sched = solve(p, opts)
        except InfeasibleError as err:
            sched, error = None, str(err).split(": ", 1)[-1]
        times.append(time.monotonic() - t)
        settled.append(sched.ii_seconds if sched is not None and sched.ii_seconds is not None else times[-1])
        answer = (sched.ii, sched.status) if sched is not None else (None, "none found")
        if answer not in answers:
            answers.append(answer)
        if sched is None or sched.status != "optimal":
            break
    return times, settled, sched, error, answers


def spread(values: list[float], runs: bool = False) -> str:
    """The median, and where there are several runs their count and range: what the README quotes as a
    claim's spread (issue 16)."""
    median = f"{statistics.median(values):.1f}"
    if len(values) < 2:
        return median
    count = f"x{len(values)}: " if runs else ""
    return f"{median} ({count}{min(values):.1f}-{max(values):.1f})"


def run_case(label: str, arch_name: str, body_fn, swp_only: bool, repeat: int, limit: float) -> list[str]:
    arch = get_arch(arch_name)
    p = build_problem(body_fn(arch), arch)
    opts = SolveOptions(swp_only=swp_only, time_limit=limit)
    b = compute_bounds(p)
    lb = lower_bound(p, opts, b)
    times, settled, sched, error, answers = timed_solves(p, opts, repeat)
    mode = "SWP only" if swp_only else "joint"
    seconds, ii_seconds = spread(times, runs=True), spread(settled)
    if sched is None:
        return [label, arch_name, mode, str(len(p.ops)), str(len(p.edges)), str(lb), "-", "none found", "-",
                ii_seconds, seconds, PUBLISHED.get((label, arch_name), ""), error[:90]]
    note = f"II >= {sched.ii_lower_bound} proven" if sched.status != "optimal" else ""
    if len(answers) > 1:  # a reproducible search gives one answer; say so loudly if it did not
        note = "; ".join(filter(None, [note, "runs differ: " + ", ".join(f"{ii} {st}" for ii, st in answers)]))
    return [label, arch_name, mode, str(len(p.ops)), str(len(p.edges)), str(lb), str(sched.ii),
            sched.status, str(len(sched.groups)) if not swp_only else "-", ii_seconds, seconds,
            PUBLISHED.get((label, arch_name), ""), note]


SCALING_SIZES = (10, 20, 40, 80, 160)
SCALING_SEED = 1
SCALING_RESULTS = ROOT / "bench" / "results" / "scaling.json"
TABLE_RESULTS = ROOT / "bench" / "results" / "table.json"  # the programs and graphs rows of the last runs


def run_scaling(cap: float, arch_name: str = "h100") -> list[dict]:
    """Time to a proven optimum on random FA-like bodies (``twill.random_loops``), SWP-only and joint."""
    arch = get_arch(arch_name)
    points = []
    for n in SCALING_SIZES:
        body = random_body(SCALING_SEED, n, profile="fa")
        p = build_problem(body, arch)
        for swp in (True, False):
            opts = SolveOptions(swp_only=swp, time_limit=cap)
            lb = lower_bound(p, opts)
            times, _, sched, error, _ = timed_solves(p, opts, 1)
            point = {"ops": n, "edges": len(p.edges), "mode": "SWP only" if swp else "joint", "lb": lb,
                     "ii": sched.ii if sched else None, "proven_lb": sched.ii_lower_bound if sched else None,
                     "status": sched.status if sched else "none found", "seconds": times[0],
                     "groups": len(sched.groups) if sched and not swp else None, "note": error[:80]}
            points.append(point)
            print(point, flush=True)
    return points


def scaling_plot(points: list[dict], cap: float, path: Path) -> None:
    """Solve time against ops, one line per mode; unproven points drawn hollow at their time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for mode, color in (("SWP only", "tab:blue"), ("joint", "tab:red")):
        pts = [q for q in points if q["mode"] == mode]
        ax.plot([q["ops"] for q in pts], [q["seconds"] for q in pts], color=color, label=mode)
        for q in pts:
            proven = q["status"] == "optimal"
            ax.scatter(q["ops"], q["seconds"], color=color, facecolors=color if proven else "none", zorder=3, s=36)
    ax.axhline(cap, color="grey", linestyle=":", label=f"time cap {cap:g} s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(SCALING_SIZES), [str(n) for n in SCALING_SIZES])
    ax.set_xlabel(f"ops in the loop body (random FA-like, seed {SCALING_SEED})")
    ax.set_ylabel("seconds to a proven optimum")
    ax.set_title("twill solve time vs. loop size (filled: proven optimal; hollow: not proven)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def scaling_table(points: list[dict]) -> list[str]:
    header = ["ops", "edges", "mode", "lower bound", "II", "status", "proven II >=", "groups", "seconds", "note"]
    rows = [[str(q["ops"]), str(q["edges"]), q["mode"], str(q["lb"]), str(q["ii"] or "-"), q["status"],
             str(q["proven_lb"] or "-"), str(q["groups"] or "-"), f"{q['seconds']:.1f}", q["note"]] for q in points]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def program_rows(repeat: int, limit: float, only: str = "") -> list[list[str]]:
    """One row per built-in program and architecture (``only``: the rows whose "label arch" is
    one of its comma-separated entries)."""
    rows, wanted = [], {w.strip() for w in only.split(",") if w.strip()}
    for name, params in CASES:
        label = name + "".join(f" {k}={v}" for k, v in params.items())
        for arch in ("h100", "b200"):
            if wanted and f"{label} {arch}" not in wanted:
                continue
            rows.append(run_case(label, arch, lambda a, n=name, pr=params: load_program(n, a, pr), False, repeat, limit))
            print(" | ".join(rows[-1]), flush=True)
    return rows


def graph_rows(repeat: int, limit: float) -> list[list[str]]:
    """Two rows (SWP only, joint) per shared Triton graph; none where ../shared is absent."""
    rows = []
    for graph in ("fa_fwd", "fa_fwd_subtiled", "fa_bwd"):
        path = SHARED / f"{graph}.b200.curated_ddg.json"
        if not path.is_file():
            continue
        for swp in (True, False):
            rows.append(run_case(f"{graph}.b200 (graph)", "b200", lambda a, p=path: load_program(str(p), a), swp,
                                 repeat, limit))
            print(" | ".join(rows[-1]), flush=True)
    return rows


def suite_lines(sections: set[str], limit: float) -> list[str]:
    """The generalization suite's section, rerun first when ``suite`` is one of the sections; the
    suite's modules live in bench/suite/ (this script's folder is on sys.path)."""
    from suite import report, run

    if "suite" in sections:
        for half in ("tuned", "fresh"):
            run.run_half(half, limit, SUITE_WORKERS, set(), jobs=1, redo=False)
    return report.section(ROOT / "docs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="solves per case; the median time is reported")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--scaling-cap", type=float, default=300.0, help="time cap per random-graph solve (s)")
    ap.add_argument("--sections", default="programs,graphs,scaling")
    ap.add_argument("--only", default="", help='programs rows to rerun, e.g. "fa_fwd subtiles=2 b200,gemm h100"; '
                    "the other rows keep their last measurement")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    load = os.getloadavg()[0]
    table = json.loads(TABLE_RESULTS.read_text()) if TABLE_RESULTS.is_file() else {}
    if "programs" in sections:
        rows = program_rows(args.repeat, args.time_limit, args.only)
        if args.only:  # the rerun rows replace theirs; the rest keep their last measurement
            fresh = {tuple(r[:3]): r for r in rows}
            rows = [fresh.pop(tuple(r[:3]), r) for r in table.get("programs", {}).get("rows", [])] + list(fresh.values())
        table["programs"] = {"date": dt.date.today().isoformat(), "rows": rows, "load": round(load, 1),
                             "repeat": args.repeat}
    if "graphs" in sections:
        table["graphs"] = {"date": dt.date.today().isoformat(), "rows": graph_rows(args.repeat, args.time_limit),
                           "repeat": args.repeat}
    TABLE_RESULTS.write_text(json.dumps(table, indent=1) + "\n")
    rows = [r for part in ("programs", "graphs") for r in table.get(part, {}).get("rows", [])]
    kept = [f"{part} measured on {table[part]['date']}" + (f" with --repeat {table[part]['repeat']}"
                                                            if "repeat" in table[part] else "")
            for part in ("programs", "graphs") if part in table and part not in sections]
    if args.only and "programs" in sections:
        kept.insert(0, f"programs rows other than {args.only}")
    header = ["program", "arch", "mode", "ops", "edges", "lower bound", "II", "status", "groups", "II settled s",
              "solve s (median, runs: range)", "published", "note"]
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `python bench/run.py --repeat {args.repeat} --time-limit {args.time_limit:g} "
        f"--scaling-cap {args.scaling_cap:g} --sections {args.sections}"
        + (f' --only "{args.only}"' if args.only else "") + "` on "
        f"{dt.date.today().isoformat()}" + (f" (kept from earlier runs: {', '.join(kept)}; `bench/results/table.json`)."
                                            if kept else "."),
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"OR-Tools {ortools.__version__}, load average {table.get('programs', {}).get('load', load):.1f} when "
        f"the programs rows were measured (other jobs on the "
        f"machine slow every timing). Default solve options: one CP-SAT worker per core, the deterministic work that "
        f"goes with the cap ({SolveOptions(time_limit=args.time_limit).work:g} units), all objectives (each secondary "
        f"one up to {SolveOptions().phase_limit:g} units of the work kept for them).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
        "`optimal` means the II is proven minimal; `feasible` means a schedule was found whose II is not proven "
        "minimal (the note gives the II the search proved; the lower bound column is the static bound, "
        "max(ResMII, RecMII, StorageMII)); `none found` means the time limit ran out first. \"II settled s\" is when the "
        "search had its II (proven, for optimal rows; the median over the repeats, their range in brackets); the solve "
        "column's xN counts the runs, each proven optimal (repeats stop at the first run that is not, and a row whose "
        "runs gave different answers says so in its note); the rest of the solve time "
        "goes to the secondary objectives (groups, hand-offs, registers, length) and the canonical schedule. "
        "Published times are Twill's, on one server core, with normalised (not exact) costs and no secondary "
        "objectives.",
    ]
    if "scaling" in sections:
        points = run_scaling(args.scaling_cap)
        SCALING_RESULTS.write_text(json.dumps({"date": dt.date.today().isoformat(), "cap": args.scaling_cap,
                                               "points": points}, indent=1) + "\n")
        scaling_plot(points, args.scaling_cap, ROOT / "docs" / "scaling.png")
        when, cap = "", args.scaling_cap
    else:  # keep the last scaling run: at a 300 s cap it takes most of an hour
        stored = json.loads(SCALING_RESULTS.read_text())
        points, cap = stored["points"], stored["cap"]
        when = f" Not rerun this time: measured on {stored['date']} (`bench/results/scaling.json`)."
    lines += ["", "## Scaling: random loop bodies", "",
              f"Random FA-like bodies (`twill.random_loops.random_body({SCALING_SEED}, n, profile=\"fa\")`) on h100, "
              f"one solve each, capped at {cap:g} s.{when}", "", "![scaling](scaling.png)", "",
              *scaling_table(points)]
    lines += suite_lines(sections, args.time_limit)
    extra = ROOT / "docs" / "benchmarks_notes.md"
    if extra.is_file():
        lines += ["", extra.read_text().rstrip()]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
