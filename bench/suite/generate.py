"""Write the generalization suite's manifests, bench/suite/tuned.json and bench/suite/fresh.json.

Run once, from the repository root, before anything is tuned:  python bench/suite/generate.py
The manifests are checked in and frozen: each case carries the SHA-256 of its loop body, and
bench/suite/run.py refuses to measure a case whose body no longer matches. ``--force`` rewrites
them (only before tuning, and say so in the commit); ``--check`` rebuilds every case and
compares, changing nothing.

Halves. "tuned" is what the search may be tuned on: it holds the points the benchmark table
already shows (fa_fwd at its defaults and with 2 sub-tiles, fa_bwd and gemm at their defaults)
and the three shared graphs. "fresh" has random bodies from other seeds and program variants at
other parameter points, and is measured only at the end. Both halves draw random bodies of every
profile (twill.random_loops) at 8-80 ops, one per size band, on h100 and b200 in turn (b200
only for "tmem"); sizes come from a generator seeded with the half's name.

A program or graph point that is provably infeasible (``Problem.impossibilities`` or the static
bound says no II can hold it) is listed under "excluded" with the reason, not measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, so that "suite" is importable

from suite.cases import HALVES, ROOT, SHARED_DDG, body_hash, build_case, describe, manifest_path  # noqa: E402
from twill.bounds import lower_bound  # noqa: E402
from twill.errors import InfeasibleError  # noqa: E402
from twill.options import SolveOptions  # noqa: E402
from twill.random_loops import PROFILE_ARCHS  # noqa: E402

SEED_BASE = {"tuned": 16_000, "fresh": 16_500}  # random bodies' seeds: the halves share none
RANDOM_PROFILES = ("fa", "tmem", "regs", "recurrence", "units", "loads", "handoff")
SIZE_BANDS = ((8, 16), (17, 32), (33, 56), (57, 80))
ARCHS = ("h100", "b200")
GRAPHS = ("fa_fwd", "fa_fwd_subtiled", "fa_bwd")

# fa_fwd: sub-tiles x head_dim x block_n x arch. The benchmark table's points go to "tuned"; the
# others alternate between the halves like the squares of a chessboard, so each half has every
# value of every parameter.
FA_FWD_SUBTILES, FA_FWD_HEAD_DIMS, FA_FWD_BLOCK_N = (1, 2), (64, 128, 256), (64, 128)
FA_FWD_KNOWN = {(1, 128, 128), (2, 128, 128)}
FA_BWD = {"tuned": ({"head_dim": 128, "subtiles": 1}, {"head_dim": 128, "subtiles": 2}),
          "fresh": ({"head_dim": 64, "subtiles": 1}, {"head_dim": 64, "subtiles": 2})}
GEMM = {"tuned": ((128, 256, 64), (128, 128, 64), (256, 128, 64)),
        "fresh": ((64, 256, 64), (128, 128, 128), (128, 256, 128))}


def random_cases(half: str) -> list[dict[str, Any]]:
    """One body per profile and size band; seeds count up from the half's base."""
    rng = random.Random(f"twill.suite:{half}")
    seed = SEED_BASE[half]
    out = []
    for profile in RANDOM_PROFILES:
        archs = [a for a in ARCHS if a in PROFILE_ARCHS[profile]]
        for i, (lo, hi) in enumerate(SIZE_BANDS):
            n, arch = rng.randint(lo, hi), archs[i % len(archs)]
            source = {"kind": "random", "profile": profile, "seed": seed, "n_ops": n}
            out.append({"id": f"random-{profile}-{seed}-n{n}-{arch}", "source": source, "arch": arch})
            seed += 1
    return out


def fa_fwd_cases(half: str) -> list[dict[str, Any]]:
    out = []
    for s_i, subtiles in enumerate(FA_FWD_SUBTILES):
        for d_i, head_dim in enumerate(FA_FWD_HEAD_DIMS):
            for n_i, block_n in enumerate(FA_FWD_BLOCK_N):
                for a_i, arch in enumerate(ARCHS):
                    known = (subtiles, head_dim, block_n) in FA_FWD_KNOWN
                    tuned = known or (s_i + d_i + n_i + a_i) % 2 == 0
                    if tuned != (half == "tuned"):
                        continue
                    params = {"subtiles": subtiles, "head_dim": head_dim, "block_n": block_n}
                    out.append({"id": f"fa_fwd-st{subtiles}-d{head_dim}-bn{block_n}-{arch}",
                                "source": {"kind": "program", "name": "fa_fwd", "params": params}, "arch": arch})
    return out


def other_program_cases(half: str) -> list[dict[str, Any]]:
    out = []
    for params in FA_BWD[half]:
        for arch in ARCHS:
            out.append({"id": f"fa_bwd-d{params['head_dim']}-st{params['subtiles']}-{arch}",
                        "source": {"kind": "program", "name": "fa_bwd", "params": dict(params)}, "arch": arch})
    for m, n, k in GEMM[half]:
        for arch in ARCHS:
            params = {"block_m": m, "block_n": n, "block_k": k}
            out.append({"id": f"gemm-{m}x{n}x{k}-{arch}", "source": {"kind": "program", "name": "gemm",
                                                                     "params": params}, "arch": arch})
    return out


def graph_cases(half: str) -> list[dict[str, Any]]:
    if half != "tuned":
        return []
    return [{"id": f"graph-{g}-b200", "source": {"kind": "graph", "path": f"{g}.b200.curated_ddg.json"},
             "arch": "b200"} for g in GRAPHS]


def freeze(case: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The case with its size and hash, and the reason it is infeasible ("" when it is not)."""
    problem = build_case(case)
    frozen = {**case, "ops": len(problem.ops), "edges": len(problem.edges), "sha256": body_hash(problem.body)}
    reasons = problem.impossibilities()
    if reasons:
        return frozen, reasons[0]
    try:
        lower_bound(problem, SolveOptions())
    except InfeasibleError as err:
        return frozen, err.reason or str(err)
    return frozen, ""


def manifest(half: str) -> dict[str, Any]:
    cases, excluded = [], []
    for case in random_cases(half) + fa_fwd_cases(half) + other_program_cases(half) + graph_cases(half):
        frozen, reason = freeze(case)
        if reason:
            excluded.append({**frozen, "reason": reason})
        else:
            cases.append(frozen)
        print(f"{half}: {frozen['id']} ({frozen['ops']} ops){' excluded: ' + reason if reason else ''}", flush=True)
    return {
        "half": half,
        "frozen_on": dt.date.today().isoformat(),
        "generated_by": "python bench/suite/generate.py",
        "twill_commit": _commit(),
        "seed_base": SEED_BASE[half],
        "about": describe_half(half),
        "cases": cases,
        "excluded": excluded,
    }


def describe_half(half: str) -> str:
    if half == "tuned":
        return "the half the search may be tuned on: the benchmark table's points, the shared graphs, other seeds"
    return "measured only at the end: other seeds and other parameter points than 'tuned'"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def check() -> int:
    """Rebuild every case of both manifests and compare hashes; the number that differ."""
    from suite.cases import CaseUnavailable, read_manifest

    bad = 0
    for half in HALVES:
        for case in read_manifest(half)["cases"]:
            try:
                got = body_hash(build_case(case).body)
            except CaseUnavailable:
                print(f"{half}: {case['id']}: skipped ({describe(case)} is not on this machine)")
                continue
            if got != case["sha256"]:
                bad += 1
                print(f"{half}: {case['id']}: body changed (sha256 {got[:12]}, manifest {case['sha256'][:12]})")
    print("all cases match their manifests" if not bad else f"{bad} cases changed")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rewrite existing manifests (only before tuning)")
    ap.add_argument("--check", action="store_true", help="rebuild every case and compare hashes; write nothing")
    args = ap.parse_args()
    if args.check:
        sys.exit(1 if check() else 0)
    existing = [manifest_path(h) for h in HALVES if manifest_path(h).exists()]
    if existing and not args.force:
        sys.exit(f"{existing[0]} exists and is frozen; --force rewrites it (only before tuning)")
    if not SHARED_DDG.is_dir():
        sys.exit(f"{SHARED_DDG} is absent: the graph cases need it to be hashed")
    for half in HALVES:
        data = manifest(half)
        manifest_path(half).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {manifest_path(half)}: {len(data['cases'])} cases, {len(data['excluded'])} excluded")


if __name__ == "__main__":
    main()
