"""The sweep's result cache: one JSON file per solved point, keyed by what decides the result.

The key hashes the loop body's JSON (so two parameter spellings that build the same graph share
an entry, and a program edit that changes the graph misses), the arch's facts (values, not
sources), every ``SolveOptions`` field that takes part in equality (``dataclasses.fields``, so a
field added later, such as a reproducible-budget mode, joins the key without a change here), and
the source of the modules that decide a solve's answer plus the OR-Tools version.

Entries are written whole (a temporary file, then ``os.replace``), one per point as each result
arrives, so an interrupted sweep leaves only complete entries and the next run resumes from them.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import fields
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from twill.arch.model import Arch
from twill.body_json import body_document
from twill.errors import TwillError
from twill.ir import LoopBody
from twill.jsonfile import read_json
from twill.options import SolveOptions

__all__ = ["ENTRY_FORMAT", "ResultCache", "arch_content", "cache_key", "options_content"]

ENTRY_FORMAT = "twill.sweep-entry/1"
_PACKAGE = Path(__file__).resolve().parents[1]
# The modules whose code decides what ``solve`` returns for a body, an arch and options.
_SOLVE_SOURCES = ("ir.py", "problem.py", "options.py", "bounds.py", "schedule.py", "validate.py", "solver")


def arch_content(arch: Arch) -> dict[str, Any]:
    """The arch as the solver sees it: its name, units and every fact's value (sources are prose)."""
    return {
        "name": arch.name,
        "units": [[u.name, u.capacity.value, u.is_async, list(u.aliases)] for u in arch.units],
        "facts": {k: f.value for k, f in sorted(arch.all_facts().items())},
    }


def options_content(options: SolveOptions) -> dict[str, Any]:
    """Every ``SolveOptions`` field that takes part in equality (callbacks such as ``progress`` do not)."""
    return {f.name: getattr(options, f.name) for f in fields(SolveOptions) if f.compare}


@lru_cache(maxsize=1)
def _solver_fingerprint() -> str:
    """A hash of the solver's source and the OR-Tools version: new code or a new CP-SAT misses."""
    h = hashlib.sha256()
    for name in _SOLVE_SOURCES:
        root = _PACKAGE / name
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            h.update(str(path.relative_to(_PACKAGE)).encode())
            h.update(path.read_bytes())
    try:
        h.update(metadata.version("ortools").encode())
    except metadata.PackageNotFoundError:
        h.update(b"ortools ?")
    return h.hexdigest()


def cache_key(body: LoopBody, arch: Arch, options: SolveOptions) -> str:
    """The content hash that names one point's result (hex SHA-256)."""
    document = {
        "body": body_document(body),
        "arch": arch_content(arch),
        "options": options_content(options),
        "solver": _solver_fingerprint(),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


class ResultCache:
    """A folder of ``<key[:2]>/<key>.json`` entries; ``root=None`` keeps nothing (``--no-cache``)."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = Path(root) if root is not None else None

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored outcome of ``key``, or ``None``; an unreadable entry counts as missing."""
        if self.root is None or not self._path(key).is_file():
            return None
        try:
            entry = read_json(self._path(key), "sweep cache entry", TwillError)
        except TwillError:
            return None  # a damaged entry is solved again and overwritten
        if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT or entry.get("key") != key:
            return None
        outcome = entry.get("outcome")
        return outcome if isinstance(outcome, dict) else None

    def put(self, key: str, point: dict[str, Any], outcome: dict[str, Any]) -> None:
        """Store one outcome atomically: readers see the old state or the whole new entry."""
        if self.root is None:
            return
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"format": ENTRY_FORMAT, "key": key, "point": point, "outcome": outcome}, default=repr)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text + "\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def keys(self) -> set[str]:
        """Every key with an entry (tests and ``--resume`` reports read this)."""
        if self.root is None or not self.root.is_dir():
            return set()
        return {p.stem for p in self.root.glob("*/*.json")}
