"""The generalization suite's cases: what a manifest entry names, how its loop body is built, and
the hash that freezes it.

A case is ``{id, source, arch, ops, edges, sha256}`` where ``source`` is one of
``{"kind": "random", "profile", "seed", "n_ops"}`` (``twill.random_loops.random_body``),
``{"kind": "program", "name", "params"}`` (a built-in program) or ``{"kind": "graph", "path"}``
(a curated-ddg file under ../shared/ddg, which only some checkouts have). ``sha256`` is the hash
of the body's canonical JSON (``twill.body_json.body_document``, sorted keys, no spaces), so any
change to a generator, a program, a cost model or an arch file that alters a case is caught
before it is measured: the suite must stay the one frozen before tuning.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from twill.arch.registry import get_arch
from twill.body_json import body_document
from twill.errors import TwillError
from twill.frontend.programs import load_program
from twill.ir import LoopBody
from twill.jsonfile import read_json
from twill.problem import Problem, build_problem
from twill.random_loops import random_body

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "bench" / "suite"
SHARED_DDG = ROOT.parent / "shared" / "ddg"
HALVES = ("tuned", "fresh")


class CaseUnavailable(Exception):
    """The case's input is not on this machine (a shared graph without ../shared): skip it."""


def manifest_path(half: str) -> Path:
    return SUITE / f"{half}.json"


def read_manifest(half: str) -> dict[str, Any]:
    return read_json(manifest_path(half), f"suite manifest {half}", TwillError)


def build_body(case: dict[str, Any]) -> LoopBody:
    """The loop body a case names, built for its arch; ``CaseUnavailable`` for a missing graph."""
    source, arch = case["source"], get_arch(case["arch"])
    if source["kind"] == "random":
        return random_body(source["seed"], source["n_ops"], profile=source["profile"])
    if source["kind"] == "program":
        return load_program(source["name"], arch, dict(source["params"]))
    if source["kind"] == "graph":
        path = SHARED_DDG / source["path"]
        if not path.is_file():
            raise CaseUnavailable(f"{path} is absent (the shared graphs live beside the checkout, in ../shared)")
        return load_program(str(path), arch)
    raise ValueError(f"case {case.get('id')!r}: unknown source kind {source['kind']!r}")


def build_case(case: dict[str, Any]) -> Problem:
    return build_problem(build_body(case), get_arch(case["arch"]))


CODE_GLOBS = ("twill/**/*.py", "archs/*.toml")  # what decides a case's answer, beside its body and CP-SAT's version


def code_version(root: Path = ROOT) -> str:
    """A short SHA-256 of the solver's code and arch files: rows with equal versions were solved by the same code,
    so a table mixing versions says so (docs/benchmarks.md). Contents only, with paths relative to ``root``: the
    same tree hashes alike in any clone or worktree, and a change to a comment counts (it cannot be told apart)."""
    h = hashlib.sha256()
    for path in sorted({f for pattern in CODE_GLOBS for f in root.glob(pattern)}):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def body_hash(body: LoopBody) -> str:
    """SHA-256 of the body's canonical JSON: equal bodies, equal hashes, on every machine."""
    text = json.dumps(body_document(body), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def describe(case: dict[str, Any]) -> str:
    """The case's source in a few words, for tables."""
    source = case["source"]
    if source["kind"] == "random":
        return f"random {source['profile']} seed {source['seed']}"
    if source["kind"] == "program":
        params = " ".join(f"{k}={v}" for k, v in source["params"].items())
        return f"{source['name']} {params}".strip()
    return f"graph {source['path']}"
