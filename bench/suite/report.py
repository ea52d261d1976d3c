"""The generalization suite's part of docs/benchmarks.md: a summary per half, the plot, the tables.

Read from the frozen manifests (bench/suite/*.json) and the last results
(bench/results/suite_<half>.json); nothing here solves. The summary counts every case of the
manifest: one not measured yet (or skipped for want of ../shared) is counted as such, never as
a success. Issue 16's bar: every case has a valid schedule, the first within 5 s; at least 80%
proven optimal; median gap 0; largest gap at most 10%.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.cases import HALVES, code_version, read_manifest
from suite.run import load_results

FIRST_WITHIN = 5.0  # seconds: the bar for the first schedule
STATUS_COLOURS = {"optimal": "tab:green", "feasible": "tab:orange"}


@dataclass(frozen=True, slots=True)
class Summary:
    half: str
    cases: int
    measured: int
    valid: int
    first_known: int  # rows that report when their first schedule came
    first_fast: int
    optimal: int
    median_gap: float | None
    largest_gap: float | None
    settings: str
    dates: str
    code: str  # which code solved the rows (``code_versions``)

    def cells(self) -> list[str]:
        first = f"{self.first_fast}/{self.first_known}" if self.first_known else "—"
        pct = f"{self.optimal}/{self.cases} ({100 * self.optimal / self.cases:.0f}%)" if self.cases else "-"
        return [self.half, str(self.cases), str(self.measured), f"{self.valid}/{self.cases}", first, pct,
                _pct(self.median_gap), _pct(self.largest_gap), self.settings, self.dates, self.code]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def rows_in_order(half: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each manifest case with its result row (None when not measured, or measured on another body)."""
    rows = load_results(half).get("rows", {})
    out = []
    for case in read_manifest(half)["cases"]:
        row = rows.get(case["id"])
        out.append((case, row if row and row.get("sha256") == case["sha256"] else None))
    return out


def code_versions(rows: list[dict[str, Any]], current: str) -> str:
    """The code behind the rows, as a table cell: its version where one version solved them all (marked "this
    checkout's" when it is), else how many versions and how many rows the checkout's own code gave. Rows stored
    before versions were recorded count as one unknown version."""
    versions = {r.get("code") for r in rows}
    here = sum(r.get("code") == current for r in rows)
    if len(versions) == 1:
        (only,) = versions
        return "unrecorded" if only is None else f"{only}" + (" (this checkout's)" if only == current else "")
    return f"{len(versions)} versions; {here}/{len(rows)} rows this checkout's ({current})" if rows else "-"


def summarise(half: str) -> Summary:
    pairs = rows_in_order(half)
    rows = [r for _, r in pairs if r is not None]
    good = [r for r in rows if r["ii"] is not None]
    gaps = [r["gap_pct"] for r in good if r["gap_pct"] is not None]
    firsts = [r["first_seconds"] for r in rows if r.get("first_seconds") is not None]
    settings = sorted({f"{r['time_limit']:g} s, {r['workers']} workers"
                       + (f", {r['work_limit']:g} units" if r.get("work_limit") is not None else "") for r in rows})
    dates = sorted({r["date"] for r in rows})
    return Summary(
        half=half, cases=len(pairs), measured=len(rows), valid=sum(bool(r["valid"]) for r in rows),
        first_known=len(firsts), first_fast=sum(f <= FIRST_WITHIN for f in firsts),
        optimal=sum(r["status"] == "optimal" and r["valid"] for r in rows),
        median_gap=statistics.median(gaps) if gaps else None, largest_gap=max(gaps) if gaps else None,
        settings="; ".join(settings) or "-", dates=(dates[0] if len(dates) == 1 else f"{dates[0]}..{dates[-1]}")
        if dates else "-",
        code=code_versions(rows, code_version()),
    )


def summary_table() -> list[str]:
    header = ["half", "cases", "measured", "valid schedule", f"first within {FIRST_WITHIN:g} s", "proven optimal",
              "median gap", "largest gap", "settings", "measured on", "code"]
    return _table(header, [summarise(h).cells() for h in HALVES])


def case_table(half: str) -> list[str]:
    header = ["case", "source", "arch", "ops", "static bound", "proven bound", "II", "gap", "status",
              "first s", "proof s", "total s", "work units", "valid"]
    body = []
    for case, row in rows_in_order(half):
        if row is None:
            body.append([case["id"], _source(case), case["arch"], str(case["ops"]), "", "", "", "", "not measured",
                         "", "", "", "", ""])
            continue
        verdict = "yes" if row["valid"] else ("-" if row["ii"] is None else "NO: " + "; ".join(row["violations"])[:80])
        status = row["status"] + (" (cut by the wall-clock cap)" if row.get("cut") else "") + (
            f": {row['error'][:60]}" if row["error"] else "")
        body.append([case["id"], _source(case), case["arch"], str(row["ops"]), str(row["static_bound"] or "-"),
                     str(row["bound"] or "-"), str(row["ii"] or "-"), _pct(row["gap_pct"]), status,
                     _seconds(row.get("first_seconds")), _seconds(row.get("proof_seconds")),
                     f"{row['total_seconds']:.1f}", "-" if row.get("work") is None else f"{row['work']:.1f}", verdict])
    return _table(header, body)


def _source(case: dict[str, Any]) -> str:
    s = case["source"]
    if s["kind"] == "random":
        return f"`random_body({s['seed']}, {s['n_ops']}, profile=\"{s['profile']}\")`"
    if s["kind"] == "program":
        return f"{s['name']} " + " ".join(f"{k}={v}" for k, v in s["params"].items())
    return f"../shared/ddg/{s['path']}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    clean = [[c.replace("|", "/") for c in r] for r in rows]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in clean)]


def plot(path: Path) -> None:
    """Gap per case, one panel per half, coloured by status; a case with no schedule is a red x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, half in zip(axes, HALVES, strict=True):
        pairs = rows_in_order(half)
        for x, (_, row) in enumerate(pairs):
            if row is None:
                ax.scatter(x, 0, marker="o", facecolors="none", edgecolors="grey", s=14)
            elif row["ii"] is None or not row["valid"]:
                ax.scatter(x, 0, marker="x", color="tab:red", s=30, zorder=3)
            elif not row["gap_pct"]:
                ax.scatter(x, 0, marker="o", color=STATUS_COLOURS.get(row["status"], "tab:blue"), s=14, zorder=3)
            else:
                ax.bar(x, row["gap_pct"], color=STATUS_COLOURS.get(row["status"], "tab:blue"))
        ax.axhline(10, color="grey", linestyle=":", linewidth=1)
        ax.set_xticks(range(len(pairs)), [c["id"] for c, _ in pairs], rotation=90, fontsize=4.5)
        s = summarise(half)
        ax.set_title(f"{half}: {s.optimal}/{s.cases} proven optimal, median gap {_pct(s.median_gap)}", fontsize=9)
    axes[0].set_ylabel("gap (II - proven bound) / bound, %")
    axes[0].set_yscale("symlog", linthresh=10)
    ticks = [0, 2, 5, 10, 25, 50, 100, 200, 400]
    axes[0].set_yticks(ticks, [f"{t}%" for t in ticks])
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in STATUS_COLOURS.values()]
    handles += [plt.Line2D([], [], marker="x", color="tab:red", linestyle=""),
                plt.Line2D([], [], marker="o", markerfacecolor="none", color="grey", linestyle="")]
    axes[1].legend(handles, ["optimal", "feasible", "no valid schedule", "not measured"], fontsize=7)
    fig.suptitle("twill on the generalization suite (dotted: the 10% bar)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def section(docs: Path) -> list[str]:
    """The "Generalization suite" section of docs/benchmarks.md; writes ``docs/suite.png``."""
    lines = ["", "## Generalization suite", "",
             "Loop bodies the search was not tuned on (issue 16), frozen before tuning: `bench/suite/tuned.json` "
             "(the half the search may be tuned on: the table's points above, the shared graphs, random bodies) and "
             "`bench/suite/fresh.json` (other seeds, other parameter points; measured only at the end). Random bodies "
             "come from `twill.random_loops` in every profile (fa, tmem, regs, recurrence, units, loads, handoff) at "
             "8-80 ops; each case carries the SHA-256 of its body, and the runner refuses a case that changed. "
             "Run: `python bench/suite/run.py --half both --time-limit 120 --workers 2` (resumable; `--only ID,...`).",
             "", *summary_table(), "",
             "The gap is (II - proven bound) / proven bound; \"first\" is the seconds to the first valid schedule "
             "(— where the solver does not report it), \"proof\" the seconds until II was proven optimal. A case "
             "without a valid schedule counts against every column; one not measured is counted as such. \"code\" is "
             "the version of the solver's sources and arch files that solved the rows (`bench/suite/cases.py`, "
             "`code_version`); a run without `--redo` re-solves the rows another version gave.", ""]
    if any(row is not None for half in HALVES for _, row in rows_in_order(half)):
        plot(docs / "suite.png")
        lines += ["![suite](suite.png)", ""]
    for half in HALVES:
        lines += [f"### Suite: {half}", "", *case_table(half), ""]
    return lines
