"""Compile a user's ``@triton.jit`` kernel to TTGIR for an arch, in a subprocess (``twill[triton]``).

Stage 0 of the pipeline for Triton users: ``kernel.py:name`` plus a launch description (a TOML
file: signature, constexprs, num_warps, num_stages and the runtime values the trip count follows
from) becomes the MLIR dump stream that ``twill.frontend.ttgir`` reads. Triton is never imported
here: the compile runs in a child interpreter (``_triton_worker.py``), one kernel per process,
because Triton opens its dump stream once per process and the wheel is large. The CUDA capability
comes from the arch's ``triton_target`` feature (h100/h200: 90, b200: 100), not from its name.
See docs/frontend.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from twill.arch.model import Arch
from twill.errors import ProgramError

__all__ = ["Launch", "read_launch", "compile_to_dump", "capability_for", "COMPILE_TIMEOUT_S"]

COMPILE_TIMEOUT_S = 300  # FA to TTGIR takes about 1 s (research note §3); a compile past 5 minutes is stuck
_WORKER = Path(__file__).with_name("_triton_worker.py")
_LAUNCH_KEYS = {"kernel", "num_warps", "num_stages", "signature", "constexprs", "values", "trip_count"}


@dataclass(frozen=True, slots=True)
class Launch:
    """How the kernel is launched: what Triton needs to compile it and what twill needs to count."""

    signature: MappingProxyType  # argument name -> Triton type string ("*fp16", "i32", "tensordesc<...>")
    constexprs: MappingProxyType  # name -> int/float/bool/str value
    num_warps: int
    num_stages: int
    values: MappingProxyType  # runtime scalar arguments the loop bounds read (n_ctx = 8192)
    trip_count: int | None = None  # given outright; otherwise computed from the loop bounds and values
    kernel: str | None = None


def _fail(path: str | Path, what: str) -> ProgramError:
    return ProgramError(f"{path}: {what}")


def _table(path: str | Path, raw: dict[str, Any], key: str, scalar_types: tuple[type, ...]) -> MappingProxyType:
    table = raw.get(key, {})
    if not isinstance(table, dict):
        raise _fail(path, f"[{key}] must be a table")
    for name, value in table.items():
        if not isinstance(value, scalar_types):
            kinds = " or ".join(t.__name__ for t in scalar_types)
            raise _fail(path, f"[{key}] {name} = {value!r} must be {kinds}")
    return MappingProxyType(dict(table))


def _positive(path: str | Path, raw: dict[str, Any], key: str, default: int | None) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(path, f"{key} = {value!r} must be a positive integer")
    return value


def read_launch(path: str | Path) -> Launch:
    """Read a launch description TOML (examples/triton/*.toml shows every key)."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(p, "no such launch file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise _fail(p, f"not a readable TOML launch description ({' '.join(str(err).split())[:200]})") from None
    unknown = sorted(set(raw) - _LAUNCH_KEYS)
    if unknown:
        raise _fail(p, f"unknown keys {unknown}; a launch description has {sorted(_LAUNCH_KEYS)}")
    signature = _table(p, raw, "signature", (str,))
    if not signature:
        raise _fail(p, "[signature] is empty; name every kernel argument with its Triton type")
    kernel = raw.get("kernel")
    if kernel is not None and not isinstance(kernel, str):
        raise _fail(p, f"kernel = {kernel!r} must be a string")
    return Launch(signature=signature, constexprs=_table(p, raw, "constexprs", (bool, int, float, str)),
                  num_warps=_positive(p, raw, "num_warps", 4), num_stages=_positive(p, raw, "num_stages", 3),
                  values=_table(p, raw, "values", (int,)), trip_count=_positive(p, raw, "trip_count", None),
                  kernel=kernel)


def capability_for(arch: Arch) -> int:
    """The CUDA compute capability Triton compiles for on ``arch`` (its ``triton_target`` feature)."""
    if not arch.has_feature("triton_target"):
        raise ProgramError(f"arch {arch.name!r}: no [features] triton_target; add the CUDA capability Triton "
                           "compiles for (90 for Hopper, 100 for Blackwell) to its TOML")
    raw = arch.feature("triton_target")
    try:
        return int(raw)
    except ValueError:
        raise ProgramError(f"arch {arch.name!r}: triton_target {raw!r} is not a CUDA capability like 90") from None


def _python() -> str:
    """The interpreter that has triton: TWILL_TRITON_PYTHON if set (a separate venv), else this one."""
    return os.environ.get("TWILL_TRITON_PYTHON") or sys.executable


def compile_to_dump(kernel_file: str | Path, kernel: str, launch: Launch, capability: int,
                    timeout_s: float = COMPILE_TIMEOUT_S) -> tuple[str, str]:
    """Compile ``kernel`` from ``kernel_file`` for ``capability``; return (MLIR dump, triton version).

    Raises ``ProgramError`` (one line) when triton is missing, the kernel fails to compile, or the
    compile runs past ``timeout_s``.
    """
    src = Path(kernel_file).resolve()
    if not src.is_file():
        raise ProgramError(f"{kernel_file}: no such kernel file")
    tmp = Path(tempfile.mkdtemp(prefix="twill-triton-"))
    try:
        request = {"file": str(src), "kernel": kernel, "signature": dict(launch.signature),
                   "constexprs": dict(launch.constexprs), "capability": capability,
                   "options": {"num_warps": launch.num_warps, "num_stages": launch.num_stages},
                   "meta_out": str(tmp / "meta.json")}
        (tmp / "request.json").write_text(json.dumps(request), encoding="utf-8")
        env = dict(os.environ, MLIR_ENABLE_DUMP=kernel, MLIR_DUMP_PATH=str(tmp / "dump.mlir"),
                   TRITON_ALWAYS_COMPILE="1", TRITON_CACHE_DIR=str(tmp / "cache"),
                   TRITON_DEFAULT_FP_FUSION=os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"))
        try:
            done = subprocess.run([_python(), str(_WORKER), str(tmp / "request.json")], env=env, cwd=tmp,
                                  capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise ProgramError(f"{kernel_file}:{kernel}: the Triton compile ran past {timeout_s:.0f} s") from None
        if done.returncode != 0:
            raise ProgramError(f"{kernel_file}:{kernel}: {_last_line(done.stderr)}")
        dump = tmp / "dump.mlir"
        if not dump.is_file() or dump.stat().st_size == 0:
            raise ProgramError(f"{kernel_file}:{kernel}: Triton wrote no MLIR dump (is {kernel!r} the @triton.jit "
                               "kernel that was compiled?)")
        return dump.read_text(encoding="utf-8", errors="replace"), _version(tmp / "meta.json")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _version(meta: Path) -> str:
    """The triton version the worker reported ("unknown" if it wrote none)."""
    try:
        return str(json.loads(meta.read_text(encoding="utf-8"))["triton_version"])
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"


def _last_line(stderr: str) -> str:
    """The worker's one-line error, or a hint when triton itself is missing."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else "the Triton compile failed with no message"
    if "No module named 'triton'" in last:
        return "triton is not installed in this Python; pip install 'twill[triton]' (or set TWILL_TRITON_PYTHON)"
    return last[:300]
