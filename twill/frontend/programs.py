"""Find and build loop-body programs: built-in names, ``.py`` files, or imported graph files.

A program is a Python module with ``DESCRIPTION`` (one line), ``PARAMETERS`` (name -> default)
and ``build(arch, **params) -> LoopBody``; it asks the arch for every cost, so one program runs
on every arch. Built-ins live in the repository's ``programs/`` folder (packed into the wheel as
``twill/_data/programs``). A ``.json`` path is read as a curated-ddg graph.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from twill.arch.model import Arch
from twill.errors import GraphError, ProgramError, TwillError
from twill.frontend.ddg_import import read_ddg
from twill.ir import LoopBody

__all__ = ["ProgramInfo", "programs_dir", "list_programs", "program_info", "load_program", "parse_params",
           "iteration_flops"]


@dataclass(frozen=True, slots=True)
class ProgramInfo:
    name: str
    description: str
    parameters: dict[str, Any]
    path: Path


def programs_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here.parents[1] / "programs", here.parent / "_data" / "programs"):
        if candidate.is_dir():
            return candidate
    raise ProgramError("the built-in programs/ folder is missing from this installation")


def _load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"twill_program_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ProgramError(f"{path}: cannot load as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except TwillError:
        raise
    except (Exception, SystemExit) as err:  # a program's sys.exit() must not end twill
        raise ProgramError(f"{path}: failed to import ({_what(err)})") from err
    if not callable(getattr(module, "build", None)):
        raise ProgramError(f"{path}: defines no build(arch, **params) function")
    _parameters(path, module)
    return module


def _what(err: BaseException) -> str:
    """An exception as one short line for an error message."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:200]}" if text else type(err).__name__


def _parameters(path: Path, module: ModuleType) -> dict[str, Any]:
    """A program's PARAMETERS: names to defaults whose type ``-p NAME=VALUE`` can parse into."""
    raw = getattr(module, "PARAMETERS", {})
    if not isinstance(raw, dict):
        raise ProgramError(f"{path}: PARAMETERS must be a dict of name -> default, got {type(raw).__name__}")
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, (bool, int, float, str)):
            raise ProgramError(f"{path}: parameter {key!r} = {value!r}; names are strings and defaults are "
                               "bool, int, float or str (the types -p NAME=VALUE can give)")
    return dict(raw)


def _info(path: Path) -> ProgramInfo:
    module = _load_module(path)
    return ProgramInfo(path.stem, str(getattr(module, "DESCRIPTION", "")).strip(), _parameters(path, module), path)


def list_programs() -> list[ProgramInfo]:
    return [_info(p) for p in sorted(programs_dir().glob("*.py")) if not p.name.startswith("_")]


def parse_params(pairs: list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    """Turn ``["subtiles=2", "dtype=bf16"]`` into typed values, typed like the defaults."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise ProgramError(f"parameter {pair!r}: expected NAME=VALUE")
        if key not in defaults:
            raise ProgramError(f"parameter {key!r}: unknown; this program takes {', '.join(sorted(defaults)) or 'none'}")
        kind = type(defaults[key])
        try:
            out[key] = (raw.lower() in ("1", "true", "yes")) if kind is bool else kind(raw)
        except ValueError:
            raise ProgramError(f"parameter {key!r}: {raw!r} is not a valid {kind.__name__}") from None
    return out


def _resolve(spec: str) -> Path:
    path = Path(spec)
    if path.suffix == ".py" and path.is_file():
        return path
    if path.suffix or "/" in spec:
        raise ProgramError(f"program {spec!r}: no such file")
    builtin = programs_dir() / f"{spec}.py"
    if not builtin.is_file():
        names = ", ".join(p.name for p in list_programs())
        raise ProgramError(f"unknown program {spec!r}; built-in programs: {names} (or a .py or .json file)")
    return builtin


def program_info(spec: str) -> ProgramInfo:
    """Name, description and parameter defaults of a built-in name or ``.py`` program."""
    return _info(_resolve(spec))


def load_program(spec: str, arch: Arch, params: dict[str, Any] | None = None, loop: int = 0) -> LoopBody:
    """Build the loop body named by ``spec`` for ``arch``.

    Examples
    --------
    >>> from twill.arch.registry import get_arch
    >>> body = load_program("toy", get_arch("h100"))
    >>> [op.name for op in body.ops]
    ['S', 'P', 'O']
    """
    params = dict(params or {})
    if spec.endswith(".json"):
        if params:
            raise ProgramError(f"program {spec!r}: a graph file takes no parameters")
        if not Path(spec).is_file():
            raise GraphError(f"{spec}: no such graph file")
        return read_ddg(spec, arch, loop=loop)
    path = _resolve(spec)
    module = _load_module(path)
    defaults = _parameters(path, module)
    unknown = set(params) - set(defaults)
    if unknown:
        raise ProgramError(f"program {path.stem!r}: unknown parameters {sorted(unknown)}; it takes {sorted(defaults)}")
    merged = {**defaults, **params}
    try:
        body = module.build(arch, **merged)
    except TwillError:
        raise
    except (Exception, SystemExit) as err:
        raise ProgramError(f"program {path.stem!r}: build failed ({_what(err)})") from err
    if not isinstance(body, LoopBody):
        raise ProgramError(f"program {path.stem!r}: build() returned {type(body).__name__}, not a LoopBody")
    return body


def iteration_flops(spec: str, params: dict[str, Any] | None = None) -> float | None:
    """Useful FLOPs of one loop iteration, from the program's optional ``flops(**params)``.

    The II alone cannot compare tile shapes (a bigger tile takes more cycles and does more work),
    so a program may say how much work one iteration does; ``None`` when it does not (graph files,
    programs without the hook), and the caller picks a fallback.
    """
    if spec.endswith(".json"):
        return None
    path = _resolve(spec)
    module = _load_module(path)
    hook = getattr(module, "flops", None)
    if not callable(hook):
        return None
    merged = {**_parameters(path, module), **dict(params or {})}
    try:
        value = hook(**merged)
    except TwillError:
        raise
    except (Exception, SystemExit) as err:
        raise ProgramError(f"program {path.stem!r}: flops() failed ({_what(err)})") from err
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ProgramError(f"program {path.stem!r}: flops() returned {value!r}; expected a positive number")
    return float(value)


def describe_parameters(info: ProgramInfo) -> str:
    return ", ".join(f"{k}={v}" for k, v in info.parameters.items())

